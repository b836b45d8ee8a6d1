"""A job's control methods reach whoever serves it through one protocol: the service's
scheduler (a shared job), the job's own executor (``dedicated=True``), or the store loop (a
schedule kept in a store)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from executors import BackgroundService, Cron, Job
from executors.testing import wait_until


def _noop() -> None:
    """The job's target (module level: a stored schedule names it by import path)."""


@pytest.fixture(params=["shared", "dedicated", "stored"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[BackgroundService, Job]]:
    kind = request.param
    svc = BackgroundService(f"control-{kind}", store="memory:" if kind == "stored" else None)
    if kind == "stored":
        job = svc.schedule(Cron("0 0 1 1 *", tz="UTC"), _noop, name="yearly")
    elif kind == "dedicated":
        job = svc.every(3600, _noop, name="hourly", dedicated=True)
    else:
        job = svc.every(3600, _noop, name="hourly", delay=3600)
    with svc:
        yield svc, job


def test_wake_pause_and_cancel_act_alike_whoever_serves_the_job(
        served: tuple[BackgroundService, Job]) -> None:
    """Whoever serves the job, a wake runs it once, a wake of a paused job runs nothing, and
    a cancel takes it out of the service's jobs: `Job` holds one server and calls it, without
    asking which kind it has."""
    svc, job = served
    # A dedicated job's executor runs it once as it starts; the others are not due for long.
    wait_until(lambda: job.statistics().state == "scheduled", 5)
    before = job.statistics().runs
    job.wake()
    wait_until(lambda: job.statistics().runs == before + 1
               and job.statistics().state == "scheduled", 5)
    job.pause()
    assert job.statistics().state == "paused"
    job.wake()
    job.cancel()
    wait_until(lambda: job not in svc.jobs, 5)
    assert job.statistics().state == "cancelled"
    assert job.statistics().runs == before + 1
    assert job.statistics().wake_requests == 2
