"""executors: background machinery for threaded programs, and a clean way into asyncio."""

from __future__ import annotations

from .deferred import DeferredQueue as DeferredQueue
from .deferred import DeferredQueueStatistics as DeferredQueueStatistics
from .deferred import Reaper as Reaper
from .deferred import ReaperStatistics as ReaperStatistics
from .errors import ChannelClosed as ChannelClosed
from .errors import ClosedError as ClosedError
from .errors import ExecutorsError as ExecutorsError
from .errors import ShutdownError as ShutdownError
from .errors import ThreadCancelled as ThreadCancelled
from .errors import TransactionExpired as TransactionExpired
from .errors import TransactionRetry as TransactionRetry
from .errors import WouldBlock as WouldBlock
from .periodic import PeriodicExecutor as PeriodicExecutor
from .periodic import PeriodicExecutorStatistics as PeriodicExecutorStatistics
from .service import BackgroundService as BackgroundService
from .service import Job as Job
from .service import JobStatistics as JobStatistics
from .service import ServiceStatistics as ServiceStatistics
from .service import ServiceStatus as ServiceStatus
from .service import ShutdownReport as ShutdownReport
from .threads import CancelToken as CancelToken
from .threads import ThreadGroup as ThreadGroup
from .threads import ThreadGroupStatistics as ThreadGroupStatistics

__version__ = "0.1.0.dev0"

__all__ = (
    "PeriodicExecutor",
    "PeriodicExecutorStatistics",
    "DeferredQueue",
    "DeferredQueueStatistics",
    "Reaper",
    "ReaperStatistics",
    "BackgroundService",
    "Job",
    "JobStatistics",
    "ServiceStatistics",
    "ServiceStatus",
    "ShutdownReport",
    "ExecutorsError",
    "WouldBlock",
    "ClosedError",
    "ChannelClosed",
    "ShutdownError",
    "ThreadCancelled",
    "TransactionRetry",
    "TransactionExpired",
    "ThreadGroup",
    "ThreadGroupStatistics",
    "CancelToken",
)
