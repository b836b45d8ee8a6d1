"""What the SQLite schedule store adds to the store contract: change stamps read by
`changed_since`, batched completions, and files made before the stamps existed."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from executors._clock import SKEW_ENV
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


def test_the_store_clock_is_the_process_s_own_and_the_skew_hook_reaches_it(
        store: SQLiteScheduleStore, tmp_path: Path) -> None:
    """SQLite reads ``julianday('now')`` in the process running the statement: the store's
    clock is that process's. The race tests' wall-skew hook (`SKEW_ENV`) shifts it as a faked
    clock would: a process skewed by +90 s reads the same file's clock 90 s ahead."""
    script = ("import sys\n"
              "from executors._service.sqlite_schedules import SQLiteScheduleStore\n"
              "s = SQLiteScheduleStore(sys.argv[1])\n"
              "print(s.now().timestamp())\n"
              "s.close()\n")
    env = {**os.environ, SKEW_ENV: "90"}
    before = store.now().timestamp()
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "jobs.db")], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    after = store.now().timestamp()
    skewed = float(done.stdout)
    assert before + 90 <= skewed <= after + 90
