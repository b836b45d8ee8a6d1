"""What the SQLite schedule store adds to the store contract: change stamps read by
`changed_since` (the capability's contract: tests/integrations/test_store_capabilities.py),
and files made before the stamps existed."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from executors._clock import SKEW_ENV
from executors.stores import (
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    SQLiteScheduleStore,
    StoreFormatError,
    open_store,
    sqlite_path,
)
from executors.stores._sqlite_checkpoint import LOG_LIMIT
from executors.testing import wait_until

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


def _older_file(path: str, name: str, *statements: str) -> None:
    """A store file at `path` holding `name`, then made as an older version made it: the
    change stamps' index dropped, then each of `statements`."""
    made = SQLiteScheduleStore(path)
    declare(made, name, due=False)
    made.close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP INDEX executors_schedules_changed")
        for statement in statements:
            conn.execute(statement)


def test_a_store_opened_while_another_process_holds_the_file_s_lock_waits_for_it(
        tmp_path: Path) -> None:
    """Two processes opening one new file together (workers of one server starting): the
    one that finds the file locked (the other making its schema, or writing its first batch
    of declarations) waits for the lock, up to its busy timeout, as any of its writes
    does; it is not refused "database is locked" after one attempt."""
    path = str(tmp_path / "jobs.db")
    SQLiteScheduleStore(path).close()  # the file exists, in WAL mode
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # what a schema change or a long write holds
    released = threading.Timer(1.5, holder.execute, ("COMMIT",))
    released.start()
    try:
        store = SQLiteScheduleStore(str(tmp_path / "jobs.db"), busy_timeout=10.0)
        store.close()
    finally:
        released.join()
        holder.close()
    fresh = str(tmp_path / "fresh.db")
    SQLiteScheduleStore(fresh).close()
    holder = sqlite3.connect(fresh, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(ConnectionError, match="locked"):
            SQLiteScheduleStore(fresh, busy_timeout=0.6)  # its own deadline still holds
    finally:
        holder.close()


def test_a_row_read_again_unchanged_is_not_decoded_again(tmp_path: Path) -> None:
    """A row read again as it was is answered with the record decoded from it (a due row the
    status copy read since it last changed: the claim decodes nothing); a row another
    process changed, or one changed by hand without its version, reads as it now is."""
    path = str(tmp_path / "jobs.db")
    store, other = SQLiteScheduleStore(path), SQLiteScheduleStore(path)
    try:
        declare(store, "a", due=False)
        first = store.get("a")
        assert first is not None and store.get("a") is first
        assert store.records() == [first] and store.records()[0] is first
        assert other.set_paused("a", True)
        paused = store.get("a")
        assert paused is not None and paused.paused and paused.version == first.version + 1
        assert paused.definition is first.definition  # the same text: decoded once
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE executors_schedules SET paused = 0")  # the version kept
        by_hand = store.get("a")
        assert by_hand is not None and not by_hand.paused and by_hand.version == paused.version
    finally:
        store.close()
        other.close()


def test_a_file_made_before_the_change_stamps_gains_them_and_a_hand_edit_shows_when_whole(
        tmp_path: Path) -> None:
    """Opening a file whose table lacks the ``changed`` column adds it, keeping its records;
    a row edited by hand (no stamp) is not in a later look, but is in a whole one."""
    path = str(tmp_path / "old.db")
    _older_file(path, "kept", "ALTER TABLE executors_schedules DROP COLUMN changed",
                "DELETE FROM executors_meta WHERE key = 'removed'")
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
              "from executors.stores import SQLiteScheduleStore\n"
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

def _schema(path: Path) -> list[tuple[str, str]]:
    """What the file holds: every table, index and view, by type and name."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute("SELECT type, name FROM sqlite_master"))


@pytest.mark.parametrize(("stored", "message"), [
    ("99", "written by store format 99; this version of executors reads format"),
    ("1.5", "records store format '1.5', not a number"),
    ("new", "records store format 'new', not a number"),
])
def test_a_newer_or_unreadable_format_is_refused_before_anything_is_added(
        tmp_path: Path, stored: str, message: str) -> None:
    """The format is read first, read-only: a file of a newer format (or one whose format is
    not a number: a StoreFormatError, not int()'s ValueError) is refused with no table,
    column or index added to it."""
    path = tmp_path / "new.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE executors_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO executors_meta VALUES ('format', ?)", (stored,))
    before = _schema(path)
    with pytest.raises(StoreFormatError, match=re.escape(message)):
        SQLiteScheduleStore(str(path))
    assert _schema(path) == before


def test_a_database_that_is_not_a_store_is_refused_unaltered_when_a_store_is_required(
        tmp_path: Path) -> None:
    """Opened as an existing store (``create=False``) or read-only, a SQLite database of
    something else is refused, and nothing is added to it; a file that is not SQLite at all
    is a StoreFormatError naming it."""
    path = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    before = _schema(path)
    for options in ({"create": False}, {"read_only": True}):
        with pytest.raises(StoreFormatError, match="holds no schedule store"):
            SQLiteScheduleStore(str(path), **options)  # type: ignore[arg-type]
    assert _schema(path) == before
    text = tmp_path / "notes.txt"
    text.write_text("not a database, " * 100)
    with pytest.raises(StoreFormatError, match="is not a SQLite database"):
        SQLiteScheduleStore(str(text))


def test_a_read_only_store_reads_and_never_writes(tmp_path: Path) -> None:
    """A store opened read-only lists the records, adds nothing (a file made before the
    later columns is read as it is), and refuses a write."""
    path = tmp_path / "jobs.db"
    _older_file(str(path), "a", "ALTER TABLE executors_schedules DROP COLUMN claim_token",
                "ALTER TABLE executors_schedules DROP COLUMN changed")
    before, content = _schema(path), path.read_bytes()
    reader = SQLiteScheduleStore(str(path), read_only=True)
    try:
        assert [r.name for r in reader.records()] == ["a"] and reader.corrupt() == []
        assert reader.get("a") is not None and reader.now() is not None
        with pytest.raises(sqlite3.OperationalError, match=r"readonly|view"):
            reader.set_paused("a", True)
    finally:
        reader.close()
    assert _schema(path) == before and path.read_bytes() == content


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o277])
def test_a_new_store_file_and_its_companions_are_owner_only_whatever_the_umask(
        tmp_path: Path, umask: int) -> None:
    """A new store file is created 0600 (not 0644 under the usual umask), and so are the
    -wal and -shm files SQLite makes beside it."""
    path = tmp_path / "jobs.db"
    old = os.umask(umask)
    try:
        store = SQLiteScheduleStore(str(path))
    finally:
        os.umask(old)
    try:
        declare(store, "a", due=False)
        for name in ("jobs.db", "jobs.db-wal", "jobs.db-shm"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
    finally:
        store.close()


def test_an_existing_files_permissions_are_left_alone(tmp_path: Path) -> None:
    """A file that exists keeps the permissions its owner gave it."""
    path = tmp_path / "jobs.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    SQLiteScheduleStore(str(path)).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize(("where", "reason"), [
    ("folder", "it is a folder, not a file"),
    ("missing/jobs.db", "does not exist"),
])
def test_a_place_with_no_file_is_a_connection_error_naming_the_path(
        tmp_path: Path, where: str, reason: str) -> None:
    """A folder or a missing folder is the documented ConnectionError naming the path, from
    the store and from the service, not sqlite3's bare "unable to open database file"."""
    from executors import BackgroundService

    (tmp_path / "folder").mkdir()
    path = tmp_path / where
    for opening in (lambda: SQLiteScheduleStore(str(path)),
                    lambda: BackgroundService("s", store=f"sqlite:///{path}")):
        with pytest.raises(ConnectionError) as info:
            opening()
        assert repr(str(path)) in str(info.value) and reason in str(info.value)
    assert not (tmp_path / "missing").exists()


def test_a_read_only_location_is_a_connection_error_naming_the_path(tmp_path: Path) -> None:
    """A store in a folder where its process cannot create a file is the documented
    ConnectionError naming the path and saying why. (Root writes a folder whatever its
    mode: for root, sysfs's top folder, where not even root creates a file.)"""
    if os.geteuid() == 0:
        folder = Path("/sys")
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
    path = folder / "executors-test-jobs.db"
    try:
        with pytest.raises(ConnectionError) as info:
            SQLiteScheduleStore(str(path))
    finally:
        if folder != Path("/sys"):
            folder.chmod(0o755)
    message = str(info.value)
    assert message.startswith("cannot open the schedule store") and repr(str(path)) in message
    assert "read-only location" in message
    assert not path.exists()


@pytest.mark.parametrize(("url", "named"), [
    ("sqlite:/jobs.db", "has fewer than three slashes"),
    ("sqlite:jobs.db", "has fewer than three slashes"),
    ("sqlite://host/jobs.db", "has a host"),
    ("sqlite://", "names no file"),
    ("sqlite:///jobs.db?mode=ro", "has a query ('?mode=ro')"),
    ("sqlite:///jobs.db#main", "has a fragment ('#main')"),
])
def test_a_sqlite_url_of_another_form_is_refused_naming_the_two_forms(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, named: str) -> None:
    """Only ``sqlite:///relative`` and ``sqlite:////absolute`` are read: ``sqlite:/jobs.db``
    does not create the root's /jobs.db, nor ``?mode=ro`` a file of that name; each is a
    ValueError saying what is wrong and the two accepted forms, and no file is made."""
    monkeypatch.chdir(tmp_path)
    at_root = os.path.exists("/jobs.db")
    with pytest.raises(ValueError) as info:
        open_store(url)
    assert named in str(info.value) and repr(url) in str(info.value)
    assert "sqlite:///jobs.db (a file relative" in str(info.value)
    assert "sqlite:////srv/jobs.db (an absolute path)" in str(info.value)
    assert list(tmp_path.iterdir()) == [] and os.path.exists("/jobs.db") == at_root


def test_the_two_sqlite_forms_name_a_relative_and_an_absolute_file() -> None:
    """Three slashes: relative to the working folder; four: absolute; the scheme in any
    case."""
    assert sqlite_path("sqlite:///jobs.db") == "jobs.db"
    assert sqlite_path("sqlite:///data/jobs.db") == "data/jobs.db"
    assert sqlite_path("sqlite:////srv/jobs.db") == "/srv/jobs.db"
    assert sqlite_path("SQLite:///jobs.db") == "jobs.db"


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
    from executors.stores import _sqlite as sqlite_schedules

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
    from executors.stores import Claimable
    from executors.stores import _sqlite_sql as sq

    declare(store, "a", due=True)
    conn = store._conn()
    where, _ = store._only(conn, Claimable(frozenset({"a"})))
    plans = {name: " | ".join(row[3] for row in conn.execute(
        "EXPLAIN QUERY PLAN " + sql.format(where=where), (0.0, 100)))
        for name, sql in (("expired", sq.EXPIRED), ("due", sq.DUE))}
    assert "executors_schedules_running" in plans["expired"], plans
    assert "executors_schedules_due" in plans["due"], plans
    assert not any("TEMP B-TREE" in plan or "SCAN" in plan for plan in plans.values()), plans


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "executors-sqlite-checkpoint"]


def _toggle(store: SQLiteScheduleStore, wal: Path, commits: int, *,
            pause_every: int | None) -> int:
    """Declare "a", then pause and resume it in `commits` commits of one row (a 20 ms pause
    every `pause_every` commits, as between a service's claims); the log's largest size."""
    declare(store, "a", due=False)
    largest = 0
    for k in range(commits):
        store.set_paused("a", k % 2 == 0)
        largest = max(largest, wal.stat().st_size)
        if pause_every is not None and k % pause_every == 0:
            time.sleep(0.02)
    return largest


def test_commits_never_checkpoint_and_a_thread_of_its_own_keeps_the_log_bounded(
        tmp_path: Path) -> None:
    """SQLite's auto-checkpoint would copy the log back inside the commit that crosses its
    threshold (a claim's tail latency); the store's connections turn it off. Commits with a
    pause now and then (as a service's claims come) are copied back by the store's thread
    alone, and the log file stays near `LOG_LIMIT`: 3,000 commits of one row, about 24 MB of
    log if nothing copied it back. `close` ends the thread."""
    store = SQLiteScheduleStore(str(tmp_path / "jobs.db"))
    try:
        assert store._conn().execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
        largest = _toggle(store, tmp_path / "jobs.db-wal", 3000, pause_every=50)
        assert store._checkpoints.by_thread >= 2
        assert store._checkpoints.by_commits == 0
        assert largest <= 2 * LOG_LIMIT, largest
        assert len(_checkpoint_threads()) == 1
    finally:
        store.close()
    assert _checkpoint_threads() == []


def test_a_tight_loop_of_commits_keeps_the_log_bounded(tmp_path: Path) -> None:
    """Writers that never pause keep a passive checkpoint from ever copying the whole log;
    past twice `LOG_LIMIT` a commit checkpoints itself, and the log, truncated to the limit
    when it restarts, stays near it. 4,000 commits of one row each, about 30 MB of log if
    nothing copied it back."""
    store = SQLiteScheduleStore(str(tmp_path / "jobs.db"))
    try:
        largest = _toggle(store, tmp_path / "jobs.db-wal", 4000, pause_every=None)
        assert largest < 2 * LOG_LIMIT + 2**20, largest
        assert store.get("a") is not None
    finally:
        store.close()


def test_a_store_that_writes_little_starts_no_checkpoint_thread(store: SQLiteScheduleStore
                                                                ) -> None:
    declare(store, "a", due=True)
    assert len(claim_all(store)) == 1
    assert _checkpoint_threads() == []
