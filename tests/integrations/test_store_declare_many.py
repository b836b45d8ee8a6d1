"""Declaring a batch of schedules at once (`SupportsDeclareMany`): the same outcomes as one by
one, each schedule's failure its own, and on PostgreSQL an unchanged batch costs one round
trip to the server, measured on the wire (libpq's trace of the store's connection)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg
import pytest
from helpers import stored_jobs
from helpers.store_urls import corrupt, empty_store_url

from executors import BackgroundService, Interval
from executors._service.stored_declare import DECLARE_BATCH
from executors.stores import (
    UTC,
    Declared,
    MemoryStore,
    ScheduleDefinition,
    ScheduleStore,
    SQLiteScheduleStore,
    SupportsDeclareMany,
    offered,
    open_store,
    record_fields,
    sqlite_path,
)
from executors.testing import wait_until
from integrations.schedule_stores.postgres import PostgresScheduleStore

FirstFire = Callable[[dt.datetime], dt.datetime | None]
AT = dt.datetime(2030, 1, 1, tzinfo=UTC)


def definition(name: str, period: float = 60.0, **changes: object) -> ScheduleDefinition:
    made = ScheduleDefinition(name, {"type": "interval", "seconds": period},
                              "tests.test_store_declare_many:target", [1, "a"], {}, {})
    return dataclasses.replace(made, **changes)  # type: ignore[arg-type]


def at(offset: float) -> FirstFire:
    """A first fire time that does not depend on when the test runs."""
    return lambda now: AT + dt.timedelta(seconds=offset)


def _many(store: ScheduleStore) -> SupportsDeclareMany:
    many = offered(store, SupportsDeclareMany)
    assert many is not None, f"{store!r} does not offer declare_many"
    return many


def _prepared(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> ScheduleStore:
    """A new store holding "same" (paused), "changed" (period 60) and, but in memory,
    "corrupt" (unreadable); "new" is not there."""
    url = empty_store_url(kind, request, tmp_path)
    store = open_store(url)
    for name in ("same", "changed", "corrupt"):
        store.declare(definition(name), at(1))
    store.set_paused("same", True)
    if kind == "memory":
        store.remove("corrupt")
    else:
        corrupt(url, "corrupt", {"trigger": 3})
    return store


def _batch() -> list[tuple[ScheduleDefinition, FirstFire]]:
    return [(definition("same"), at(2)), (definition("changed", 120.0), at(3)),
            (definition("corrupt"), at(4)), (definition("new"), at(5))]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_batch_declares_what_one_by_one_declares(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """`declare_many` answers and stores what `declare` called for each in turn does, on a
    store prepared the same way: unchanged (its pause kept, its fire time not moved),
    changed (the definition written, the state kept), replaced (an unreadable record; in
    memory none can be, so added) and added; the stored records are equal field by field."""
    answers, stored = [], []
    for batched in (True, False):
        folder = tmp_path / ("batched" if batched else "alone")
        folder.mkdir()
        store = _prepared(kind, request, folder)
        try:
            if batched:
                results = _many(store).declare_many(_batch())
            else:
                results = [store.declare(d, f) for d, f in _batch()]
            assert all(isinstance(r, Declared) for r in results), results
            answers.append([(r.outcome, record_fields(r.record))  # type: ignore[union-attr]
                            for r in results])
            stored.append([record_fields(r) for r in store.records()])
            assert store.corrupt() == []
        finally:
            store.close()
    assert answers[0] == answers[1] and stored[0] == stored[1]
    outcomes = [outcome for outcome, _ in answers[0]]
    assert outcomes == ["unchanged", "changed",
                        "added" if kind == "memory" else "replaced", "added"]
    same, changed = answers[0][0][1], answers[0][1][1]
    assert same["paused"] and same["next_fire"] == (AT + dt.timedelta(seconds=1)).timestamp()
    assert changed["definition"]["trigger"] == {"type": "interval", "seconds": 120.0}  # type: ignore[index]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgresql"])
def test_a_schedule_whose_definition_or_first_fire_fails_fails_alone_in_its_batch(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """In a batch, a definition that is not JSON (a NaN argument) and a first fire time that
    raises are answered with their own exceptions and write nothing; the schedules around
    them are declared."""
    store = open_store(empty_store_url(kind, request, tmp_path))

    def broken(now: dt.datetime) -> dt.datetime | None:
        raise RuntimeError("no first fire time")

    try:
        results = _many(store).declare_many([
            (definition("a"), at(1)), (definition("nan", args=[float("nan")]), at(1)),
            (definition("raises"), broken), (definition("b"), at(1))])
        assert [type(r).__name__ for r in results] == [
            "Declared", "ValueError", "RuntimeError", "Declared"]
        assert "'nan' is not plain JSON" in str(results[1])
        assert [r.name for r in store.records()] == ["a", "b"]
    finally:
        store.close()


def test_sqlite_a_record_the_file_refuses_fails_alone_in_its_batch(tmp_path: Path) -> None:
    """A write the file refuses (a trigger that RAISEs for one name) rolls back that
    schedule's savepoint only: it is answered with the error, the others of the one write
    transaction are committed."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(url)
    try:
        with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn, conn:
            conn.execute("CREATE TRIGGER poison BEFORE INSERT ON executors_schedules "
                         "WHEN NEW.name = 'poisoned' "
                         "BEGIN SELECT RAISE(ABORT, 'poisoned declaration'); END")
        results = _many(store).declare_many(
            [(definition(n), at(1)) for n in ("a", "poisoned", "b")])
        assert isinstance(results[1], sqlite3.IntegrityError), results
        assert "poisoned declaration" in str(results[1])
        assert [r.name for r in store.records()] == ["a", "b"]
    finally:
        store.close()


def test_postgres_a_batch_the_server_refuses_is_declared_each_alone(pg_dsn: str,
                                                                     request: pytest.FixtureRequest,
                                                                     tmp_path: Path) -> None:
    """A record PostgreSQL refuses (a NUL in a key of its definition: jsonb will not hold
    it) fails the batch's write; nothing of it is kept, and each schedule is declared alone,
    so the refused one is answered with the server's error and the others are added."""
    store = open_store(empty_store_url("postgresql", request, tmp_path))
    try:
        results = _many(store).declare_many([
            (definition("a"), at(1)), (definition("poisoned", kwargs={"k\x00": 1}), at(1)),
            (definition("b"), at(1))])
        assert isinstance(results[1], psycopg.Error), results
        assert [getattr(r, "outcome", None) for r in results] == ["added", None, "added"]
        assert [r.name for r in store.records()] == ["a", "b"]
    finally:
        store.close()


def _round_trips(store: PostgresScheduleStore, path: Path, call: Callable[[], object]) -> int:
    """How many times the store's connection waited for the server while `call` ran: the
    messages that end a request in libpq's trace of the connection (a simple ``Query``, or
    the ``Sync`` that closes an extended-protocol one)."""
    conn = store._conn()
    with path.open("w") as trace:
        conn.pgconn.trace(trace.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            call()
        finally:
            conn.pgconn.untrace()
    sent = [line.split("\t") for line in path.read_text().splitlines()]
    return sum(1 for fields in sent if fields[0] == "F" and fields[2].split(" ")[0] in (
        "Query", "Sync"))


def test_postgres_an_unchanged_batch_costs_one_round_trip(pg_dsn: str,
                                                          request: pytest.FixtureRequest,
                                                          tmp_path: Path) -> None:
    """Declaring again 2 batches of `DECLARE_BATCH` unchanged schedules (a process starting
    with the schedules it had) costs 2 round trips to the server, counted on the wire; one
    unchanged schedule declared alone costs 4 (a transaction: BEGIN, its lock, its read,
    COMMIT)."""
    url = empty_store_url("postgresql", request, tmp_path)
    declarations = [(definition(f"s{k:04d}"), at(k)) for k in range(2 * DECLARE_BATCH)]
    first = open_store(url)
    try:
        assert {r.outcome for r in _many(first).declare_many(declarations)  # type: ignore[union-attr]
                } == {"added"}
    finally:
        first.close()
    store = PostgresScheduleStore(url)
    try:
        results: list[Declared | Exception] = []

        def batches() -> None:
            for start in range(0, len(declarations), DECLARE_BATCH):
                results.extend(store.declare_many(declarations[start:start + DECLARE_BATCH]))

        assert _round_trips(store, tmp_path / "batch.trace", batches) == 2
        assert {r.outcome for r in results} == {"unchanged"}  # type: ignore[union-attr]
        alone = _round_trips(store, tmp_path / "alone.trace",
                             lambda: store.declare(*declarations[0]))
        assert alone == 4, alone
    finally:
        store.close()


class _BatchRefusing:
    """A store (written here from the public names, as a third party would) that keeps its
    records in a `MemoryStore` and whose ``declare_many`` refuses a whole batch holding the
    schedule "poisoned" (as a store that cannot tell which record its server refused);
    ``declare`` refuses that one alone."""

    display_url = "refusing:"

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def declare(self, definition: ScheduleDefinition, first_fire: FirstFire) -> Declared:
        if definition.name == "poisoned":
            raise ValueError("poisoned declaration")
        return self.inner.declare(definition, first_fire)

    def declare_many(self, declarations: Sequence[tuple[ScheduleDefinition, FirstFire]]
                     ) -> list[Declared | Exception]:
        with self.lock:
            self.batches.append(len(declarations))
        if any(d.name == "poisoned" for d, _ in declarations):
            raise ConnectionError("the batch was refused")
        return self.inner.declare_many(declarations)


def _ticks() -> int:
    return sum(1 for tag, _, _ in stored_jobs.SEEN if tag == "t")


def test_a_service_declares_in_batches_and_a_batch_refused_whole_one_by_one() -> None:
    """At start, a service declares its stored schedules in batches of `DECLARE_BATCH`
    through a store's ``declare_many``; a batch the store refuses as a whole is declared
    again one schedule at a time, so the one bad declaration in it is the only failure
    (listed in `declarations_failing`) and the schedule beside it runs."""
    store = _BatchRefusing()
    stored_jobs.SEEN.clear()
    svc = BackgroundService(store=store)  # type: ignore[arg-type]
    for k in range(2 * DECLARE_BATCH):
        svc.schedule(Interval(3600), stored_jobs.seen, "i", name=f"s{k:04d}")
    svc.schedule(Interval(0.1), stored_jobs.seen, "t", name="tick")
    svc.schedule(Interval(0.1), stored_jobs.seen, "p", name="poisoned")
    try:
        svc.start()
        assert store.batches == [DECLARE_BATCH, DECLARE_BATCH, 2]
        wait_until(lambda: _ticks() >= 2, 10)
        status = svc.status().store
        assert status is not None
        assert [name for name, _ in status.declarations_failing] == ["poisoned"]
        assert "poisoned declaration" in status.declarations_failing[0][1]
        assert len(store.inner.records()) == 2 * DECLARE_BATCH + 1
    finally:
        svc.shutdown()
        stored_jobs.SEEN.clear()


def test_postgres_a_batch_another_process_inserted_meanwhile_is_read_again_as_a_batch(
        pg_dsn: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Two processes starting with the same schedules: the rows of a batch are inserted by
    another session between this store's read (none there) and its write, which waits for
    that session and then finds them taken. The batch is read again as a batch and judged
    unchanged (a few round trips), not declared again one schedule at a time (4 each)."""
    url = empty_store_url("postgresql", request, tmp_path)
    batch = [(definition(f"s{k:04d}"), at(k)) for k in range(DECLARE_BATCH)]
    first = open_store(url)
    try:
        _many(first).declare_many(batch)
    finally:
        first.close()
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("CREATE TABLE saved AS SELECT * FROM executors_schedules")
        other.execute("DELETE FROM executors_schedules")
        other.execute("BEGIN")
        other.execute("INSERT INTO executors_schedules SELECT * FROM saved")  # not committed
        store = PostgresScheduleStore(url)
        results: list[Declared | Exception] = []
        trips: list[int] = []

        def declare() -> None:
            trips.append(_round_trips(store, tmp_path / "race.trace",
                                      lambda: results.extend(store.declare_many(batch))))

        thread = threading.Thread(target=declare)
        try:
            thread.start()
            with psycopg.connect(url, autocommit=True) as watcher:
                # The store's write waits for the other session's rows: commit them then.
                wait_until(lambda: watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                ).fetchone() == (1,), 10)
            other.execute("COMMIT")
            thread.join(30)
        finally:
            store.close()
    assert not thread.is_alive()
    assert {r.outcome for r in results} == {"unchanged"}, results  # type: ignore[union-attr]
    assert trips[0] <= 10, trips


def test_sqlite_an_unchanged_batch_takes_no_write_lock(tmp_path: Path) -> None:
    """A batch the file holds as declared (a process starting again) is answered unchanged
    from one read, while another connection holds the file's write lock: it neither waits
    for that lock nor takes it. A batch with one new schedule does need it (and times out
    here, the lock still held)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    batch = [(definition(f"s{k}"), at(k)) for k in range(3)]
    first = open_store(url)
    try:
        _many(first).declare_many(batch)
    finally:
        first.close()
    store = SQLiteScheduleStore(sqlite_path(url), busy_timeout=0.2)
    try:
        with contextlib.closing(sqlite3.connect(sqlite_path(url), isolation_level=None)) as conn:
            conn.execute("BEGIN IMMEDIATE")  # the write lock, held
            results = store.declare_many(batch)
            assert [getattr(r, "outcome", r) for r in results] == ["unchanged"] * 3
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                store.declare_many([*batch, (definition("new"), at(9))])
            conn.execute("ROLLBACK")
    finally:
        store.close()


def test_postgres_a_batch_notifies_once_and_an_unchanged_one_not_at_all(
        pg_dsn: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Other processes hear of a written batch once (one ``pg_notify`` for its 3 new
    schedules, not 3), and of an unchanged batch not at all; the pause after them is the
    next notification heard."""
    store = PostgresScheduleStore(empty_store_url("postgresql", request, tmp_path))
    batch = [(definition(f"s{k}"), at(k)) for k in range(3)]
    try:
        with psycopg.connect(store._url, autocommit=True) as listen:
            listen.execute(f'LISTEN "{store.channel}"')
            store.declare_many(batch)
            store.declare_many(batch)  # unchanged
            assert store.set_paused("s1", True)
            payloads: list[str] = []
            for notify in listen.notifies(timeout=10):
                payloads.append(notify.payload)
                if notify.payload == "s1":
                    break
    finally:
        store.close()
    assert payloads == ["", "s1"]
