"""The bridge: a Portal runs an event loop for plain threads, which share its primitives' FIFOs.

Two directions:

- Threads into asyncio: `Portal` runs (or attaches to) an event loop; threads call coroutines
  on it (`Portal.call`, `Portal.start_task_soon`) and use the loop's aio primitives through
  blocking views with `threading`-style APIs (`Portal.semaphore`, `Portal.lock`,
  `Portal.channel`, `Portal.select`, `Portal.task_group`). A thread's blocking call parks a
  `ThreadWaiter` in the primitive's own FIFO (no Task per call, no second queue), so threads
  and tasks are served in one order.
- Asyncio into threads: ``await run_sync(fn, *args)`` runs blocking code in a worker thread,
  under a thread limiter, with the caller's contextvars, waiting for the thread on cancellation.

Primitives shared by threads and tasks of any loop, with no portal: `SharedChannel`,
`SharedSemaphore`, `SharedBoundedSemaphore`, `SharedLock`, and janus 2.0's queues under every
name janus exports (`Queue`, `LifoQueue`, `PriorityQueue`, `SyncQueue`, `AsyncQueue`,
`BaseQueue`, `SyncQueueEmpty`, `AsyncQueueEmpty`, `SyncQueueFull`, `AsyncQueueFull`,
`SyncQueueShutDown`, `AsyncQueueShutDown`): ``from integrations.bridge import ...`` replaces
``from janus import ...``.
"""

from __future__ import annotations

from ._portal import Portal as Portal
from ._portal import PortalStatistics as PortalStatistics
from ._queue import AsyncQueueProxy as AsyncQueueProxy
from ._queue import LifoQueue as LifoQueue
from ._queue import PriorityQueue as PriorityQueue
from ._queue import Queue as Queue
from ._queue import SyncQueueProxy as SyncQueueProxy
from ._queue_protocols import AsyncQueue as AsyncQueue
from ._queue_protocols import AsyncQueueEmpty as AsyncQueueEmpty
from ._queue_protocols import AsyncQueueFull as AsyncQueueFull
from ._queue_protocols import AsyncQueueShutDown as AsyncQueueShutDown
from ._queue_protocols import BaseQueue as BaseQueue
from ._queue_protocols import SyncQueue as SyncQueue
from ._queue_protocols import SyncQueueEmpty as SyncQueueEmpty
from ._queue_protocols import SyncQueueFull as SyncQueueFull
from ._queue_protocols import SyncQueueShutDown as SyncQueueShutDown
from ._run_sync import RUN_SYNC_LIMIT as RUN_SYNC_LIMIT
from ._run_sync import default_limiter as default_limiter
from ._run_sync import run_sync as run_sync
from ._run_sync import run_sync_limiter as run_sync_limiter
from ._shared_channel import BlockingSharedChannel as BlockingSharedChannel
from ._shared_channel import SharedChannel as SharedChannel
from ._shared_channel import select_blocking as select_blocking
from ._shared_locks import BlockingSharedLock as BlockingSharedLock
from ._shared_locks import BlockingSharedSemaphore as BlockingSharedSemaphore
from ._shared_locks import SharedBoundedSemaphore as SharedBoundedSemaphore
from ._shared_locks import SharedLock as SharedLock
from ._shared_locks import SharedSemaphore as SharedSemaphore
from ._views import BlockingChannel as BlockingChannel
from ._views import BlockingLock as BlockingLock
from ._views import BlockingSemaphore as BlockingSemaphore
from ._views import BlockingTaskGroup as BlockingTaskGroup
from ._waiter import PortalFuture as PortalFuture
from ._waiter import ThreadWaiter as ThreadWaiter

__all__ = (
    "Portal",
    "PortalStatistics",
    "PortalFuture",
    "ThreadWaiter",
    "BlockingSemaphore",
    "BlockingLock",
    "BlockingChannel",
    "BlockingTaskGroup",
    "SharedSemaphore",
    "SharedBoundedSemaphore",
    "SharedLock",
    "BlockingSharedSemaphore",
    "BlockingSharedLock",
    "run_sync",
    "run_sync_limiter",
    "RUN_SYNC_LIMIT",
    "default_limiter",
    "SharedChannel",
    "BlockingSharedChannel",
    "select_blocking",
    "Queue",
    "SyncQueueProxy",
    "AsyncQueueProxy",
    # janus 2.0's other names, under janus's names (migrating is one import).
    "LifoQueue",
    "PriorityQueue",
    "BaseQueue",
    "SyncQueue",
    "AsyncQueue",
    "SyncQueueEmpty",
    "SyncQueueFull",
    "SyncQueueShutDown",
    "AsyncQueueEmpty",
    "AsyncQueueFull",
    "AsyncQueueShutDown",
)
