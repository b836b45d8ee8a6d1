"""The copy of the store's records behind `status()` is read off the store loop: a slow read
(100,000 records take seconds on a server) delays no claim and no lease renewal, a copy read
before a claim or a pause does not undo them on the job, and shutdown interrupts it at its
deadline (or says it could not)."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import stored_jobs

from executors import BackgroundService, Interval
from executors._service import stored_status
from executors.stores import Claim, MemoryStore, ScheduleRecord
from executors.testing import wait_until


class SlowRecords:
    """A memory store whose `records()` reads, then blocks until `allow` lets that many reads
    end (a read of a large store on a slow server): it returns what it read before."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.blocked = threading.Event()  # a read is blocked
        self.reads = 0
        self.allowed = 0
        self.cond = threading.Condition()
        self.renewals = 0

    def allow(self, reads: int) -> None:
        with self.cond:
            self.allowed = reads
            self.cond.notify_all()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)  # the rest of the store, as it is

    def records(self) -> list[ScheduleRecord]:
        read = self.inner.records()
        with self.cond:
            self.reads += 1
            self.blocked.set()
            self.cond.wait_for(lambda: self.allowed >= self.reads, 30)
        return read

    def renew(self, claim: Claim, lease: float) -> bool:
        self.renewals += 1
        return self.inner.renew(claim, lease)


@pytest.fixture
def store() -> Iterator[SlowRecords]:
    stored_jobs.SEEN.clear()
    slow = SlowRecords()
    yield slow
    slow.allow(1_000_000)  # never leave a reader blocked behind a failed test
    stored_jobs.SEEN.clear()


def _names(svc: BackgroundService) -> set[str]:
    store = svc.status().store
    assert store is not None
    return {s.name for s in store.schedules}


def _snapshot_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("-store-snapshot")]


def test_a_blocked_snapshot_delays_no_claim_and_no_renewal(store: SlowRecords) -> None:
    """While the read behind status() is blocked, a schedule due every 0.2 s keeps running
    and a long run's lease (0.6 s, renewed every 0.2 s) keeps being renewed and is not lost."""
    with tempfile.TemporaryDirectory() as tmp, \
            BackgroundService(store=store, store_lease=0.6, workers=4) as svc:
        svc.schedule(Interval(0.2), stored_jobs.seen, "fast", name="fast")
        svc.schedule(Interval(0.2), stored_jobs.hold, str(Path(tmp) / "log"), 1.5,
                     name="long")
        assert store.blocked.wait(10)  # the first read, at start, is blocked
        wait_until(lambda: store.renewals >= 3, 10)
        runs = len(stored_jobs.SEEN)
        wait_until(lambda: len(stored_jobs.SEEN) >= runs + 5, 10)
        assert store.reads == 1 and svc.status().store.lease_lost == 0  # type: ignore[union-attr]
        store.allow(1_000_000)
        wait_until(lambda: _names(svc) == {"fast", "long"}, 10)


def test_a_copy_read_before_a_claim_and_a_pause_does_not_undo_them(
        store: SlowRecords) -> None:
    """A read that began before the loop claimed a schedule (moving its next fire time) and
    paused it does not put the older next fire time and the unpaused state back on the job
    when it ends."""
    svc = BackgroundService(store=store)
    job = svc.schedule(Interval(0.2), stored_jobs.seen, "fast", name="fast")
    with svc:  # declared at start: the first read has it
        assert store.blocked.wait(10)
        wait_until(lambda: len(stored_jobs.SEEN) >= 3, 10)
        job.pause()
        wait_until(lambda: store.get("fast").paused, 5)  # type: ignore[union-attr]
        assert job._wall is not None
        fire = job._wall.fire
        store.allow(1)
        wait_until(lambda: store.reads >= 2, 10)  # the first read has been applied
        # The copy shows the record as read (before the claims); the job keeps its own.
        listed = svc.status().store.schedules  # type: ignore[union-attr]
        assert [s.paused for s in listed] == [False]
        assert job._wall.fire == fire and job.statistics().state == "paused"
        store.allow(1_000_000)


def test_shutdown_interrupts_a_blocked_snapshot_read_and_leaves_no_thread(
        store: SlowRecords) -> None:
    """A read still hanging 1 s before the shutdown's deadline is interrupted (the store's
    ``interrupt``): the reader ends by the deadline and the report is complete."""
    store.interrupt = lambda: store.allow(1_000_000)  # type: ignore[method-assign,attr-defined]
    svc = BackgroundService(store=store).start()
    svc.schedule(Interval(0.2), stored_jobs.seen, "fast", name="fast")
    assert store.blocked.wait(10)
    report = svc.shutdown(timeout=2)
    assert report.completed and 0.9 < report.elapsed < 2.5, report
    assert not _snapshot_threads()


def test_shutdown_reports_a_snapshot_read_it_could_not_interrupt(store: SlowRecords) -> None:
    """A store that cannot interrupt a hanging read (no ``interrupt``): shutdown returns at
    its deadline and says the service did not stop (``completed=False``: the reader is
    still reading); the reader ends, and closes nothing twice, once its read returns."""
    before = set(threading.enumerate())
    svc = BackgroundService(store=store).start()
    svc.schedule(Interval(0.2), stored_jobs.seen, "fast", name="fast")
    assert store.blocked.wait(10)
    began = time.monotonic()
    report = svc.shutdown(timeout=2)
    took = time.monotonic() - began
    assert not report.completed and 1.9 < took < 3.0, (report, took)
    assert _snapshot_threads()  # still reading
    store.allow(1_000_000)
    wait_until(lambda: not _snapshot_threads(), 10)
    wait_until(lambda: set(threading.enumerate()) <= before, 10)


@pytest.mark.usefixtures("store")  # for its clean SEEN
def test_a_snapshot_that_fails_is_a_store_error_and_the_service_goes_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read behind status() that raises (the store went down) is counted and reported
    like any store error; claims go on and a later read succeeds."""
    # The later read comes SNAPSHOT_EVERY (5 s of the real clock) after the failed one.
    monkeypatch.setattr(stored_status, "SNAPSHOT_EVERY", 0.5)

    class Flaky(SlowRecords):
        fail = True

        def records(self) -> list[ScheduleRecord]:
            if self.fail:
                raise ConnectionError("store down")
            return self.inner.records()

    flaky = Flaky()
    with BackgroundService(store=flaky) as svc:
        svc.schedule(Interval(0.2), stored_jobs.seen, "fast", name="fast")
        wait_until(lambda: svc.status().store.store_errors >= 1, 10)  # type: ignore[union-attr]
        assert "store down" in (svc.status().store.last_error or "")  # type: ignore[union-attr]
        runs = len(stored_jobs.SEEN)
        wait_until(lambda: len(stored_jobs.SEEN) >= runs + 3, 10)
        flaky.fail = False
        wait_until(lambda: svc.status().store.schedules, 15)  # type: ignore[union-attr]


def test_the_copy_behind_status_keeps_rows_not_the_store_records(
        store: SlowRecords, monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy behind status() keeps each schedule's row and its definition's digest, never
    the record the store decoded (10,000 decoded records weighed some 30 MB on PostgreSQL,
    their rows a few), and a row whose record has not changed is kept, not made again."""
    monkeypatch.setattr(stored_status, "SNAPSHOT_EVERY", 0.05)  # many reads in a short test
    store.allow(1_000_000)

    def read_twice(svc: BackgroundService) -> None:
        reads = store.reads  # counted as a read starts: two more, and one has ended since
        wait_until(lambda: svc.status() is not None and store.reads >= reads + 2, 10)

    with BackgroundService(store=store) as svc:
        svc.schedule(Interval(3600), stored_jobs.seen, "hourly", name="hourly")
        wait_until(lambda: _names(svc) == {"hourly"}, 10)
        read_twice(svc)
        snapshots = svc._store.snapshots  # type: ignore[union-attr]
        parts = [part for entry in snapshots.listed.values() for part in entry]
        assert parts and not any(isinstance(part, ScheduleRecord) for part in parts), parts
        first = svc.status().store.schedules  # type: ignore[union-attr]
        read_twice(svc)
        again = svc.status().store.schedules  # type: ignore[union-attr]
        assert len(again) == 1 and again[0] is first[0]


def test_schedules_of_one_expression_share_their_trigger_and_their_rows_their_times(
        tmp_path: Path) -> None:
    """`cron()` gives schedules of equal arguments one trigger (an immutable value: 10,000
    schedules of sixty expressions hold sixty), not one made of equal arguments of another
    kind (``jitter=True`` is refused, though ``jitter=1`` made one); the rows behind
    `status()` share the text of an instant they show alike."""
    from executors import Cron

    svc = BackgroundService(store=f"sqlite:///{tmp_path / 'jobs.db'}")
    # Declared together at the start, so that one read of the store lists the three (a
    # text is shared within a read: rows read apart, declared apart, hold their own).
    jobs = [svc.cron("0 0 * * * *", stored_jobs.seen, tz="UTC", name=f"s{k}")
            for k in range(3)]
    with svc:
        assert jobs[0].trigger is jobs[1].trigger is jobs[2].trigger
        assert jobs[0].trigger == Cron("0 0 * * * *", tz="UTC")
        assert svc.cron("0 0 * * * *", stored_jobs.seen, tz="UTC", jitter=1,
                        name="j").trigger is not jobs[0].trigger
        with pytest.raises(TypeError, match="jitter"):
            svc.cron("0 0 * * * *", stored_jobs.seen, tz="UTC", jitter=True, name="k")

        def rows() -> list[object]:
            status = svc.status().store
            return [] if status is None else [
                r.next_fire for r in status.schedules if r.name.startswith("s")]

        wait_until(lambda: len(rows()) == 3 and None not in rows(), 15)
        first, *others = rows()
        assert all(other is first for other in others), rows()


def test_status_describes_a_schedule_whose_trigger_another_process_changed_anew(
        tmp_path: Path) -> None:
    """The copy behind `status()` keeps a schedule's trigger description while its trigger
    data stays the same (a run moved its record on), and describes it anew when another
    process declares the schedule with a different trigger."""
    db = f"sqlite:///{tmp_path / 'jobs.db'}"

    def listed(svc: BackgroundService) -> list[tuple[str, str]]:
        status = svc.status().store
        assert status is not None
        return [(s.name, s.trigger) for s in status.schedules]

    with BackgroundService("watcher", store=db) as watcher:
        with BackgroundService("a", store=db) as svc:
            svc.schedule(Interval(3600), stored_jobs.seen, name="x")
            wait_until(lambda: len(listed(watcher)) == 1, 15)
        hourly = listed(watcher)[0][1]
        with BackgroundService("b", store=db) as svc:
            svc.schedule(Interval(120), stored_jobs.seen, name="x")
            wait_until(lambda: listed(watcher)[0][1] != hourly, 15)
            # b's own copy: the same description.
            wait_until(lambda: listed(svc) == listed(watcher), 15)
        assert "3600" in hourly or "1h" in hourly or "hour" in hourly, hourly
