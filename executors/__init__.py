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
from .service import ClockChanged as ClockChanged
from .service import Job as Job
from .service import JobStatistics as JobStatistics
from .service import LeaseLost as LeaseLost
from .service import RunFailed as RunFailed
from .service import RunFinished as RunFinished
from .service import RunInfo as RunInfo
from .service import RunMissed as RunMissed
from .service import RunStarted as RunStarted
from .service import ScheduleAdded as ScheduleAdded
from .service import ScheduleChanged as ScheduleChanged
from .service import SchedulePaused as SchedulePaused
from .service import ScheduleRemoved as ScheduleRemoved
from .service import ScheduleResumed as ScheduleResumed
from .service import ServiceEvent as ServiceEvent
from .service import ServiceStatistics as ServiceStatistics
from .service import ServiceStatus as ServiceStatus
from .service import ShutdownReport as ShutdownReport
from .service import StoredSchedule as StoredSchedule
from .service import StoreStatus as StoreStatus
from .service import Subscription as Subscription
from .service import SubscriptionStatistics as SubscriptionStatistics
from .service import current_run as current_run
from .threads import CancelToken as CancelToken
from .threads import ThreadGroup as ThreadGroup
from .threads import ThreadGroupStatistics as ThreadGroupStatistics
from .triggers import AllOf as AllOf
from .triggers import AnyOf as AnyOf
from .triggers import CalendarInterval as CalendarInterval
from .triggers import Cron as Cron
from .triggers import Date as Date
from .triggers import FoldPolicy as FoldPolicy
from .triggers import GapPolicy as GapPolicy
from .triggers import Interval as Interval
from .triggers import Trigger as Trigger
from .triggers import trigger_from_data as trigger_from_data

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
    "current_run",
    "RunInfo",
    "ServiceEvent",
    "RunStarted",
    "RunFinished",
    "RunFailed",
    "RunMissed",
    "ScheduleAdded",
    "ScheduleChanged",
    "ScheduleRemoved",
    "SchedulePaused",
    "ScheduleResumed",
    "ClockChanged",
    "LeaseLost",
    "StoreStatus",
    "StoredSchedule",
    "Subscription",
    "SubscriptionStatistics",
    "Trigger",
    "Cron",
    "Date",
    "CalendarInterval",
    "Interval",
    "AnyOf",
    "AllOf",
    "trigger_from_data",
    "GapPolicy",
    "FoldPolicy",
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
