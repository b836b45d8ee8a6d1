"""Waiters and the FIFO they park in: the internal protocol shared by every aio primitive.

The model (the "host" of the restaurant): a primitive keeps its state on its event loop's thread
and parks whoever must wait as a *waiter* in a FIFO. Every state change is an atomic section
(a plain ``def``, see `atomic`). The protocol is small so that parties other than tasks can park
in the same FIFO: the bridge (`integrations.bridge`) enqueues *thread waiters*, so threads and
tasks share one queue and one order.

Protocol, for a primitive:

- Park: create a waiter (a `TaskWaiter` around a future of the running loop, or another
  `Waiter`), ``queue.append(waiter)``, then wait for it in the waiter's own way.
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
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterator
from typing import ClassVar, Generic, TypeVar

from ._atomic import atomic

__all__ = ("Waiter", "TaskWaiter", "WaiterQueue")

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


W = TypeVar("W")


class WaiterQueue(Generic[W]):
    """A FIFO of waiters (or registrations) with O(1) append, popleft and discard.

    Built on an `OrderedDict` (a C hash table threaded on a linked list): removing a cancelled
    waiter from the middle costs O(1), where asyncio's `deque.remove` costs O(n) (cancelling
    16,000 queued waiters takes about 2 s in asyncio, anyio and aiologic).
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: OrderedDict[W, None] = OrderedDict()

    def append(self, waiter: W) -> None:
        self._items[waiter] = None

    def popleft(self) -> W:
        """Remove and return the head. Raises IndexError when empty."""
        try:
            return self._items.popitem(last=False)[0]
        except KeyError:
            raise IndexError("popleft from an empty WaiterQueue") from None

    def peek(self) -> W:
        """The head, without removing it. Raises IndexError when empty."""
        for waiter in self._items:
            return waiter
        raise IndexError("peek into an empty WaiterQueue")

    def discard(self, waiter: W) -> bool:
        """Remove `waiter` wherever it is; True if it was queued."""
        return self._items.pop(waiter, _MISSING) is not _MISSING

    def __contains__(self, waiter: object) -> bool:
        return waiter in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[W]:
        return iter(list(self._items))

    def __repr__(self) -> str:
        return f"<WaiterQueue len={len(self._items)}>"


_MISSING: object = object()
