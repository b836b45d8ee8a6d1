"""SharedSemaphore, SharedBoundedSemaphore and SharedLock: threads and tasks of several loops.

Real threads and real event loops (asyncio's and, where installed, uvloop's), no mocks. Each
loop runs in a thread of its own (`LoopThread`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import signal
import sys
import threading
import weakref
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from executors import WouldBlock
from executors.testing import wait_until
from integrations.bridge import (
    Portal,
    SharedBoundedSemaphore,
    SharedLock,
    SharedSemaphore,
)

T = TypeVar("T")


def _uvloop_factory() -> asyncio.AbstractEventLoop:
    uvloop = pytest.importorskip("uvloop")
    return uvloop.new_event_loop()  # type: ignore[no-any-return]


LOOP_FACTORIES = [
    pytest.param(asyncio.new_event_loop, id="asyncio"),
    pytest.param(_uvloop_factory, id="uvloop"),
]


class LoopThread:
    """An event loop running forever in a thread of its own, until `close`."""

    def __init__(self, factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
        self.loop = factory()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the loop's thread and return its result."""
        async def run() -> T:
            return fn()
        return self.submit(run()).result(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        assert not self.thread.is_alive()

    def close(self) -> None:
        """Stop, cancel leftover tasks and run them to completion (as asyncio.run), close."""
        if self.loop.is_closed():
            return
        if self.thread.is_alive():
            self.stop()
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()


@pytest.fixture(params=LOOP_FACTORIES)
def loop_factory(request: pytest.FixtureRequest) -> Callable[[], asyncio.AbstractEventLoop]:
    factory: Callable[[], asyncio.AbstractEventLoop] = request.param
    factory().close()  # importorskip for uvloop happens here
    return factory


@pytest.fixture
def loops(loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> Iterator[list[LoopThread]]:
    threads = [LoopThread(loop_factory), LoopThread(loop_factory)]
    yield threads
    for lt in threads:
        lt.close()


def _waiting(sem: SharedSemaphore | SharedLock) -> int:
    return sem.statistics().waiting


def _park_thread(
    sem: SharedSemaphore | SharedLock, expect_waiting: int
) -> tuple[threading.Thread, threading.Event]:
    """Start a thread that takes and returns a permit, setting the event while it holds it;
    return once it is parked (the line is `expect_waiting` long)."""
    got = threading.Event()

    def thread() -> None:
        with sem.blocking:
            got.set()

    t = threading.Thread(target=thread)
    t.start()
    wait_until(lambda: _waiting(sem) == expect_waiting, message="the thread did not park")
    return t, got


# -- the stress: never more holders than permits, the level ends where it began ----------------


def _stress(loops: list[LoopThread], seed: int, rounds: int, value: int = 2) -> None:
    rng = random.Random(seed)
    sem = SharedSemaphore(value)
    guard = threading.Lock()
    holders = [0, 0]  # now, most ever
    grants = [0]

    def enter() -> None:
        with guard:
            holders[0] += 1
            holders[1] = max(holders[1], holders[0])
            grants[0] += 1
            assert holders[0] <= value, holders

    def leave() -> None:
        with guard:
            holders[0] -= 1

    def thread_worker(seed: int) -> None:
        r = random.Random(seed)
        for _ in range(rounds):
            timeout = r.choice([None, 0, 0.0005, 0.002])
            if sem.blocking.acquire(timeout=timeout):
                enter()
                leave()
                sem.release()

    async def task_worker(seed: int) -> None:
        r = random.Random(seed)
        for _ in range(rounds):
            how = r.random()
            if how < 0.25:  # a timeout around acquire (a cancellation)
                try:
                    async with asyncio.timeout(r.choice([0, 0.0005, 0.002])):
                        await sem.acquire()
                except TimeoutError:
                    continue
            elif how < 0.4:  # cancelled by another task at a random point
                inner = asyncio.ensure_future(sem.acquire())
                for _ in range(r.randrange(3)):
                    await asyncio.sleep(0)
                inner.cancel()
                try:
                    await inner
                except asyncio.CancelledError:
                    continue
            else:
                await sem.acquire()
            enter()
            if r.random() < 0.5:
                await asyncio.sleep(0)
            leave()
            sem.release()

    async def tasks(seed: int) -> None:
        await asyncio.gather(*(task_worker(seed * 10 + i) for i in range(3)))

    futures = [lt.submit(tasks(rng.randrange(1 << 30))) for lt in loops]
    workers = [threading.Thread(target=thread_worker, args=(rng.randrange(1 << 30),))
               for _ in range(3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
        assert not t.is_alive(), f"seed {seed}: a thread is stuck; {sem!r}"
    for f in futures:
        f.result(120)
    stats = sem.statistics()
    assert (stats.value, stats.woken, stats.waiting) == (value, 0, 0), (seed, stats)
    assert holders[0] == 0 and 1 <= holders[1] <= value
    assert grants[0] > 0


@pytest.mark.parametrize("seed", range(6))
def test_holders_never_exceed_value_and_level_returns(loops: list[LoopThread], seed: int) -> None:
    """3 threads with random timeouts and 3 tasks on each of 2 loops with random timeouts and
    cancellations share a semaphore of 2: never more than 2 holders at once, and at the end every
    permit is free again (none lost, none duplicated) and nobody is left waiting."""
    _stress(loops, seed, rounds=150)


@pytest.mark.parametrize("seed", range(3))
def test_stress_with_tiny_switch_interval(loops: list[LoopThread], seed: int) -> None:
    """The same stress with ``sys.setswitchinterval(1e-6)``: threads preempted everywhere,
    inside the mutex's sections as well."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _stress(loops, 100 + seed, rounds=60)
    finally:
        sys.setswitchinterval(old)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(30))
def test_stress_long(loops: list[LoopThread], seed: int) -> None:
    """The stress, longer and over more seeds."""
    _stress(loops, 1000 + seed, rounds=600)


# -- one FIFO for threads and tasks ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["semaphore", "lock"])
def test_grant_order_is_arrival_order(loops: list[LoopThread], kind: str) -> None:
    """Threads and tasks of two loops, arriving one after another while the permit is held, are
    granted it in arrival order, whichever side releases."""
    sem: SharedSemaphore | SharedLock = SharedSemaphore(1) if kind == "semaphore" else SharedLock()
    order: list[int] = []
    assert sem.blocking.acquire()

    def thread_party(i: int) -> None:
        with sem.blocking:
            order.append(i)

    async def task_party(i: int) -> None:
        async with sem:
            order.append(i)
            await asyncio.sleep(0)

    threads = []
    futures = []
    for i in range(12):
        side = i % 3
        if side == 0:
            t = threading.Thread(target=thread_party, args=(i,))
            t.start()
            threads.append(t)
        else:
            futures.append(loops[side - 1].submit(task_party(i)))
        wait_until(lambda i=i: _waiting(sem) == i + 1, message=f"party {i} did not park")
    sem.release()
    for t in threads:
        t.join(30)
    for f in futures:
        f.result(30)
    assert order == list(range(12))
    assert not sem.locked()


def test_one_release_of_several_permits_serves_the_line_in_order(
    loops: list[LoopThread],
) -> None:
    """``release(3)`` hands its permits in one section to the first three live waiters of a line
    of a thread, a thread that gave up (skipped, no permit lost on it), a task, a thread and a
    fourth party: the fourth, the last to arrive, keeps waiting until a permit comes back, and
    every permit ends free (the release's drain, inlined in the section runner)."""
    sem = SharedSemaphore(0)
    held: list[str] = []
    go = threading.Event()

    def thread_party(name: str) -> None:
        assert sem.blocking.acquire()
        held.append(name)
        go.wait(30)
        sem.release()

    async def task_party() -> None:
        await sem.acquire()
        held.append("task")
        await asyncio.get_running_loop().run_in_executor(None, go.wait, 30)
        sem.release()

    first = threading.Thread(target=thread_party, args=("first",))
    first.start()
    wait_until(lambda: _waiting(sem) == 1, message="the first thread did not park")
    assert not sem.blocking.acquire(timeout=0.001)  # leaves a tombstone in the line
    task = loops[0].submit(task_party())
    wait_until(lambda: _waiting(sem) == 2, message="the task did not park")
    last = threading.Thread(target=thread_party, args=("last",))
    last.start()
    wait_until(lambda: _waiting(sem) == 3, message="the last thread did not park")
    fourth = threading.Thread(target=thread_party, args=("fourth",))
    fourth.start()
    wait_until(lambda: _waiting(sem) == 4, message="the fourth thread did not park")
    sem.blocking.release(3)
    wait_until(lambda: len(held) == 3, message="three parties did not get a permit")
    assert sorted(held) == ["first", "last", "task"]
    assert sem.statistics().value == 0 and _waiting(sem) == 1
    go.set()
    for t in (first, last, fourth):
        t.join(30)
    task.result(30)
    assert sorted(held) == ["first", "fourth", "last", "task"]
    stats = sem.statistics()
    assert (stats.value, stats.level, stats.waiting, stats.woken) == (3, 3, 0, 0)


def test_newcomer_never_takes_a_handed_permit(loops: list[LoopThread]) -> None:
    """A release while someone waits hands the permit to the waiter: a newcomer thread or task
    arriving right after finds none free (no barging)."""
    sem = SharedSemaphore(1)
    assert sem.blocking.acquire()
    got = threading.Event()

    def waiter() -> None:
        with sem.blocking:
            got.wait(10)

    t = threading.Thread(target=waiter)
    t.start()
    wait_until(lambda: _waiting(sem) == 1)
    sem.blocking.release()
    assert not sem.blocking.acquire(blocking=False)
    with pytest.raises(WouldBlock):
        loops[0].call(sem.acquire_nowait)
    got.set()
    t.join(10)
    assert sem.blocking.acquire(blocking=False)


def test_uncontended_task_acquire_does_not_yield(loops: list[LoopThread]) -> None:
    """A free permit is taken without a loop iteration (as executors.aio.Semaphore)."""
    sem = SharedSemaphore(1)

    async def probe() -> bool:
        acquire = sem.acquire().__await__()
        try:
            next(acquire)
        except StopIteration as stop:
            return bool(stop.value)
        return False

    assert loops[0].submit(probe()).result(10)
    assert sem.locked()


# -- nothing lost --------------------------------------------------------------------------------


def test_task_claimed_then_cancelled_passes_the_permit_on(loops: list[LoopThread]) -> None:
    """A task handed the permit and cancelled before it resumes passes it to the thread parked
    behind it (same loop: the release and the cancel run in one callback)."""
    sem = SharedLock()
    lt = loops[0]
    assert sem.blocking.acquire()
    task = lt.call(lambda: lt.loop.create_task(sem.acquire()))
    wait_until(lambda: _waiting(sem) == 1)
    t, got = _park_thread(sem, expect_waiting=2)

    def release_then_cancel() -> None:
        sem.release()
        assert sem.statistics().woken == 1
        task.cancel()

    lt.loop.call_soon_threadsafe(release_then_cancel)
    assert got.wait(10), f"the permit was lost: {sem!r}"
    t.join(10)
    wait_until(task.done)
    assert task.cancelled()
    stats = sem.statistics()
    assert (stats.locked, stats.woken, stats.waiting) == (False, 0, 0)


def test_cross_thread_claim_then_cancel_passes_the_permit_on(loops: list[LoopThread]) -> None:
    """A thread's release claims a task of another loop (posted to its waker); the task is then
    cancelled before it resumed: the permit goes to the next waiter, not lost."""
    sem = SharedSemaphore(1)
    lt = loops[0]
    assert sem.blocking.acquire()
    lt.stop()  # the loop does not run: the claim is posted and the task cannot resume
    task = lt.loop.create_task(sem.acquire())
    lt.loop.run_until_complete(asyncio.sleep(0))  # the task parks
    assert _waiting(sem) == 1
    sem.release()  # claims the task (posted to its loop's waker)
    assert sem.statistics().woken == 1
    assert not sem.blocking.acquire(blocking=False)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        lt.loop.run_until_complete(task)
    stats = sem.statistics()
    assert (stats.value, stats.woken) == (1, 0)


def test_ctrl_c_while_parked_leaves_it_consistent() -> None:
    """KeyboardInterrupt raised by a signal handler into a parked main thread: it owns no
    permit, leaves the line, and the next release goes to whoever waits next."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread only")
    sem = SharedSemaphore(1)
    assert sem.blocking.acquire()

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            sem.blocking.acquire(timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert _waiting(sem) == 0
    sem.release()
    assert sem.statistics().value == 1


# -- re-entry: finalizers and signal handlers ------------------------------------------------------


def test_release_from_signal_handler_wakes_the_parked_main_thread() -> None:
    """A SIGALRM handler releases the permit the main thread is parked for: no deadlock, the
    main thread gets it."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are delivered to the main thread only")
    sem = SharedLock()
    assert sem.blocking.acquire()
    old = signal.signal(signal.SIGALRM, lambda signum, frame: sem.release())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        assert sem.blocking.acquire(timeout=30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert sem.locked()


def test_release_from_del_inside_the_mutex_is_deferred_in_fifo_order() -> None:
    """A finalizer that releases while its thread is inside the primitive's mutex (here: the
    section is held open by the test, as any section of ours) neither deadlocks nor hands the
    permit out early: it is applied when the section ends, to the head of the line."""
    sem = SharedSemaphore(1)
    assert sem.blocking.acquire()
    t, got = _park_thread(sem, expect_waiting=1)

    class Releaser:
        def __del__(self) -> None:
            sem.release()

    sem._mutex.acquire()  # what each section does first
    try:
        obj = Releaser()
        del obj  # __del__ runs now, on the thread inside the mutex
        assert sem.statistics().value == 0 and _waiting(sem) == 1  # deferred, still held
    finally:
        sem._exit()  # the section's exit: releases the mutex, then runs the deferred release
    assert got.wait(10)
    t.join(10)
    assert sem.statistics().value == 1


def test_deferred_over_release_is_reported_not_applied(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An over-release made from a finalizer inside the mutex has nobody to raise to: it is
    reported through sys.unraisablehook when the section ends, and changes nothing."""
    reported: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reported.append(info.exc_value))
    for primitive in (SharedBoundedSemaphore(1), SharedLock()):
        primitive._mutex.acquire()  # what each section does first
        try:
            primitive.release()  # at its bound (a lock: not acquired): deferred
        finally:
            primitive._exit()  # the section's exit runs the deferred release
        assert primitive._value == 1 and not primitive.locked()
    assert [type(exc) for exc in reported] == [ValueError, RuntimeError]
    bounded = SharedBoundedSemaphore(1)
    assert bounded.blocking.acquire()
    bounded._mutex.acquire()
    try:
        bounded.release()  # a valid release, deferred: applied at the exit
    finally:
        bounded._exit()
    assert bounded.statistics().value == 1 and len(reported) == 2


def test_release_from_weakref_callback_freed_inside_a_section() -> None:
    """A thread that timed out leaves a tombstone in the line; the release that pops it frees it
    inside the mutex, and a weakref callback on it releases re-entrantly there: deferred to the
    end of that section, no deadlock, both permits end up free."""
    sem = SharedSemaphore(0)
    assert not sem.blocking.acquire(timeout=0.001)
    inside: list[bool] = []
    ref = weakref.ref(sem._line[0], lambda _: (inside.append(sem._mutex._is_owned()),
                                                sem.release()))
    assert ref() is not None and not ref().waiting  # type: ignore[union-attr]
    done = threading.Event()

    def release() -> None:
        sem.release()  # pops the tombstone: its last reference dies inside the section
        done.set()

    t = threading.Thread(target=release)
    t.start()
    assert done.wait(10), "deadlocked"
    t.join(10)
    assert inside == [True]
    assert sem.statistics().value == 2


# -- loops closing under parked tasks ------------------------------------------------------------


def test_loop_closed_with_parked_tasks_does_not_strand_threads(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """Tasks of a loop that is closed (without cancelling them) while they wait are dropped when
    their turn comes; the thread parked behind them is served."""
    sem = SharedSemaphore(1)
    lt = LoopThread(loop_factory)
    assert sem.blocking.acquire()
    futs = [lt.submit(sem.acquire()) for _ in range(3)]
    wait_until(lambda: _waiting(sem) == 3)
    t, got = _park_thread(sem, expect_waiting=4)
    lt.stop()
    lt.loop.close()  # the tasks stay pending forever
    sem.release()
    assert got.wait(10), f"the thread was stranded: {sem!r}"
    t.join(10)
    assert sem.statistics().value == 1
    del futs


def test_loop_closed_after_the_post_hands_the_permit_back(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """A release claims a parked task and posts its resumption, then the loop shuts down (as
    asyncio.run does: leftover tasks cancelled, then closed) before the post ran: the task hands
    its permit back and the thread parked behind it gets it."""
    sem = SharedSemaphore(1)
    lt = LoopThread(loop_factory)
    assert sem.blocking.acquire()
    lt.submit(sem.acquire())
    wait_until(lambda: _waiting(sem) == 1)
    t, got = _park_thread(sem, expect_waiting=2)
    lt.stop()
    sem.release()  # claims the task: posted, but the loop does not run any more
    assert sem.statistics().woken == 1 and not got.is_set()
    lt.close()
    assert got.wait(10), f"the permit was lost: {sem!r}"
    t.join(10)
    assert sem.statistics().value == 1


# -- API ------------------------------------------------------------------------------------------


def test_task_api_matches_aio_semaphore(loops: list[LoopThread]) -> None:
    """async with, acquire(), release(), locked(), statistics() and the repr, from a task."""
    sem = SharedSemaphore(2)

    async def use() -> list[object]:
        seen: list[object] = []
        async with sem:
            seen.append(repr(sem))
            await sem.acquire()
            seen.append(sem.locked())
            seen.append(sem.statistics())
            sem.release()
        seen.append(repr(sem))
        return seen

    first, locked, stats, last = loops[0].submit(use()).result(10)
    assert "[unlocked, value:1]" in str(first) and locked is True
    assert stats.value == 0 and stats.level == 0 and stats.locked  # type: ignore[attr-defined]
    assert "[unlocked, value:2]" in str(last)


def test_bounded_over_release_raises_from_both_sides(loops: list[LoopThread]) -> None:
    """SharedBoundedSemaphore refuses a release beyond its value with ValueError, from a task or
    a thread, and changes nothing."""
    sem = SharedBoundedSemaphore(2)
    with pytest.raises(ValueError, match="released too many times"):
        sem.release()
    with pytest.raises(ValueError, match="released too many times"):
        loops[0].call(sem.release)
    assert sem.blocking.acquire()
    with pytest.raises(ValueError):
        sem.blocking.release(2)
    sem.blocking.release()
    assert sem.statistics().value == 2


def test_lock_release_unlocked_raises() -> None:
    """SharedLock.release() on an unlocked lock raises RuntimeError (asyncio's message)."""
    lock = SharedLock()
    with pytest.raises(RuntimeError, match="Lock is not acquired"):
        lock.release()
    with pytest.raises(RuntimeError):
        lock.blocking.release()


def test_bad_arguments() -> None:
    """Bad values and timeouts fail at the boundary with TypeError/ValueError."""
    with pytest.raises(TypeError, match="value"):
        SharedSemaphore("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="value"):
        SharedBoundedSemaphore(-1)
    sem = SharedSemaphore(0)
    with pytest.raises(ValueError, match="timeout"):
        sem.blocking.acquire(timeout=-1)
    with pytest.raises(ValueError):
        sem.blocking.acquire(False, 1)
    with pytest.raises(TypeError, match="timeout"):
        sem.blocking.acquire(timeout="1")  # type: ignore[arg-type]


def test_portal_views_are_the_shared_views() -> None:
    """Portal.semaphore(shared) and Portal.lock(shared) return the primitives' own views."""
    sem, lock = SharedSemaphore(1), SharedLock()
    with Portal() as portal:
        assert portal.semaphore(sem) is sem.blocking
        assert portal.lock(lock) is lock.blocking


def test_thread_timeout_returns_false_and_leaves_no_residue() -> None:
    """A thread that times out returns False, is no longer in line, and the next release frees
    the permit instead of handing it to the gone thread."""
    sem = SharedSemaphore(0)
    assert not sem.blocking.acquire(timeout=0.01)
    assert _waiting(sem) == 0
    sem.release()
    assert sem.statistics().value == 1


# -- the state machine -------------------------------------------------------------------------


class ThreadsAndTasks(RuleBasedStateMachine):
    """Threads and tasks (one loop) arrive, release, time out and get cancelled; after every step
    the model's holders, line and free count match the semaphore's."""

    def __init__(self) -> None:
        super().__init__()
        self.value = 2
        self.sem = SharedSemaphore(self.value)
        self.lt = LoopThread(asyncio.new_event_loop)
        self.holders: list[tuple[str, Any]] = []  # (kind, handle) in grant order
        self.line: list[tuple[str, Any]] = []  # the model's waiting line
        self.next_id = 0

    def teardown(self) -> None:
        for kind, handle in self.line:
            if kind == "task":
                handle.cancel()
            else:
                handle[2].set()  # release at once when granted
        for _, handle in list(self.holders):
            self._release_handle(handle)
        for kind, handle in self.line:
            if kind == "thread":
                handle[1].join(10)
                assert not handle[1].is_alive()
        self.lt.close()

    def _arrive_thread(self) -> tuple[str, Any]:
        release = threading.Event()
        granted = threading.Event()

        def run() -> None:
            assert self.sem.blocking.acquire(timeout=30)
            granted.set()
            release.wait(30)
            self.sem.release()

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return "thread", (granted, t, release)

    def _arrive_task(self) -> tuple[str, Any]:
        fut = self.lt.submit(self.sem.acquire())
        return "task", fut

    def _granted(self, kind: str, handle: Any) -> bool:
        return bool(handle[0].is_set()) if kind == "thread" else bool(handle.done())

    def _release_handle(self, handle: Any) -> None:
        if handle is None:  # taken by the test's own thread (try_acquire)
            self.sem.release()
        elif isinstance(handle, tuple):
            handle[2].set()
            handle[1].join(10)
        else:
            self.lt.call(self.sem.release)

    def _settle(self) -> None:
        """Wait until the model's expected holders are granted (the FIFO head first)."""
        free = self.value - len(self.holders)
        while free and self.line:
            kind, handle = self.line.pop(0)
            wait_until(lambda k=kind, h=handle: self._granted(k, h), message="head not granted")
            self.holders.append((kind, handle))
            free -= 1
        for kind, handle in self.line:
            assert not self._granted(kind, handle), "a later arrival overtook the line"
        wait_until(lambda: _waiting(self.sem) == len(self.line), message="line mismatch")

    @rule(kind=st.sampled_from(["thread", "task"]))
    def arrive(self, kind: str) -> None:
        party = self._arrive_thread() if kind == "thread" else self._arrive_task()
        self.line.append(party)
        expected = len(self.line) if len(self.holders) >= self.value else 0
        if expected:
            wait_until(lambda: _waiting(self.sem) == expected, message="did not park")
        self._settle()

    @precondition(lambda self: bool(self.holders))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.holders) - 1))
        _, handle = self.holders.pop(i)
        self._release_handle(handle)
        self._settle()

    @precondition(lambda self: any(kind == "task" for kind, _ in self.line))
    @rule(data=st.data())
    def cancel_task(self, data: st.DataObject) -> None:
        tasks = [p for p in self.line if p[0] == "task"]
        party = data.draw(st.sampled_from(tasks))
        party[1].cancel()
        self.line.remove(party)
        wait_until(lambda: _waiting(self.sem) == len(self.line))
        self._settle()

    @precondition(lambda self: not self.line)
    @rule()
    def try_acquire(self) -> None:
        taken = self.sem.blocking.acquire(blocking=False)
        assert taken == (len(self.holders) < self.value)
        if taken:
            self.holders.append(("main", None))

    @invariant()
    def counts_match(self) -> None:
        stats = self.sem.statistics()
        assert len(self.holders) <= self.value
        if stats.woken == 0:
            assert stats.value == self.value - len(self.holders)


TestThreadsAndTasks = ThreadsAndTasks.TestCase
TestThreadsAndTasks.settings = settings(max_examples=15, stateful_step_count=15, deadline=None)
