"""SharedSemaphore, SharedBoundedSemaphore and SharedLock: one fair FIFO for threads and tasks.

Shared by plain threads (through ``.blocking``) and tasks of any number of event loops running
in any threads, with no Portal and no loop round trip: the state lives behind the primitive's own
short mutex, and a loop is touched only when a parked task must be resumed (through the loop's
`LoopWaker`: a burst of wake-ups for one loop costs one ``call_soon_threadsafe``).

The model is `executors.aio.Semaphore`'s (Guido van Rossum's restaurant: permits are tables, a
waiter holds a buzzer), with a thread mutex instead of the loop's atomicity. State, under the
mutex (``value``: free permits; ``woken``: tasks handed a permit that have not resumed yet,
less the entries of ``resumed``, which a task appends to without the mutex when it resumes, so
that it does not block its loop on the mutex a second time; sections that read ``woken`` fold
``resumed`` into it first)::

    value >= 0 and woken >= 0
    value > 0  implies  no live waiter is in line      # no idle permit (research bug 1)
    acquire waits  iff  value == 0                      # so locked() == (value == 0)

- **One strict FIFO, no barging.** A newcomer (thread or task) takes a permit only when one is
  free, which by the invariant means nobody waits; otherwise it parks at the tail. A release
  hands its permit straight to the head of the line (the waiter's one-shot claim, made under the
  mutex, is the linearization point), so grant order is arrival order. The wake-up of the waiter
  (its lock released, its loop's waker posted) happens after the releaser leaves the mutex: woken
  inside it, the waiter's thread may take the GIL while the mutex is still held and the next
  party, often a loop thread, blocks on it (research/bridge_shared_state.md, risk 1). Every
  section that adds a permit (release, a hand-back, a dropped waiter) hands it on while both a
  permit and a live waiter exist, whoever runs it: a permit never idles while someone waits.
- **Thread waiters** (`SharedThreadWaiter`) block on a lock of their own: the claim releases it,
  no loop is involved. A timeout that loses the race with a claim returns True.
- **Task waiters** (`SharedTaskWaiter`) are resumed on their own loop: directly when the releaser
  runs on it, else through its waker. A task claimed and then cancelled before it resumes hands
  its permit on (to the next waiter, or back to the free count). A waiter whose loop is closed
  is dropped when its turn comes (the claim fails) and the next party is served; a task whose
  loop closes after its claim was posted hands the permit back when its coroutine is closed
  (``asyncio.run`` cancels leftover tasks; a loop closed without that closes them when they
  are collected).
- **Re-entry** (bpo-14976): ``release()`` may be called from ``__del__``, a weakref callback or a
  signal handler on a thread that is inside this primitive's mutex at that moment. The mutex is
  a ``threading.RLock`` only to ask ``_is_owned()``: such a release is *deferred*, appended to a
  deque that the interrupted section runs right after it leaves the mutex. The permit stays held
  until then, so FIFO is kept. A blocking or task ``acquire()`` made re-entrantly raises
  RuntimeError (it would wait on its own thread).
- **Ctrl-C** in a thread: each section has one commit point. A thread interrupted while parked
  either gave up (it owns nothing) or was claimed (it hands the permit back) before the
  exception leaves ``acquire``.
- **Fork**: in the child, every live shared primitive gets a fresh mutex and drops the waiters
  of threads and loops that do not exist there (all but the forking thread's running loop's).

Atomic operations relied on (besides the mutex): those of `_shared_waiter` (the claim token's
``list.pop``, a thread waiter's lock) and `_waker` (``deque.append``/``popleft``), and
``deque.append``/``popleft`` on the deferred-release deque, which re-entrant callers append to
without the mutex, and on the ``resumed`` deque, which resumed tasks append to without it.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import types
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Final, Literal, Self, TypeVar, final

from executors import validate
from executors.aio import LockStatistics, SemaphoreStatistics
from executors.aio._waiters import READY as _READY
from executors.errors import WouldBlock

from ._shared_waiter import (
    _HELD,
    COMPLETED_NOTE,
    THREAD,
    UNSET,
    SharedTaskWaiter,
    SharedThreadWaiter,
    SharedWaiter,
    finish,
    hold,
    raise_held,
)
from ._waker import running_loop

__all__ = (
    "SharedSemaphore",
    "SharedBoundedSemaphore",
    "SharedLock",
    "BlockingSharedSemaphore",
    "BlockingSharedLock",
)

_A = TypeVar("_A")
_COMPACT_MIN: Final = 64
_GRANTED: Final = True  # the value a permit is handed over as

_live: weakref.WeakSet[_SharedPermits] = weakref.WeakSet()


def _check_value(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} value must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} value must be >= 0, got {value}")
    return value


def _reentry_error(what: str) -> RuntimeError:
    return RuntimeError(
        f"{what} called re-entrantly (from __del__, a weakref callback or a signal handler) on "
        "a thread that is inside this primitive: it would wait on its own thread. Only "
        "release() may be called there."
    )


class _SharedPermits:
    """The machinery of the three classes: permits, one FIFO line, a mutex, deferred ops."""

    __slots__ = (
        "__weakref__", "_blocking", "_bound", "_deferred", "_left", "_line", "_mutex", "_resumed",
        "_value", "_woken")

    _blocking: _BlockingSharedPermits

    def _setup(self, value: int, bound: int | None) -> None:
        self._mutex = threading.RLock()  # an RLock only for _is_owned(): re-entry is detected
        self._value = value
        self._woken = 0
        self._resumed: deque[None] = deque()  # one entry per woken task that resumed since
        self._bound = bound
        self._line: deque[SharedWaiter] = deque()  # arrival order; gone waiters are skipped
        self._left = 0  # parties that left the line themselves since the last compaction
        self._deferred: deque[tuple[Callable[..., BaseException | None], tuple[object, ...]]] = (
            deque())
        _live.add(self)

    # -- sections (call with the mutex held) -----------------------------------------------
    #
    # Ctrl-C (design.md, "Ctrl-C"): a signal handler may raise at any checkpoint (a function's
    # start, a backward jump, the return of a call into C). Every section here is a commit
    # made in one checkpoint-free stretch (guarded by a `done` flag, so that running it again
    # skips it) followed by the drain (free permits to the head of the line while both exist),
    # which can always run again. `_complete` runs them, releases the mutex and wakes what was
    # taken, to the end, whatever a signal handler raises meanwhile (the exception is held and
    # raised by the public call once it is done).

    def _fold_locked(self) -> None:
        """Make ``_woken`` exact: subtract the tasks that resumed (appended without the mutex)."""
        resumed = self._resumed
        while resumed:
            del resumed[0]  # no call between the removal and the count: no checkpoint
            self._woken -= 1

    def _woken_now(self) -> int:
        """Woken tasks not resumed yet, without the mutex (a snapshot for the views)."""
        return max(self._woken - len(self._resumed), 0)

    def _release_locked(self, n: int, done: list[bool]) -> BaseException | None:
        # Inlined in _complete for the classes without a bound (keep in step).
        if done[0]:
            return None
        if self._resumed:
            self._fold_locked()
        if self._bound is not None:
            try:
                self._check_release_locked(n)
            except (ValueError, RuntimeError) as exc:
                done[0] = True  # nothing changed: nothing to do again
                return exc
        done[0] = True
        self._value += n
        return None

    def _undo_locked(self, waiter: SharedWaiter, done: list[bool]) -> None:
        # A taken task whose loop closed before it resumed (its wake failed, or its loop's
        # sentinel found it owed): the permit goes on, once (its value is reset here).
        if done[0]:
            return
        if waiter.value is UNSET:  # handed back already (its coroutine closed, a second path)
            done[0] = True
            return
        done[0] = True
        waiter.value = UNSET
        self._woken -= 1  # only task waiters are undone
        self._value += 1
        if isinstance(waiter, SharedTaskWaiter):
            waiter.returned()

    def _check_release_locked(self, n: int) -> None:
        """Raise if releasing `n` permits is an over-release (classes with a bound); no change."""

    def _leave_locked(self, waiter: SharedWaiter, done: list[bool]) -> None:
        """A waiter gives up: leave the line, or hand back what it was handed."""
        if done[0]:
            return
        if waiter.abandon() or waiter.value is UNSET:
            # It owns nothing: it gave up now, or earlier (a thread's timeout), or a claim found
            # its loop closed and dropped it. Its entry is a tombstone the line skips; compact
            # once tombstones may outnumber live entries (an overcount only compacts earlier).
            done[0] = True
            self._left += 1
            line = self._line
            if self._left * 2 > len(line) > _COMPACT_MIN:
                self._line = deque([w for w in line if w.waiting])
                self._left = 0
            return
        # Claimed first: it owns a permit it will not use (a task claimed then cancelled
        # before it resumed, or a thread interrupted after the hand-off). Pass it on, once
        # (`_undo_locked` checks the reset value). One checkpoint-free stretch:
        done[0] = True
        waiter.value = UNSET
        if waiter.resumes_on_loop:
            self._woken -= 1
        self._value += 1
        if isinstance(waiter, SharedTaskWaiter):
            waiter.returned()

    # -- running sections --------------------------------------------------------------------

    def _complete(self, section: Callable[..., BaseException | None] | None,
                  *args: object) -> BaseException | None:
        """Run ``section(*args)`` under the mutex, then hand free permits on, leave the mutex
        and wake what was taken: to the end, whatever a signal handler raises meanwhile.
        Returns the error the section returned (an over-release), for the caller to raise.

        `section` None is the release of ``args = (n,)``, `_release_locked` inlined, its `done`
        flag a local (the retries run in this frame): the hot path makes one Python call here,
        not three (each is a measurable share of the gap to the contention benchmark's floor).

        The drain hands free permits to the head of the line while both exist (dead waiters
        skipped), and appends the waiters it took to `taken`, woken after the mutex is left.
        The take decides FIFO order. From a take's return to the append, no checkpoint: a
        taken waiter is always in `taken`.

        Such an exception is held (`hold`) and the whole retried: the section skips what it did
        (its `done` flag), the drain and the wake-ups can always run again (a woken waiter is
        not harmed by a second wake-up). The mutex is taken inside the ``try``: an exception
        raised right after ``acquire`` returned still releases it; an ``acquire`` interrupted
        while it waited never took it (the release then raises RuntimeError, ignored).
        """
        mutex = self._mutex
        taken: list[SharedWaiter] = []
        error: BaseException | None = None
        released = False  # the inlined release's `done` flag
        while True:
            try:
                while True:
                    try:
                        try:
                            mutex.acquire()
                            if section is not None:
                                found = section(*args)
                                if found is not None:
                                    error = found
                            elif not released:
                                # _release_locked inlined (keep in step).
                                resumed = self._resumed
                                while resumed:  # _fold_locked inlined
                                    del resumed[0]
                                    self._woken -= 1
                                if self._bound is not None:
                                    try:
                                        self._check_release_locked(args[0])  # type: ignore[arg-type]
                                    except (ValueError, RuntimeError) as exc:
                                        error = exc  # nothing changed: nothing to do again
                                        released = True
                                    else:
                                        released = True  # no checkpoint from here to the add
                                        self._value += args[0]  # type: ignore[operator]
                                else:
                                    released = True
                                    self._value += args[0]  # type: ignore[operator]
                            line = self._line
                            while self._value and line:  # the drain
                                waiter = line[0]
                                if waiter.take(_GRANTED):
                                    del line[0]
                                    self._value -= 1
                                    if waiter.resumes_on_loop:
                                        self._woken += 1
                                    taken.append(waiter)
                                else:
                                    del line[0]
                                    del waiter  # a tombstone: it dies here, in the section
                        finally:
                            try:
                                mutex.release()
                            except RuntimeError:
                                pass
                        while taken:
                            waiter = taken[-1]
                            if not waiter.wake():
                                # Its loop closed after the take: the permit goes on.
                                self._locked_or_deferred(self._undo_locked, waiter, [False])
                            del taken[-1]
                        break
                    except BaseException as exc:
                        hold(exc)
                break
            except BaseException as exc:
                hold(exc)
        return error

    def _exit(self) -> None:
        self._mutex.release()
        if self._deferred:
            self._run_deferred()

    def _run_deferred(self) -> None:
        # Runs right after the section that a re-entrant call interrupted left the mutex (on
        # that same thread), or by any later section's exit.
        mutex = self._mutex
        deferred = self._deferred
        while deferred and not mutex._is_owned():  # type: ignore[attr-defined]
            try:
                section, args = deferred.popleft()
            except IndexError:
                return
            error = self._complete(section, *args)
            if error is not None:  # a deferred over-release: nobody to raise it to
                sys.unraisablehook(_unraisable(error, self))  # type: ignore[arg-type]

    def _locked_or_deferred(self, section: Callable[..., BaseException | None],
                            *args: object) -> None:
        """Run ``section(*args)`` through `_complete`; if this thread is already inside the
        mutex (re-entry from a finalizer or signal handler), defer it to the end of the
        interrupted section."""
        if self._mutex._is_owned():  # type: ignore[attr-defined]
            # A release keeps its permit held until then, so FIFO order is kept; a leave (a
            # coroutine closed by the garbage collector) leaves or hands back a little later.
            self._deferred.append((section, args))
            return
        try:
            self._complete(section, *args)
        finally:
            if self._deferred:
                self._run_deferred()

    def _release(self, n: int = 1) -> None:
        if self._mutex._is_owned():  # type: ignore[attr-defined]
            self._deferred.append((self._release_locked, (n, [False])))  # see above
            return
        released = False
        try:
            try:
                error = self._complete(None, n)  # None: the release, inlined
            except BaseException as exc:  # at _complete's first checkpoint, before it began
                hold(exc)
                error = self._complete(None, n)
            if error is not None:
                raise error  # an over-release: nothing changed
            released = True  # no checkpoint since _complete returned
            if self._deferred:
                self._run_deferred()
            if _HELD[0] is not None:
                raise_held(True)  # the permit is back: the Ctrl-C that came meanwhile
        except BaseException as exc:  # no call from here to the raise: see THREAD
            late = _HELD[0] if THREAD.holds else None
            out = exc if late is None else late  # a held one leaves instead
            if late is not None:
                _HELD[0] = None
            if released:
                if "__notes__" not in out.__dict__:
                    out.__notes__ = [COMPLETED_NOTE]
                elif COMPLETED_NOTE not in out.__notes__:
                    out.__notes__ += [COMPLETED_NOTE]
            if late is not None:
                raise late  # noqa: B904  (it came first: not caused by the one caught)
            raise

    def _lost(self, waiter: SharedTaskWaiter) -> None:
        """Owner hook: `waiter`'s loop closed before its task used the permit it was handed."""
        self._locked_or_deferred(self._undo_locked, waiter, [False])

    def _try_take(self, what: str) -> bool:
        mutex = self._mutex
        if mutex._is_owned():  # type: ignore[attr-defined]
            raise _reentry_error(what)
        try:
            mutex.acquire()  # inside the try: an exception right after it still releases
            if self._value:
                self._value -= 1
                return True
            return False
        finally:
            try:
                mutex.release()
            except RuntimeError:  # interrupted while it waited: never taken
                pass
            if self._deferred:
                self._run_deferred()

    # -- task side ---------------------------------------------------------------------------

    def _take_or_park(self) -> SharedTaskWaiter | None:
        """A task's entry: take a free permit (None), else park a waiter at the tail (it)."""
        mutex = self._mutex
        if mutex._is_owned():  # type: ignore[attr-defined]
            raise _reentry_error("acquire()")
        try:
            mutex.acquire()  # inside the try: an exception right after it still releases
            if self._value:
                self._value -= 1
                return None
            waiter = SharedTaskWaiter(self)  # owned: a closing loop hands its permit back
            self._line.append(waiter)
            return waiter
        finally:
            try:
                mutex.release()
            except RuntimeError:  # interrupted while it waited: never taken
                pass
            if self._deferred:
                self._run_deferred()

    async def _await_permit(self, waiter: SharedTaskWaiter) -> None:
        # Keep in step with acquire(), which inlines this (one coroutine per parked acquire).
        try:
            await waiter.future
        except BaseException:
            # Cancelled (or anything thrown in, GeneratorExit included): leave the line, or
            # pass on a permit claimed for us before we resumed.
            self._leave(waiter)
            raise
        waiter.consume()  # the permit is ours: a closing loop no longer hands it back
        self._resumed.append(None)  # resumed: no second trip on the mutex

    def _leave(self, waiter: SharedWaiter) -> None:
        done = [False]
        try:
            self._locked_or_deferred(self._leave_locked, waiter, done)
        except BaseException as exc:  # at its first checkpoint, before it began: again
            hold(exc)
            self._locked_or_deferred(self._leave_locked, waiter, done)

    def __aenter__(self) -> Awaitable[None]:
        # A plain function, as executors.aio.Semaphore's: `async with` awaits what it returns.
        # A free permit then costs no coroutine at all, a parked task one (not two).
        waiter = self._take_or_park()
        if waiter is None:
            return _READY
        return self._await_permit(waiter)

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Awaitable[None]:
        self._release()
        return _READY  # awaits to None: exceptions are not suppressed

    async def acquire(self) -> Literal[True]:
        """Take a permit (the lock), waiting in FIFO order behind threads and tasks if none is free.

        Does not yield when a permit is free (then nobody waits).

        Raises:
            asyncio.CancelledError: cancelled while waiting; it then holds no permit, and a
                permit handed to it meanwhile goes to the next waiter.
            RuntimeError: called re-entrantly from a finalizer inside this primitive.
        """
        waiter = self._take_or_park()
        if waiter is not None:  # _await_permit inlined: one coroutine, not two
            try:
                await waiter.future
            except BaseException:
                self._leave(waiter)  # see _await_permit
                raise
            waiter.consume()
            self._resumed.append(None)
        return True

    def acquire_nowait(self) -> None:
        """Take a permit (the lock) now if one is free (then nobody waits); never yields.

        Raises:
            executors.WouldBlock: no permit is free. Nothing changed.
        """
        if not self._try_take("acquire_nowait()"):
            raise WouldBlock(
                f"{type(self).__name__} is locked; await acquire() to wait for a permit in turn")

    # -- thread side -------------------------------------------------------------------------

    def _acquire_thread(self, blocking: bool, timeout: float | None) -> bool:
        mutex = self._mutex
        if mutex._is_owned():  # type: ignore[attr-defined]
            raise _reentry_error("acquire()")
        taken = False
        waiter: SharedThreadWaiter | None = None
        try:
            try:
                mutex.acquire()  # inside the try: an exception right after it still releases
                if self._value:
                    self._value -= 1
                    taken = True  # the commit point of the fast path (no checkpoint between)
                elif blocking and timeout != 0:
                    waiter = SharedThreadWaiter()
                    self._line.append(waiter)
            finally:
                try:
                    mutex.release()  # _exit() inlined
                except RuntimeError:  # interrupted while it waited: never taken
                    pass
                if self._deferred:
                    self._run_deferred()
            if waiter is not None:
                taken = waiter.wait(timeout)
                if not taken:
                    self._leave(waiter)  # gave up at its timeout: count it for compaction
            if _HELD[0] is not None:
                raise_held()  # handled below: a permit taken goes back
            return taken
        except BaseException:
            # Interrupted (Ctrl-C): the caller never learns of a permit taken or a place
            # in line. Give them back, through `finish` (see there).
            if waiter is not None:
                # `wait` settled first (or never began): the thread gives up, or was handed
                # the permit (then it goes on; `_leave` can run again).
                try:
                    finish(self._leave, waiter)
                except BaseException:  # a second signal at finish's first instruction
                    finish(self._leave, waiter)
            elif taken:
                done = [False]  # shared by both runs below
                try:
                    finish(self._complete, self._release_locked, 1, done)
                except BaseException:  # a second signal at finish's first instruction
                    finish(self._complete, self._release_locked, 1, done)
            late = _HELD[0] if THREAD.holds else None  # no call from here on: see THREAD
            if late is not None:
                _HELD[0] = None
                raise late  # noqa: B904  (it came first: not caused by the one caught)
            raise

    # -- fork --------------------------------------------------------------------------------

    def _after_fork_in_child(self, loop: asyncio.AbstractEventLoop | None) -> None:
        # One thread is left: the forking one. Parked threads are gone, and so are the loops
        # other threads ran; a task of the forking thread's running loop may still resume.
        self._mutex = threading.RLock()
        self._line = deque(w for w in self._line if w.waiting
                           and isinstance(w, SharedTaskWaiter) and w.loop is loop)
        self._left = 0
        # Woken tasks of dead loops never resume: their permits are as lost as those held by
        # the parent's other threads (threading's primitives behave the same).
        self._woken = 0
        self._resumed.clear()

    # -- views -------------------------------------------------------------------------------

    def _waiting(self) -> int:
        return sum(1 for w in list(self._line) if w.waiting)

    def __repr__(self) -> str:
        res = object.__repr__(self)
        return f"<{res[1:-1]} [{self._format()}]>"

    def _format(self) -> str:
        raise NotImplementedError

    def _line_state(self, extra: str) -> str:
        waiting = self._waiting()
        if waiting:
            extra += f", waiters:{waiting}"
        woken = self._woken_now()
        if woken:
            extra += f", woken:{woken}"
        return extra


def _unraisable(exc: BaseException, obj: object) -> object:
    # The shape sys.unraisablehook expects (what the interpreter passes for a failing __del__).
    return types.SimpleNamespace(
        exc_type=type(exc), exc_value=exc, exc_traceback=exc.__traceback__,
        err_msg="Exception ignored in a deferred release of", object=obj)


class SharedSemaphore(_SharedPermits):
    """A fair counting semaphore shared by plain threads and tasks of any event loop.

    Tasks use it exactly as `executors.aio.Semaphore` (``async with``, ``acquire()``,
    ``acquire_nowait()``, ``release()``, ``locked()``, ``statistics()``); threads use
    ``sem.blocking`` (`BlockingSharedSemaphore`: ``threading.Semaphore``'s ``acquire``,
    ``release`` and ``with``). No Portal is needed. Guarantees (module docstring):

    - One strict FIFO for threads and tasks: a newcomer never takes a permit while anyone waits;
      permits are granted in arrival order, a release hands its permit to the head directly.
    - Nothing lost: a task claimed then cancelled before it resumes passes the permit on; a
      thread whose timeout loses the race with a hand-off gets the permit (True).
    - An uncontended acquire or release never touches a loop; releasing to a parked thread
      releases that thread's own lock; to a parked task of another loop posts to that loop's
      waker (one ``call_soon_threadsafe`` per burst).
    - ``release()`` is safe from ``__del__``, weakref callbacks and signal handlers.

    Args:
        value: the initial number of permits (an int >= 0; default 1).

    Raises:
        TypeError: `value` is not an int.
        ValueError: `value` is negative.

    Example:
        >>> import asyncio, threading
        >>> sem = SharedSemaphore(1)
        >>> async def task() -> None:
        ...     async with sem:
        ...         pass
        >>> def thread() -> None:
        ...     with sem.blocking:
        ...         pass
        >>> workers = [threading.Thread(target=thread) for _ in range(3)]
        >>> for t in workers:
        ...     t.start()
        >>> asyncio.run(task())
        >>> for t in workers:
        ...     t.join()
        >>> print(sem)  # doctest: +ELLIPSIS
        <...SharedSemaphore object at 0x... [unlocked, value:1]>
    """

    __slots__ = ()

    def __init__(self, value: int = 1) -> None:
        self._setup(_check_value(value, type(self).__name__), None)
        self._blocking = BlockingSharedSemaphore(self)

    @property
    def blocking(self) -> BlockingSharedSemaphore:
        """The thread-side view: ``threading.Semaphore``'s acquire/release/with."""
        return self._blocking  # type: ignore[return-value]

    def locked(self) -> bool:
        """True if ``acquire()`` would wait now: no permit is free (a snapshot)."""
        return not self._value

    def release(self) -> None:
        """Return a permit: hand it to the longest waiter (thread or task), or free it.

        Never blocks for long, never yields; safe from finalizers and signal handlers (a call
        made while this thread is inside the primitive is applied as that section ends).
        """
        self._release()

    def statistics(self) -> SemaphoreStatistics:
        """A frozen snapshot: free value, level, waiting, woken and locked."""
        value, woken = self._value, self._woken_now()
        return SemaphoreStatistics(value=value, level=value + woken, waiting=self._waiting(),
                                   woken=woken, locked=not value)

    def _format(self) -> str:
        value = self._value
        return self._line_state(f"unlocked, value:{value}" if value else "locked")


@final
class SharedBoundedSemaphore(SharedSemaphore):
    """A `SharedSemaphore` that refuses to be released more often than acquired.

    As `executors.aio.BoundedSemaphore`: the permits not held by a resumed task or a thread
    (free plus handed to woken tasks) never exceed the initial value; an over-release raises
    ValueError and changes nothing (from either side). An over-release deferred because it was
    made re-entrantly (see `SharedSemaphore.release`) is reported through
    ``sys.unraisablehook``.

    Example:
        >>> sem = SharedBoundedSemaphore(1)
        >>> sem.blocking.acquire()
        True
        >>> sem.release()
        >>> sem.release()
        Traceback (most recent call last):
          ...
        ValueError: SharedBoundedSemaphore released too many times
    """

    __slots__ = ()

    def _check_release_locked(self, n: int) -> None:
        bound = self._bound
        assert bound is not None
        if self._value + self._woken + n > bound:
            raise ValueError(f"{type(self).__name__} released too many times")

    def __init__(self, value: int = 1) -> None:
        super().__init__(value)
        self._bound = self._value


@final
class SharedLock(_SharedPermits):
    """A fair mutual-exclusion lock shared by plain threads and tasks of any event loop.

    Tasks use it as `executors.aio.Lock` (``async with``, ``acquire()``, ``acquire_nowait()``,
    ``release()``, ``locked()``, ``statistics()``); threads use ``lock.blocking``
    (`BlockingSharedLock`: ``threading.Lock``'s API). Not owned (any party may release it). FIFO
    with direct hand-off, shared by threads and tasks; the guarantees of `SharedSemaphore`.

    Example:
        >>> lock = SharedLock()
        >>> with lock.blocking:
        ...     print(lock.locked())
        True
        >>> print(lock)  # doctest: +ELLIPSIS
        <...SharedLock object at 0x... [unlocked]>
    """

    __slots__ = ()

    def __init__(self) -> None:
        self._setup(1, 1)
        self._blocking = BlockingSharedLock(self)

    @property
    def blocking(self) -> BlockingSharedLock:
        """The thread-side view: ``threading.Lock``'s acquire/release/locked/with."""
        return self._blocking  # type: ignore[return-value]

    def _check_release_locked(self, n: int) -> None:
        if self._value or self._woken:
            raise RuntimeError("Lock is not acquired.")

    def locked(self) -> bool:
        """True while the lock is held, or handed to a task that has not resumed yet."""
        return not self._value

    def release(self) -> None:
        """Release the lock, handing it to the longest waiter (thread or task) if any.

        Raises:
            RuntimeError: the lock is not acquired (a re-entrant call is checked when it is
                applied and reported through ``sys.unraisablehook``).
        """
        self._release()

    def statistics(self) -> LockStatistics:
        """A frozen snapshot: locked, waiting and woken."""
        return LockStatistics(locked=not self._value, waiting=self._waiting(),
                              woken=self._woken_now())

    def _format(self) -> str:
        return self._line_state("locked" if not self._value else "unlocked")


# -- thread-side views ---------------------------------------------------------------------


class _BlockingSharedPermits:
    __slots__ = ("__weakref__", "_permits")

    def __init__(self, permits: _SharedPermits) -> None:
        self._permits = permits

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take a permit; True if taken (``threading.Semaphore.acquire`` semantics, FIFO).

        Blocking, the thread joins the primitive's one FIFO behind every waiting thread and
        task and blocks on its own lock (no CPU, no loop). With `timeout` it gives up after that
        many seconds and returns False; a permit handed over at the same moment is kept (True).
        Non-blocking (``blocking=False`` or ``timeout=0``) it takes a permit only if one is free
        (then nobody waits). A timeout above ``threading.TIMEOUT_MAX`` waits without limit.

        Raises:
            ValueError: a timeout with ``blocking=False`` (as threading), or a negative one.
            TypeError: `timeout` is not a number.
            RuntimeError: called re-entrantly (from a finalizer or signal handler) on a thread
                that is inside this primitive.
        """
        if timeout is None:
            return self._permits._acquire_thread(blocking, None)
        if not blocking:
            raise ValueError("can't specify a timeout for a non-blocking call")
        seconds = validate.timeout(timeout)
        if seconds is not None and seconds > threading.TIMEOUT_MAX:
            seconds = None
        return self._permits._acquire_thread(blocking, seconds)

    def locked(self) -> bool:
        """True if an acquire would wait now (a snapshot)."""
        return not self._permits._value

    def __enter__(self) -> Self:
        self._permits._acquire_thread(True, None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._permits._release()

    def __repr__(self) -> str:
        state = "locked" if not self._permits._value else "unlocked"
        return f"<{state} {type(self).__name__} object at {id(self):#x} of {self._permits!r}>"


@final
class BlockingSharedSemaphore(_BlockingSharedPermits):
    """The thread side of a `SharedSemaphore` (``sem.blocking``): ``threading.Semaphore``'s API.

    Example:
        >>> sem = SharedSemaphore(2)
        >>> with sem.blocking:
        ...     print(sem.blocking.acquire(timeout=0.01), sem.blocking.acquire(blocking=False))
        True False
    """

    __slots__ = ()

    def release(self, n: int = 1) -> None:
        """Return `n` permits, handing them to the longest waiters (threads or tasks).

        Raises:
            ValueError: `n` < 1, or a `SharedBoundedSemaphore` released too many times.
        """
        n = validate.count(n, "n")
        self._permits._release(n)


@final
class BlockingSharedLock(_BlockingSharedPermits):
    """The thread side of a `SharedLock` (``lock.blocking``): ``threading.Lock``'s API.

    Example:
        >>> lock = SharedLock()
        >>> print(lock.blocking.acquire(), lock.blocking.acquire(blocking=False))
        True False
        >>> lock.blocking.release()
    """

    __slots__ = ()

    def release(self) -> None:
        """Release the lock, handing it to the longest waiter (thread or task).

        Raises:
            RuntimeError: the lock is not acquired.
        """
        self._permits._release()


# -- fork ----------------------------------------------------------------------------------


@final
class _Fork:
    """The forking thread's running loop, read before the fork: on 3.12+ asyncio's own
    after-fork hook forgets the running loop in the child, and the child keeps only the tasks
    of that loop."""

    loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def before(cls) -> None:
        cls.loop = running_loop()

    @classmethod
    def after_in_parent(cls) -> None:
        cls.loop = None

    @classmethod
    def after_in_child(cls) -> None:
        loop, cls.loop = cls.loop, None
        for permits in list(_live):
            permits._after_fork_in_child(loop)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_Fork.before, after_in_parent=_Fork.after_in_parent,
                        after_in_child=_Fork.after_in_child)
