"""Resolve asyncio futures from any thread: one waker per loop, one loop wake-up per burst.

The shared primitives (`SharedChannel`, `SharedSemaphore`, ...) keep their state behind their own
mutex, so a thread completes a hand-off to a parked task by itself; only the *resumption* of that
task must run on the task's loop (an asyncio future is resolved on its own loop's thread, never
elsewhere). `LoopWaker.post` queues that resumption in the loop's open *batch*: the first post of
a burst makes a batch and schedules it with one ``call_soon_threadsafe``; the posts that follow
before it runs are plain appends, so a thread handing 64 values to 64 parked tasks of one loop
wakes that loop once (culsans and aiologic pay one ``call_soon_threadsafe`` per waiter;
research/bridge_shared_state.md).

**What a closing loop was handed goes back.** A loop that stops and is then closed (the ending
``call_soon_threadsafe(loop.stop)``, join, ``loop.close()``) drops its ready queue and its
timers: a batch posted between ``stop`` and ``close``, and the wake-up of a task whose future
was resolved in the loop's last iteration, never run. asyncio has no close hook, but a loop
lets go of the callbacks it drops. So each loop where an owned task waiter parks gets one
*sentinel*: a timer due in 30 years whose object holds the loop's *owed* set (the task waiters
handed a value or permit they have not consumed yet, see `_shared_waiter`). When the loop is
closed (or collected unclosed) it drops the timer, the sentinel's ``__del__`` runs, and every
owed waiter goes to its *owner* (the primitive it parked in), which hands the value or permit
to the next party exactly as if the task had been cancelled before it resumed. So nothing a
task was handed waits for the task's coroutine to be collected (or forever, if it never is).

**Nothing here keeps a loop alive.** The table maps each loop (weakly) to its waker; a waker
holds its loop weakly and its open batch weakly: a batch is owned by the loop's ready queue. The
"last waker" cache holds a waker, which holds nothing. So a loop, its tasks and what they were
handed are collectable as soon as the loop is closed (or unreachable).

**Ctrl-C.** ``call_soon_threadsafe`` is Python code on asyncio's loop (and writes to a socket,
releasing the GIL), so a signal handler may raise inside it. `post` then forgets the batch it
was scheduling before the exception leaves (no checkpoint between the ``except`` and that
store), so the next post schedules a new one: the waker is never wedged on a batch that was not
queued. The caller retries the post (`wake_or_hold` in `_shared_waiter`); a batch that was queued
after all runs too (a second resumption of a resolved future is a no-op), and one that was not
re-posts its waiters when it is dropped.

Atomic operations relied on (no reliance on the GIL beyond these): ``collections.deque.append``
and ``popleft`` (documented thread-safe), reading or writing one attribute, and calling a
weak reference. A poster appends to the open batch and then checks that it is still the open
one: the batch forgets itself as the open batch *before* draining, so an append seen as still
open is drained, and one that is not re-posts in a new batch (a duplicate resumption is a
no-op).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from ._shared_waiter import SharedTaskWaiter

__all__ = ("LoopWaker", "waker_for", "owed_set", "running_loop", "last_waker")


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
class _Batch:
    """The resumptions of one burst: scheduled once on the loop, run once, or handed back."""

    __slots__ = ("__weakref__", "items", "ran", "waker")

    def __init__(self, waker: LoopWaker, first: SharedTaskWaiter) -> None:
        # `ran` is set last: a signal handler raising inside this __init__ (at its first
        # instruction, or at the return of deque()) makes `post` raise before the batch is
        # used, and its __del__ then finds no `ran` (nothing to do).
        self.waker = waker
        self.items: deque[SharedTaskWaiter] = deque((first,))
        self.ran = False

    def __call__(self) -> None:
        # On the loop's thread. Stop being the open batch before draining: a racing post either
        # appends before the drain ends (and is drained here) or sees that and posts again.
        self.ran = True
        waker = self.waker
        if waker._open is not None and waker._open() is self:
            waker._open = None
        items = self.items
        while items:
            future = items.popleft().future
            if not future.done():  # cancelled meanwhile: the task's leave section hands back
                future.set_result(None)

    def __del__(self) -> None:
        # The loop let go of the batch. Run: nothing to do. Never ran: its loop closed or was
        # collected (hand back: the sentinel does too, each value goes back once), or a signal
        # handler's exception left call_soon_threadsafe before it queued the batch (the loop
        # lives on: post the waiters again).
        if getattr(self, "ran", True) or not self.items:
            return  # ran, or never fully made (see __init__)
        loop = self.waker._loop_ref()
        if loop is None or loop.is_closed():
            _hand_back_all(self.items)
        else:
            _repost_all(self.waker, self.items)


def _hand_back_all(items: deque[SharedTaskWaiter]) -> None:
    while items:
        waiter = items.popleft()
        waiter.lost()


def _repost_all(waker: LoopWaker, items: deque[SharedTaskWaiter]) -> None:
    # From __del__: an exception cannot leave, so a second Ctrl-C must not lose the rest.
    while items:
        waiter = items[0]
        try:
            if not waker.post(waiter):
                waiter.lost()
        except BaseException:  # retried: the wake-up must happen
            continue
        del items[0]


@final
class _Sentinel:
    """A timer parked in a loop for its lifetime; dropped when the loop closes (see above)."""

    __slots__ = ("__weakref__", "owed")

    def __init__(self) -> None:
        # A dict used as a set: a take records with an item store, which has no checkpoint
        # (see SharedTaskWaiter.take).
        self.owed: dict[SharedTaskWaiter, None] = {}

    def __call__(self) -> None:
        pass  # due after 30 years of running: a loop that runs that long closes some day too

    def __del__(self) -> None:
        owed = self.owed
        while owed:
            try:
                waiter, _ = owed.popitem()
            except KeyError:  # emptied by a racing consume
                return
            waiter.lost()


#: A sentinel's delay: long, but well inside every loop's timer range.
_SENTINEL_DELAY: Final = 30 * 365 * 86400.0


def owed_set(waker: LoopWaker, loop: asyncio.AbstractEventLoop
             ) -> dict[SharedTaskWaiter, None]:
    """The owed set of `loop` (on its thread: its sentinel timer is made on first use)."""
    ref = waker._sentinel
    sentinel = ref() if ref is not None else None
    if sentinel is None:
        sentinel = _Sentinel()
        loop.call_later(_SENTINEL_DELAY, sentinel)  # the loop alone keeps it alive
        waker._sentinel = weakref.ref(sentinel)
    return sentinel.owed


@final
class LoopWaker:
    """The resumptions queued for one event loop's thread (see the module docstring)."""

    __slots__ = ("__weakref__", "_loop_ref", "_open", "_sentinel")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: `_wakers` maps each loop (weakly) to its waker, so a strong reference here
        # would keep every loop that ever parked a task alive for good.
        self._loop_ref: Final = weakref.ref(loop)
        self._open: weakref.ref[_Batch] | None = None
        self._sentinel: weakref.ref[_Sentinel] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop, or None once it has been collected."""
        return self._loop_ref()

    def post(self, waiter: SharedTaskWaiter) -> bool:
        """Resolve ``waiter.future`` on the loop's thread soon; from any thread, without a lock.

        Returns False when the loop is closed (nothing will run): the caller then treats the
        waiter it meant to resume as dead and serves the next party. A waiter whose post
        returned True is resumed, or handed back to its owner if the loop closes first.
        Posting a waiter twice is harmless. Safe from ``__del__``, weakref callbacks and signal
        handlers (no lock is taken here). An exception raised meanwhile by a signal handler
        propagates and leaves the waker usable; the caller posts again (see `wake_or_hold`).
        """
        loop = self._loop_ref()
        if loop is None or loop.is_closed():
            return False
        ref = self._open
        if ref is not None:
            batch = ref()
            if batch is not None:
                batch.items.append(waiter)
                if self._open is ref:
                    return True
                # That batch started draining meanwhile: post again (a no-op if it was drained).
        batch = _Batch(self, waiter)
        self._open = weakref.ref(batch)
        try:
            loop.call_soon_threadsafe(batch)
        except RuntimeError:  # the loop closed meanwhile: nothing queued here will ever run
            self._forget(batch)
            batch.items.popleft()  # ours: the caller serves the next party
            _hand_back_all(batch.items)  # posted by others into this batch meanwhile
            return False
        except BaseException:
            # A signal handler's exception (Ctrl-C): whether or not the batch was queued, the
            # next post must schedule a new one. No checkpoint before this store.
            self._open = None
            raise
        return True

    def _forget(self, batch: _Batch) -> None:
        ref = self._open
        if ref is not None and ref() is batch:
            self._open = None
        batch.ran = True  # nothing for its __del__ to do: handled here

    def __repr__(self) -> str:
        ref = self._open
        batch = ref() if ref is not None else None
        pending = len(batch.items) if batch is not None else 0
        return f"<LoopWaker loop={self._loop_ref()!r} pending={pending}>"


_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWaker] = (
    weakref.WeakKeyDictionary()
)
_wakers_lock = threading.Lock()
#: The waker last looked up (any thread's). A waker holds its loop and its batch weakly, so this
#: keeps nothing alive; a stale entry only misses (its loop is another one, or collected).
last_waker: list[LoopWaker | None] = [None]


def waker_for(loop: asyncio.AbstractEventLoop) -> LoopWaker:
    """The one `LoopWaker` of `loop` (made on first use; it dies with the loop, which it
    references only weakly).

    Call it on the loop's own thread when a task parks, and keep the result on the waiter: the
    thread that later resumes the task then needs no lookup.
    """
    last = last_waker[0]  # one attribute read: the common case is one loop parking over and over
    if last is not None and last._loop_ref() is loop:
        return last
    waker = _wakers.get(loop)  # a WeakKeyDictionary lookup makes a weakref per call
    if waker is None:
        with _wakers_lock:
            waker = _wakers.get(loop)
            if waker is None:
                waker = _wakers[loop] = LoopWaker(loop)
    last_waker[0] = waker
    return waker
