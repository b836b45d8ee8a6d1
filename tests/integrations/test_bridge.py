"""Tests for integrations.bridge: the Portal, thread waiters in the primitives' FIFOs, run_sync."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import gc
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from helpers.forking import in_forked_child
from hypothesis import given, settings
from hypothesis import strategies as st

from executors import CancelToken, ChannelClosed, ShutdownError, WouldBlock, registry
from executors.aio import (
    BoundedSemaphore,
    Channel,
    Get,
    GetResult,
    Lock,
    Semaphore,
    Send,
    SendResult,
)
from executors.testing import wait_until
from integrations.bridge import Portal, PortalFuture, ThreadWaiter, run_sync

T = TypeVar("T")

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")


@pytest.fixture
def portal() -> Iterator[Portal]:
    with Portal(name="test-portal") as p:
        yield p


def on_loop(portal: Portal, fn: Callable[..., T], *args: object) -> T:
    """Run a plain function on the portal's loop thread and return its result."""
    async def run() -> T:
        return fn(*args)
    return portal.call(run)


def start_thread(fn: Callable[..., object], *args: object) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


# -- ThreadWaiter ------------------------------------------------------------------------------


def test_thread_waiter_exactly_one_resolution_wins() -> None:
    """try_wake, try_fail and try_abandon: the first wins, the others return False."""
    w = ThreadWaiter()
    assert w.waiting and not w.wait(0)
    assert w.try_wake(1) and not w.try_fail(ValueError()) and not w.try_abandon()
    assert w.wait(0) and w.woken and w.outcome() == 1
    w = ThreadWaiter()
    assert w.try_abandon() and not w.try_wake(1) and not w.waiting and not w.woken
    w = ThreadWaiter()
    assert w.try_fail(KeyError("k")) and not w.try_wake(1)
    with pytest.raises(KeyError):
        w.outcome()
    assert ThreadWaiter.resumes_on_loop is False and "failed" in repr(w)


# -- Portal: calls -----------------------------------------------------------------------------


def test_call_returns_and_reraises(portal: Portal) -> None:
    """call() returns the coroutine's result and re-raises its exception in the caller."""
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    async def fail() -> None:
        raise KeyError("k")

    assert portal.call(double, 21) == 42
    with pytest.raises(KeyError):
        portal.call(fail)
    with pytest.raises(TypeError, match="awaitable"):
        portal.call(lambda: 3)  # type: ignore[arg-type,return-value]


def test_call_sees_caller_context_and_changes_do_not_flow_back(portal: Portal) -> None:
    """The callee sees the caller's contextvars; its changes stay in its copy (as anyio)."""
    async def read_and_set() -> str:
        seen = var.get()
        var.set("callee")
        return seen

    token = var.set("caller")
    try:
        assert portal.call(read_and_set) == "caller"
        assert var.get() == "caller"
    finally:
        var.reset(token)


def test_callee_has_a_current_task(portal: Portal) -> None:
    """The callee runs as a real Task: current_task(), asyncio.timeout and TaskGroup work."""
    async def body() -> bool:
        async with asyncio.timeout(5), asyncio.TaskGroup() as tg:
            tg.create_task(asyncio.sleep(0))
        return asyncio.current_task() is not None

    assert portal.call(body)


def test_a_callee_that_never_suspends_still_runs_as_its_own_task(portal: Portal) -> None:
    """A callee that returns without suspending runs its one step inside a real Task (3.11 as
    3.12+): current_task() is a fresh task per call, asyncio.timeout() enters and leaves, the
    caller's context is seen and the callee's changes stay in its copy."""
    tasks: list[asyncio.Task[object]] = []

    async def body() -> str:
        async with asyncio.timeout(5):  # noqa: ASYNC100  # needs a task, never suspends
            task = asyncio.current_task()
            assert task is not None and not task.done()
            tasks.append(task)
            seen = var.get()
            var.set("callee")
            return seen

    token = var.set("caller")
    try:
        assert portal.call(body) == "caller" and portal.call(body) == "caller"
        assert var.get() == "caller"
        assert tasks[0] is not tasks[1] and all(t.done() for t in tasks)
    finally:
        var.reset(token)


def test_a_call_that_never_suspends_costs_one_loop_iteration(portal: Portal) -> None:
    """On the portal's own selector loop, a call whose callee finishes without suspending is
    served in the iteration its post woke: the callee's first step runs inside the drain, not
    in a second iteration (one select() per call, as for a bare call_soon_threadsafe)."""
    if not isinstance(portal.loop, asyncio.SelectorEventLoop):
        pytest.skip("counts the selector's select() calls: asyncio's own selector loop only")

    async def noop() -> None:
        return None

    selector = portal.loop._selector  # type: ignore[attr-defined]
    original = selector.select
    count = [0]

    def counting(timeout: float | None = None) -> object:
        count[0] += 1
        return original(timeout)

    portal.call(noop)
    selector.select = counting
    try:
        calls = 100
        for _ in range(calls):
            portal.call(noop)
    finally:
        del selector.select
    # One select per call, plus slack for a wake-up that lands while the loop is still busy
    # (two calls' worth of iterations would be 200).
    assert count[0] <= calls * 1.2 + 3, count[0]


def test_only_the_calls_own_task_starts_at_once(portal: Portal) -> None:
    """The first step run at once is the call's own task's: callbacks and tasks its callee
    schedules are queued on the loop and run in FIFO order, as on any asyncio loop (3.11's
    portal loop takes over one step per call, never a later one)."""
    order: list[int] = []

    async def child() -> None:
        order.append(2)

    async def body() -> list[int]:
        loop = asyncio.get_running_loop()
        loop.call_soon(order.append, 1)
        task = loop.create_task(child())
        loop.call_soon(order.append, 3)
        order.append(0)
        await task
        await asyncio.sleep(0)
        return order

    for _ in range(3):
        order.clear()
        assert portal.call(body) == [0, 1, 2, 3]


def test_posts_to_a_busy_loop_do_not_write_to_its_self_pipe(portal: Portal) -> None:
    """While the loop runs callbacks, thread posts are drained without waking it.

    A task keeps the loop busy (every iteration has a ready callback, so the loop never
    sleeps in select); calls, acquires and releases from a thread meanwhile complete without
    a single wake-up write (to the portal's wake-up socket or the loop's self-pipe; and, on
    the loop, a read), observed by wrapping the portal's wake-up and the loop's
    call_soon_threadsafe. (While the loop sleeps, every call writes: the wrapper counts.)
    """
    if not isinstance(portal.loop, asyncio.SelectorEventLoop):
        pytest.skip("needs asyncio's own selector event loop: the busy-loop inbox hooks its "
                    f"select(); {type(portal.loop).__module__}'s loop is woken by every post")
    loop = portal.loop
    running = threading.Event()
    stop = threading.Event()

    async def busy() -> None:
        running.set()
        # A busy loop on purpose (ready callbacks every iteration), not a wait for `stop`.
        while not stop.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0)

    async def double(x: int) -> int:
        return 2 * x

    writes: list[str] = []
    wake = portal._wake

    def counting(owner: object, name: str) -> Callable[..., object]:
        original = getattr(owner, name)

        def count(*args: object, **kwargs: object) -> object:
            writes.append(name)
            return original(*args, **kwargs)

        return count

    loop.call_soon_threadsafe = counting(loop, "call_soon_threadsafe")  # type: ignore[method-assign]
    portal._wake = counting(portal, "_wake")
    future: PortalFuture[None] | None = None
    try:
        wait_until(lambda: portal._sleeping)  # idle: a post must wake the loop
        assert portal.call(double, 1) == 2
        assert writes == ["_wake"]
        future = portal.start_task_soon(busy)
        assert running.wait(10)
        writes.clear()  # (the start itself woke the idle loop)
        view = portal.semaphore(Semaphore(1))
        for i in range(200):
            assert portal.call(double, i) == 2 * i
            with view:
                pass
    finally:
        stop.set()
        if future is not None:
            future.result(10)
        del loop.call_soon_threadsafe
        portal._wake = wake
    assert writes == []


def test_posts_racing_the_loop_going_to_sleep_are_never_missed(portal: Portal) -> None:
    """The handshake between a posting thread and a loop about to block in select.

    Threads post calls, acquires and sends while the loop alternates between short sleeps
    (select with a timeout, while a ticker task runs), bursts of work and idling (select with
    no timeout, once the ticker is done: then a missed wake-up is not rescued by a timer).
    Every wait has a deadline, so a missed wake-up fails the test instead of hanging it.
    """
    sem = Semaphore(1)
    ch: Channel[int] = Channel(4)

    async def ticker() -> None:
        for _ in range(300):
            await asyncio.sleep(random.choice((0, 0, 0.0001, 0.0005)))

    async def consume() -> int:
        total = 0
        async for value in ch:
            total += value
        return total

    async def noop(x: int) -> int:
        return x

    ticking = portal.start_task_soon(ticker)
    consumer = portal.start_task_soon(consume)
    view = portal.semaphore(sem)
    channel = portal.channel(ch)
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for i in range(300):
                if rng.random() < 0.3:
                    # Give the loop time to go idle, so some posts find it asleep.
                    time.sleep(rng.choice((0, 0.0002, 0.001)))  # jitter, not a wait for anything
                future = portal.start_task_soon(noop, i)
                assert future.result(10) == i
                assert view.acquire(timeout=10)
                view.release()
                channel.send(1, timeout=10)
        except BaseException as exc:
            errors.append(exc)

    threads = [start_thread(worker, seed) for seed in range(4)]
    for t in threads:
        t.join(50)
    ticking.result(10)
    channel.close()
    assert errors == []
    assert consumer.result(10) == 4 * 300


def test_calls_from_the_loop_thread_fail_instead_of_deadlocking(portal: Portal) -> None:
    """A blocking portal method called on the loop thread raises RuntimeError at once."""
    sem = Semaphore(1)

    async def nested() -> None:
        portal.call(asyncio.sleep, 0)

    async def view() -> None:
        portal.semaphore(sem).acquire()

    with pytest.raises(RuntimeError, match="event loop thread"):
        portal.call(nested)
    with pytest.raises(RuntimeError, match="event loop thread"):
        portal.call(view)
    assert on_loop(portal, sem.statistics).value == 1


def test_portal_not_open_and_bad_arguments() -> None:
    """Using a portal before open, opening twice, and bad arguments are refused clearly."""
    p = Portal()
    with pytest.raises(RuntimeError, match="not open"):
        p.call(asyncio.sleep, 0)
    with pytest.raises(RuntimeError, match="no loop"):
        _ = p.loop
    assert p.join(0) is True
    with pytest.raises(TypeError, match="loop"):
        Portal(loop=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        Portal(name=3)  # type: ignore[arg-type]
    with p, pytest.raises(RuntimeError, match="opens once"):
        p.open()
    with pytest.raises(TypeError, match="semaphore"):
        Portal().semaphore(asyncio.Semaphore())  # type: ignore[arg-type]


def test_portal_is_registered_and_repr() -> None:
    """An open portal is tracked by the executors registry; repr and statistics show state."""
    with Portal(name="reg") as p:
        assert any(ref() is p for ref in list(registry._registered))
        assert repr(p) == "<Portal 'reg' open pending=0 tasks=0>"
        assert p.statistics().state == "open" and p.statistics().owns_loop
    assert p.statistics().state == "closed" and p.closed


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_sees_a_closed_portal_and_can_open_a_new_one(portal: Portal) -> None:
    """In a forked child the parent's portal is closed (no loop thread there): calls fail
    fast with ShutdownError; a new portal works."""
    assert portal.call(asyncio.sleep, 0, 1) == 1

    def in_child() -> int:
        with pytest.raises(ShutdownError):
            portal.call(asyncio.sleep, 0)
        with Portal() as fresh:
            return fresh.call(asyncio.sleep, 0, 5)

    assert in_forked_child(in_child) == 5
    assert portal.call(asyncio.sleep, 0, 2) == 2


# -- start_task_soon and PortalFuture ----------------------------------------------------------


def test_start_task_soon_result_and_cancel_waits_for_cleanup(portal: Portal) -> None:
    """cancel() cancels the task; the future completes only after the task's async cleanup."""
    started = threading.Event()
    cleaned = threading.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.05)  # async cleanup that takes a while
            cleaned.set()

    async def value() -> int:
        return 7

    assert portal.start_task_soon(value).result(10) == 7
    fut = portal.start_task_soon(slow, name="slow")
    assert isinstance(fut, PortalFuture) and started.wait(10)
    assert fut.cancel() is True
    done, _ = concurrent.futures.wait([fut], timeout=10)
    assert done == {fut} and cleaned.is_set()
    assert fut.cancelled() and fut.cancel() is True
    with pytest.raises(concurrent.futures.CancelledError):
        fut.result()


def test_cancel_before_start_and_a_task_that_swallows_cancellation(portal: Portal) -> None:
    """A future cancelled before its task starts is cancelled; a task that catches the
    cancellation and returns gives its result (the future reports what really happened)."""
    gate = threading.Event()

    async def block_loop() -> None:
        gate.wait(10)  # holds the loop so the next task cannot start yet

    async def stubborn() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "kept going"
        return "slept"

    blocker = portal.start_task_soon(block_loop)
    early = portal.start_task_soon(stubborn)
    assert early.cancel()
    gate.set()
    blocker.result(10)
    assert early.exception(10) is None if not early.cancelled() else True
    assert early.cancelled()

    late = portal.start_task_soon(stubborn)
    wait_until(lambda: portal.statistics().tasks >= 1)
    late.cancel()
    assert late.result(10) == "kept going" and not late.cancelled()


def test_exit_waits_for_tasks_or_cancels_them_if_the_block_raised() -> None:
    """Leaving the block waits for start_task_soon tasks; if the block raised, cancels them."""
    async def short() -> str:
        await asyncio.sleep(0.05)
        return "done"

    with Portal() as p:
        fut = p.start_task_soon(short)
    assert fut.result(0) == "done"

    with pytest.raises(KeyError), Portal() as p:
        fut = p.start_task_soon(asyncio.sleep, 30)
        raise KeyError
    assert fut.cancelled()


# -- attaching to a running loop ---------------------------------------------------------------


def test_attach_to_a_loop_running_in_another_thread() -> None:
    """Portal(loop=...) works on another thread's loop; closing leaves that loop running."""
    loop = asyncio.new_event_loop()
    t = start_thread(loop.run_forever)
    try:
        wait_until(loop.is_running)
        with Portal(loop=loop) as p:
            assert p.call(asyncio.sleep, 0, "ok") == "ok"
            assert p.statistics().owns_loop is False
            pending = p.start_task_soon(asyncio.sleep, 30)
            p.close()
            assert p.join(10)
        with pytest.raises(ShutdownError):
            pending.result(10)
        assert loop.is_running()
        assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, 1), loop).result(10) == 1
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
        loop.close()
    with pytest.raises(RuntimeError, match="runs"):
        Portal(loop=loop).open()


# -- shutdown ----------------------------------------------------------------------------------


def test_shutdown_fails_pending_calls_views_and_futures_cleanly() -> None:
    """Closing with work pending: every blocked thread gets ShutdownError, nothing hangs, and
    no thread waiter is left in a primitive's queue."""
    sem = Semaphore(0)
    ch: Channel[int] = Channel()
    other: Channel[int] = Channel()
    errors: list[BaseException] = []
    p = Portal().open()

    def catch(fn: Callable[[], object]) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        start_thread(catch, lambda: p.call(asyncio.sleep, 30)),
        start_thread(catch, lambda: p.semaphore(sem).acquire()),
        start_thread(catch, lambda: p.channel(ch).get()),
        start_thread(catch, lambda: p.select(Get(ch), Get(other))),
    ]
    fut = p.start_task_soon(asyncio.sleep, 30)
    wait_until(lambda: p.statistics().pending == 5 and len(sem._waiters) == 1
               and ch.statistics().waiting_getters == 2)
    p.close()
    assert p.join(10)
    for t in threads:
        t.join(10)
    assert [type(e) for e in errors] == [ShutdownError] * 4
    with pytest.raises(ShutdownError):
        fut.result(10)
    assert len(sem._waiters) == 0
    assert ch.statistics().waiting_getters == ch.statistics().waiting_senders == 0
    assert other.statistics().waiting_getters == 0
    with pytest.raises(ShutdownError):
        p.call(asyncio.sleep, 0)
    assert p.statistics().pending == 0


def test_registry_exit_closes_a_portal_with_a_pending_call() -> None:
    """At interpreter exit the registry closes the portal: a blocked caller fails cleanly."""
    script = textwrap.dedent("""
        import atexit, threading

        failed = threading.Event()

        def check():  # registered first, so it runs after the registry's exit hook
            print("caller failed cleanly" if failed.wait(5) else "caller still blocked")
            print("portal", p.statistics().state)

        atexit.register(check)

        import asyncio, time
        from executors import ShutdownError
        from executors.testing import wait_until
        from integrations.bridge import Portal

        p = Portal().open()

        def caller():
            try:
                p.call(asyncio.sleep, 60)
            except ShutdownError:
                failed.set()

        threading.Thread(target=caller, daemon=True).start()
        wait_until(lambda: p.statistics().tasks)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["caller failed cleanly", "portal closed"], proc.stdout


# -- semaphore and lock: one FIFO for threads and tasks ----------------------------------------


def test_threads_and_tasks_contend_for_one_semaphore_in_strict_fifo(portal: Portal) -> None:
    """Alternating task and thread waiters are served in exactly their arrival order."""
    sem = Semaphore(0)
    order: list[str] = []
    got = threading.Semaphore(0)

    async def task_acquire(name: str) -> None:
        await sem.acquire()
        order.append(name)
        got.release()

    def thread_acquire(name: str) -> None:
        assert portal.semaphore(sem).acquire()
        order.append(name)
        got.release()

    names = [f"{'task' if i % 2 else 'thread'}{i}" for i in range(8)]
    for i, name in enumerate(names):
        if name.startswith("task"):
            portal.start_task_soon(task_acquire, name)
        else:
            start_thread(thread_acquire, name)
        wait_until(lambda i=i: on_loop(portal, lambda: len(sem._waiters)) == i + 1)
    for _ in names:
        on_loop(portal, sem.release)
        assert got.acquire(timeout=10)
    assert order == names
    assert on_loop(portal, sem.statistics).waiting == 0


@settings(max_examples=15, deadline=None)
@given(st.lists(st.sampled_from(["task", "thread", "thread-timeout"]), min_size=1, max_size=8))
def test_mixed_fifo_with_leavers_property(arrivals: list[str]) -> None:
    """For any arrival order of tasks and threads (some threads giving up at a timeout while
    queued), permits go to the waiters still in line in exactly their arrival order, and no
    permit is lost: the semaphore ends with every permit free and nobody queued."""
    sem = Semaphore(0)
    order: list[int] = []
    got = threading.Semaphore(0)
    with Portal() as portal:
        view = portal.semaphore(sem)

        # Each keeps its permit, so exactly one permit moves per release below.
        async def task_acquire(i: int) -> None:
            await sem.acquire()
            order.append(i)
            got.release()

        def thread_acquire(i: int) -> None:
            assert view.acquire()
            order.append(i)
            got.release()

        stayers = []
        for i, kind in enumerate(arrivals):
            before = on_loop(portal, lambda: len(sem._waiters))
            if kind == "task":
                portal.start_task_soon(task_acquire, i)
            elif kind == "thread":
                start_thread(thread_acquire, i)
            else:
                start_thread(view.acquire, True, 0.001)
            if kind == "thread-timeout":
                gone = arrivals[:i + 1].count("thread-timeout")
                wait_until(lambda gone=gone: portal.statistics().timeouts >= gone)
                continue
            stayers.append(i)
            wait_until(lambda before=before: on_loop(portal, lambda: len(sem._waiters))
                       == before + 1)
        for _ in stayers:
            on_loop(portal, sem.release)
            assert got.acquire(timeout=10)
        assert order == stayers
        stats = on_loop(portal, sem.statistics)
        assert (stats.value, stats.waiting, stats.woken) == (0, 0, 0)


def test_thread_that_releases_and_reacquires_queues_behind_waiters(portal: Portal) -> None:
    """No barging: a thread's release-then-acquire lines up behind the waiting task."""
    lock = Lock()
    view = portal.lock(lock)
    order: list[str] = []
    gate = asyncio.Event()

    async def task() -> None:
        async with lock:
            order.append("task")
            await gate.wait()

    def open_gate_once_the_thread_waits() -> None:
        wait_until(lambda: on_loop(portal, lambda: any(
            isinstance(w, ThreadWaiter) for w in lock._waiters)))
        on_loop(portal, gate.set)

    assert view.acquire()
    fut = portal.start_task_soon(task)
    wait_until(lambda: on_loop(portal, lambda: len(lock._waiters)) == 1)
    view.release()
    assert view.acquire(blocking=False) is False  # promised to (or held by) the task
    opener = start_thread(open_gate_once_the_thread_waits)
    with view:
        order.append("thread")
    fut.result(10)
    opener.join(10)
    assert order == ["task", "thread"]
    assert not on_loop(portal, lock.locked)


def test_blocking_semaphore_threading_api(portal: Portal) -> None:
    """acquire(blocking, timeout) -> bool, release(), with; over-release raises in the thread."""
    sem = BoundedSemaphore(1)
    view = portal.semaphore(sem)
    assert view.acquire(blocking=False) is True and view.locked()
    assert view.acquire(timeout=0.01) is False
    assert view.acquire(timeout=0) is False
    view.release()
    with pytest.raises(ValueError, match="too many"):
        view.release()
    with pytest.raises(ValueError, match="non-blocking"):
        view.acquire(False, 1.0)
    with pytest.raises(ValueError, match="timeout"):
        view.acquire(timeout=-1)
    with view:
        assert on_loop(portal, sem.locked)
    assert not on_loop(portal, sem.locked)
    with pytest.raises(RuntimeError, match="not acquired"):
        portal.lock(Lock()).release()
    assert "BlockingSemaphore" in repr(view)


# -- timeouts at every point of a hand-off -----------------------------------------------------


def _hold_loop(portal: Portal) -> tuple[threading.Event, PortalFuture[None]]:
    """Block the loop thread until the returned event is set (callbacks queue up meanwhile)."""
    gate = threading.Event()
    entered = threading.Event()

    async def hold() -> None:
        entered.set()
        gate.wait(10)

    fut = portal.start_task_soon(hold)
    assert entered.wait(10)
    return gate, fut


def test_timeout_before_the_waiter_is_parked(portal: Portal) -> None:
    """The thread times out before its park ran on the loop: nothing is queued, ever."""
    sem = Semaphore(0)
    gate, fut = _hold_loop(portal)
    assert portal.semaphore(sem).acquire(timeout=0.01) is False
    gate.set()
    fut.result(10)
    assert on_loop(portal, sem.statistics).waiting == 0
    on_loop(portal, sem.release)
    assert on_loop(portal, sem.statistics).value == 1


def test_timeout_while_parked_then_release_skips_the_abandoned_waiter(portal: Portal) -> None:
    """A release between the timeout and the undo skips the abandoned waiter: no permit lost."""
    sem = Semaphore(0)
    timed_out = threading.Event()

    def acquire() -> None:
        assert portal.semaphore(sem).acquire(timeout=0.05) is False
        timed_out.set()

    async def release_after_timeout() -> None:
        timed_out.wait(10)  # the loop is held: the thread's undo callback waits behind us
        sem.release()

    wait_thread = start_thread(acquire)
    wait_until(lambda: on_loop(portal, lambda: len(sem._waiters)) == 1)
    portal.call(release_after_timeout)
    wait_thread.join(10)
    stats = on_loop(portal, sem.statistics)
    assert (stats.value, stats.waiting) == (1, 0)


def test_hand_off_that_wins_the_race_with_the_timeout_is_kept(portal: Portal) -> None:
    """The loop wakes the waiter after its timeout expired but before it abandoned: the thread
    gets the permit (True), which it then holds; nothing duplicated."""
    sem = Semaphore(0)
    result: list[bool] = []

    def acquire() -> None:
        result.append(portal.semaphore(sem).acquire(timeout=0.05))

    async def wake_late() -> None:
        (waiter,) = list(sem._waiters)
        assert isinstance(waiter, ThreadWaiter)
        with waiter.mutex:  # the thread's try_abandon waits for this
            time.sleep(0.1)  # noqa: ASYNC251 (holds the loop past the thread's timeout on purpose)
            sem.release()

    t = start_thread(acquire)
    wait_until(lambda: on_loop(portal, lambda: len(sem._waiters)) == 1)
    portal.call(wake_late)
    t.join(10)
    assert result == [True]
    stats = on_loop(portal, sem.statistics)
    assert (stats.value, stats.waiting) == (0, 0)


def test_channel_get_hand_off_that_wins_the_race_with_the_timeout_is_received(
    portal: Portal,
) -> None:
    """A value handed to a getter whose timeout expired but who had not abandoned yet is
    received by the thread (not raised as TimeoutError, not lost)."""
    ch: Channel[int] = Channel()
    got: list[object] = []

    def get() -> None:
        try:
            got.append(portal.channel(ch).get(timeout=0.05))
        except TimeoutError as exc:
            got.append(exc)

    async def send_late() -> None:
        (reg,) = list(ch._getters)
        with reg.waiter.mutex:
            time.sleep(0.1)  # noqa: ASYNC251 (holds the loop past the thread's timeout)
            ch.send_nowait(7)

    t = start_thread(get)
    wait_until(lambda: on_loop(portal, ch.statistics).waiting_getters == 1)
    portal.call(send_late)
    t.join(10)
    assert got == [7]


def test_channel_get_abandoned_before_undo_passes_the_value_on(portal: Portal) -> None:
    """A send between a getter's timeout and its undo skips the abandoned getter: the value
    is buffered for the next getter, and the getter's entry is gone."""
    ch: Channel[int] = Channel(1)
    timed_out = threading.Event()

    def get() -> None:
        with pytest.raises(TimeoutError):
            portal.channel(ch).get(timeout=0.05)
        timed_out.set()

    async def send_after_timeout() -> None:
        timed_out.wait(10)
        ch.send_nowait(9)

    t = start_thread(get)
    wait_until(lambda: on_loop(portal, ch.statistics).waiting_getters == 1)
    portal.call(send_after_timeout)
    t.join(10)
    stats = on_loop(portal, ch.statistics)
    assert (stats.buffered, stats.waiting_getters) == (1, 0)
    assert portal.channel(ch).get(timeout=1) == 9


def test_select_timeout_before_it_parked_leaves_nothing(portal: Portal) -> None:
    """A select that times out before its registration ran never registers anywhere."""
    a: Channel[int] = Channel()
    b: Channel[int] = Channel()
    gate, fut = _hold_loop(portal)
    with pytest.raises(TimeoutError):
        portal.select(Get(a), Send(b, 1), timeout=0.01)
    gate.set()
    fut.result(10)
    assert on_loop(portal, lambda: (a.statistics().waiting_getters,
                                    b.statistics().waiting_senders)) == (0, 0)


def test_calls_racing_close_either_complete_or_fail_cleanly() -> None:
    """Threads calling while the portal closes: every call returns or raises ShutdownError;
    none hangs, whether it arrives before, during or after the loop stops."""
    outcomes: list[str] = []
    lock = threading.Lock()
    p = Portal().open()
    start = threading.Barrier(5)

    def hammer() -> None:
        start.wait(10)
        for _ in range(200):
            try:
                p.call(asyncio.sleep, 0)
                result = "ok"
            except ShutdownError:
                result = "shutdown"
            with lock:
                outcomes.append(result)

    threads = [start_thread(hammer) for _ in range(4)]
    start.wait(10)
    wait_until(lambda: len(outcomes) >= 50)
    p.close()
    for t in threads:
        t.join(20)
        assert not t.is_alive()
    assert p.join(10)
    assert len(outcomes) == 800 and "shutdown" in outcomes
    assert p.statistics().pending == 0


def test_channel_get_timeout_racing_sends_loses_nothing(portal: Portal) -> None:
    """Thread gets with short timeouts race task sends: every value is received exactly once,
    by the thread or left buffered, and no getter stays queued."""
    ch: Channel[int] = Channel(1000)
    view = portal.channel(ch)
    received: list[int] = []
    rng = random.Random(7)

    async def send_later(i: int, delay: float) -> None:
        await asyncio.sleep(delay)
        ch.send_nowait(i)

    for i in range(150):
        fut = portal.start_task_soon(send_later, i, rng.uniform(0, 0.002))
        try:
            received.append(view.get(timeout=rng.uniform(0, 0.002)))
        except TimeoutError:
            pass
        fut.result(10)
    stats = on_loop(portal, ch.statistics)
    assert stats.waiting_getters == 0
    rest = on_loop(portal, lambda: [ch.get_nowait() for _ in range(len(ch))])
    assert sorted(received + rest) == list(range(150))


def test_channel_send_timeout_racing_gets_is_exactly_once(portal: Portal) -> None:
    """Thread sends with short timeouts race task gets on an unbuffered channel: a send that
    timed out was never received; one that returned was received exactly once."""
    ch: Channel[int] = Channel()
    view = portal.channel(ch)
    sent: list[int] = []
    got: list[int] = []
    rng = random.Random(11)

    async def get_later(delay: float) -> None:
        await asyncio.sleep(delay)
        try:
            got.append(ch.get_nowait())
        except WouldBlock:
            pass

    for i in range(150):
        fut = portal.start_task_soon(get_later, rng.uniform(0, 0.002))
        try:
            view.send(i, timeout=rng.uniform(0, 0.002))
            sent.append(i)
        except TimeoutError:
            pass
        fut.result(10)
    assert got == sent
    assert on_loop(portal, ch.statistics).waiting_senders == 0


# -- channels: mixed mode ----------------------------------------------------------------------


def test_thread_senders_task_receivers_fifo_exactly_once(portal: Portal) -> None:
    """Several thread senders, task receivers: each value once, each sender's order kept."""
    ch: Channel[tuple[int, int]] = Channel(2)
    view = portal.channel(ch)
    per_sender = 200

    def produce(sender: int) -> None:
        for i in range(per_sender):
            view.send((sender, i))

    async def consume(n: int) -> list[tuple[int, int]]:
        return [await ch.get() for _ in range(n)]

    futs = [portal.start_task_soon(consume, 150) for _ in range(4)]
    threads = [start_thread(produce, s) for s in range(3)]
    for t in threads:
        t.join(30)
    values = [v for f in futs for v in f.result(30)]
    assert sorted(values) == [(s, i) for s in range(3) for i in range(per_sender)]
    for f in futs:
        for s in range(3):
            mine = [i for (sender, i) in f.result() if sender == s]
            assert mine == sorted(mine)


def test_task_senders_thread_receivers_and_close_ends_iteration(portal: Portal) -> None:
    """Task senders, thread receivers iterating the view; close() ends every iteration."""
    ch: Channel[int] = Channel()
    view = portal.channel(ch)
    results: list[list[int]] = [[], [], []]

    def consume(k: int) -> None:
        results[k].extend(view)

    async def produce() -> None:
        for i in range(300):
            await ch.send(i)
        ch.close()

    threads = [start_thread(consume, k) for k in range(3)]
    portal.call(produce)
    for t in threads:
        t.join(10)
    assert sorted(v for r in results for v in r) == list(range(300))
    assert all(r == sorted(r) for r in results)
    with pytest.raises(ChannelClosed):
        view.send(1)
    with pytest.raises(ChannelClosed):
        view.get()
    with pytest.raises(ChannelClosed):
        view.close()


def test_channel_view_nowait_and_close_wakes_blocked_threads(portal: Portal) -> None:
    """send_nowait/get_nowait raise WouldBlock; close() wakes a thread blocked in send."""
    ch: Channel[int] = Channel(1)
    view = portal.channel(ch)
    view.send_nowait(1)
    with pytest.raises(WouldBlock):
        view.send_nowait(2)
    errors: list[BaseException] = []

    def blocked_send() -> None:
        try:
            view.send(2)
        except ChannelClosed as exc:
            errors.append(exc)

    t = start_thread(blocked_send)
    wait_until(lambda: on_loop(portal, ch.statistics).waiting_senders == 1)
    view.close()
    t.join(10)
    assert len(errors) == 1
    assert view.get_nowait() == 1
    with pytest.raises(ChannelClosed):
        view.get_nowait()
    assert view.channel is ch and "BlockingChannel" in repr(view)


def test_thread_blocked_in_select_is_woken_by_a_task(portal: Portal) -> None:
    """A thread's select parks on both channels; a task's send completes exactly that case and
    no registration is left on the other channel."""
    a: Channel[str] = Channel()
    b: Channel[str] = Channel()
    get_b = Get(b)
    results: list[object] = []
    t = start_thread(lambda: results.append(portal.select(Get(a), get_b)))
    wait_until(lambda: on_loop(portal, lambda: (a.statistics().waiting_getters,
                                                b.statistics().waiting_getters)) == (1, 1))
    portal.call(b.send, "hello")
    t.join(10)
    assert results == [GetResult(b, get_b, "hello")]
    assert on_loop(portal, a.statistics).waiting_getters == 0


def test_select_send_case_timeout_and_closed(portal: Portal) -> None:
    """select returns SendResult for a ready send; times out leaving nothing; all-ignored
    closed channels raise ChannelClosed."""
    ch: Channel[int] = Channel(1)
    op = Send(ch, 5)
    assert portal.select(op) == SendResult(ch, op)
    with pytest.raises(TimeoutError):
        portal.select(Send(ch, 6), timeout=0.01)
    assert on_loop(portal, ch.statistics).waiting_senders == 0
    assert on_loop(portal, ch.get_nowait) == 5
    on_loop(portal, ch.close)
    with pytest.raises(ChannelClosed):
        portal.select(Get(ch, ignore_on_closed=True))


def test_two_loops_share_a_channel_through_portals() -> None:
    """Tasks on two event loops in two threads exchange values through one channel: the
    channel lives on portal A; loop B's tasks reach it with run_sync and A's blocking view."""
    ch: Channel[int] = Channel()
    with Portal(name="A") as a, Portal(name="B") as b:
        view = a.channel(ch)

        async def produce(start: int) -> None:
            for i in range(start, start + 100):
                await run_sync(view.send, i)

        async def consume() -> list[int]:
            return [await ch.get() for _ in range(200)]

        got = a.start_task_soon(consume)
        producers = [b.start_task_soon(produce, k * 100) for k in range(2)]
        for f in producers:
            f.result(30)
        assert sorted(got.result(30)) == list(range(200))


@pytest.mark.skipif(sys.platform == "win32", reason="pthread_kill")
def test_ctrl_c_while_blocked_in_get_leaves_no_waiter(portal: Portal) -> None:
    """SIGINT to a thread blocked in get: KeyboardInterrupt, and its getter leaves the queue."""
    assert threading.current_thread() is threading.main_thread()
    ch: Channel[int] = Channel()
    main = threading.main_thread().ident
    assert main is not None

    def interrupt() -> None:
        wait_until(lambda: ch.statistics().waiting_getters == 1)
        signal.pthread_kill(main, signal.SIGINT)

    t = start_thread(interrupt)
    with pytest.raises(KeyboardInterrupt):
        portal.channel(ch).get(timeout=20)
    t.join(10)
    assert on_loop(portal, ch.statistics).waiting_getters == 0


def test_ctrl_c_while_blocked_in_call_cancels_its_task(portal: Portal) -> None:
    """SIGINT to a thread blocked in call(): KeyboardInterrupt in the caller, the callee's task
    is cancelled (its cleanup runs), and the call is no longer pending."""
    assert threading.current_thread() is threading.main_thread()
    main = threading.main_thread().ident
    assert main is not None
    started = threading.Event()
    cancelled = threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    seen = threading.Event()

    def interrupt() -> None:
        started.wait(10)
        # CPython runs a handler when a signal interrupts the lock's wait, not for one that
        # landed after the caller let go of the GIL and before it blocked (that one waits for
        # the wait to end): send again until the caller has seen one. (uvloop's fast wake-up
        # made the first signal land there about one run in three on a busy machine.)
        for _ in range(30):
            signal.pthread_kill(main, signal.SIGINT)
            if seen.wait(1.0):
                return

    t = start_thread(interrupt)
    with pytest.raises(KeyboardInterrupt):
        portal.call(forever)
    seen.set()
    t.join(10)
    assert cancelled.wait(10)
    wait_until(lambda: portal.statistics().tasks == 0)
    assert portal.statistics().pending == 0


def test_calls_interrupted_at_random_points_leave_nothing_behind(portal: Portal) -> None:
    """A signal handler raising KeyboardInterrupt every 0.1-1 ms while the main thread makes
    calls (some finishing at once, some suspending): each call returns its value or raises
    KeyboardInterrupt, later calls work, and afterwards nothing is pending, no task is left
    and every callee that started either finished or was cancelled."""
    assert threading.current_thread() is threading.main_thread()
    rng = random.Random(7)
    started = [0]
    ended = [0]

    async def callee(x: int, suspend: bool) -> int:
        started[0] += 1
        try:
            if suspend:
                await asyncio.sleep(0)
            return x
        finally:
            ended[0] += 1

    stopping = [False]
    in_call = [False]  # raise only inside portal.call: not at the test's own checks

    def interrupt(signum: int, frame: object) -> None:
        if stopping[0]:
            return
        signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0001, 0.001))
        if in_call[0]:
            in_call[0] = False
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    # A KeyboardInterrupt raised in a collector callback (hypothesis registers one for good)
    # is reported as unraisable by CPython: the storm runs without them.
    gc_callbacks = gc.callbacks[:]
    gc.callbacks.clear()
    interrupts = returned = 0
    deadline = time.monotonic() + 1.0
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.001)
        while time.monotonic() < deadline:
            x = rng.randrange(1000)
            suspend = rng.random() < 0.5
            try:
                in_call[0] = True
                value = portal.call(callee, x, suspend)
                in_call[0] = False  # (a store: no check between it and the call's return)
            except KeyboardInterrupt:
                interrupts += 1
                continue
            assert value == x, "a call returned another call's value"
            returned += 1
    finally:
        stopping[0] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        gc.callbacks[:] = gc_callbacks
    assert returned > 0 and interrupts > 0
    assert portal.call(callee, 5, True) == 5
    wait_until(lambda: portal.statistics().tasks == 0 and portal.statistics().pending == 0)
    assert on_loop(portal, lambda: started[0] == ended[0])


def test_a_raising_inbox_callback_is_reported_and_the_next_one_runs(portal: Portal) -> None:
    """A loop callback posted by a thread that raises goes to the loop's exception handler
    (as a Handle's would), and the callbacks posted after it still run, in order."""
    reported: list[BaseException | None] = []
    ran: list[int] = []

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, object]) -> None:
        error = context.get("exception")
        reported.append(error if isinstance(error, BaseException) else None)

    def fail() -> None:
        raise ValueError("boom")

    on_loop(portal, portal.loop.set_exception_handler, handler)
    portal._soon(ran.append, 1)
    portal._soon(fail)
    portal._soon(ran.append, 2)
    wait_until(lambda: ran == [1, 2])
    assert [type(e) for e in reported] == [ValueError]


def test_idle_parked_thread_uses_no_cpu(portal: Portal) -> None:
    """A thread parked in acquire blocks on a lock: the process burns ~no CPU meanwhile."""
    sem = Semaphore(0)
    t = start_thread(lambda: portal.semaphore(sem).acquire(timeout=5))
    wait_until(lambda: on_loop(portal, lambda: len(sem._waiters)) == 1)
    cpu = time.process_time()
    time.sleep(0.3)  # a real-time measurement
    used = time.process_time() - cpu
    on_loop(portal, sem.release)
    t.join(10)
    assert used < 0.05, f"{used:.3f} s of CPU while parked"


# -- task groups from a thread -----------------------------------------------------------------


def test_task_group_waits_for_all_and_returns_futures(portal: Portal) -> None:
    """Leaving the block waits for every task; create_task returns futures with results."""
    async def later(x: int) -> int:
        await asyncio.sleep(0.01)
        return x

    with portal.task_group() as tg:
        futs = [tg.create_task(later, i) for i in range(5)]
    assert [f.result(0) for f in futs] == list(range(5))
    with pytest.raises(RuntimeError, match="not open"):
        tg.create_task(later, 1)


def test_task_group_errors_come_out_as_exception_group(portal: Portal) -> None:
    """A failing task cancels its siblings; the thread gets an ExceptionGroup; token set."""
    cancelled = threading.Event()

    async def fail() -> None:
        raise ValueError("x")

    async def sibling() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with pytest.raises(ExceptionGroup) as info, portal.task_group() as tg:
        tg.create_task(sibling)
        tg.create_task(fail)
        assert tg.token.wait(10)
    assert [type(e) for e in info.value.exceptions] == [ValueError] and cancelled.is_set()


def test_task_group_block_error_cancels_tasks(portal: Portal) -> None:
    """The block raising cancels the tasks; with no task errors, the block's exception."""
    with pytest.raises(KeyError), portal.task_group() as tg:
        fut = tg.create_task(asyncio.sleep, 30)
        raise KeyError
    assert fut.cancelled()


def test_persistent_task_group_reports_and_keeps_siblings(portal: Portal) -> None:
    """persistent=True: failures go to the handler, siblings keep running, no group raised."""
    seen: list[BaseException] = []

    async def fail() -> None:
        raise ValueError("x")

    with portal.task_group(persistent=True,
                           exception_handler=lambda exc, task: seen.append(exc)) as tg:
        bad = tg.create_task(fail)
        good = tg.create_task(asyncio.sleep, 0.02, "ok")
    assert good.result(0) == "ok" and isinstance(bad.exception(0), ValueError)
    assert [type(e) for e in seen] == [ValueError]
    with pytest.raises(TypeError, match="persistent"):
        portal.task_group(exception_handler=lambda e, t: None)


# -- run_sync ----------------------------------------------------------------------------------


def test_run_sync_result_context_and_limiter() -> None:
    """run_sync returns fn's result, copies contextvars, and the limiter bounds concurrency."""
    active = 0
    peak = 0
    lock = threading.Lock()

    def work() -> str:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        time.sleep(0.01)
        with lock:
            active -= 1
        return var.get()

    async def main() -> list[str]:
        var.set("async")
        limiter = Semaphore(2)
        return list(await asyncio.gather(*(run_sync(work, limiter=limiter) for _ in range(6))))

    assert asyncio.run(main()) == ["async"] * 6
    assert peak == 2


def test_run_sync_cancellation_waits_for_the_thread() -> None:
    """Cancelling the awaiting task cancels the thread's token and waits for the thread to
    finish before CancelledError propagates."""
    finished = threading.Event()

    def worker() -> None:
        token = CancelToken.current()
        assert token is not None
        assert token.wait(10)
        time.sleep(0.02)
        finished.set()

    async def main() -> None:
        task = asyncio.create_task(run_sync(worker))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished.is_set()

    asyncio.run(main())


def test_run_sync_abandon_on_cancel_returns_at_once() -> None:
    """abandon_on_cancel=True: the cancellation propagates while the thread still runs."""
    release = threading.Event()
    done = threading.Event()

    def worker() -> None:
        release.wait(10)
        done.set()

    async def main() -> None:
        task = asyncio.create_task(run_sync(worker, abandon_on_cancel=True))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not done.is_set()

    asyncio.run(main())
    release.set()
    assert done.wait(10)


def test_run_sync_reraises_and_rejects_non_callables() -> None:
    """Exceptions from fn are raised in the task; a non-callable is a TypeError."""
    async def main() -> None:
        with pytest.raises(ZeroDivisionError):
            await run_sync(lambda: 1 / 0)
        with pytest.raises(TypeError, match="fn"):
            await run_sync(3)  # type: ignore[arg-type]

    asyncio.run(main())


def test_thread_getter_arriving_while_a_value_is_in_flight_after_close_waits_for_it(
    portal: Portal,
) -> None:
    """A value handed to task g1 is in flight (g1 has not resumed) when the channel closes and a
    thread's get arrives: the channel is not drained yet, so the thread parks instead of
    raising ChannelClosed; g1 is cancelled before it resumes and hands the value back, and the
    thread receives it. The send returned normally, so the value must be received.

    The loop is held while the thread calls are posted, so that send, close, g1's cancellation
    and the thread's get run in one drain of the portal's inbox, in that order, before g1 can
    resume."""
    ch: Channel[str] = Channel()
    view = portal.channel(ch)
    g1 = portal.start_task_soon(ch.get)
    wait_until(lambda: ch.statistics().waiting_getters == 1)
    gate = threading.Event()

    async def hold_loop() -> None:
        gate.wait(10)

    blocker = portal.start_task_soon(hold_loop)
    wait_until(lambda: not portal._inbox)  # the blocker runs: the loop is held

    def posted(n: int) -> None:
        wait_until(lambda: len(portal._inbox) == n)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        sent = pool.submit(view.send_nowait, "v")
        posted(1)
        closed = pool.submit(view.close)
        posted(2)
        assert g1.cancel()
        posted(3)
        got = pool.submit(view.get, 10)
        posted(4)
        gate.set()
        blocker.result(10)
        sent.result(10)
        closed.result(10)
        assert got.result(10) == "v"
    # g1's future settles on the loop after the thread had the value: wait for it first.
    concurrent.futures.wait([g1], 10)
    assert g1.cancelled() or isinstance(g1.exception(0), asyncio.CancelledError)
    with pytest.raises(ChannelClosed):
        view.get(10)
