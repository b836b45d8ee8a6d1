"""DeferredQueue: a FIFO that destructors may put into without a lock (`executors.deferred`)."""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
from collections.abc import Callable
from typing import Generic, TypeVar, final

from . import _validate

__all__ = ("DeferredQueue", "DeferredQueueStatistics")

T = TypeVar("T")


class _Counter:
    """A counter whose increment is one C call (``next`` on ``itertools.count``).

    ``self.n += 1`` is a read-modify-write of three bytecodes: two threads (or a destructor that
    interrupts its own thread) can lose an increment. ``next(count)`` is atomic under the GIL
    and takes no lock, so it may be called from ``__del__`` and weakref callbacks. Reading the
    value parses ``repr(count)`` ("count(5)"): the supported way to peek without consuming.
    """

    __slots__ = ("_count",)

    def __init__(self) -> None:
        self._count = itertools.count()

    def incr(self) -> None:
        next(self._count)

    @property
    def value(self) -> int:
        return int(repr(self._count)[6:-1])


@dataclasses.dataclass(frozen=True)
class DeferredQueueStatistics:
    """A snapshot of a `DeferredQueue` (see `DeferredQueue.statistics`)."""

    #: Items waiting to be drained.
    pending: int
    #: Items `put` accepted since the queue was made (or since a fork).
    accepted: int
    #: Items `drain` has handed out.
    drained: int
    #: Items `put` refused: the queue was full (`max_pending`) or closed.
    dropped: int
    #: The most items kept waiting (``DeferredQueue(max_pending=...)``), or None for no bound.
    max_pending: int | None
    #: True once `close` was called: later items are dropped (pending ones can still be drained).
    closed: bool


@final
class DeferredQueue(Generic[T]):
    """A FIFO that any code may `put` into, including destructors, without taking a lock.

    `put` is one ``deque.append`` plus atomic counter increments: no lock, never blocks, safe
    from ``__del__``, weakref callbacks, signal handlers and any thread (PyMongo PYTHON-799 and
    PYTHON-1272 were deadlocks of destructors that took a lock held by the thread the garbage
    collector interrupted). `drain` hands the pending items to whoever does the work that needs
    locks: a `Reaper`, or your own code.

    Bound: with `max_pending`, a `put` that finds the queue full drops the item, counts it
    (`statistics().dropped`) and returns False: a destructor must never block waiting for room.
    The check and the append are two steps, so concurrent putters may overshoot the bound by at
    most one item each.

    Counters: `accepted` and `dropped` are incremented atomically (never lost). A
    `statistics()` snapshot is read without a lock, so under concurrent puts its fields may be a
    few items apart from one another (``accepted - drained`` may briefly differ from `pending`).

    Args:
        max_pending: the most items kept waiting (an int >= 1), or None for no bound.

    Raises:
        TypeError, ValueError: `max_pending` is not an int >= 1 or None.

    Example:
        >>> q = DeferredQueue[int](max_pending=2)
        >>> q.put(1), q.put(2), q.put(3)
        (True, True, False)
        >>> q.drain()
        [1, 2]
        >>> q.statistics().dropped
        1
    """

    __slots__ = (
        "__weakref__",
        "_accepted",
        "_closed",
        "_drain_lock",
        "_drained",
        "_dropped",
        "_items",
        "_max_pending",
        "_wake",
        "_wake_sent",
        "_wake_threshold",
    )

    def __init__(self, *, max_pending: int | None = None) -> None:
        if max_pending is not None:  # None: no bound
            _validate.count(max_pending, "max_pending")
        self._max_pending = max_pending
        self._wake: Callable[[], object] | None = None
        self._wake_threshold = 1
        self._reset()

    def _reset(self) -> None:
        # Also the after-fork path: a fresh deque and lock, never the parent's (whose lock may
        # be held by a thread that does not exist in the child).
        self._items: collections.deque[T] = collections.deque()
        self._drain_lock = threading.Lock()
        self._accepted = _Counter()
        self._dropped = _Counter()
        self._drained = 0
        self._closed = False
        self._wake_sent = False

    def put(self, item: T) -> bool:
        """Enqueue `item`; False if it was dropped (queue full or closed). Takes no lock.

        Safe from ``__del__``, weakref callbacks, signal handlers and any thread. Never blocks
        and never raises because of the queue's state.
        """
        items = self._items
        limit = self._max_pending
        if self._closed or (limit is not None and len(items) >= limit):
            self._dropped.incr()
            return False
        # deque.append is a single C call: atomic under the GIL, it allocates no object the
        # cyclic GC tracks, so no destructor can run inside it (CPython documents deques as
        # supporting "thread-safe, memory efficient appends and pops from either side").
        items.append(item)
        self._accepted.incr()
        wake = self._wake
        if wake is not None and not self._wake_sent and len(items) >= self._wake_threshold:
            # Two racing putters may both wake: harmless (one extra run). drain() clears the
            # flag *before* popping, so an item put after a drain always wakes again.
            self._wake_sent = True
            wake()
        return True

    def drain(self, max_items: int | None = None) -> list[T]:
        """Remove and return the pending items, oldest first (at most `max_items`).

        Safe to call from several threads at once: each item is returned exactly once. Not for
        destructors (it takes a short lock to keep the `drained` counter exact).
        """
        if max_items is not None:  # None: all
            _validate.count(max_items, "max_items")
        self._wake_sent = False
        popleft = self._items.popleft
        out: list[T] = []
        try:
            if max_items is None:
                while True:
                    out.append(popleft())
            else:
                for _ in range(max_items):
                    out.append(popleft())  # noqa: PERF401 (IndexError ends it early)
        except IndexError:  # empty; other threads may be appending concurrently, that is fine
            pass
        with self._drain_lock:
            self._drained += len(out)
        return out

    def close(self) -> None:
        """Refuse further items: later `put` calls drop them (counted) and return False.

        Pending items stay until drained. Takes no lock.
        """
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def max_pending(self) -> int | None:
        return self._max_pending

    def __len__(self) -> int:
        return len(self._items)

    def _set_waker(self, wake: Callable[[], object] | None, threshold: int) -> None:
        """Call ``wake()`` (which must take no lock) once the queue holds `threshold` items."""
        self._wake_threshold = threshold
        self._wake = wake

    def statistics(self) -> DeferredQueueStatistics:
        """A snapshot, read without a lock (see the class docstring on its consistency)."""
        return DeferredQueueStatistics(
            pending=len(self._items),
            accepted=self._accepted.value,
            drained=self._drained,
            dropped=self._dropped.value,
            max_pending=self._max_pending,
            closed=self._closed,
        )

    def __repr__(self) -> str:
        bound = "" if self._max_pending is None else f"/{self._max_pending}"
        closed = " closed" if self._closed else ""
        dropped = self._dropped.value
        tail = f" dropped={dropped}" if dropped else ""
        return f"<DeferredQueue{closed} pending={len(self._items)}{bound}{tail}>"
