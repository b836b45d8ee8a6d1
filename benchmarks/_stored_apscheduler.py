"""APScheduler 3 serving cron schedules from its SQLAlchemyJobStore on a SQLite file: the stored
rows' peer, in `benchmarks.scheduler` and in issue 35's serving processes
(`benchmarks._stored_serve`).

A module apart, importing APScheduler and SQLAlchemy only: a serving process of
APScheduler's measured for its resident memory holds what APScheduler needs, not this
library nor the other peers.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from zoneinfo import ZoneInfo

from apscheduler.events import EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor as APThreadPool
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from sqlalchemy import create_engine, event

from benchmarks import _stored_jobs

__all__ = ("ZONE", "StoredRuns", "StoredScenario", "stored_apscheduler")

#: The zone of the stored rows' schedules (ours and APScheduler's).
ZONE = "Europe/Berlin"


@dataclasses.dataclass(frozen=True)
class StoredScenario:
    """N cron schedules in a SQLite file: schedule k is due once every `period` minutes, at
    second k mod (60 * period) of each period (6-field ``"<s> <m>-59/<period> * * * *"``),
    so N / (60 * period) runs are due each second."""

    jobs: int
    period: int  # minutes; divides 60, so the periods line up with the hour
    warmup: float
    window: float

    @property
    def title(self) -> str:
        every = "every minute" if self.period == 1 else f"every {self.period} minutes"
        return f"{self.jobs:,} schedules in a SQLite file, each due {every}"

    def fields(self, k: int) -> tuple[str, str]:
        """Schedule k's (second, minute) cron fields."""
        minute = "*" if self.period == 1 else f"{(k // 60) % self.period}-59/{self.period}"
        return str(k % 60), minute

    def expression(self, k: int) -> str:
        return "{} {} * * * *".format(*self.fields(k))

    def due(self, w0: float, w1: float) -> int:
        """Runs due in the wall-clock window [w0, w1): schedule k at each whole second t with
        t mod (60 * period) == k mod (60 * period) (zone offsets are whole hours)."""
        span = 60 * self.period
        per_slot = collections.Counter(k % span for k in range(self.jobs))
        first = int(w0) + (w0 != int(w0))
        return sum(per_slot[t % span] for t in range(first, int(w1) + (w1 != int(w1))))


@dataclasses.dataclass
class StoredRuns:
    """What one contender's schedules recorded: (start, name, nominal fire time) per run."""

    runs: list[tuple[float, str, float]] = dataclasses.field(default_factory=list)


def stored_apscheduler(scenario: StoredScenario, path: Path,
                        runs: StoredRuns) -> tuple[Callable[[], None], Callable[[], None]]:
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _pragmas(connection: sqlite3.Connection, _record: object) -> None:
        # The same file settings as ours: write-ahead log, synchronous=NORMAL.
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")

    fires: list[tuple[str, float]] = []

    def executed(event: JobExecutionEvent) -> None:
        fires.append((event.job_id, event.scheduled_run_time.timestamp()))

    sched = BackgroundScheduler(
        executors={"default": APThreadPool(10)},
        jobstores={"default": SQLAlchemyJobStore(engine=engine)},
        job_defaults={"coalesce": True, "max_instances": 1},
        timezone=ZONE,
    )
    sched.add_listener(executed, EVENT_JOB_EXECUTED)
    sched.start(paused=True)  # jobs go straight to the store, none runs before the last
    tz = ZoneInfo(ZONE)
    for k in range(scenario.jobs):
        second, minute = scenario.fields(k)
        sched.add_job(f"{_stored_jobs.__name__}:record_apscheduler",
                      CronTrigger(second=second, minute=minute, timezone=tz), args=[str(k)],
                      id=str(k))
    sched.resume()

    def teardown() -> None:
        sched.shutdown(wait=True)
        engine.dispose()

    def finish() -> None:
        starts: dict[str, list[float]] = {}
        for start, job_id in _stored_jobs.APSCHEDULER_STARTS:
            starts.setdefault(job_id, []).append(start)
        by_job: dict[str, list[float]] = {}
        for job_id, fire in fires:
            by_job.setdefault(job_id, []).append(fire)
        for job_id, ts in starts.items():
            # One job's runs never overlap (max_instances=1): both lists are in run order.
            for start, fire in zip(sorted(ts), sorted(by_job.get(job_id, ())), strict=False):
                runs.runs.append((start, job_id, fire))

    return teardown, finish
