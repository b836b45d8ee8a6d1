"""The service's snapshots: its counters and its status for health endpoints.

Defined here, re-exported by `executors.service` (and the package root).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .job import JobStatistics

if TYPE_CHECKING:
    from .job import Job
    from .stored import StoreStatus

__all__ = ("ServiceStatistics", "ServiceStatus", "state_counts")


@dataclasses.dataclass(frozen=True)
class ServiceStatistics:
    """Service-wide counters (see `BackgroundService.statistics`)."""

    #: The service's name (``BackgroundService(name=...)``, else ``BackgroundService-N``).
    name: str
    #: "idle" (not started), "running", "closing" (shutdown begun) or "closed".
    state: str
    #: The most pool threads the service may start (``BackgroundService(workers=...)``).
    workers: int
    #: Threads of this service alive now: scheduler + pool workers + dedicated jobs + the
    #: event dispatcher (started by the first event someone subscribed to); with a store,
    #: its store thread, snapshot thread and (PostgreSQL) listener too.
    threads: int
    #: Jobs the service holds now (a cancelled job leaves once the scheduler has seen it).
    jobs: int
    #: Finished runs of all jobs, summed (a cancelled job's runs stay counted).
    job_runs: int
    #: Job runs that raised, summed over all jobs.
    job_errors: int
    #: Calls of `submit` that were accepted, over the service's life.
    submitted: int
    #: Submissions not finished yet (queued or running).
    submissions_pending: int
    #: Submissions whose work raised (a cancelled submission is not counted).
    submissions_failed: int
    #: ``"ExceptionType: message"`` of the latest submission that raised, or None if none has.
    last_submission_error: str | None
    #: Bumped by every fork: the service's internals were rebuilt that many times.
    generation: int


@dataclasses.dataclass(frozen=True)
class ServiceStatus:
    """Everything a health endpoint needs: the service's counters and every job's snapshot."""

    #: The service-wide counters (the same snapshot `BackgroundService.statistics` returns).
    service: ServiceStatistics
    #: A snapshot of every job the service holds, in the order they were added.
    jobs: tuple[JobStatistics, ...]
    #: The store side (``BackgroundService(store=...)``): its health, counters and every
    #: stored schedule, declared here or not; None without a store.
    store: StoreStatus | None = None

    @property
    def healthy(self) -> bool:
        """True while the service runs, no job has been stopped by an error, and its store
        (if any) answers and takes every declaration and plan of this process
        (`StoreStatus.healthy`)."""
        return self.service.state == "running" and not any(
            j.state == "failed" for j in self.jobs
        ) and (self.store is None or self.store.healthy)

    def as_dict(self) -> dict[str, object]:
        """A JSON-serialisable dict (for ``json.dumps`` in a health endpoint)."""
        out: dict[str, object] = {
            "healthy": self.healthy,
            "service": dataclasses.asdict(self.service),
            "jobs": [dataclasses.asdict(j) for j in self.jobs],
        }
        if self.store is not None:
            out["store"] = dataclasses.asdict(self.store)
        return out


def state_counts(jobs: list[Job]) -> str:
    """``"paused=1 scheduled=3"``: how many of `jobs` are in each state (for reprs)."""
    counts: dict[str, int] = {}
    for job in jobs:
        state = job._state()
        counts[state] = counts.get(state, 0) + 1
    return " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
