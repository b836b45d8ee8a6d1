"""executors.aio: asyncio primitives done right (one event loop, no threads, no blocking calls)."""

from __future__ import annotations

from ._atomic import atomic as atomic
from .locks import BoundedSemaphore as BoundedSemaphore
from .locks import Lock as Lock
from .locks import LockStatistics as LockStatistics
from .locks import Semaphore as Semaphore
from .locks import SemaphoreStatistics as SemaphoreStatistics

__all__ = (
    "atomic",
    "Semaphore",
    "BoundedSemaphore",
    "Lock",
    "SemaphoreStatistics",
    "LockStatistics",
)
