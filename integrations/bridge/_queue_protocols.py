"""janus 2.0's names besides its queues: its exceptions and its BaseQueue/SyncQueue/AsyncQueue.

They mean what janus's mean (janus/__init__.py, 2.0.0), so a janus program that catches
``janus.SyncQueueEmpty`` or annotates ``janus.SyncQueue[int]`` migrates by changing the import.
"""

from __future__ import annotations

import asyncio
import queue as _stdlib_queue
import sys
from typing import Protocol, TypeVar

__all__ = (
    "AsyncQueue",
    "AsyncQueueEmpty",
    "AsyncQueueFull",
    "AsyncQueueShutDown",
    "BaseQueue",
    "SyncQueue",
    "SyncQueueEmpty",
    "SyncQueueFull",
    "SyncQueueShutDown",
)

T = TypeVar("T")

SyncQueueEmpty = _stdlib_queue.Empty
"""`queue.Empty`, as janus: a ``sync_q`` get found nothing (at once, or within its timeout)."""

SyncQueueFull = _stdlib_queue.Full
"""`queue.Full`, as janus: a ``sync_q`` put found no room (at once, or within its timeout)."""

AsyncQueueEmpty = asyncio.QueueEmpty
"""`asyncio.QueueEmpty`, as janus: ``async_q.get_nowait()`` found nothing."""

AsyncQueueFull = asyncio.QueueFull
"""`asyncio.QueueFull`, as janus: ``async_q.put_nowait()`` found no room."""

if sys.version_info >= (3, 13):
    SyncQueueShutDown = _stdlib_queue.ShutDown
    AsyncQueueShutDown = asyncio.QueueShutDown
else:

    class SyncQueueShutDown(Exception):  # janus's name
        """A ``sync_q`` operation on a queue that was shut down (janus's name).

        From Python 3.13 on it is `queue.ShutDown`, as janus's. Before 3.13 the stdlib has none
        and janus defines a class of its own, so does this module: the two are different classes
        there, and ``except janus.SyncQueueShutDown`` does not catch this one (change that
        import too).
        """

    class AsyncQueueShutDown(Exception):  # janus's name
        """An ``async_q`` operation on a queue that was shut down (janus's name).

        From Python 3.13 on it is `asyncio.QueueShutDown`, as janus's; before 3.13 a class of
        its own, as janus's (see `SyncQueueShutDown`).
        """


class BaseQueue(Protocol[T]):
    """What both sides of a queue offer (janus's ``BaseQueue`` protocol, member for member).

    One difference: `maxsize` is typed ``float``, not ``int``: ``Queue(maxsize=2.5)`` is
    accepted (janus's runtime accepts it too; full once ``qsize() >= maxsize``).
    """

    __slots__ = ()

    @property
    def maxsize(self) -> float: ...

    @property
    def closed(self) -> bool: ...

    def task_done(self) -> None: ...

    def qsize(self) -> int: ...

    @property
    def unfinished_tasks(self) -> int: ...

    def empty(self) -> bool: ...

    def full(self) -> bool: ...

    def put_nowait(self, item: T) -> None: ...

    def get_nowait(self) -> T: ...

    def shutdown(self, immediate: bool = False) -> None: ...


class SyncQueue(BaseQueue[T], Protocol[T]):
    """The thread side, ``Queue.sync_q``: `queue.Queue`'s blocking API (janus's protocol)."""

    __slots__ = ()

    def put(self, item: T, block: bool = True, timeout: float | None = None) -> None: ...

    def get(self, block: bool = True, timeout: float | None = None) -> T: ...

    def join(self) -> None: ...


class AsyncQueue(BaseQueue[T], Protocol[T]):
    """The task side, ``Queue.async_q``: `asyncio.Queue`'s API (janus's protocol)."""

    __slots__ = ()

    async def put(self, item: T) -> None: ...

    async def get(self) -> T: ...

    async def join(self) -> None: ...
