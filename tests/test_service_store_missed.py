"""One definition of a missed fire time (run late or not run) for the log, `RunMissed`, a job's
statistics, the store's ``missed`` counter (what ``executors schedules`` shows) and the
schedules kept in memory: after a restart the log said "missed 6 ... ran 1" while the command
showed "missed 5"."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import stored_jobs

from executors import BackgroundService, Interval, RunMissed, ServiceEvent
from executors.stores import SQLiteScheduleStore
from executors.testing import wait_until


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    stored_jobs.SEEN.clear()
    yield
    stored_jobs.SEEN.clear()


def _moved_back(db: str, period: float, by: dt.timedelta, policy: str,
                start: dt.datetime | None = None) -> None:
    """Declare "s" (every `period` seconds from `start`, `policy`), stop, and move its next
    fire time back by `by`: what the store holds after that long with nobody serving it."""
    with BackgroundService("first", store=db) as svc:
        svc.schedule(Interval(period, start=start), stored_jobs.seen, "r", name="s",
                     missed=policy)  # type: ignore[arg-type]
    store = SQLiteScheduleStore(db[10:])
    try:
        record = store.get("s")
        assert record is not None and record.next_fire is not None
        assert store.set_next_fire("s", record.next_fire - by)
    finally:
        store.close()


def _serve(db: str, period: float, policy: str, runs: int,
           start: dt.datetime | None = None) -> tuple[list[ServiceEvent], int, int, int]:
    """Serve "s" until `runs` runs ended; (the RunMissed events, the job's missed and
    missed_run, the store's missed counter)."""
    events: list[ServiceEvent] = []
    with BackgroundService("second", store=db) as svc:
        svc.subscribe(events.append, RunMissed)
        job = svc.schedule(Interval(period, start=start), stored_jobs.seen, "r", name="s",
                           missed=policy)  # type: ignore[arg-type]
        wait_until(lambda: job.statistics().runs >= runs and bool(events), 10)
        stats = job.statistics()
    store = SQLiteScheduleStore(db[10:])
    try:
        record = store.get("s")
        assert record is not None
        return events, stats.missed, stats.missed_run, record.counters["missed"]
    finally:
        store.close()


@pytest.mark.parametrize("latest_ago", [1.0, 30.0], ids=["latest-just-now", "latest-30s-ago"])
@pytest.mark.parametrize(("policy", "runs", "ran"), [("latest", 1, 1), ("all", 6, 6),
                                                     ("skip", 0, 0)])
def test_after_a_restart_the_announced_count_is_the_stored_counter(
        tmp_path: Path, policy: str, runs: int, ran: int, latest_ago: float) -> None:
    """Six fire times passed while no process served the schedule (the issue's restart): the
    log, RunMissed and the job's statistics say 6 missed, `ran` of them run, and the store's
    counter (the command's `missed`) says 6 too, for each policy; under "all" the six runs
    are six claims, and their counts add up to the one announced. The latest of the six fell
    due `latest_ago` seconds before the restart: within `UNWATCHED_AFTER` of the walk's last
    claim or not, it is one of the group that was announced (a walk once counted it on time
    when the restart came within seconds of it)."""
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    # A grid of minutes a day old whose latest point is `latest_ago` seconds back.
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=1, seconds=latest_ago)
    _moved_back(db, 60, dt.timedelta(minutes=6), policy, start)
    events, missed, missed_run, counter = _serve(db, 60, policy, runs, start)
    assert [(e.count, e.ran) for e in events] == [(6, ran)]  # type: ignore[attr-defined]
    assert (missed, missed_run) == (6, ran)
    assert counter == 6


def test_a_group_run_behind_counts_the_same_in_the_store_and_in_memory(tmp_path: Path) -> None:
    """Fire times due together while the process watched (reason "behind": the latest one
    runs on time, the others are missed) count the same in the store's counter as announced;
    and a memory schedule after the issue's restart (six fire times passed, `since`) counts
    6 missed, 1 run, as the store does (the test above)."""
    db = f"sqlite:///{tmp_path / 'jobs.db'}"
    _moved_back(db, 0.5, dt.timedelta(seconds=2), "latest")
    events, missed, _, counter = _serve(db, 0.5, "latest", 1)
    assert events and events[0].reason == "behind"  # type: ignore[attr-defined]
    assert counter == sum(e.count for e in events) == missed  # type: ignore[attr-defined]
    # In memory: six fire times passed since the state was saved (a restart with `since`),
    # the latest 30 s ago: counted as the store counts the restart above.
    start = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=6) + dt.timedelta(seconds=30)
    got: list[ServiceEvent] = []
    with BackgroundService() as svc:
        svc.subscribe(got.append, RunMissed)
        job = svc.schedule(Interval(60, start=start), _nothing, name="m",
                           since=start - dt.timedelta(microseconds=1))
        wait_until(lambda: bool(got) and job.statistics().runs >= 1, 10)
        stats = job.statistics()
    assert [(e.count, e.ran) for e in got] == [(6, 1)]  # type: ignore[attr-defined]
    assert (stats.missed, stats.missed_run) == (6, 1)


def _nothing() -> None:
    """A memory schedule's target."""
