"""The targets of the stored-schedule benchmark: importable ``"module:qualname"`` functions.

A schedule kept in a store names its target as ``"module:qualname"`` (no lambdas, no
closures: another process must be able to import it), and APScheduler's SQLAlchemyJobStore
pickles a job's function by the same kind of reference. The benchmark script runs as
``__main__``, so the targets live here, in a module that is imported once, and what they
record is this module's state, read back by `benchmarks.scheduler`.
"""

from __future__ import annotations

import time

__all__ = ("APSCHEDULER_STARTS", "OURS_RUNS", "record_apscheduler", "record_ours", "reset")

#: ours: ``(start, schedule name, nominal fire time)``, Unix seconds, one per run.
OURS_RUNS: list[tuple[float, str, float]] = []
#: APScheduler: ``(start, job id)`` (its job cannot see its fire time: the benchmark pairs
#: these with the ``EVENT_JOB_EXECUTED`` events' scheduled run times).
APSCHEDULER_STARTS: list[tuple[float, str]] = []


def reset() -> None:
    """Forget every recorded run (before a contender's round)."""
    OURS_RUNS.clear()
    APSCHEDULER_STARTS.clear()


def record_ours() -> None:
    """A stored schedule's run: its start, name and the fire time it was claimed for."""
    start = time.time()
    # Imported here: APScheduler's serving process imports this module, not this library.
    from executors import current_run

    info = current_run()
    if info is not None and info.fire_time is not None:
        OURS_RUNS.append((start, info.name, info.fire_time.timestamp()))


def record_apscheduler(job_id: str) -> None:
    """An APScheduler job's run: its start and its id."""
    APSCHEDULER_STARTS.append((time.time(), job_id))
