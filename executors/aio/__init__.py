"""executors.aio: asyncio primitives done right (one event loop, no threads, no blocking calls)."""

from __future__ import annotations

from ._atomic import atomic as atomic
from .channels import Channel as Channel
from .channels import ChannelStatistics as ChannelStatistics
from .channels import Closed as Closed
from .channels import Get as Get
from .channels import GetResult as GetResult
from .channels import Operation as Operation
from .channels import Select as Select
from .channels import SelectResult as SelectResult
from .channels import Send as Send
from .channels import SendResult as SendResult
from .channels import select as select
from .combinators import Merge as Merge
from .combinators import join as join
from .combinators import merge as merge
from .combinators import race as race
from .combinators import race_ok as race_ok
from .combinators import try_join as try_join
from .locks import BoundedSemaphore as BoundedSemaphore
from .locks import Lock as Lock
from .locks import LockStatistics as LockStatistics
from .locks import Semaphore as Semaphore
from .locks import SemaphoreStatistics as SemaphoreStatistics
from .periodic import AsyncPeriodicExecutor as AsyncPeriodicExecutor
from .periodic import AsyncPeriodicExecutorStatistics as AsyncPeriodicExecutorStatistics
from .persistent import PersistentTaskGroup as PersistentTaskGroup
from .persistent import PersistentTaskGroupStatistics as PersistentTaskGroupStatistics
from .persistent import spawn_background as spawn_background
from .taskgroups import TaskGroup as TaskGroup
from .traversal import DEFAULT_LIMIT as DEFAULT_LIMIT
from .traversal import TRAVERSAL_LIMIT as TRAVERSAL_LIMIT
from .traversal import CursorEntry as CursorEntry
from .traversal import Entry as Entry
from .traversal import Kind as Kind
from .traversal import Store as Store
from .traversal import Transaction as Transaction
from .traversal import Traversal as Traversal
from .traversal import TraversalStatistics as TraversalStatistics
from .traversal import Visit as Visit
from .traversal import default_limiter as default_limiter
from .traversal import traversal_limiter as traversal_limiter
from .traversal import traverse as traverse

__all__ = (
    "atomic",
    "Semaphore",
    "BoundedSemaphore",
    "Lock",
    "SemaphoreStatistics",
    "LockStatistics",
    "Channel",
    "ChannelStatistics",
    "Operation",
    "Send",
    "Get",
    "Select",
    "select",
    "SendResult",
    "GetResult",
    "Closed",
    "SelectResult",
    "TaskGroup",
    "PersistentTaskGroup",
    "PersistentTaskGroupStatistics",
    "spawn_background",
    "race",
    "join",
    "try_join",
    "race_ok",
    "merge",
    "Merge",
    "AsyncPeriodicExecutor",
    "AsyncPeriodicExecutorStatistics",
    "Kind",
    "Entry",
    "Transaction",
    "Store",
    "Visit",
    "CursorEntry",
    "Traversal",
    "TraversalStatistics",
    "traverse",
    "traversal_limiter",
    "TRAVERSAL_LIMIT",
    "default_limiter",
    "DEFAULT_LIMIT",
)
