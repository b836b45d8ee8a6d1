"""What the SQLite schedule store adds to the store contract: change stamps read by
`changed_since`, batched completions, and files made before the stamps existed."""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from executors._service.sqlite_schedules import SQLiteScheduleStore
from executors._service.store import Plan, ScheduleDefinition, ScheduleRecord

PERIOD = dt.timedelta(seconds=60)


def definition(name: str) -> ScheduleDefinition:
    return ScheduleDefinition(name, {"type": "interval", "seconds": 60.0},
                              "tests.test_sqlite_schedules:definition", [name], {}, {})


def next_period(record: ScheduleRecord, now: dt.datetime) -> Plan:
    assert record.next_fire is not None
    return Plan(record.next_fire, record.next_fire + PERIOD, 0)


def drop(record: ScheduleRecord) -> str:
    return "drop"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteScheduleStore]:
    s = SQLiteScheduleStore(str(tmp_path / "jobs.db"))
    yield s
    s.close()


def declare(store: SQLiteScheduleStore, name: str, due: bool) -> None:
    offset = dt.timedelta(seconds=-1 if due else 3600)
    store.declare(definition(name), lambda now: now + offset)


def claim_all(store: SQLiteScheduleStore) -> list[object]:
    return store.claim("p1", lease=30.0, limit=100, planner=next_period,
                       on_crash=drop)  # type: ignore[arg-type]


def test_changed_since_reads_the_rows_written_after_the_mark_and_a_removal_reads_all(
        store: SQLiteScheduleStore) -> None:
    """A first look (mark None) is whole; later looks hold only the records written since the
    mark (a claim, a pause); after a removal the next look is whole again (the removed name
    is gone from it); nothing written: nothing read."""
    for name in ("a", "b", "c"):
        declare(store, name, due=name == "a")
    first = store.changed_since(None)
    assert first.whole and [r.name for r in first.records] == ["a", "b", "c"]
    assert len(claim_all(store)) == 1
    assert store.set_paused("c", True)
    later = store.changed_since(first.mark)
    assert not later.whole and [r.name for r in later.records] == ["a", "c"]
    assert later.records[0].running_fire is not None and later.records[1].paused
    quiet = store.changed_since(later.mark)
    assert not quiet.whole and quiet.records == [] and quiet.mark == later.mark
    assert store.remove("c")
    after = store.changed_since(quiet.mark)
    assert after.whole and [r.name for r in after.records] == ["a", "b"]
    assert store.changed_since(after.mark).records == []


def test_removing_the_latest_written_record_still_moves_the_mark_on(
        store: SQLiteScheduleStore) -> None:
    """The removal of the record holding the largest stamp is seen (the removal's stamp is
    taken before the row goes), and a write after it is read by a later look."""
    declare(store, "a", due=False)
    declare(store, "b", due=False)
    mark = store.changed_since(None).mark
    assert store.remove("b")
    seen = store.changed_since(mark)
    assert seen.whole and [r.name for r in seen.records] == ["a"]
    assert store.set_paused("a", True)
    assert [r.name for r in store.changed_since(seen.mark).records] == ["a"]


def test_complete_many_writes_each_fenced_completion_in_one_batch(
        store: SQLiteScheduleStore) -> None:
    """Each completion of a batch counts its run (a failure as one too) and lets its lease
    go; a stale one (its record moved on) is refused, the others are still written."""
    declare(store, "ok", due=True)
    declare(store, "bad", due=True)
    claims = {c.name: c for c in claim_all(store)}  # type: ignore[attr-defined]
    assert store.complete(claims["ok"], "ok")
    answers = store.complete_many([(claims["ok"], "ok"), (claims["bad"], "error: E: x")])
    assert answers == [False, True]
    ok, bad = store.get("ok"), store.get("bad")
    assert ok is not None and bad is not None
    assert ok.counters["runs"] == 1 and ok.counters["failures"] == 0
    assert bad.counters["runs"] == 1 and bad.counters["failures"] == 1
    assert bad.last_result == "error: E: x" and bad.last_fire == claims["bad"].fire_time
    assert bad.owner is None and bad.running_fire is None and bad.lease_until is None


def test_a_file_made_before_the_change_stamps_gains_them_and_a_hand_edit_shows_when_whole(
        tmp_path: Path) -> None:
    """Opening a file whose table lacks the ``changed`` column adds it, keeping its records;
    a row edited by hand (no stamp) is not in a later look, but is in a whole one."""
    path = str(tmp_path / "old.db")
    old = SQLiteScheduleStore(path)
    declare(old, "kept", due=False)
    old.close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP INDEX executors_schedules_changed")
        conn.execute("ALTER TABLE executors_schedules DROP COLUMN changed")
        conn.execute("DELETE FROM executors_meta WHERE key = 'removed'")
    store = SQLiteScheduleStore(path)
    try:
        first = store.changed_since(None)
        assert [r.name for r in first.records] == ["kept"]
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE executors_schedules SET paused = 1")
        assert store.changed_since(first.mark).records == []
        (record,) = store.changed_since(None).records
        assert record.paused
    finally:
        store.close()


def _claim_while_planning(store: SQLiteScheduleStore, during: Callable[[], object]
                          ) -> list[str]:
    """Claim on a thread whose planner is stuck (a trigger search that takes long) until
    `during()` has run; the names claimed."""
    entered, release = threading.Event(), threading.Event()
    result: list[list[str]] = []

    def planner(record: ScheduleRecord, now: dt.datetime) -> Plan:
        entered.set()
        assert release.wait(10)
        return next_period(record, now)

    claimer = threading.Thread(target=lambda: result.append(sorted(c.name for c in store.claim(
        "p1", lease=30.0, limit=100, planner=planner, on_crash=drop))))  # type: ignore[arg-type]
    claimer.start()
    try:
        assert entered.wait(10)
        during()
    finally:
        release.set()
        claimer.join(10)
    return result[0]


def test_a_slow_plan_holds_no_lock_other_connections_write_meanwhile(
        store: SQLiteScheduleStore, tmp_path: Path) -> None:
    """A claim plans with no lock held: while its planner is stuck, another connection takes
    the file's write lock at once (``BEGIN IMMEDIATE`` with no busy wait) and writes; the
    claim then writes its plan, conditional on the record being as read."""
    declare(store, "a", due=True)
    declare(store, "b", due=True)

    def write() -> None:
        with contextlib.closing(sqlite3.connect(tmp_path / "jobs.db", timeout=0,
                                                isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")  # "database is locked" if the claim held it
            other.execute("UPDATE executors_meta SET value = value WHERE key = 'format'")
            other.execute("COMMIT")

    assert _claim_while_planning(store, write) == ["a", "b"]


def test_a_record_written_while_its_claim_plans_is_left_as_written(
        store: SQLiteScheduleStore, tmp_path: Path) -> None:
    """The claim's write is conditional on the row as read (version and lease): a record
    paused by another process while the claim planned is not claimed (it stays paused, no
    owner); the other due record, untouched, is."""
    declare(store, "a", due=True)
    declare(store, "b", due=True)
    other = SQLiteScheduleStore(str(tmp_path / "jobs.db"))
    assert _claim_while_planning(store, lambda: other.set_paused("a", True)) == ["b"]
    paused = other.get("a")
    assert paused is not None and paused.paused and paused.owner is None
    assert paused.running_fire is None
    other.close()


def test_a_slow_plan_gives_its_claims_a_full_lease_from_their_write(
        store: SQLiteScheduleStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan that took longer than the bound starts its leases at the write, not at the
    read: a claim planned for 0.3 s (past a bound made 0.1 s) holds its full 30 s from the
    write, and the claim and the record agree."""
    from executors._service import sqlite_schedules
    from executors.testing import wait_until

    monkeypatch.setattr(sqlite_schedules, "_REBASE_AFTER", 0.1)
    declare(store, "a", due=True)
    read: list[dt.datetime] = []

    def slow(record: ScheduleRecord, now: dt.datetime) -> Plan:
        read.append(now)
        # A trigger search that takes 0.3 s of the store's clock.
        wait_until(lambda: store.now() >= now + dt.timedelta(seconds=0.3), 5)
        return next_period(record, now)

    (claim,) = store.claim("p1", lease=30.0, limit=100, planner=slow,
                           on_crash=drop)  # type: ignore[arg-type]
    record = store.get("a")
    assert record is not None and record.lease_until == claim.lease_until
    assert claim.lease_until >= read[0] + dt.timedelta(seconds=30.3)


def test_a_claim_walks_the_partial_indexes_in_order_and_sorts_nothing(
        store: SQLiteScheduleStore) -> None:
    """A claim's reads (expired leases, then due records, of the declared names) are ordered
    walks of the partial indexes that stop at the batch's limit: no temporary b-tree sorts
    every due record, and the declared names are tested row by row (a lookup in the
    connection's table), not looked up one by one and sorted."""
    from executors._service import sqlite_schedules as sq
    from executors._service.claimable import Claimable

    declare(store, "a", due=True)
    conn = store._conn()
    where, _ = store._only(conn, Claimable(frozenset({"a"})))
    plans = {name: " | ".join(row[3] for row in conn.execute(
        "EXPLAIN QUERY PLAN " + sql.format(where=where), (0.0, 100)))
        for name, sql in (("expired", sq._EXPIRED), ("due", sq._DUE))}
    assert "executors_schedules_running" in plans["expired"], plans
    assert "executors_schedules_due" in plans["due"], plans
    assert not any("TEMP B-TREE" in plan or "SCAN" in plan for plan in plans.values()), plans
