"""What the parts of a service read of it: name, clocks, lock, events, counters, run state.

`ServiceContext` is the leaf every part receives (a job, the scheduler's wall-clock slots, the
store loop) instead of the `Scheduler`: they import this module, never the scheduler's, and see
only these names. The scheduler provides them as its own attributes (it is the one object
whose loop reads them per run: a context held apart would cost each run an extra attribute
read), and the control protocol jobs call is `executors._service.job.JobServer`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from executors._clock import Clock
    from executors.periodic import ForkPolicy

    from .events import Events

__all__ = ("ServiceContext",)


class ServiceContext(Protocol):
    """One service's shared state as its parts see it. Flags and counters are written without
    a lock (read as statistics); `lock` guards the schedule (and is new after a fork)."""

    #: The service's name (thread names, log lines).
    name: str
    clock: Clock
    #: The clock read of the hot path (for the real clock, ``time.monotonic`` itself).
    monotonic: Callable[[], float]
    fork_policy: ForkPolicy
    events: Events
    lock: threading.Lock
    #: Runs and failed runs of every job (lock-free counters, one writer at a time per job).
    job_runs: int
    job_errors: int
    #: The service has started / is closing (set by the scheduler, read by everyone).
    started: bool
    closing: bool
