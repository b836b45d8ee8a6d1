"""executors.aio: asyncio primitives done right (one event loop, no threads, no blocking calls)."""

from __future__ import annotations

from ._atomic import atomic as atomic
from .channels import Channel as Channel
from .channels import ChannelStatistics as ChannelStatistics
from .channels import Closed as Closed
from .channels import Get as Get
from .channels import GetResult as GetResult
from .channels import Select as Select
from .channels import SelectResult as SelectResult
from .channels import Send as Send
from .channels import SendResult as SendResult
from .channels import select as select
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
    "Channel",
    "ChannelStatistics",
    "Send",
    "Get",
    "Select",
    "select",
    "SendResult",
    "GetResult",
    "Closed",
    "SelectResult",
)
