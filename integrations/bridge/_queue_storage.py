"""The storage of Queue, LifoQueue and PriorityQueue: their SharedChannel's buffer, and puts.

A `SharedChannel` uses its buffer through a few operations only (its sections never index it):
``append`` (a value put, or a parked putter's value moving in), ``popleft`` (the next value got),
``appendleft`` (a value handed back by a getter cancelled before it resumed: it is the next one
got again), ``len``, truth and ``clear``; a Queue's buffer adds `withdraw`, for a put cancelled
after its value moved in (`Withdrawable`). Each buffer here keeps its order with those
operations, so the channel's FIFO hand-off of parked parties, exactly-once delivery and
cancellation rules hold for every order.
"""

from __future__ import annotations

import bisect
from collections import deque
from typing import Any, Generic, TypeVar, final

__all__ = ("FifoBuffer", "HeapBuffer", "LifoBuffer", "Withdrawable", "unwrapped")

T = TypeVar("T")


@final
class Withdrawable(Generic[T]):
    """An item a task puts on the terms of `asyncio.Queue.put` (a parked `Queue` put).

    In asyncio's and janus's queues the put takes effect when the putter resumes; a
    `SharedChannel` moves a parked sender's value into the buffer as a slot opens (Go's
    hand-off, one strict FIFO). A put parks with its item in this wrapper, and
    `SharedChannel.send` withdraws it when the task is cancelled after the move but before any
    getter took it (the put then raises `asyncio.CancelledError` and nothing was delivered, as
    janus's); once a getter took it, the put returns (the deferred-cancellation rule). Found by
    identity (each put has its own wrapper); the Queue's gets unwrap it (`unwrapped`).
    """

    __slots__ = ("item", "withdrawn")

    def __init__(self, item: T) -> None:
        self.item = item
        self.withdrawn = False  # set under the channel's mutex when it is taken back

    def __repr__(self) -> str:
        return f"<Withdrawable {self.item!r}{' withdrawn' if self.withdrawn else ''}>"


def unwrapped(value: T | Withdrawable[T]) -> T:
    """The item itself: `value`, or the item of a `Withdrawable`."""
    return value.item if type(value) is Withdrawable else value


class FifoBuffer(deque[T]):
    """First in, first out (`Queue`): the channel's own order, plus `withdraw`."""

    __slots__ = ()

    def withdraw(self, value: object) -> bool:
        """Remove `value` (by identity: each `Withdrawable` is unique); False if absent."""
        # From the newest end: a withdrawn value moved in at most a few hand-offs ago.
        for back, item in enumerate(reversed(self)):
            if item is value:
                del self[-1 - back]
                return True
        return False


class LifoBuffer(FifoBuffer[T]):
    """Last in, first out (`LifoQueue`): the newest item is kept at the head (index 0).

    The channel's sections read the head with ``buffer[0]`` and drop it with ``del buffer[0]``
    (no Python-level call between the two: Ctrl-C cannot split them), so every order keeps its
    next item at index 0. Here both ``append`` (a put) and ``appendleft`` (a handed-back item,
    the newest one got) are the C-level `deque.appendleft`, which runs no Python code.
    """

    __slots__ = ()

    append = deque.appendleft
    appendleft = deque.appendleft


class HeapBuffer(list[Any]):
    """Lowest first (`PriorityQueue`), as `queue.PriorityQueue` and janus, equal items in put
    order: a list kept sorted, so the next item is at index 0 and ``del buffer[0]`` removes it
    in one C-level step (the channel's sections rely on that: see `LifoBuffer`).

    The items' ``<`` runs inside the queue's mutex (janus and the stdlib compare under their
    locks too): an item's comparison must not use the queue. Items are stored unwrapped (a
    `Withdrawable` put is found again by its item's identity), so they only meet each other.
    """

    __slots__ = ()

    # Any: the items only need ``<``, which the channel's item type does not promise.
    def append(self, value: Any) -> None:
        bisect.insort_right(self, unwrapped(value))

    def appendleft(self, value: Any) -> None:
        # A handed-back item was the lowest: it goes before the items equal to it.
        bisect.insort_left(self, unwrapped(value))

    def withdraw(self, value: object) -> bool:
        """Remove the item of the `Withdrawable` `value` (by identity); False if absent.

        The same object put twice is the same item twice: removing either leaves the same
        contents, so the order of what is left is the one without this put.
        """
        item = unwrapped(value)
        for index, stored in enumerate(self):
            if stored is item:
                del self[index]
                return True
        return False
