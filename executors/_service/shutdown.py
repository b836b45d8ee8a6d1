"""A service's shutdown: one deadline for every thread, executor and submission, and its report.

Defined here, re-exported by `executors.service` (and the package root).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from collections.abc import Iterable, Sequence

from executors import _threads
from executors._clock import SYSTEM_CLOCK
from executors.periodic import PeriodicExecutor

from .pool import Pool

__all__ = ("ShutdownReport", "alive", "wait_all")


@dataclasses.dataclass(frozen=True)
class ShutdownReport:
    """What `BackgroundService.shutdown` achieved by its deadline."""

    #: True if every thread stopped and every submission finished (or was cancelled on request).
    completed: bool
    #: Jobs whose run was still executing at the deadline.
    unfinished_jobs: tuple[str, ...]
    #: Submissions still running at the deadline (they may finish later; nothing waits).
    unfinished_submissions: int
    #: Submissions cancelled before they started (at the deadline, or by ``cancel_pending``).
    cancelled_submissions: int
    #: Real seconds the shutdown took.
    elapsed: float
    #: Jobs whose due run was still queued behind a busy pool at the deadline: it never
    #: started and never will (runs not started by the shutdown are dropped, not executed).
    dropped_jobs: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.completed


def alive(threads: Iterable[threading.Thread], executors: Iterable[PeriodicExecutor]) -> int:
    """How many of `threads` and of the executors' threads are alive."""
    n = sum(1 for t in threads if _threads.alive(t))
    return n + sum(1 for e in executors if e.statistics().thread_alive)


def wait_all(threads: Sequence[threading.Thread], pool: Pool,
             executors: Sequence[PeriodicExecutor],
             futures: set[concurrent.futures.Future[object]], deadline: float | None) -> bool:
    """Join `threads` in order, then the executors, then wait for `futures`, all against one
    `deadline` (real monotonic time; None: no limit). True if everything is done."""

    def remaining() -> float | None:
        return None if deadline is None else max(0.0, deadline - SYSTEM_CLOCK.monotonic())

    me = threading.current_thread()
    for t in threads:
        if t is me:
            return False  # a job (or a subscriber) cannot wait for its own service
        # One joiner at a time (the dispatcher and the store thread wait for some of these
        # threads too): python/cpython#116372.
        _threads.join(t, remaining())
    if not any(_threads.alive(t) for t in threads):
        pool.cancel_leftovers()
    for executor in executors:
        executor.join(remaining())
    waiting = [f for f in list(futures) if not f.done()]
    if waiting:
        concurrent.futures.wait(waiting, timeout=remaining())
    return alive(threads, executors) == 0 and all(f.done() for f in list(futures))
