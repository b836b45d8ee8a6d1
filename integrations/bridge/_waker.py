"""Resolve asyncio futures from any thread: one waker per loop, one loop wake-up per burst.

The shared primitives (`SharedChannel`, `SharedSemaphore`, ...) keep their state behind their own
mutex, so a thread completes a hand-off to a parked task by itself; only the *resumption* of that
task must run on the task's loop (an asyncio future is resolved on its own loop's thread, never
elsewhere). `LoopWaker.post` queues that resumption. The first post of a burst schedules one
`call_soon_threadsafe(flush)`; the posts that follow before the flush runs are plain appends, so
a thread handing 64 values to 64 parked tasks of one loop wakes that loop once (culsans and
aiologic pay one `call_soon_threadsafe` per waiter; research/bridge_shared_state.md).

Atomic operations relied on (the module does not rely on the GIL beyond these):
``collections.deque.append``/``popleft`` (documented thread-safe), and reading or writing one
attribute. The ``_scheduled`` flag may be seen stale by a racing poster: the flush clears it
*before* draining, so a post that reads the flag as set has appended before the drain began and
is drained by it; two posters that both read it clear schedule two flushes (harmless: the second
finds nothing).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Final, final

__all__ = ("LoopWaker", "waker_for", "running_loop")


def _running_loop_or_none() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


#: The running loop of this thread, or None: no exception on the hot path of a hand-off.
#: ``asyncio._get_running_loop`` is private but exported in ``asyncio.events.__all__`` for
#: third-party loops (uvloop calls it); where it is absent, the public call stands in.
running_loop: Callable[[], asyncio.AbstractEventLoop | None] = getattr(
    asyncio, "_get_running_loop", _running_loop_or_none)


@final
class LoopWaker:
    """The resumptions queued for one event loop's thread (see the module docstring)."""

    __slots__ = ("__weakref__", "_loop_ref", "_pending", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: `_wakers` maps each loop (weakly) to its waker, so a strong reference here
        # would keep every loop that ever parked a task alive for good.
        self._loop_ref: Final = weakref.ref(loop)
        self._pending: deque[tuple[Callable[[object], object], object]] = deque()
        self._scheduled = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop, or None once it has been collected."""
        return self._loop_ref()

    def post(self, fn: Callable[[object], object], arg: object) -> bool:
        """Run ``fn(arg)`` on the loop's thread soon; from any thread, without a lock.

        Returns False when the loop is closed (nothing will run): the caller then treats the
        waiter it meant to resume as dead and serves the next party.
        Safe from ``__del__``, weakref callbacks and signal handlers (no lock is taken here;
        ``call_soon_threadsafe`` writes to the loop's self-pipe).
        """
        loop = self._loop_ref()
        if loop is None or loop.is_closed():
            return False
        self._pending.append((fn, arg))
        if self._scheduled:
            return True
        self._scheduled = True
        try:
            loop.call_soon_threadsafe(self._flush)
        except RuntimeError:  # the loop is closed: nothing queued here will ever run
            self._scheduled = False
            self._pending.clear()
            return False
        return True

    def _flush(self) -> None:
        # Clear the flag before draining: a racing post either lands before the drain ends (and is
        # drained here) or sees the flag clear and schedules another flush.
        self._scheduled = False
        pending = self._pending
        while pending:
            fn, arg = pending.popleft()
            fn(arg)

    def __repr__(self) -> str:
        return f"<LoopWaker loop={self._loop_ref()!r} pending={len(self._pending)}>"


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = (
    weakref.WeakKeyDictionary()
)
_wakers_lock = threading.Lock()
#: The waker last looked up (any thread's). It holds its loop weakly, so it keeps nothing alive;
#: a stale entry only misses (its loop is another one, or collected: the reference reads None).
_last: list[LoopWaker | None] = [None]


def waker_for(loop: asyncio.AbstractEventLoop) -> LoopWaker:
    """The one `LoopWaker` of `loop` (made on first use; it dies with the loop, which it
    references only weakly).

    Call it on the loop's own thread when a task parks, and keep the result on the waiter: the
    thread that later resumes the task then needs no lookup.
    """
    last = _last[0]  # one attribute read: the common case is one loop parking over and over
    if last is not None and last._loop_ref() is loop:
        return last
    waker = _wakers.get(loop)  # a WeakKeyDictionary lookup makes a weakref per call
    if waker is None:
        with _wakers_lock:
            waker = _wakers.get(loop)
            if waker is None:
                waker = _wakers[loop] = LoopWaker(loop)
    _last[0] = waker
    return waker
