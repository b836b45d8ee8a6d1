"""A job's statistics snapshot (`Job.statistics`), the frozen record behind `status()`."""

from __future__ import annotations

import dataclasses

__all__ = ("JobStatistics",)


@dataclasses.dataclass(frozen=True)
class JobStatistics:
    """A snapshot of one job (see `Job.statistics` and `BackgroundService.status`).

    Times are on the service's clock (`time.monotonic` unless a clock was injected);
    `next_run_in` is relative to the moment of the snapshot. Wall-clock times (the fields
    about fire times, for ``schedule()`` and ``cron()`` jobs) are ISO 8601 strings, so that
    `ServiceStatus.as_dict` stays ready for ``json.dumps``.
    """

    #: The job's name: ``every(name=...)``, else the function's qualified name (with ``#2``,
    #: ``#3``... added when taken).
    name: str
    #: "pending" (service not started), "scheduled" (also while a due run waits for a pool
    #: thread), "running" (a run is executing), "paused", "failed" (stopped by
    #: ``on_error="stop"``, or its trigger raised), "finished" (its trigger has no fire time
    #: left), "cancelled", or "closed" (the service shut down; a run that had not started by
    #: then is dropped).
    state: str
    #: True if the job runs on its own `PeriodicExecutor` thread (``every(dedicated=True)``),
    #: False if it shares the service's scheduler and worker pool.
    dedicated: bool
    #: The time between due runs, in seconds, as given to ``every()``; None for a wall-clock
    #: job (``schedule()``, ``cron()``).
    interval: float | None
    #: Runs that finished (successfully or not); a run in progress is not counted yet.
    runs: int
    #: Runs that raised, over the job's life (never reset).
    errors: int
    #: Errors since the last successful run (what ``on_error="backoff"`` doubles its delay by).
    consecutive_errors: int
    #: ``"ExceptionType: message"`` of the latest run that raised, or None if no run has raised.
    #: Kept after later successful runs.
    last_error: str | None
    #: When the latest run started (seconds on the service's monotonic clock), or None before
    #: the first run.
    last_run_at: float | None
    #: How long the latest finished run took, in seconds, or None before the first run ends.
    last_duration: float | None
    #: When the next run is due (seconds on the service's monotonic clock); None unless the
    #: job is "scheduled" (or, for a dedicated job, "running").
    next_run_at: float | None
    #: Seconds from this snapshot until `next_run_at` (0.0 if already due), or None when
    #: `next_run_at` is None.
    next_run_in: float | None
    #: How late the latest run started after its due time, in seconds (0.0 if it started on
    #: time), or None before the first run.
    lateness: float | None
    #: The largest `lateness` of any run so far, in seconds (0.0 before the first run).
    max_lateness: float
    #: Runs that took longer than `interval` (a failed run and the last run before a
    #: pause, cancel or shutdown count too).
    overruns: int
    #: Due runs left out because an overrun ended after them (``overrun="skip"``): the next
    #: run goes to the first due time after the overrun. Always 0 for a dedicated job.
    skipped: int
    #: Calls of `Job.wake()` so far, including those ignored (paused, cancelled, failed job)
    #: and those merged into one run.
    wake_requests: int
    #: True while the job is light enough to run on the scheduler thread (no hand-off).
    inline: bool
    #: The schedule as people read it: the trigger's description (``"30 2 * * *
    #: Europe/Berlin"``) for a wall-clock job, ``"every 60s"`` for an ``every()`` job.
    trigger: str = ""
    #: The next fire time in the trigger's zone (ISO 8601, with its UTC offset), or None (an
    #: ``every()`` job, or no run is scheduled: paused, finished, cancelled, failed).
    next_fire: str | None = None
    #: The same instant in UTC (ISO 8601), or None.
    next_fire_utc: str | None = None
    #: The fire time of the latest run (UTC, ISO 8601), or None before the first run (and
    #: for an ``every()`` job).
    last_fire: str | None = None
    #: The ``missed`` policy (``"latest"``, ``"all"``, ``"skip"``), or None for ``every()``.
    missed_policy: str | None = None
    #: Fire times missed, over the job's life (see `BackgroundService.schedule` for what a
    #: miss is): run late or not run, each counted once.
    missed: int = 0
    #: Of `missed`, the fire times run anyway, late (``missed="latest"`` or ``"all"``);
    #: ``missed - missed_run`` were not run.
    missed_run: int = 0
    #: Why the latest miss happened (``"stopped"``, ``"suspended"``, ``"clock_jump"``,
    #: ``"behind"``, ``"grace"``), or None if nothing was missed.
    last_missed_reason: str | None = None
    #: Fire times that passed while the job was paused: skipped by intent, not run, and not
    #: counted in `missed`.
    skipped_paused: int = 0
