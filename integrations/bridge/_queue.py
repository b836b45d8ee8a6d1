"""Queue, LifoQueue, PriorityQueue: janus 2.0 drop-ins (``.sync_q``, ``.async_q``) on SharedChannel.

Migrating from janus is one import: ``from integrations.bridge import Queue`` where the code said
``from janus import Queue``; every other name janus exports is in `integrations.bridge` too
(its exceptions and protocols live in `_queue_protocols`).
"""

from __future__ import annotations

import asyncio
import math
import sys
import threading
from typing import Any, ClassVar, Generic, TypeVar, final

from executors.errors import ChannelClosed, WouldBlock

from ._queue_protocols import (
    AsyncQueue,
    AsyncQueueEmpty,
    AsyncQueueFull,
    AsyncQueueShutDown,
    SyncQueue,
    SyncQueueEmpty,
    SyncQueueFull,
    SyncQueueShutDown,
)
from ._queue_storage import FifoBuffer, HeapBuffer, LifoBuffer, Withdrawable, unwrapped
from ._shared_channel import SharedChannel
from ._shared_waiter import (
    _HELD,
    COMPLETED_NOTE,
    THREAD,
    SharedTaskWaiter,
    SharedThreadWaiter,
    SharedWaiter,
    finish,
)

__all__ = (
    "Queue",
    "LifoQueue",
    "PriorityQueue",
    "SyncQueueProxy",
    "AsyncQueueProxy",
)

T = TypeVar("T")


class Queue(Generic[T]):
    """A FIFO queue for threads (`sync_q`) and tasks (`async_q`) with janus 2.0's API.

    Built on `SharedChannel`: one mutex, direct hand-off, one strict FIFO for threads and tasks
    (janus serves its sync and async sides from two sets of condition variables, where a
    newcomer may overtake a woken waiter), a thread never touches the loop unless a parked task
    must be resumed.

    Where janus's semantics are weaker than `SharedChannel`'s, the facade follows janus:

    - ``maxsize <= 0`` means unbounded (a channel's 0 is a rendezvous).
    - The async side binds to the first event loop that uses it and raises `RuntimeError` on
      another (`SharedChannel` itself serves tasks of any loop).
    - `close()` is janus's ``shutdown(immediate=True)``: the queued items are discarded, then
      every put and get raises ``SyncQueueShutDown``/``AsyncQueueShutDown``. ``shutdown()``
      (not immediate) lets gets drain the items first.
    - `qsize()` counts buffered items; an item handed straight to a parked getter is never
      counted (janus counts it until the getter runs).
    - `task_done`/`join` count every put, as `queue.Queue`.
    - Cancellation (asyncio's and janus's rule): an ``async_q.put`` that raises
      `asyncio.CancelledError` put nothing (an item that moved into the queue as the putter
      was cancelled is taken back, unless a getter already has it: then the put returns, and
      the cancellation reaches the task's next await if still requested). A cancelled
      ``async_q.get`` took nothing (an item handed to it is passed on).

    `LifoQueue` and `PriorityQueue` are the same queue in another order. Subclassing is for
    those two: janus's storage hooks (``_init``, ``_put``, ``_get``, ``_qsize``) do not exist
    here.

    Example:
        >>> import asyncio, threading
        >>> from integrations.bridge import Queue
        >>> async def main() -> list[int]:
        ...     q: Queue[int] = Queue(maxsize=2)
        ...     def produce() -> None:
        ...         for i in range(3):
        ...             q.sync_q.put(i)
        ...     t = threading.Thread(target=produce); t.start()
        ...     got = [await q.async_q.get() for _ in range(3)]
        ...     t.join()
        ...     await q.aclose()
        ...     return got
        >>> asyncio.run(main())
        [0, 1, 2]
    """

    __slots__ = ("_async_queue", "_channel", "_joiners", "_loop", "_maxsize", "_sync_queue",
                 "_tasks_mutex", "_unfinished_tasks")

    #: The order the items are got in: the channel's buffer (see `_queue_storage`).
    _buffer_class: ClassVar[type[FifoBuffer[Any]] | type[HeapBuffer]] = FifoBuffer

    def __init__(self, maxsize: float = 0) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, (int, float)):
            raise TypeError(f"Queue: maxsize must be a number, got {type(maxsize).__name__}")
        self._maxsize = maxsize
        # janus accepts a float (full once qsize >= maxsize): the capacity is its ceiling.
        capacity = math.ceil(maxsize) if maxsize > 0 else sys.maxsize
        self._channel: SharedChannel[T] = SharedChannel(capacity)
        # The channel's sections use its buffer through append, appendleft, ``buffer[0]`` and
        # ``del buffer[0]`` (the next item is at index 0), len and clear only: another order is
        # another buffer (LifoQueue, PriorityQueue), and every buffer of ours can withdraw a
        # cancelled put's item.
        self._channel._buffer = self._buffer_class()  # type: ignore[assignment]
        self._loop: asyncio.AbstractEventLoop | None = None
        # task_done/join bookkeeping: a small lock of its own (never held with the channel's).
        self._tasks_mutex = threading.Lock()
        self._unfinished_tasks = 0
        self._joiners: list[SharedWaiter] = []
        self._sync_queue: SyncQueueProxy[T] = SyncQueueProxy(self)
        self._async_queue: AsyncQueueProxy[T] = AsyncQueueProxy(self)

    @property
    def sync_q(self) -> SyncQueueProxy[T]:
        """The `queue.Queue`-style side, for threads."""
        return self._sync_queue

    @property
    def async_q(self) -> AsyncQueueProxy[T]:
        """The `asyncio.Queue`-style side, for tasks."""
        return self._async_queue

    @property
    def maxsize(self) -> float:
        return self._maxsize

    @property
    def closed(self) -> bool:
        """True once `close()` or `shutdown()` was called."""
        return self._channel.closed

    def shutdown(self, immediate: bool = False) -> None:
        """Make puts raise the ShutDown exceptions; gets too once the queue is empty.

        With ``immediate=True`` the queued items are discarded first (each counts as done for
        `join`). Parked putters and getters wake with the exception. Idempotent (as janus).
        """
        channel = self._channel
        discarded = 0
        mutex = channel._mutex
        mutex.acquire()
        try:
            if immediate:
                discarded = len(channel._buffer)
                channel._buffer.clear()
            if not channel._closed:
                channel._close_locked()
        finally:
            mutex.release()
        for _ in range(discarded):
            self._done(1, check=False)

    def close(self) -> None:
        """janus's ``close()``: ``shutdown(immediate=True)``."""
        self.shutdown(immediate=True)

    async def wait_closed(self) -> None:
        """Wait until the queue is closed (it has no background activity to wait for).

        Raises:
            RuntimeError: the queue is not closed (janus's check).
        """
        if not self.closed:
            raise RuntimeError("Waiting for non-closed queue")
        await asyncio.sleep(0)

    async def aclose(self) -> None:
        """`close()`, then `wait_closed()`."""
        self.close()
        await self.wait_closed()

    def __repr__(self) -> str:
        return (f"<Queue maxsize={self._maxsize} qsize={len(self._channel)} "
                f"unfinished={self._unfinished_tasks} "
                f"{'closed' if self.closed else 'open'}>")

    # -- shared bookkeeping ------------------------------------------------------------------

    def _check_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            with self._tasks_mutex:
                if self._loop is None:
                    self._loop = loop
        if self._loop is not loop:
            raise RuntimeError(f"{self!r} is bound to a different event loop")

    def _added(self) -> None:
        # Counted before the item becomes visible, so join() never sees 0 while it is queued.
        with self._tasks_mutex:
            self._unfinished_tasks += 1

    def _done(self, n: int, check: bool = True) -> None:
        woken: list[SharedWaiter] = []
        with self._tasks_mutex:
            left = self._unfinished_tasks - n
            if left < 0:
                if check:
                    raise ValueError("task_done() called too many times")
                left = 0
            self._unfinished_tasks = left
            if not left:
                woken, self._joiners = self._joiners, []
        for waiter in woken:
            waiter.claim(None)

    def _count(self, put: list[Any]) -> None:
        """A thread's put is counted: ``put[0]`` turns True with the count, no checkpoint
        between them (`_uncount` takes it back if the put raises without queueing the item)."""
        with self._tasks_mutex:
            self._unfinished_tasks += 1
            put[0] = True

    def _uncount(self, put: list[Any]) -> None:
        """Take back the count of a thread's put that queued nothing. Restartable (`finish`):
        the count goes down once, and the joiners it frees are woken to the last."""
        with self._tasks_mutex:
            if put[0]:
                put[0] = False
                self._unfinished_tasks -= 1
                if not self._unfinished_tasks:
                    put[1], self._joiners = self._joiners, []
        woken = put[1]
        while woken:
            woken[-1].claim(None)  # a second claim of one waiter does nothing
            del woken[-1]

    def _join_waiter(self, waiter: SharedWaiter) -> bool:
        """Park `waiter` for join; False if nothing is unfinished (no need to wait)."""
        with self._tasks_mutex:
            if not self._unfinished_tasks:
                return False
            self._joiners.append(waiter)
            return True

    def _leave_join(self, waiter: SharedWaiter) -> None:
        with self._tasks_mutex:
            if waiter in self._joiners:
                self._joiners.remove(waiter)


@final
class LifoQueue(Queue[T]):
    """A `Queue` that gets the most recently put item first (janus's ``LifoQueue``).

    Everything else is `Queue`'s (both sides, task accounting, shutdown, cancellation). Parked
    putters still take free slots in their arrival order; an item handed back by a getter that
    was cancelled before it resumed is on top again.

    Example:
        >>> q: LifoQueue[int] = LifoQueue()
        >>> for i in (1, 3, 2):
        ...     q.sync_q.put(i)
        >>> [q.sync_q.get() for _ in range(3)]
        [2, 3, 1]
    """

    __slots__ = ()

    _buffer_class = LifoBuffer


@final
class PriorityQueue(Queue[T]):
    """A `Queue` that gets the lowest item first (janus's ``PriorityQueue``; `heapq` order).

    Items are typically ``(priority, data)`` tuples and must be comparable with ``<``, which
    runs inside the queue's mutex (as in janus and `queue.PriorityQueue`): a comparison must
    not use the queue. Equal items come out in no promised order. Everything else is
    `Queue`'s; parked putters take free slots in their arrival order.

    Example:
        >>> q: PriorityQueue[tuple[int, str]] = PriorityQueue()
        >>> for item in ((2, "b"), (1, "a"), (3, "c")):
        ...     q.sync_q.put(item)
        >>> [q.sync_q.get()[1] for _ in range(3)]
        ['a', 'b', 'c']
    """

    __slots__ = ()

    _buffer_class = HeapBuffer


class _Side(Generic[T]):
    """What both sides share: sizes and task accounting."""

    __slots__ = ("_channel", "_parent")

    def __init__(self, parent: Queue[T]) -> None:
        self._parent = parent
        self._channel = parent._channel

    @property
    def maxsize(self) -> float:
        return self._parent._maxsize

    @property
    def closed(self) -> bool:
        return self._parent.closed

    def qsize(self) -> int:
        """The number of queued items (approximate, as for every queue shared by threads)."""
        return len(self._channel)

    def empty(self) -> bool:
        return not len(self._channel)

    def full(self) -> bool:
        return 0 < self._parent._maxsize <= len(self._channel)

    @property
    def unfinished_tasks(self) -> int:
        return self._parent._unfinished_tasks

    def task_done(self) -> None:
        """Mark one item got earlier as processed (see `queue.Queue.task_done`).

        Raises:
            ValueError: called more times than items were put.
        """
        self._parent._done(1)

    def shutdown(self, immediate: bool = False) -> None:
        """As `Queue.shutdown`."""
        self._parent.shutdown(immediate)


@final
class SyncQueueProxy(_Side[T], SyncQueue[T]):
    """`Queue.sync_q`: the `queue.Queue` API, for threads (blocking calls, timeouts)."""

    __slots__ = ()

    def put(self, item: T, block: bool = True, timeout: float | None = None) -> None:
        """Put `item`, waiting for room if the queue is bounded and full.

        Raises:
            SyncQueueFull: no room (at once with ``block=False``, or within `timeout`).
            SyncQueueShutDown: the queue was shut down.
            ValueError: `timeout` is negative.
        """
        if block and timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        parent = self._parent
        put: list[Any] = [False, None]  # counted; the joiners to wake if the count is undone
        try:
            parent._count(put)
            if block:
                self._channel.blocking.send(item, timeout)
            else:
                self._channel.send_nowait(item)
        except BaseException as exc:
            # Ctrl-C: a send that raised with the completed note queued the item, and it stays
            # counted; any other exception queued nothing. No call before the test (see
            # _shared_waiter.THREAD), then the count goes back through `finish`.
            if put[0] and ("__notes__" not in exc.__dict__
                           or COMPLETED_NOTE not in exc.__notes__):
                again: BaseException | None = None
                try:
                    finish(parent._uncount, put)
                except BaseException as second:  # a signal at finish's first instruction
                    # Kept: `exc` may be the queue's own Full, not a Ctrl-C. One level more
                    # than elsewhere, since this one already is the first signal.
                    again = second
                    try:
                        finish(parent._uncount, put)
                    except BaseException:  # a second signal at finish's first instruction
                        finish(parent._uncount, put)
                late = _HELD[0] if THREAD.holds else None  # one held meanwhile leaves instead
                if late is not None:
                    _HELD[0] = None
                    raise late  # noqa: B904  (it came first: not caused by the one caught)
                if again is not None:
                    raise again  # noqa: B904  (the same)
            if exc.__class__ is ChannelClosed:
                raise SyncQueueShutDown from None
            if exc.__class__ is TimeoutError or exc.__class__ is WouldBlock:
                raise SyncQueueFull from None
            raise

    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """Remove and return the next item, waiting for one.

        Raises:
            SyncQueueEmpty: none available (at once with ``block=False``, or within `timeout`).
            SyncQueueShutDown: the queue was shut down and is empty.
            ValueError: `timeout` is negative.
        """
        if block and timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        try:
            value = self._channel.blocking.get(timeout) if block else self._channel.get_nowait()
        except ChannelClosed:
            raise SyncQueueShutDown from None
        except (TimeoutError, WouldBlock):
            raise SyncQueueEmpty from None
        # `unwrapped` inlined: a call here would be a checkpoint where Ctrl-C loses the item.
        return value.item if value.__class__ is Withdrawable else value  # type: ignore[attr-defined]

    def put_nowait(self, item: T) -> None:
        """``put(item, block=False)``."""
        self.put(item, block=False)

    def get_nowait(self) -> T:
        """``get(block=False)``."""
        return self.get(block=False)

    def join(self) -> None:
        """Block until every item put has been got and marked done with `task_done`."""
        parent = self._parent
        waiter = SharedThreadWaiter()
        if not parent._join_waiter(waiter):
            return
        try:
            waiter.wait(None)
        except BaseException:
            parent._leave_join(waiter)
            raise

    def __repr__(self) -> str:
        return f"<SyncQueueProxy of {self._parent!r}>"


@final
class AsyncQueueProxy(_Side[T], AsyncQueue[T]):
    """`Queue.async_q`: the `asyncio.Queue` API, for tasks (of the loop the queue binds to)."""

    __slots__ = ()

    async def put(self, item: T) -> None:
        """Put `item`, waiting for room if the queue is bounded and full.

        Raises:
            AsyncQueueShutDown: the queue was shut down.
            RuntimeError: called from another event loop than the queue's.
        """
        parent = self._parent
        parent._check_loop()
        parent._added()
        channel = self._channel
        try:
            try:
                channel.send_nowait(item)
            except WouldBlock:
                # It parks. Its item may move into the queue before the task resumes, so it
                # goes in a Withdrawable: a cancellation then takes it back unless it was got.
                await channel.send(Withdrawable(item))  # type: ignore[arg-type]
        except BaseException as exc:
            if "__notes__" not in exc.__dict__ or COMPLETED_NOTE not in exc.__notes__:
                parent._done(1, check=False)  # queued nothing (a Ctrl-C with the note did)
            if isinstance(exc, ChannelClosed):
                raise AsyncQueueShutDown from None
            raise

    def put_nowait(self, item: T) -> None:
        """Put `item` if there is room now.

        Raises:
            AsyncQueueFull: no room. AsyncQueueShutDown: the queue was shut down.
        """
        parent = self._parent
        parent._check_loop()
        parent._added()
        try:
            self._channel.send_nowait(item)
        except BaseException as exc:
            if "__notes__" not in exc.__dict__ or COMPLETED_NOTE not in exc.__notes__:
                parent._done(1, check=False)  # queued nothing (a Ctrl-C with the note did)
            if isinstance(exc, ChannelClosed):
                raise AsyncQueueShutDown from None
            if isinstance(exc, WouldBlock):
                raise AsyncQueueFull from None
            raise

    async def get(self) -> T:
        """Remove and return the next item, waiting for one.

        Raises:
            AsyncQueueShutDown: the queue was shut down and is empty.
        """
        self._parent._check_loop()
        try:
            return unwrapped(await self._channel.get())
        except ChannelClosed:
            raise AsyncQueueShutDown from None

    def get_nowait(self) -> T:
        """Remove and return an item if one is available now.

        Raises:
            AsyncQueueEmpty: none available. AsyncQueueShutDown: shut down and empty.
        """
        try:
            self._parent._check_loop()
        except RuntimeError:
            # janus looks at the items before the loop: an empty queue raises Empty (or
            # ShutDown) outside a running loop too, and on another loop.
            if not len(self._channel):
                raise (AsyncQueueShutDown if self.closed else AsyncQueueEmpty)() from None
            raise
        try:
            return unwrapped(self._channel.get_nowait())
        except ChannelClosed:
            raise AsyncQueueShutDown from None
        except WouldBlock:
            raise AsyncQueueEmpty from None

    async def join(self) -> None:
        """Wait until every item put has been got and marked done with `task_done`."""
        parent = self._parent
        parent._check_loop()
        waiter = SharedTaskWaiter()
        if not parent._join_waiter(waiter):
            return
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.abandon():
                parent._leave_join(waiter)
            raise

    def __repr__(self) -> str:
        return f"<AsyncQueueProxy of {self._parent!r}>"
