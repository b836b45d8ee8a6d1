"""Fair (FIFO, no barging, cancellation-correct) Semaphore, BoundedSemaphore and Lock for asyncio.

Drop-ins for `asyncio.Semaphore`, `asyncio.BoundedSemaphore` and `asyncio.Lock`: same
constructors (and the same rejection of ``loop=``), methods, exceptions, ``async with`` use, class
names and repr format. What they add is the model of Guido van Rossum's "Reasoning about
asyncio.Semaphore" (2022), kept exactly on every supported Python:

- **Tables and buzzers.** The permits are tables; a task that finds none free takes a buzzer and
  waits in line (W). A release buzzes the first buzzer in line and *reserves* a table for it
  (gh-97545): the task is now woken but has not resumed yet (R). A task cancelled while it waits
  just leaves the line (C: cancelled entries are dropped in O(1)).
- **No barging.** An arrival takes a table at once only if nobody waits and nobody is on the way
  to a reserved table (``locked()`` is False). So a task that releases and immediately
  re-acquires queues behind the waiters (bpo-45997 / gh-90155), and several releases while the
  head has not resumed yet seat the following waiters in order (gh-111693; 3.13 behaviour on
  3.11 and 3.12 too).
- **Cancellation passes the table on.** A task woken and then cancelled before it resumed hands
  its reserved table to the next waiter, or back to the free count (python/asyncio#270,
  gh-90155). ``asyncio.timeout()`` and ``asyncio.wait_for()`` around ``acquire()`` are
  cancellations. No permit is ever lost or duplicated.

Invariants, true between any two atomic sections (``value`` is the number of free, unreserved
permits; ``woken`` the number of tasks in R; ``level = value + woken`` Guido's level)::

    value >= 0 and woken >= 0            # so level >= woken
    value > 0  implies  nobody waits     # no idle permit while someone waits
    locked() == (anyone waits or woken > 0 or level == 0) == (value == 0 or woken > 0)

Internal protocol (for the bridge; not public API). The waiting line is a queue of waiter
objects (the waiter protocol the bridge builds on, see the design page), so a party
other than a task (a *thread waiter*) can wait in the same FIFO as tasks. (A task parked by this
module is entered as its bare `asyncio.Future`, the contended path's cheaper form of a
`TaskWaiter`: anything that walks the line must accept both.) Everything below runs on the loop
thread, in an atomic section:

- ``_try_acquire() -> bool``: take a permit if ``locked()`` is False; never barges. True means
  the caller now holds a permit: if it cannot use it after all, it must ``release()`` it.
- ``_park(waiter)``: join the line (raises `RuntimeError`, changing nothing, if called from
  another event loop than that of the tasks parked or woken here; see ``_bind``). Permits are
  handed over with ``waiter.try_wake(True)``; once that returns True the waiter owns one
  permit and gives it back with ``release()``. If
  ``waiter.resumes_on_loop`` is True (tasks), it is counted as woken until it calls
  ``_resumed()`` (it now holds the permit) or ``_hand_back()`` (it gave up after being woken).
- ``_leave(waiter) -> bool``: a waiter that gives up leaves the line in O(1). False means it was
  no longer in line: it was either woken (``try_wake`` returned True: it owns a permit) or
  skipped (``try_wake`` returned False: it owns nothing); the waiter knows which.
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Awaitable
from types import TracebackType
from typing import Final, Literal, TypeAlias, cast, final

from executors.errors import WouldBlock

from ._atomic import atomic
from ._waiters import READY as _READY
from ._waiters import Waiter, WaiterQueue, bind_loop

__all__ = (
    "Semaphore",
    "BoundedSemaphore",
    "Lock",
    "SemaphoreStatistics",
    "LockStatistics",
)


@final
@dataclasses.dataclass(frozen=True)
class SemaphoreStatistics:
    """A snapshot of a `Semaphore` (or `BoundedSemaphore`), in the restaurant model's terms.

    Attributes:
        value: free permits, neither held nor reserved for a woken task (asyncio's ``_value``).
        level: ``value + woken``: permits not held by a task that has resumed (Guido's level).
        waiting: entries in the waiting line (W), including ones cancelled in this loop
            iteration whose task has not run yet (C).
        woken: tasks handed a permit that have not resumed yet (R).
        locked: what `Semaphore.locked` returns.
    """

    value: int
    level: int
    waiting: int
    woken: int
    locked: bool


@final
@dataclasses.dataclass(frozen=True)
class LockStatistics:
    """A snapshot of a `Lock`.

    Attributes:
        locked: held, or handed to a woken task that has not resumed yet.
        waiting: entries in the waiting line, as for `SemaphoreStatistics.waiting`.
        woken: 1 while the lock is handed to a task that has not resumed yet, else 0.
    """

    locked: bool
    waiting: int
    woken: int





_Future: Final = asyncio.Future
_new: Final = object.__new__

_NO_PERMIT: Final[weakref.WeakSet[Waiter | asyncio.Future[object]]] = weakref.WeakSet()
"""Parked tasks' futures that got a result but no permit (their loop was closed first)."""


def _loop_closed(fut: asyncio.Future[object]) -> bool:
    """After ``fut.set_result`` raised RuntimeError: True if because `fut`'s loop is closed.

    Its loop was closed without cancelling its tasks: the task will never run, so it cannot take
    the permit (and must not strand the line). The result is set all the same; `fut` is then
    remembered as carrying no permit, for the day the task's coroutine is closed and runs its
    handler. False for any other RuntimeError (the caller re-raises it).
    """
    if fut.get_loop().is_closed():
        _NO_PERMIT.add(fut)
        return True
    return False


_Entry: TypeAlias = "Waiter | asyncio.Future[object]"
"""An entry of the line: a `Waiter`, or a parked task's bare future (see `_FairPermits`)."""


def _check_value(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} initial value must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} initial value must be >= 0, got {value}")
    return value


class _FairPermits:
    """The machinery shared by Semaphore, BoundedSemaphore and Lock: permits and a FIFO line."""

    __slots__ = (
        "__weakref__", "_bound", "_line", "_loop", "_value", "_waiters", "_woken")

    _value: int
    _woken: int
    _waiters: WaiterQueue[_Entry]
    _bound: int | None
    _loop: asyncio.AbstractEventLoop | None

    def _setup(self, value: int, bound: int | None) -> None:
        self._value = value  # free permits, not reserved (the name asyncio's tests inspect)
        self._woken = 0  # tasks handed a permit that have not resumed yet (R)
        # W and C, in arrival order. The hot paths test `WaiterQueue.live` (an attribute, no
        # call) and call the queue's methods. They used to alias all of its private containers
        # and repeat its popleft, append and discard inline; measured with benchmarks/locks.py's
        # workloads (quick sizes, 40 interleaved rounds, CPython 3.11), those copies were worth
        # 0-1.5% each and are gone. One copy is kept, with the one alias it needs (`_line`, the
        # queue's deque): _give's contended hand-off (see there).
        self._waiters = queue = WaiterQueue[_Entry]()
        self._line = queue._items
        self._bound = bound
        # The event loop of the tasks parked or woken here; meaningful only while any are (see
        # _bind). The name is asyncio's (_LoopBoundMixin), so code that inspects it still works.
        self._loop = None

    # -- atomic sections (plain functions: nothing can interleave with them) ----------------

    @atomic
    def _try_acquire(self) -> bool:
        if self._value and not self._woken:
            self._value -= 1
            return True
        return False

    @atomic
    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind to `loop` before a party of it parks, or raise `RuntimeError` (see `bind_loop`).

        Reached from the waiting path only, as in asyncio; bound only while tasks wait or are
        woken here, so successive event loops keep working (asyncio binds for good).
        """
        shared = "SharedLock" if isinstance(self, Lock) else "SharedSemaphore"
        busy = bool(self._waiters.live or self._woken)
        self._loop = bind_loop(self, self._loop, loop, busy, shared)

    @atomic
    def _park(self, waiter: Waiter) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # parked from outside any running loop: nothing to compare
            pass
        else:
            if loop is not self._loop:
                self._bind(loop)
        self._waiters.append(waiter)
        if self._value:
            # Only woken tasks that have not resumed kept us from the fast path: reserve a permit
            # now, so no permit idles while we wait, and resume after them (gh-111693 order).
            self._drain()

    @atomic
    def _leave(self, waiter: Waiter) -> bool:
        return self._waiters.discard(waiter)

    @atomic
    def _resumed(self) -> None:
        self._woken -= 1

    @atomic
    def _hand_back(self) -> None:
        # State 4 of gh-90155: woken, then cancelled before resuming. The reserved permit goes to
        # the next waiter, or back to the free count (python/asyncio#270; the 3.9 hang).
        self._woken -= 1
        self._value += 1
        self._drain()

    @atomic
    def _drain(self) -> None:
        """Hand free permits to the head of the line while both exist (skipping C entries)."""
        waiters = self._waiters
        live = waiters.live
        while self._value and live:
            waiter = waiters.popleft()  # `live` non-empty: a live entry is in line
            if type(waiter) is _Future:
                # A parked task's bare future (see _acquire_slow): TaskWaiter.try_wake inlined.
                if waiter.done():
                    continue  # cancelled (C): the task leaves on its own
                try:
                    waiter.set_result(True)
                except RuntimeError:
                    if _loop_closed(waiter):
                        continue
                    raise
                self._value -= 1
                self._woken += 1
            else:
                waiter = cast("Waiter", waiter)  # any other entry is a Waiter
                if waiter.try_wake(True):
                    self._value -= 1
                    if waiter.resumes_on_loop:
                        self._woken += 1

    @atomic
    def _give(self) -> None:
        """Return one permit: hand it to the head of the line, or add it to the free count."""
        live = self._waiters.live
        if not live:
            self._value += 1
            return
        if not self._value:
            # The contended hand-off without _drain's loop and the queue's popleft (two Python
            # calls): one permit, and the head is nearly always a parked task's pending future,
            # a live entry (a task's entry is discarded only once its future is done, see
            # _acquire_slow). benchmarks/locks.py's workloads, 40 interleaved rounds: through
            # _drain instead, 100 tasks through Semaphore(10) do 1-2% fewer acquisitions per
            # second and acquire()/release() pairs 4.5% fewer, which took the contended paths
            # 4-7% below the version before the other copies were folded back; with it, every
            # workload is within 3.5% of that version.
            line = self._line
            head = line.popleft()
            if type(head) is _Future and not head.done():
                live.discard(head)
                try:
                    head.set_result(True)
                except RuntimeError:
                    if not _loop_closed(head):
                        raise
                else:
                    self._woken += 1
                    return
            else:
                line.appendleft(head)  # a tombstone, C entry or Waiter: _drain's job
        self._value += 1
        self._drain()

    async def _acquire_slow(self) -> None:
        # The sections between awaits are atomic; _park's and _resumed's few lines are inlined
        # (the queue's own methods are called: inlining them measured no faster).
        # The task parks its bare future in the line, as its waiter: no TaskWaiter object
        # around it (an allocation, a slot store and a type check per contended acquisition).
        # _drain and _give recognise it by its exact type and treat it as TaskWaiter would.
        # A pending future in the line is always a live entry: the entry is discarded (below)
        # only once the future is done, cancelled by the task or here.
        # asyncio.Future() rather than loop.create_future(): one Python call less on the
        # contended path, as anyio does.
        fut: asyncio.Future[object] = _Future()
        loop = fut.get_loop()
        if loop is not self._loop:
            self._bind(loop)  # asyncio's check, on the same (waiting) path only
        self._waiters.append(fut)
        try:
            if not self._value:
                await fut
            else:
                self._drain()  # as in _park
                if fut.done():
                    # Reserved at once; still yield so earlier woken tasks resume first.
                    await asyncio.sleep(0)
                else:
                    await fut
        except BaseException:
            # CancelledError (cancel(), asyncio.timeout(), wait_for()) or anything thrown in.
            # fut.cancel() cancels it if something other than a cancellation was thrown in.
            if fut.cancelled() or fut.cancel():
                # Leave the line (C): O(1), unlike asyncio's deque.remove. Not queued any
                # more if _drain already skipped it.
                self._waiters.discard(fut)
            elif fut in _NO_PERMIT:  # woken, but skipped by _drain: its loop was closed
                _NO_PERMIT.discard(fut)
            else:
                self._hand_back()  # woken, then cancelled before it resumed
            raise
        self._woken -= 1

    def _format(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        res = super().__repr__()
        return f"<{res[1:-1]} [{self._format()}]>"

    # -- async context manager -------------------------------------------------------------

    def __aenter__(self) -> Awaitable[None]:
        # A plain function: `async with` awaits whatever __aenter__ returns. The uncontended path
        # then creates no coroutine at all (asyncio's creates two: __aenter__ and acquire), and
        # the contended one a single coroutine. Taking the permit happens in this call, which
        # `async with` makes immediately before the await.
        if self._value and not self._woken:
            self._value -= 1
            return _READY
        return self._acquire_slow()

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]:
        self.release()
        return _READY  # awaits to None: exceptions are not suppressed

    def release(self) -> None:
        raise NotImplementedError


class Semaphore(_FairPermits):
    """A fair counting semaphore for asyncio tasks: a drop-in for `asyncio.Semaphore`.

    ``acquire()`` takes one of ``value`` permits, waiting in a strict FIFO line when none is free
    or someone is already waiting; ``release()`` returns one, handing it directly to the head of
    the line. Guarantees (see the module docstring for the model):

    - FIFO with no barging: a task that releases and re-acquires queues behind the waiters.
    - Cancellation-correct: a cancelled waiter leaves the line in O(1); a waiter woken and then
      cancelled before it resumed passes its permit on. ``asyncio.timeout()``/``wait_for()``
      around ``acquire()`` behave the same. No permit is lost or duplicated.
    - An uncontended ``acquire()`` does not yield (as asyncio's). All methods must be called from
      the thread running the event loop of the tasks using it (as asyncio's). A task of another
      event loop that would wait while tasks of the first are parked (or woken) raises
      `RuntimeError` ("is bound to a different event loop", as asyncio's) instead of hanging;
      unlike asyncio's, the binding ends when nobody waits, so once idle it serves another loop
      (successive ``asyncio.run`` calls). `integrations.bridge.SharedSemaphore` is the semaphore
      for several loops and threads at once.

    Subclassed by `BoundedSemaphore` only.

    Args:
        value: the initial number of permits (an int >= 0; default 1).

    Raises:
        TypeError: `value` is not an int (or ``loop=`` is passed, as in asyncio).
        ValueError: `value` is negative.

    Example:
        >>> async def main() -> None:
        ...     sem = Semaphore(2)
        ...     async with sem:
        ...         print(sem)  # doctest: +ELLIPSIS
        >>> asyncio.run(main())
        <executors.aio.locks.Semaphore object at 0x... [unlocked, value:1]>
    """

    __slots__ = ()

    def __init__(self, value: int = 1) -> None:
        self._setup(_check_value(value, "Semaphore"), None)

    def locked(self) -> bool:
        """True if ``acquire()`` would wait: no free permit, someone waits, or one is woken.

        Unlike `asyncio.Lock` (gh-138121) this stays True between a ``release()`` that woke a
        waiter and the moment that waiter resumes.
        """
        return not self._value or self._woken > 0

    async def acquire(self) -> Literal[True]:
        """Take a permit, waiting in FIFO order if `locked()`; return True.

        Does not yield if a permit is free and nobody waits, so a task that is already being
        cancelled on entry gets the permit and sees its `CancelledError` at its next ``await``
        (asyncio's behaviour). If it has to wait, the pending cancellation is delivered at once
        and it leaves the line.

        Raises:
            asyncio.CancelledError: cancelled while waiting (including by ``asyncio.timeout()``);
                it then holds no permit, and a permit it had been handed goes to the next waiter.
            RuntimeError: it would wait while tasks of another event loop wait (see above).
        """
        if self._value and not self._woken:
            self._value -= 1
            return True
        await self._acquire_slow()
        return True

    def acquire_nowait(self) -> None:
        """Take a permit now if `locked()` is False, never overtaking anyone.

        A plain function: it never yields, so it ignores a pending cancellation of the calling
        task (which is delivered at that task's next ``await``).

        Raises:
            executors.WouldBlock: `locked()` is True: no free permit, someone waits, or a woken
                task has not resumed yet. Nothing changed.
        """
        if not self._try_acquire():
            raise WouldBlock(
                f"{type(self).__name__} is locked; await acquire() to wait for a permit in turn"
            )

    @atomic
    def release(self) -> None:
        """Return a permit: hand it to the longest waiter if any, else add it to the free count.

        Never blocks and never yields; the woken waiter resumes on a later loop iteration.
        """
        self._give()

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]:
        # release() inlined where nobody waits (the contended case calls _give): the two Python
        # calls it saves are a sixth of an uncontended `async with` (benchmarks/locks.py
        # "uncontended acquire/release": 17% fewer ops/s through release(), 15 interleaved
        # quick rounds, CPython 3.11).
        if self._waiters.live:
            self._give()
        else:
            self._value += 1
        return _READY

    def statistics(self) -> SemaphoreStatistics:
        """A frozen snapshot: free value, level, waiting, woken and locked."""
        return SemaphoreStatistics(
            value=self._value,
            level=self._value + self._woken,
            waiting=len(self._waiters),
            woken=self._woken,
            locked=self.locked(),
        )

    def _format(self) -> str:
        # asyncio's format ("locked" or "unlocked, value:N", then ", waiters:N"), plus the free
        # value when locked only by woken tasks and ", woken:N" while any task is in R.
        value = self._value
        extra = f"unlocked, value:{value}" if not self.locked() else (
            f"locked, value:{value}" if value else "locked")
        if self._waiters:
            extra += f", waiters:{len(self._waiters)}"
        if self._woken:
            extra += f", woken:{self._woken}"
        return extra


@final
class BoundedSemaphore(Semaphore):
    """A `Semaphore` that refuses to be released more often than acquired.

    Drop-in for `asyncio.BoundedSemaphore`. The count of permits not held by a resumed task
    (free plus reserved for woken tasks) never exceeds the initial value. This is stricter than
    asyncio, which also accepts a second ``release()`` while a woken waiter has not resumed yet
    and only raises on a later one: here the over-release is refused at once.

    Args:
        value: the initial and maximum number of permits (an int >= 0; default 1).

    Raises:
        TypeError: `value` is not an int (or ``loop=`` is passed).
        ValueError: `value` is negative.

    Example:
        >>> async def main() -> None:
        ...     sem = BoundedSemaphore(1)
        ...     async with sem:
        ...         pass
        ...     sem.release()
        >>> asyncio.run(main())
        Traceback (most recent call last):
          ...
        ValueError: BoundedSemaphore released too many times
    """

    __slots__ = ()

    def __init__(self, value: int = 1) -> None:
        self._setup(_check_value(value, "BoundedSemaphore"), value)

    __aexit__ = _FairPermits.__aexit__  # release() with its bound check

    @atomic
    def release(self) -> None:
        """Return a permit, as `Semaphore.release`.

        Raises:
            ValueError: every permit is already free or reserved for a woken task (more
                releases than acquisitions). The state is unchanged.
        """
        bound = self._bound
        assert bound is not None
        if self._value + self._woken >= bound:
            raise ValueError("BoundedSemaphore released too many times")
        self._give()


_LOCK_BOUND: Final = 1


@final
class Lock(_FairPermits):
    """A fair mutual-exclusion lock for asyncio tasks: a drop-in for `asyncio.Lock`.

    Not owned (as asyncio's: any task may release it). FIFO with direct hand-off: ``release()``
    passes the lock to the longest waiter, so a task that releases and re-acquires queues behind
    the others; a waiter woken and then cancelled before it resumed passes the lock on.

    One deliberate difference: `locked()` is True from a ``release()`` that handed the lock to a
    waiter until that waiter resumes (the lock is promised to it). `asyncio.Lock.locked()`
    returns False in that window although ``acquire()`` would wait (gh-138121).

    Bound to an event loop only while tasks wait on it, as `Semaphore` is; a waiting task of
    another loop gets `RuntimeError`. `integrations.bridge.SharedLock` serves several loops and
    threads at once.

    Raises:
        TypeError: ``loop=`` (or any argument) is passed, as in asyncio.

    Example:
        >>> async def main() -> None:
        ...     lock = Lock()
        ...     async with lock:
        ...         print(lock.locked())
        ...     print(lock)  # doctest: +ELLIPSIS
        >>> asyncio.run(main())
        True
        <executors.aio.locks.Lock object at 0x... [unlocked]>
    """

    __slots__ = ()

    def __init__(self) -> None:
        self._setup(_LOCK_BOUND, _LOCK_BOUND)

    def locked(self) -> bool:
        """True while the lock is held, or handed to a woken task that has not resumed yet."""
        return not self._value

    async def acquire(self) -> Literal[True]:
        """Take the lock, waiting in FIFO order if it is locked or anyone waits; return True.

        Cancellation behaves as for `Semaphore.acquire`.

        Raises:
            asyncio.CancelledError: cancelled while waiting; the lock is not held by this task,
                and if it had been handed over it passes to the next waiter.
            RuntimeError: it would wait while tasks of another event loop wait.
        """
        if self._value:
            self._value = 0
            return True
        await self._acquire_slow()
        return True

    def acquire_nowait(self) -> None:
        """Take the lock now if it is unlocked (then nobody waits). Never yields.

        Raises:
            executors.WouldBlock: the lock is locked. Nothing changed.
        """
        if not self._try_acquire():
            raise WouldBlock("Lock is locked; await acquire() to wait for it in turn")

    @atomic
    def release(self) -> None:
        """Release the lock, handing it to the longest waiter if there is one.

        Raises:
            RuntimeError: the lock is not acquired (also when it is already handed to a woken
                task that has not resumed: that release belongs to the new holder).
        """
        if self._value or self._woken:
            raise RuntimeError("Lock is not acquired.")
        self._give()

    def statistics(self) -> LockStatistics:
        """A frozen snapshot: locked, waiting and woken."""
        return LockStatistics(locked=not self._value, waiting=len(self._waiters),
                              woken=self._woken)

    def _format(self) -> str:
        extra = "locked" if not self._value else "unlocked"
        if self._waiters:
            extra += f", waiters:{len(self._waiters)}"
        if self._woken:
            extra += f", woken:{self._woken}"
        return extra
