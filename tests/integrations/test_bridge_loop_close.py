"""A loop that stops, then closes, with tasks parked on shared primitives: nothing is stranded.

The ending under test is the common one besides ``asyncio.run``: ``call_soon_threadsafe(
loop.stop)``, join the loop's thread, ``loop.close()``, with no cancellation of the leftover
tasks. Whatever a task was handed and never resumed to take goes back when the loop closes.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from executors.errors import ChannelClosed
from executors.testing import wait_until
from integrations.bridge import SharedChannel, SharedLock, SharedSemaphore

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def _uvloop_factory() -> asyncio.AbstractEventLoop:
    uvloop = pytest.importorskip("uvloop")
    return uvloop.new_event_loop()  # type: ignore[no-any-return]


@pytest.fixture(params=[pytest.param(asyncio.new_event_loop, id="asyncio"),
                        pytest.param(_uvloop_factory, id="uvloop")])
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    """asyncio's loop and uvloop's."""
    factory: LoopFactory = request.param
    factory().close()
    return factory


class LoopThread:
    """A loop running in a thread until `stop_and_close` (no task is cancelled)."""

    def __init__(self, factory: LoopFactory) -> None:
        self.loop = factory()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        assert not self.thread.is_alive(), "the loop did not stop"

    def stop_and_close(self) -> None:
        self.stop()
        self.loop.close()


@pytest.mark.parametrize("size", [0, 1, 64])
def test_a_send_landing_between_stop_and_close_goes_back(
        loop_factory: LoopFactory, size: int) -> None:
    """A thread's send to a parked task, made after the loop stopped and before it closed,
    returns (it was handed over); when the loop closes the value goes to the next getter and
    ``in_flight`` returns to 0. The task object is kept alive: no collection is needed."""
    ch: SharedChannel[str] = SharedChannel(size)
    lt = LoopThread(loop_factory)
    fut = lt.submit(ch.get())
    wait_until(lambda: ch.statistics().waiting_getters == 1)
    lt.stop()
    ch.blocking.send("v", timeout=5)  # handed to the parked task: its resumption is posted
    assert ch._in_flight == 1
    lt.loop.close()
    assert ch._in_flight == 0, ch
    assert ch.blocking.get(timeout=5) == "v"
    ch.close()
    with pytest.raises(ChannelClosed):
        ch.blocking.get(timeout=5)
    del fut


def test_a_value_whose_task_wakeup_was_dropped_goes_back(loop_factory: LoopFactory) -> None:
    """The task's future was resolved in the loop's last iteration (a hand-off on the loop
    itself), so its wake-up sat in the ready queue when the loop stopped: closing the loop
    hands the value back."""
    ch: SharedChannel[str] = SharedChannel(0)
    lt = LoopThread(loop_factory)
    fut = lt.submit(ch.get())
    wait_until(lambda: ch.statistics().waiting_getters == 1)

    def send_then_stop() -> None:
        ch.send_nowait("v")  # on the loop: resolves the future, the task's step is queued
        lt.loop.stop()

    lt.loop.call_soon_threadsafe(send_then_stop)
    lt.thread.join(10)
    if ch._in_flight == 0:  # uvloop's stop() runs what the last iteration scheduled: the
        lt.loop.close()     # task resumed and consumed the value, nothing was stranded
        return
    assert ch._in_flight == 1
    lt.loop.close()
    assert ch._in_flight == 0
    assert ch.blocking.get(timeout=5) == "v"
    del fut


@pytest.mark.parametrize("kind", ["semaphore", "lock"])
def test_a_release_landing_between_stop_and_close_goes_back(
        loop_factory: LoopFactory, kind: str) -> None:
    """A release handed to a parked task of a stopped loop comes back when the loop closes:
    the thread parked behind the task gets it, and the primitive ends with its permits."""
    prim: SharedSemaphore | SharedLock = SharedSemaphore(1) if kind == "semaphore" else SharedLock()
    lt = LoopThread(loop_factory)
    assert prim.blocking.acquire()
    fut = lt.submit(prim.acquire())
    wait_until(lambda: prim.statistics().waiting == 1)
    got = threading.Event()

    def thread() -> None:
        assert prim.blocking.acquire(timeout=10)
        got.set()
        prim.blocking.release()

    t = threading.Thread(target=thread)
    t.start()
    wait_until(lambda: prim.statistics().waiting == 2)
    lt.stop()
    prim.release()  # taken by the task: woken=1 until the loop closes
    assert prim.statistics().woken == 1
    lt.loop.close()
    assert got.wait(10), f"the permit was lost: {prim!r}"
    t.join(10)
    stats = prim.statistics()
    assert not stats.locked and stats.woken == 0 and stats.waiting == 0
    del fut


def test_a_collected_task_parked_in_get_hands_its_value_back() -> None:
    """GeneratorExit (the coroutine of a task collected while parked) is handled like a
    cancellation: the value handed to it goes to the next getter."""
    ch: SharedChannel[str] = SharedChannel(0)
    loop = asyncio.new_event_loop()
    task = loop.create_task(ch.get())
    loop.run_until_complete(asyncio.sleep(0))
    waiter = ch._getters.items[0].waiter
    waiter.take("v")  # as a claimer would: the value is the task's now
    ch._in_flight += 1
    waiter.owner = None  # this test is about the coroutine's own path, not the loop's close
    loop.close()
    coro = task.get_coro()
    del task
    coro.close()  # what the collector does to a pending task's coroutine
    assert ch._in_flight == 0
    assert ch.get_nowait() == "v"


def test_the_waker_table_keeps_no_closed_loop_alive(loop_factory: LoopFactory) -> None:
    """After a stop-then-close ending with a hand-off in between, nothing in the bridge keeps
    the loop or its task alive: the waker table and its last-waker cache hold neither."""
    ch: SharedChannel[str] = SharedChannel(0)
    lt = LoopThread(loop_factory)
    fut = lt.submit(ch.get())
    wait_until(lambda: ch.statistics().waiting_getters == 1)
    lt.stop()
    ch.blocking.send("v", timeout=5)
    lt.loop.close()
    dead = weakref.ref(lt.loop)
    del lt, fut
    gc.collect()
    assert dead() is None
    assert ch.blocking.get(timeout=5) == "v"


@pytest.mark.parametrize("size", [0, 1, 64])
def test_threads_busy_while_the_loop_stops_and_closes(loop_factory: LoopFactory, size: int) -> None:
    """Tasks get, send and acquire; threads send, get and acquire throughout while the loop
    stops and closes. Afterwards every value is received exactly once or was reported unsent,
    ``in_flight`` is 0, every permit is back and no thread blocks (all waits have timeouts)."""
    ch: SharedChannel[tuple[str, int]] = SharedChannel(size)
    sem = SharedSemaphore(2)
    lock = SharedLock()
    lt = LoopThread(loop_factory)
    sent: list[tuple[str, int]] = []
    received: list[tuple[str, int]] = []
    stop = threading.Event()

    async def task_get() -> None:
        while True:
            received.append(await ch.get())

    async def task_send(tag: str) -> None:
        i = 0
        while True:
            i += 1
            await ch.send((tag, i))
            sent.append((tag, i))

    async def task_acquire(prim: SharedSemaphore | SharedLock) -> None:
        # No await inside: a task never holds a permit across a suspension, so one that is
        # never resumed holds none (a permit held by a task of a dead loop stays held).
        while True:
            async with prim:
                pass
            await asyncio.sleep(0)

    def thread_send(tag: str) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                ch.blocking.send((tag, i), timeout=0.01)
            except TimeoutError:
                continue
            sent.append((tag, i))

    def thread_get() -> None:
        while not stop.is_set():
            try:
                received.append(ch.blocking.get(timeout=0.01))
            except TimeoutError:
                pass

    def thread_acquire(prim: SharedSemaphore | SharedLock) -> None:
        while not stop.is_set():
            if prim.blocking.acquire(timeout=0.01):
                prim.blocking.release()

    futs = [lt.submit(task_get()) for _ in range(3)]
    futs += [lt.submit(task_send(f"t{k}")) for k in range(2)]
    futs += [lt.submit(task_acquire(p)) for p in (sem, sem, sem, lock, lock)]
    threads = [threading.Thread(target=thread_send, args=(f"h{k}",)) for k in range(2)]
    threads += [threading.Thread(target=thread_get)]
    threads += [threading.Thread(target=thread_acquire, args=(p,)) for p in (sem, lock)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(received) > 200, timeout=20)
        lt.stop_and_close()
        n = len(received)
        wait_until(lambda: len(received) > n + 20, timeout=20)  # the threads carry on alone
    finally:
        # Whatever failed above, the threads must not outlive the test: five of them spinning
        # on 10 ms timeouts slow every later test of the run.
        stop.set()
        for t in threads:
            t.join(10)
    assert not any(t.is_alive() for t in threads), "a thread blocked"
    ch.close()
    while True:
        try:
            received.append(ch.blocking.get(timeout=5))
        except ChannelClosed:
            break
    counts = collections.Counter(received)
    assert not [v for v, c in counts.items() if c > 1], "received twice"
    assert set(sent) <= set(received), f"lost: {sorted(set(sent) - set(received))[:5]}"
    # A task send whose value was taken while the loop stopped is received, though the task
    # never learnt it (it never ran again): that value is "sent" for the receiver, never lost.
    assert all(v[0].startswith("t") for v in set(received) - set(sent))
    assert ch._in_flight == 0
    assert sem.statistics().value == 2 and sem.statistics().woken == 0
    assert not lock.locked() and lock.statistics().woken == 0
    del futs
