"""Waiters and the FIFO they park in: the internal protocol shared by every aio primitive.

The model (the "host" of the restaurant): a primitive keeps its state on its event loop's thread
and parks whoever must wait as a *waiter* in a FIFO. Every state change is an atomic section
(a plain ``def``, see `atomic`). The protocol is small so that parties other than tasks can park
in the same FIFO: the bridge (`integrations.bridge`) enqueues *thread waiters*, so threads and
tasks share one queue and one order.

Protocol, for a primitive:

- Park: create a waiter (a `TaskWaiter` around a future of the running loop, or another
  `Waiter`), ``queue.append(waiter)``, then wait for it in the waiter's own way. (`aio.locks`
  enters its own tasks as their bare futures, recognised by exact type on its hot paths: a
  primitive's line may hold such entries besides `Waiter` objects.)
- Wake: in an atomic section on the loop thread, take waiters from the head with
  ``queue.popleft()`` and call ``waiter.try_wake(value)``. It returns False if the waiter no longer
  wants the value (cancelled, timed out, or a select already completed through another
  registration); the primitive then tries the next one. It returns True if the waiter now owns
  the value: the hand-off happened and cannot be undone by the primitive.
- Leave: a waiter that gives up calls ``queue.discard(waiter)`` (O(1)) in an atomic section on the
  loop thread. A waiter that was woken (``try_wake`` returned True) and is then cancelled before
  it used the value must hand it back to the primitive, which passes it on.

For a waiter implementation:

- ``try_wake`` runs on the loop thread and must not block; it is the single linearization point
  of a hand-off. A thread waiter resolves its race with a timeout by a short lock of its own: the
  first of "woken" and "timed out" to take it wins.
- A task cancelled after its operation's point of no return (the hand-off happened) returns
  the operation's result and defers the cancellation to its next await (`defer_cancel`).
- A fast path that needs no wait returns `READY`, an awaitable that completes at once.
- A channel parks one registration per operation (``channels._Registration``: the waiter, the
  line, the select case); the bridge's select across shared and aio channels parks the same
  records in an aio channel's line, so both kinds of channel serve one select once.
"""

from __future__ import annotations

import asyncio
import types
from collections import deque
from collections.abc import Awaitable, Generator, Iterator
from typing import ClassVar, Final, Generic, TypeVar, cast

from ._atomic import atomic
from ._cancel import defer_cancel as defer_cancel

__all__ = ("Waiter", "TaskWaiter", "WaiterQueue", "bind_loop", "defer_cancel", "READY")

T = TypeVar("T")


class Waiter:
    """A party parked in a primitive's FIFO. Hashable by identity."""

    __slots__ = ("__weakref__",)

    #: Whether a waiter that took a value (``try_wake`` returned True) must still *resume* on the
    #: loop before it owns the value. True for tasks: the wake-up is a scheduled callback, and a
    #: task cancelled before it runs must hand the value back (python/asyncio#270, gh-90155); a
    #: primitive counts such waiters as "woken, not resumed" until they do either. False (the
    #: default) when ``try_wake`` returning True completes the hand-off, as for a thread waiter
    #: that won the race against its own timeout.
    resumes_on_loop: ClassVar[bool] = False

    def try_wake(self, value: object) -> bool:
        """Hand `value` to the waiter if it still waits; True if it took it. Loop thread only."""
        raise NotImplementedError

    @property
    def waiting(self) -> bool:
        """True until the waiter is woken, cancelled or abandoned."""
        raise NotImplementedError


class TaskWaiter(Waiter):
    """A task's waiter: a future on the primitive's loop, resolved with the handed value."""

    __slots__ = ("future",)

    resumes_on_loop: ClassVar[bool] = True

    def __init__(self, future: asyncio.Future[object]) -> None:
        self.future = future

    @atomic
    def try_wake(self, value: object) -> bool:
        if self.future.done():
            return False
        self.future.set_result(value)
        return True

    @property
    def waiting(self) -> bool:
        return not self.future.done()


def bind_loop(
    primitive: object,
    bound: asyncio.AbstractEventLoop | None,
    loop: asyncio.AbstractEventLoop,
    busy: bool,
    shared: str,
) -> asyncio.AbstractEventLoop:
    """The event loop `primitive` is bound to once a party of `loop` parks on it; or raise.

    A loop-only primitive hands values over by resolving its waiters' futures in its atomic
    sections. A future of another loop, resolved from that other loop's thread, never wakes
    its task (its loop is not told): a silent hang. So a primitive is bound to the loop of the
    parties that wait on it, and a party of another loop that would park raises, as asyncio's
    primitives do (`asyncio.mixins._LoopBoundMixin._get_loop`, reached only from the waiting
    path: the uncontended path pays nothing). Unlike asyncio's, the binding lasts only while the
    primitive is `busy` (parties of `bound` parked, or woken and not resumed) and `bound` is
    open: once idle, the primitive serves another loop (successive ``asyncio.run`` calls).

    Args:
        primitive: for the message.
        bound: the loop bound last (None if never).
        loop: the running loop of the party about to park.
        busy: whether parties of `bound` are parked or woken now.
        shared: the name in `integrations.bridge` of the primitive to use across loops.

    Raises:
        RuntimeError: `busy` on another, still open, loop ("... is bound to a different event
            loop", asyncio's words), naming `shared`.
    """
    if bound is not None and bound is not loop and busy and not bound.is_closed():
        raise RuntimeError(
            f"{primitive!r} is bound to a different event loop: parties of {bound!r} wait on "
            "it. A loop-only primitive serves one event loop at a time; to share one between "
            f"event loops or threads use integrations.bridge.{shared}"
        )
    return loop


W = TypeVar("W")


class WaiterQueue(Generic[W]):
    """A FIFO of waiters (or registrations) with O(1) append, popleft and discard.

    A `deque` in arrival order plus the set of waiters still queued. ``discard`` only removes the
    waiter from the set and leaves a *tombstone* in the deque, which ``popleft`` and ``peek`` skip
    when they reach it; the deque is compacted (in place, O(n)) once tombstones outnumber the
    live entries, so discards stay O(1) amortized and memory stays O(live). Removing a cancelled
    waiter from the middle thus costs O(1), where asyncio's `deque.remove` costs O(n) (cancelling
    16,000 queued waiters takes about 2 s in asyncio, anyio and aiologic). An append and a
    popleft cost a deque and a set operation each: a fraction of an `OrderedDict` insert and
    ``popitem(last=False)``, which this structure replaced on the primitives' hot paths.

    Appending a waiter that is already queued changes nothing (it keeps its place). A discarded
    waiter may be appended again: it then queues at the tail.
    """

    __slots__ = ("_items", "_stale", "live")

    #: Compact only past this many tombstones (small lines are never worth it).
    _COMPACT_MIN: ClassVar[int] = 64

    def __init__(self) -> None:
        # Arrival order, live entries and tombstones. Every entry of a waiter but its newest is a
        # tombstone, and so is the newest if the waiter is not in `live`: so, walking from the
        # head, a waiter's first _stale[waiter] entries are its tombstones.
        self._items: deque[W] = deque()
        #: The set of queued (live) waiters, in no order. Part of the protocol, read-only: a
        #: primitive may test it (``if queue.live``, ``waiter in queue.live``) where a call of
        #: ``__bool__``/``__contains__`` would cost too much on its hot path (aio.locks keeps
        #: a reference to it), but must never change it. Never replaced, only mutated in place.
        self.live: set[W] = set()
        self._stale: dict[W, int] = {}  # tombstones per waiter, for waiters that have any

    def append(self, waiter: W) -> None:
        queued = self.live
        if waiter not in queued:
            queued.add(waiter)
            self._items.append(waiter)

    def popleft(self) -> W:
        """Remove and return the head. Raises IndexError when empty."""
        items = self._items
        stale = self._stale
        while items:
            waiter = items.popleft()
            if stale and waiter in stale:
                self._bury(waiter)
                continue
            self.live.discard(waiter)
            return waiter
        raise IndexError("popleft from an empty WaiterQueue")

    def peek(self) -> W:
        """The head, without removing it. Raises IndexError when empty."""
        items = self._items
        stale = self._stale
        while items:
            waiter = items[0]
            if stale and waiter in stale:
                items.popleft()  # a tombstone at the head: drop it now
                self._bury(waiter)
                continue
            return waiter
        raise IndexError("peek into an empty WaiterQueue")

    def discard(self, waiter: W) -> bool:
        """Remove `waiter` wherever it is; True if it was queued. O(1) amortized."""
        queued = self.live
        if waiter not in queued:
            return False
        queued.discard(waiter)
        stale = self._stale
        stale[waiter] = stale.get(waiter, 0) + 1
        items = self._items
        if len(items) > self._COMPACT_MIN and len(items) > 2 * len(queued):
            self._compact()
        return True

    def _bury(self, waiter: W) -> None:
        """Forget one tombstone of `waiter` (just removed from the deque)."""
        stale = self._stale
        left = stale[waiter] - 1
        if left:
            stale[waiter] = left
        else:
            del stale[waiter]

    def _compact(self) -> None:
        # In place: `live` and the deque are never replaced (aio.locks keeps a reference to both).
        items = self._items
        stale = self._stale
        queued = self.live
        live: list[W]
        if queued.isdisjoint(stale):
            # The usual case: no waiter with tombstones is queued again, so every entry of a
            # waiter in _stale is a tombstone, and every other entry is live (a waiter without
            # tombstones has at most one entry, live as long as it is queued). A filter in C,
            # not a Python loop: cancelling many waiters compacts often.
            live = list(filter(queued.__contains__, items))
            stale.clear()
        else:
            live = []
            for waiter in items:
                if waiter in stale:
                    self._bury(waiter)
                else:
                    live.append(waiter)
        items.clear()
        items.extend(live)

    def __contains__(self, waiter: object) -> bool:
        return waiter in self.live

    def __len__(self) -> int:
        return len(self.live)

    def __bool__(self) -> bool:
        return bool(self.live)

    def __iter__(self) -> Iterator[W]:
        """The queued waiters in FIFO order, as a snapshot."""
        stale = dict(self._stale)
        live: list[W] = []
        for waiter in self._items:
            left = stale.get(waiter)
            if left:
                stale[waiter] = left - 1
            else:
                live.append(waiter)
        return iter(live)

    def __repr__(self) -> str:
        return f"<WaiterQueue len={len(self.live)}>"


@types.coroutine
def _ready() -> Generator[None, None, None]:
    return
    yield  # a generator function; types.coroutine makes its generators awaitable


READY: Final = cast("Awaitable[None]", _ready())
"""An awaitable that completes at once with None, without yielding, reusable by any task.

A generator-based coroutine (types.coroutine), run to exhaustion below: ``await READY`` is
``yield from`` an exhausted generator, which returns None at once (an exhausted generator
only raises StopIteration). Returned by the plain-function ``__aenter__``/``__aexit__`` fast
paths. Cheaper than a new coroutine and than an ``__await__`` defined in Python: the await is
a C call on the generator itself (callgrind, CPython 3.11: about 500 instructions, against
about 1,000 for awaiting a fresh coroutine and 1,250 for a tuple subclass whose ``__await__``
is ``tuple.__iter__``).
"""
for _ in READY:  # type: ignore[attr-defined]  # exhaust it (it yields nothing)
    raise AssertionError("_ready yielded")
