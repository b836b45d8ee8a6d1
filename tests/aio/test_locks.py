"""Tests for executors.aio.locks: fairness, cancellation, invariants, the model's locked()."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import random
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import executors
import executors.aio
from executors import WouldBlock
from executors.aio import BoundedSemaphore, Lock, LockStatistics, Semaphore, SemaphoreStatistics
from executors.aio._waiters import TaskWaiter, Waiter

Permits = Semaphore | Lock


def run(fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(fn())


async def settle(n: int = 5) -> None:
    """Let every ready task run `n` loop iterations."""
    for _ in range(n):
        await asyncio.sleep(0)


def live_waiters(sem: Permits) -> int:
    # A parked task's entry is its bare future (waiting while pending); any other is a Waiter.
    return sum(1 for w in sem._waiters
               if (not w.done() if isinstance(w, asyncio.Future) else w.waiting))


def check_model(sem: Semaphore) -> None:
    """The restaurant model's invariants, for any state between two atomic sections."""
    s = sem.statistics()
    assert s.value >= 0 and s.woken >= 0
    assert s.level == s.value + s.woken >= s.woken
    if s.value > 0:  # no idle permit while someone waits (not even a cancelled entry)
        assert s.waiting == 0
    assert sem.locked() == (live_waiters(sem) > 0 or s.woken > 0 or s.level == 0)
    assert s.locked == sem.locked()


# -- drop-in surface -----------------------------------------------------------------------


def test_exports() -> None:
    """executors.aio exports the three classes and their statistics types."""
    for name in ("Semaphore", "BoundedSemaphore", "Lock", "SemaphoreStatistics",
                 "LockStatistics"):
        assert name in executors.aio.__all__
    assert issubclass(BoundedSemaphore, Semaphore)
    assert executors.aio.Lock.__name__ == "Lock"


@pytest.mark.parametrize("cls", [Semaphore, BoundedSemaphore, Lock])
def test_loop_argument_is_rejected_like_asyncio(cls: type) -> None:
    """`loop=` raises asyncio's TypeError, naming the class."""
    with pytest.raises(TypeError, match=rf"{cls.__name__}\.__init__\(\) got an unexpected "
                                        r"keyword argument 'loop'"):
        cls(loop=None)


@pytest.mark.parametrize("cls", [Semaphore, BoundedSemaphore])
def test_initial_value_is_validated(cls: type[Semaphore]) -> None:
    """Negative values raise ValueError; non-ints (floats, strings, bools) raise TypeError."""
    with pytest.raises(ValueError, match="initial value must be >= 0, got -1"):
        cls(-1)
    for bad in (1.5, "1", True, None):
        with pytest.raises(TypeError, match="initial value must be an int"):
            cls(bad)  # type: ignore[arg-type]
    assert cls(0).locked()


def test_repr_matches_asyncio_format_plus_woken() -> None:
    """repr is asyncio's `<... object at 0x.. [state]>`, plus `woken:N` while a task is in R."""

    async def main() -> None:
        sem = Semaphore(2)
        assert repr(sem).startswith("<executors.aio.locks.Semaphore object at 0x")
        assert repr(sem).endswith(" [unlocked, value:2]>")
        await sem.acquire()
        await sem.acquire()
        assert repr(sem).endswith(" [locked]>")
        t = asyncio.create_task(sem.acquire())
        await settle(1)
        assert repr(sem).endswith(" [locked, waiters:1]>")
        sem.release()
        sem.release()  # one for t (woken), one free but held back: t has not resumed yet
        assert repr(sem).endswith(" [locked, value:1, woken:1]>")
        await t
        assert repr(sem).endswith(" [unlocked, value:1]>")

        lock = Lock()
        assert repr(lock).endswith(" [unlocked]>")
        await lock.acquire()
        t = asyncio.create_task(lock.acquire())
        await settle(1)
        assert repr(lock).endswith(" [locked, waiters:1]>")
        lock.release()
        assert repr(lock).endswith(" [locked, woken:1]>")
        await t
        assert repr(lock).endswith(" [locked]>")

    run(main)


def test_statistics_are_frozen_snapshots() -> None:
    """statistics() returns frozen dataclasses with value, level, waiting, woken, locked."""

    async def main() -> None:
        sem = Semaphore(1)
        await sem.acquire()
        t = asyncio.create_task(sem.acquire())
        await settle(1)
        s = sem.statistics()
        assert s == SemaphoreStatistics(value=0, level=0, waiting=1, woken=0, locked=True)
        sem.release()
        assert sem.statistics() == SemaphoreStatistics(value=0, level=1, waiting=0, woken=1,
                                                       locked=True)
        with pytest.raises(dataclasses.FrozenInstanceError):
            s.value = 3  # type: ignore[misc]
        await t
        lock = Lock()
        assert lock.statistics() == LockStatistics(locked=False, waiting=0, woken=0)

    run(main)


def test_not_bound_to_the_first_event_loop() -> None:
    """Unlike asyncio's (_LoopBoundMixin), one object serves successive event loops."""
    sem = Semaphore(1)
    lock = Lock()

    async def contend() -> list[int]:
        order: list[int] = []

        async def worker(i: int) -> None:
            async with sem, lock:
                order.append(i)
                await asyncio.sleep(0)

        await asyncio.gather(*(worker(i) for i in range(4)))
        return order

    assert run(contend) == [0, 1, 2, 3]
    assert run(contend) == [0, 1, 2, 3]


def _park_on_a_loop(prim: Permits) -> tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]:
    """A new loop (not running now) on which a task holds `prim` and another is parked on it."""
    loop = asyncio.new_event_loop()
    loop.run_until_complete(prim.acquire())  # held by a task of `loop`

    async def waiter() -> None:
        async with prim:
            pass

    task = loop.create_task(waiter())
    for _ in range(3):
        loop.run_until_complete(asyncio.sleep(0))
    assert live_waiters(prim) == 1
    return loop, task


@pytest.mark.parametrize(("cls", "shared"), [(Semaphore, "SharedSemaphore"),
                                             (BoundedSemaphore, "SharedSemaphore"),
                                             (Lock, "SharedLock")])
def test_waiting_from_a_second_loop_while_one_waits_raises(cls: type[Permits],
                                                           shared: str) -> None:
    """Issue 17: a task of a second loop that would park while a task of the first is parked
    gets asyncio's RuntimeError ("is bound to a different event loop") at once, naming the
    shared primitive to use instead; it used to park for ever (the first loop's release would
    resolve its future from the wrong loop). Nothing of the first loop's state changes."""
    prim = cls()
    loop1, parked = _park_on_a_loop(prim)
    try:
        async def second() -> None:
            async with asyncio.timeout(5):  # before the fix: a hang, reported as TimeoutError
                await prim.acquire()

        with pytest.raises(RuntimeError, match=rf"bound to a different event loop.*{shared}"):
            asyncio.run(second())
        assert live_waiters(prim) == 1 and prim.locked()
        # The first loop carries on: its holder releases, its waiter gets the permit.
        prim.release()
        loop1.run_until_complete(parked)
        assert not prim.locked() and prim._woken == 0
    finally:
        loop1.close()


def test_waiting_from_a_second_loop_in_another_thread_raises() -> None:
    """The issue's scenario with real threads: loop 1 runs in a thread with a holder and a
    parked waiter; a task of loop 2 (this thread) that would wait raises instead of hanging,
    and loop 1's waiter still gets the lock when its holder releases."""
    lock = Lock()
    parked = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    async def first_loop() -> None:
        await lock.acquire()

        async def waiter() -> None:
            async with lock:
                pass

        task = asyncio.create_task(waiter())
        await settle()
        assert live_waiters(lock) == 1
        parked.set()
        assert await asyncio.to_thread(release.wait, 10)  # loop 1 keeps running meanwhile
        lock.release()
        await asyncio.wait_for(task, 10)

    def thread_main() -> None:
        try:
            asyncio.run(first_loop())
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    thread = threading.Thread(target=thread_main)
    thread.start()
    try:
        assert parked.wait(10)

        async def second() -> None:
            async with asyncio.timeout(5):
                await lock.acquire()

        with pytest.raises(RuntimeError, match=r"bound to a different event loop.*SharedLock"):
            asyncio.run(second())
    finally:
        release.set()
        thread.join(10)
    assert not thread.is_alive() and errors == []
    assert not lock.locked()


def test_binding_ends_when_the_first_loop_is_closed_with_a_waiter() -> None:
    """A loop closed with a task still parked (never cancelled) does not bind the primitive for
    ever: the next loop's task waits and is served normally."""
    sem = Semaphore(1)
    loop1, _ = _park_on_a_loop(sem)
    loop1.close()

    async def second() -> list[str]:
        order: list[str] = []

        async def worker(name: str) -> None:
            async with sem:
                order.append(name)

        tasks = [asyncio.create_task(worker(name)) for name in "ab"]
        await settle()  # both park behind the closed loop's task (not refused)
        assert live_waiters(sem) == 3
        sem.release()  # for the closed loop's holder; its parked task is skipped
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(second()) == ["a", "b"]


# -- fairness ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Semaphore, Lock])
def test_release_then_reacquire_queues_behind_waiters(cls: type[Permits]) -> None:
    """A holds, B and C wait; A releases and re-acquires with no yield: order B, C, A.

    bpo-45997 / gh-90155: asyncio 3.8 ran A, B, C.
    """

    async def main() -> list[str]:
        prim = cls()
        order: list[str] = []
        await prim.acquire()

        async def waiter(name: str) -> None:
            await prim.acquire()
            order.append(name)
            prim.release()

        tasks = [asyncio.create_task(waiter(n)) for n in "BC"]
        await settle(1)
        prim.release()
        await prim.acquire()  # A again: must queue behind B and C
        order.append("A")
        prim.release()
        await asyncio.gather(*tasks)
        return order

    assert run(main) == ["B", "C", "A"]


def test_many_tasks_take_strict_turns() -> None:
    """8 tasks looping on Semaphore(1): nobody acquires twice in a row (trio's fairness test)."""

    async def main() -> list[int]:
        sem = Semaphore(1)
        order: list[int] = []

        async def loopy(i: int) -> None:
            for _ in range(50):
                async with sem:
                    order.append(i)
                    await asyncio.sleep(0)

        await asyncio.gather(*(loopy(i) for i in range(8)))
        return order

    order = run(main)
    assert all(a != b for a, b in itertools.pairwise(order))
    assert order[:16] == list(range(8)) * 2


def test_handoff_reserves_the_permit() -> None:
    """After release() wakes a waiter, acquire_nowait fails and value excludes the reservation."""

    async def main() -> None:
        sem = Semaphore(1)
        await sem.acquire()
        t = asyncio.create_task(sem.acquire())
        await settle(1)
        sem.release()
        assert sem.statistics().value == 0
        assert sem.locked()
        with pytest.raises(WouldBlock):
            sem.acquire_nowait()
        newcomer = asyncio.create_task(sem.acquire())
        await t
        await settle(2)
        assert not newcomer.done()  # t holds the only permit
        sem.release()
        await newcomer
        check_model(sem)

    run(main)


@pytest.mark.parametrize("style", ["acquire", "async with"])
def test_releases_while_head_not_resumed_keep_fifo(style: str) -> None:
    """gh-111693 (3.13 test_acquire_fifo_order_4), on every Python: order [1, 2, 3, 4].

    c2 releases three times while the woken c1 has not resumed, then acquires; c3 acquires; c1,
    once resumed, creates c4, which must run after c3. 3.11/3.12's asyncio ran [1, 2, 4, 3].
    Both ways in (acquire() and the `async with` fast path) keep the order.
    """

    async def main() -> list[int]:
        sem = Semaphore(0)

        async def take() -> None:
            if style == "acquire":
                await sem.acquire()
            else:
                await sem.__aenter__()
        result: list[int] = []
        t4: list[asyncio.Task[None]] = []

        async def c1() -> None:
            await take()
            t4.append(asyncio.create_task(c4()))
            result.append(1)

        async def c2() -> None:
            sem.release()
            sem.release()
            sem.release()
            assert sem.locked()  # c1 has not resumed yet
            check_model(sem)
            await take()
            result.append(2)

        async def c3() -> None:
            await take()
            result.append(3)

        async def c4() -> None:
            result.append(4)

        tasks = [asyncio.create_task(c()) for c in (c1, c2, c3)]
        await settle(1)
        check_model(sem)
        await asyncio.gather(*tasks)
        await asyncio.gather(*t4)
        return result

    assert run(main) == [1, 2, 3, 4]


def test_several_releases_wake_waiters_in_order() -> None:
    """Three releases with no yield wake the first three waiters, in queue order."""

    async def main() -> None:
        sem = Semaphore(0)
        order: list[int] = []

        async def waiter(i: int) -> None:
            await sem.acquire()
            order.append(i)

        tasks = [asyncio.create_task(waiter(i)) for i in range(5)]
        await settle(1)
        for _ in range(3):
            sem.release()
        assert sem.statistics() == SemaphoreStatistics(value=0, level=3, waiting=2, woken=3,
                                                       locked=True)
        await settle(2)
        assert order == [0, 1, 2]
        sem.release()
        sem.release()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2, 3, 4]

    run(main)


# -- cancellation --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [Semaphore, Lock])
def test_cancel_before_wakeup_leaves_the_line(cls: type[Permits]) -> None:
    """A cancelled waiter leaves the line; the release goes to the next live waiter."""

    async def main() -> None:
        prim = cls() if cls is Lock else cls(0)  # type: ignore[call-arg]
        if cls is Lock:
            await prim.acquire()
        b = asyncio.create_task(prim.acquire())
        c = asyncio.create_task(prim.acquire())
        await settle(1)
        assert prim.statistics().waiting == 2
        b.cancel()
        await settle(1)
        assert b.cancelled()
        assert prim.statistics().waiting == 1
        prim.release()
        assert await c
        assert prim.statistics().waiting == 0

    run(main)


@pytest.mark.parametrize("cls", [Semaphore, Lock])
def test_woken_then_cancelled_passes_permit_to_next_waiter(cls: type[Permits]) -> None:
    """State 4 (release() + cancel() with no yield): the permit goes to the next waiter.

    python/asyncio#270, gh-90155: 3.9.18 hangs here; a drop-in that loses the permit hangs too.
    """

    async def main() -> None:
        prim = cls() if cls is Lock else cls(0)  # type: ignore[call-arg]
        if cls is Lock:
            await prim.acquire()
        b = asyncio.create_task(prim.acquire())
        c = asyncio.create_task(prim.acquire())
        await settle(1)
        prim.release()  # b is woken (R) ...
        b.cancel()  # ... and cancelled before it resumes
        with pytest.raises(asyncio.CancelledError):
            await b
        await asyncio.wait_for(c, 1)
        assert prim.locked()  # c holds it
        prim.release()
        assert not prim.locked()
        assert prim.statistics().woken == 0

    run(main)


def test_woken_then_cancelled_returns_permit_when_nobody_waits() -> None:
    """State 4 with nobody behind: the permit goes back to the free value."""

    async def main() -> None:
        sem = BoundedSemaphore(1)
        await sem.acquire()
        b = asyncio.create_task(sem.acquire())
        await settle(1)
        sem.release()
        b.cancel()
        await settle(1)
        assert b.cancelled()
        assert sem.statistics() == SemaphoreStatistics(value=1, level=1, waiting=0, woken=0,
                                                       locked=False)
        with pytest.raises(ValueError):
            sem.release()

    run(main)


def test_lock_cancel_race() -> None:
    """CPython's test_cancel_race, black-box: A holds, B and C wait; B cancelled as A releases.

    C gets the lock, nothing crashes or stalls. Unlike asyncio (gh-138121) the lock reads as
    locked() while it is handed to C and C has not resumed.
    """

    async def main() -> None:
        lock = Lock()
        fa: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def lockit(blocker: asyncio.Future[None] | None) -> None:
            await lock.acquire()
            try:
                if blocker is not None:
                    await blocker
            finally:
                lock.release()

        ta = asyncio.create_task(lockit(fa))
        await settle(1)
        tb = asyncio.create_task(lockit(None))
        tc = asyncio.create_task(lockit(None))
        await settle(1)
        assert lock.statistics().waiting == 2
        fa.set_result(None)
        tb.cancel()
        await settle(1)
        assert ta.done() and tb.cancelled()
        assert lock.locked()  # handed to tc (asyncio says False here)
        await asyncio.wait_for(tc, 1)
        assert not lock.locked()

    run(main)


def test_timeout_around_acquire_behaves_like_cancellation() -> None:
    """asyncio.timeout() and wait_for() around acquire(): TimeoutError, no residue, no loss."""

    async def main() -> None:
        sem = Semaphore(0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await sem.acquire()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(sem.acquire(), 0.01)
        await settle(2)
        assert sem.statistics() == SemaphoreStatistics(value=0, level=0, waiting=0, woken=0,
                                                       locked=True)
        sem.release()
        assert sem.statistics().value == 1
        check_model(sem)

    run(main)


def test_timeout_racing_handoff_passes_permit_on() -> None:
    """A timeout that fires after the hand-off but before the task resumes passes it on."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sem = Semaphore(0)
        scopes: list[asyncio.Timeout] = []

        async def timed() -> None:
            async with asyncio.timeout(None) as scope:
                scopes.append(scope)
                await sem.acquire()

        t = asyncio.create_task(timed())
        u = asyncio.create_task(sem.acquire())
        await settle(1)
        scopes[0].reschedule(loop.time() - 1)  # the timeout callback is queued first ...
        sem.release()  # ... then t is woken: it resumes cancelled, holding a reserved permit
        with pytest.raises(TimeoutError):
            await t
        await asyncio.wait_for(u, 1)
        assert sem.statistics() == SemaphoreStatistics(value=0, level=0, waiting=0, woken=0,
                                                       locked=True)

    run(main)


def test_already_cancelled_task_on_entry() -> None:
    """A task already being cancelled: the fast path succeeds (CancelledError at its next
    await, as in asyncio); the slow path raises at once and leaves no entry; acquire_nowait
    ignores the pending cancellation."""

    async def main() -> None:
        sem = Semaphore(1)

        async def fast() -> None:
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            await sem.acquire()  # does not yield: succeeds
            assert sem.locked()
            try:
                await asyncio.sleep(0)
            finally:
                sem.release()

        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(fast())
        assert not sem.locked()

        await sem.acquire()

        async def slow() -> None:
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            await sem.acquire()

        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(slow())
        assert sem.statistics().waiting == 0
        sem.release()

        async def nowait() -> None:
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            sem.acquire_nowait()
            sem.release()
            await asyncio.sleep(0)

        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(nowait())
        assert sem.statistics().value == 1

    run(main)


def test_cancel_storm_under_load_loses_no_permit() -> None:
    """40 tasks cycle through Semaphore(5) while a chaos task cancels at random, often right
    after a release (state 4): never more than 5 holders, and every permit comes back."""

    async def main() -> None:
        rng = random.Random(4)
        sem = Semaphore(5)
        holding = 0
        peak = 0
        acquisitions = 0

        async def worker() -> None:
            nonlocal holding, peak, acquisitions
            while True:
                async with sem:
                    holding += 1
                    peak = max(peak, holding)
                    acquisitions += 1
                    try:
                        await asyncio.sleep(0)
                    finally:
                        holding -= 1

        tasks = [asyncio.create_task(worker()) for _ in range(40)]
        for _ in range(300):
            await asyncio.sleep(0)
            check_model(sem)
            for _ in range(3):  # cancel three workers, start three fresh ones
                i = rng.randrange(len(tasks))
                tasks[i].cancel()
                tasks.append(asyncio.create_task(worker()))
            check_model(sem)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert peak <= 5
        assert acquisitions > 500
        assert sem.statistics() == SemaphoreStatistics(value=5, level=5, waiting=0, woken=0,
                                                       locked=False)

    run(main)


# -- acquire_nowait, bounded, lock misuse --------------------------------------------------


def test_acquire_nowait_never_barges() -> None:
    """acquire_nowait succeeds exactly when locked() is False, and never past anyone."""

    async def main() -> None:
        sem = Semaphore(2)
        sem.acquire_nowait()
        sem.acquire_nowait()
        with pytest.raises(WouldBlock, match="await acquire"):
            sem.acquire_nowait()
        t = asyncio.create_task(sem.acquire())
        await settle(1)
        sem.release()  # handed to t
        sem.release()  # free, but t (woken) has not resumed: still locked
        assert sem.statistics().value == 1
        with pytest.raises(WouldBlock):
            sem.acquire_nowait()
        await t
        sem.acquire_nowait()
        assert sem.statistics().value == 0

        lock = Lock()
        lock.acquire_nowait()
        with pytest.raises(WouldBlock):
            lock.acquire_nowait()
        lock.release()

    run(main)


def test_bounded_over_release_raises_and_keeps_state() -> None:
    """Over-release raises ValueError and changes nothing, also during an in-flight hand-off
    (stricter than asyncio, which accepts that one and raises on the next)."""

    async def main() -> None:
        sem = BoundedSemaphore(1)
        with pytest.raises(ValueError, match="released too many times"):
            sem.release()
        await sem.acquire()
        t = asyncio.create_task(sem.acquire())
        await settle(1)
        sem.release()  # handed to t
        before = sem.statistics()
        with pytest.raises(ValueError, match="released too many times"):
            sem.release()
        assert sem.statistics() == before
        await t
        sem.release()
        assert sem.statistics().value == 1

    run(main)


def test_lock_release_when_not_acquired() -> None:
    """Lock.release() of an unlocked lock, or of one already handed to a woken task, raises
    RuntimeError (asyncio's message) and changes nothing."""

    async def main() -> None:
        lock = Lock()
        with pytest.raises(RuntimeError, match="Lock is not acquired"):
            lock.release()
        await lock.acquire()
        t = asyncio.create_task(lock.acquire())
        await settle(1)
        lock.release()
        before = lock.statistics()
        with pytest.raises(RuntimeError, match="Lock is not acquired"):
            lock.release()
        assert lock.statistics() == before == LockStatistics(locked=True, waiting=0, woken=1)
        await t
        lock.release()

    run(main)


def test_lock_locked_covers_the_handoff_window() -> None:
    """Lock.locked() stays True between release() and the woken waiter's resumption
    (deliberately unlike asyncio.Lock, gh-138121), and a newcomer queues behind it."""

    async def main() -> None:
        lock = Lock()
        order: list[str] = []
        await lock.acquire()

        async def take(name: str) -> None:
            async with lock:
                order.append(name)

        b = asyncio.create_task(take("b"))
        await settle(1)
        lock.release()
        assert lock.locked()
        c = asyncio.create_task(take("c"))
        await asyncio.gather(b, c)
        assert order == ["b", "c"]
        assert not lock.locked()

    run(main)


# -- async with ----------------------------------------------------------------------------


def test_uncontended_async_with_does_not_yield() -> None:
    """An uncontended `async with` neither suspends nor lets another task run (asyncio's
    behaviour), and releases on the way out, also on an exception."""

    async def main() -> None:
        sem = Semaphore(1)
        ran = False

        async def other() -> None:
            nonlocal ran
            ran = True

        t = asyncio.create_task(other())
        for _ in range(3):
            async with sem:
                assert sem.locked()
        assert not ran
        with pytest.raises(KeyError):
            async with sem:
                raise KeyError
        assert not sem.locked()
        await t

    run(main)


# -- the internal protocol for the bridge --------------------------------------------------


class RecordingWaiter(Waiter):
    """A stand-in for the bridge's thread waiter: takes a value unless it gave up."""

    __slots__ = ("gave_up", "got")

    def __init__(self) -> None:
        self.gave_up = False
        self.got: list[object] = []

    def try_wake(self, value: object) -> bool:
        if self.gave_up:
            return False
        self.got.append(value)
        return True

    @property
    def waiting(self) -> bool:
        return not self.gave_up and not self.got


def test_foreign_waiters_share_the_fifo_with_tasks() -> None:
    """A non-task Waiter parked with _park waits in the same FIFO as tasks; its hand-off is
    complete at once (resumes_on_loop False: never counted as woken); _leave is O(1)."""

    async def main() -> None:
        sem = Semaphore(0)
        order: list[str] = []
        w1, w2 = RecordingWaiter(), RecordingWaiter()

        async def task(name: str) -> None:
            await sem.acquire()
            order.append(name)

        sem._park(w1)
        t = asyncio.create_task(task("t"))
        await settle(1)
        sem._park(w2)
        assert sem.statistics().waiting == 3
        w2.gave_up = True
        assert sem._leave(w2) is True
        assert sem._leave(w2) is False
        sem.release()
        assert w1.got == [True] and not order
        assert sem.statistics().woken == 0  # the foreign waiter holds it already
        sem.release()
        assert sem.statistics().woken == 1
        await t
        assert order == ["t"]
        assert not sem._try_acquire()
        sem.release()  # w1's release
        assert sem._try_acquire()
        check_model(sem)

    run(main)


def test_waiter_queue_live_is_the_set_of_queued_waiters() -> None:
    """`WaiterQueue.live`, which the semaphore's hot paths test, is exactly the set of queued
    waiters through append, popleft and discard (and release hands a Waiter its permit); the
    deque the contended hand-off pops from is the queue's own."""
    sem = Semaphore(0)
    assert sem._line is sem._waiters._items
    w1, w2 = RecordingWaiter(), RecordingWaiter()
    sem._waiters.append(w1)
    sem._waiters.append(w2)
    assert sem._waiters.live == {w1, w2}
    sem._waiters.discard(w2)
    assert sem._waiters.live == {w1}
    sem.release()
    assert w1.got == [True] and w2.got == [] and not sem._waiters.live and not sem._waiters


def test_waiter_of_a_closed_loop_does_not_strand_the_line() -> None:
    """A task parked on a loop that was closed without cancelling it is skipped by release,
    and when its coroutine is finally closed it hands back nothing (no duplicated permit)."""
    sem = Semaphore(0)
    loop = asyncio.new_event_loop()
    task = loop.create_task(sem.acquire())
    loop.run_until_complete(asyncio.sleep(0))
    assert sem.statistics().waiting == 1
    loop.close()

    async def main() -> None:
        sem.release()
        assert sem.statistics().value == 1
        await sem.acquire()

    run(main)
    del task
    gc.collect()  # closes the abandoned coroutine: its handler runs now
    assert sem.statistics() == SemaphoreStatistics(value=0, level=0, waiting=0, woken=0,
                                                   locked=True)


def test_task_waiter_declares_it_resumes_on_the_loop() -> None:
    """TaskWaiter's hand-off completes only when the task resumes; the base default is False."""
    assert TaskWaiter.resumes_on_loop is True
    assert Waiter.resumes_on_loop is False


# -- the contended hand-off (__aexit__ / release fast path) ---------------------------------


@pytest.mark.parametrize("cls", [Semaphore, BoundedSemaphore, Lock])
def test_async_with_handoff_skips_cancelled_head_and_foreign_waiter(cls: type[Permits]) -> None:
    """Leaving `async with` hands the permit straight to a pending head; a head cancelled in
    this iteration (C) or a foreign Waiter at the head goes through the general path, in FIFO
    order, and no permit is lost or duplicated."""

    async def main() -> None:
        prim = cls() if cls is Lock else cls(1)
        order: list[str] = []
        foreign = RecordingWaiter()

        async def task(name: str) -> None:
            async with prim:
                order.append(name)

        async with prim:
            a = asyncio.create_task(task("a"))
            b = asyncio.create_task(task("b"))
            await settle(1)
            prim._park(foreign)
            c = asyncio.create_task(task("c"))
            await settle(1)
            assert prim.statistics().waiting == 4
            a.cancel()  # the head is now a cancelled entry whose task has not run yet (C)
        # The exit skipped a (C) and woke b, which has not resumed yet.
        assert prim.statistics().woken == 1 and prim.locked()
        await asyncio.gather(a, b, return_exceptions=True)
        assert a.cancelled() and order == ["b"]
        # b's exit handed the permit to the foreign waiter (complete at once, not woken).
        assert foreign.got == [True] and prim.statistics().woken == 0
        prim.release()  # the foreign waiter's release: c's turn
        await c
        assert order == ["b", "c"]
        assert not prim.locked() and prim.statistics().waiting == 0
        assert prim.statistics().woken == 0
        if isinstance(prim, Semaphore):
            check_model(prim)

    run(main)


def test_async_with_exit_skips_a_waiter_of_a_closed_loop() -> None:
    """The inlined hand-off in __aexit__ treats a task of a closed loop as release() does: it
    skips it (and the permit goes to the next waiter or back to the free count)."""
    sem = Semaphore(0)
    loop = asyncio.new_event_loop()
    stranded = loop.create_task(sem.acquire())
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()

    async def main() -> None:
        await sem.__aexit__(None, None, None)  # the permit of a holder, given back
        assert sem.statistics() == SemaphoreStatistics(value=1, level=1, waiting=0, woken=0,
                                                       locked=False)
        async with sem:
            pass

    run(main)
    del stranded
    gc.collect()  # its coroutine is closed: it hands back nothing
    assert sem.statistics().value == 1


def test_ready_awaitable_is_reusable_and_never_yields() -> None:
    """`_READY`, returned by the fast paths, completes with None at once, any number of times,
    from any task and loop, without letting another task run."""
    from executors.aio.locks import _READY

    async def main() -> None:
        ran = False

        async def other() -> None:
            nonlocal ran
            ran = True

        t = asyncio.create_task(other())
        for _ in range(5):
            await _READY
        assert not ran
        await t

    run(main)
    run(main)  # a second loop


def test_thrown_exception_while_parked_leaves_the_line() -> None:
    """Something other than a cancellation thrown into a parked acquirer makes it leave the
    line (its future is cancelled); the next release goes to the next waiter."""

    async def main() -> None:
        sem = Semaphore(0)
        coro = sem._acquire_slow()
        fut = coro.send(None)  # parked: yields its future
        assert sem.statistics().waiting == 1
        with pytest.raises(KeyError):
            coro.throw(KeyError())
        assert fut.cancelled() and sem.statistics().waiting == 0
        sem.release()
        assert sem.statistics().value == 1

    run(main)


# -- WaiterQueue compaction ------------------------------------------------------------------


def test_waiter_queue_compaction_keeps_fifo_with_reappended_waiters() -> None:
    """Compaction (fast path: no re-queued waiter has tombstones; slow path: some has) keeps
    exactly the live entries in FIFO order, with a re-queued waiter at its newer place."""
    from executors.aio._waiters import WaiterQueue

    for requeue in (False, True):
        q: WaiterQueue[int] = WaiterQueue()
        n = 4 * WaiterQueue._COMPACT_MIN
        for i in range(n):
            q.append(i)
        gone = [i for i in range(n) if i % 4]
        if requeue:
            q.discard(0)
            q.append(0)  # 0 now has a tombstone at the head and a live entry at the tail
        for i in gone:
            q.discard(i)  # passes the compaction threshold on the way
        live = [i for i in range(n) if not i % 4]
        expected = [*live[1:], 0] if requeue else live
        assert list(q) == expected and len(q) == len(expected)
        assert len(q._items) <= 2 * len(q) + WaiterQueue._COMPACT_MIN
        assert [q.popleft() for _ in range(len(expected))] == expected
        assert not q
        with pytest.raises(IndexError):
            q.popleft()  # drops the trailing tombstones on the way
        assert not q._items and not q._stale


# -- scaling -------------------------------------------------------------------------------


@pytest.mark.slow
def test_hundred_thousand_waiters() -> None:
    """10^5 waiters: a third cancelled in random order (O(1) each), the rest served in FIFO."""

    async def main() -> None:
        n = 100_000
        sem = Semaphore(0)
        order: list[int] = []

        async def waiter(i: int) -> None:
            await sem.acquire()
            order.append(i)

        tasks = [asyncio.create_task(waiter(i)) for i in range(n)]
        await asyncio.sleep(0)
        assert sem.statistics().waiting == n
        victims = set(random.Random(7).sample(range(n), n // 3))
        for v in victims:
            tasks[v].cancel()
        await asyncio.sleep(0)
        assert sem.statistics().waiting == n - len(victims)
        for _ in range(n):
            sem.release()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert order == [i for i in range(n) if i not in victims]
        assert sem.statistics().value == len(victims)

    run(main)


@pytest.mark.slow
@pytest.mark.serial  # a timing ratio
def test_cancelling_queued_waiters_is_linear() -> None:
    """Cancelling 16k waiters newest-first costs about what cancelling 16k tasks parked on
    their own futures costs (asyncio's deque.remove makes it ~20x that, O(n^2))."""

    def measure(on_semaphore: bool) -> float:
        async def main() -> float:
            sem = Semaphore(0)

            async def parked() -> None:
                if on_semaphore:
                    await sem.acquire()
                else:
                    await asyncio.get_running_loop().create_future()

            tasks = [asyncio.create_task(parked()) for _ in range(16_000)]
            await asyncio.sleep(0)
            start = time.perf_counter()
            for t in reversed(tasks):
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            assert sem.statistics().waiting == 0
            return time.perf_counter() - start

        return float(run(main))

    control = min(measure(False) for _ in range(3))
    ours = min(measure(True) for _ in range(3))
    assert ours < 4 * control + 0.05, (ours, control)


# -- the model, property-based ------------------------------------------------------------


class SemaphoreMachine(RuleBasedStateMachine):
    """Interleaves acquire (plain, async with, asyncio.timeout, wait_for, nowait), release,
    cancellation before and after wake-up and single loop iterations, checking after each step:
    value >= 0; level >= woken; no idle permit while someone waits; permits are conserved
    (value + woken + holders == initial); holders <= initial; locked() per the definition;
    queued tasks acquire in FIFO order."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.sem: Semaphore = Semaphore(0)
        self.initial = 0
        self.bounded = False
        self.tasks: list[asyncio.Task[None]] = []
        self.holders: list[int] = []
        self.queued: list[int] = []
        self.acquired_from_queue: list[int] = []

    @initialize(value=st.integers(0, 3), bounded=st.booleans())
    def setup(self, value: int, bounded: bool) -> None:
        self.sem = BoundedSemaphore(value) if bounded else Semaphore(value)
        self.initial, self.bounded = value, bounded

    async def _acquirer(self, tid: int, mode: str) -> None:
        sem = self.sem
        queued = sem.locked()
        if queued:
            self.queued.append(tid)
        try:
            if mode == "plain":
                await sem.acquire()
            elif mode == "async with":
                await sem.__aenter__()
            elif mode == "timeout":
                async with asyncio.timeout(0):
                    await sem.acquire()
            else:
                await asyncio.wait_for(sem.acquire(), 0)
        except TimeoutError:
            return
        if queued:
            self.acquired_from_queue.append(tid)
        self.holders.append(tid)

    def _pending(self) -> list[asyncio.Task[None]]:
        return [t for t in self.tasks if not t.done()]

    @rule(mode=st.sampled_from(["plain", "async with", "timeout", "wait_for"]))
    def start_acquirer(self, mode: str) -> None:
        tid = len(self.tasks)
        self.tasks.append(self.loop.create_task(self._acquirer(tid, mode)))

    @rule()
    def one_loop_iteration(self) -> None:
        self.loop.call_soon(self.loop.stop)
        self.loop.run_forever()

    @precondition(lambda self: bool(self.holders))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        self.holders.pop(data.draw(st.integers(0, len(self.holders) - 1)))
        self.sem.release()

    @precondition(lambda self: bool(self._pending()))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        data.draw(st.sampled_from(self._pending())).cancel()

    @precondition(lambda self: len(self.holders) > 1)
    @rule()
    def release_all(self) -> None:
        """Several releases with no yield: wakes several waiters, or frees permits while some
        woken task has not resumed (where a newcomer must still wait its turn)."""
        while self.holders:
            self.holders.pop()
            self.sem.release()

    @precondition(lambda self: bool(self.holders) and bool(self._pending()))
    @rule(data=st.data())
    def release_then_cancel(self, data: st.DataObject) -> None:
        """No yield between the two: the cancelled task may be the one just woken (state 4)."""
        self.holders.pop()
        self.sem.release()
        data.draw(st.sampled_from(self._pending())).cancel()

    @rule()
    def newcomer_nowait(self) -> None:
        was_locked = self.sem.locked()
        try:
            self.sem.acquire_nowait()
        except WouldBlock:
            assert was_locked
        else:
            assert not was_locked
            self.holders.append(-1)

    @precondition(lambda self: self.bounded and not self.holders)
    @rule()
    def over_release(self) -> None:
        before = self.sem.statistics()
        try:
            self.sem.release()
        except ValueError:
            pass
        else:
            raise AssertionError("BoundedSemaphore accepted a release with no holder")
        assert self.sem.statistics() == before

    @invariant()
    def model_holds(self) -> None:
        check_model(self.sem)
        s = self.sem.statistics()
        assert s.value + s.woken + len(self.holders) == self.initial
        assert len(self.holders) <= self.initial
        rank = {tid: i for i, tid in enumerate(self.queued)}
        ranks = [rank[t] for t in self.acquired_from_queue]
        assert ranks == sorted(ranks), (self.queued, self.acquired_from_queue)

    def teardown(self) -> None:
        try:
            for _ in list(self.holders):
                self.holders.pop()
                self.sem.release()
            for t in self.tasks:
                t.cancel()
            if self.tasks:
                self.loop.run_until_complete(
                    asyncio.gather(*self.tasks, return_exceptions=True))
            for _ in list(self.holders):  # acquired during the final run
                self.holders.pop()
                self.sem.release()
            s = self.sem.statistics()
            assert (s.value, s.woken, s.waiting) == (self.initial, 0, 0)
        finally:
            self.loop.close()


SemaphoreMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None)
TestSemaphoreMachine = SemaphoreMachine.TestCase

