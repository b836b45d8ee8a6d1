"""The optional capabilities of the stores that offer them (SQLite and PostgreSQL): batched
completion (`complete_many` writes a batch of ended runs at once, each fenced by its claim;
`complete_and_claim` writes them and claims in one transaction; on PostgreSQL a completion
is one statement, counted on the wire) and `changed_since` (a reader's look at what was
written since its last)."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers.store_urls import empty_store_url

from executors import stores
from executors.stores import (
    Claim,
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    SQLiteScheduleStore,
    open_store,
)
from integrations.schedule_stores.postgres import PostgresScheduleStore

PERIOD = dt.timedelta(seconds=1)


def _next_period(record: ScheduleRecord, now: dt.datetime) -> Plan:
    assert record.next_fire is not None
    return Plan(record.next_fire, record.next_fire + PERIOD, 0)


def _drop(record: ScheduleRecord) -> str:
    return "drop"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[stores.ScheduleStore]:
    made = open_store(empty_store_url(request.param, request, tmp_path))
    try:
        yield made
    finally:
        made.close()


def _declare(store: stores.ScheduleStore, name: str, ago: float = 1.0) -> None:
    definition = ScheduleDefinition(name, {"type": "interval", "seconds": 1.0}, "m:f")
    store.declare(definition, lambda now: now - dt.timedelta(seconds=ago))


def _both(store: stores.ScheduleStore) -> stores.SupportsCompleteAndClaim:
    both = stores.offered(store, stores.SupportsCompleteAndClaim)
    assert both is not None, f"{store!r} offers no batched completion"
    return both


def _complete_and_claim(store: stores.ScheduleStore, finished: list[tuple[Claim, str]],
                        limit: int = 100) -> tuple[list[bool], list[Claim]]:
    return _both(store).complete_and_claim(
        finished, "p1", lease=30.0, limit=limit, planner=_next_period,
        on_crash=_drop)  # type: ignore[arg-type]


def test_complete_many_writes_each_fenced_completion_in_one_batch(
        store: stores.ScheduleStore) -> None:
    """Each completion of a batch counts its run (a failure as one too) and lets its lease
    go; a stale one (its record moved on) is refused, the others are still written."""
    _declare(store, "ok")
    _declare(store, "bad")
    claims = {c.name: c for c in _complete_and_claim(store, [])[1]}
    assert store.complete(claims["ok"], "ok")
    answers = _both(store).complete_many([(claims["ok"], "ok"), (claims["bad"], "error: E: x")])
    assert answers == [False, True]
    ok, bad = store.get("ok"), store.get("bad")
    assert ok is not None and bad is not None
    assert ok.counters["runs"] == 1 and ok.counters["failures"] == 0
    assert bad.counters["runs"] == 1 and bad.counters["failures"] == 1
    assert bad.last_result == "error: E: x" and bad.last_fire == claims["bad"].fire_time
    assert bad.last_owner == "p1"
    assert bad.owner is None and bad.running_fire is None and bad.lease_until is None
    assert bad.version == claims["bad"].version + 1


def test_complete_and_claim_claims_what_its_completions_made_due(
        store: stores.ScheduleStore) -> None:
    """A record whose run the call completes, and whose next fire time is due, is claimed
    again with a new token: on PostgreSQL by the same call (its claim reads after the
    completions, in the transaction), on SQLite by the next (its claim is planned before the
    write transaction, holding no lock)."""
    _declare(store, "a", ago=5.0)  # its next fire time (fire + 1 s) is due too
    (first,) = _complete_and_claim(store, [])[1]
    written, again = _complete_and_claim(store, [(first, "ok")])
    assert written == [True]
    if isinstance(store, stores.SQLiteScheduleStore):
        assert again == []
        again = _complete_and_claim(store, [])[1]
    assert [c.name for c in again] == ["a"]
    assert again[0].token != first.token and again[0].fire_time == first.fire_time + PERIOD
    record = store.get("a")
    assert record is not None and record.counters["runs"] == 1
    assert record.running_fire == again[0].fire_time


def test_a_completion_keeps_the_counters_it_does_not_move(store: stores.ScheduleStore) -> None:
    """A completion adds one run (and one failure if it failed) and keeps every other
    counter (the missed runs a claim counted)."""
    _declare(store, "a", ago=3.5)
    missed_latest = lambda record, now: Plan(now, now + PERIOD, 3)  # noqa: E731
    (c,) = _both(store).complete_and_claim(
        [], "p1", lease=30.0, limit=10, planner=missed_latest,
        on_crash=_drop)[1]  # type: ignore[arg-type]
    assert store.complete(c, "error: E")
    record = store.get("a")
    assert record is not None
    assert (record.counters["runs"], record.counters["failures"],
            record.counters["missed"]) == (1, 1, 3)


def test_postgresql_rolls_the_completions_back_with_a_failed_claim(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Both are written or neither: a claim that fails (here a negative limit, refused by the
    server) leaves the batch's completions unwritten, and the error propagates."""
    store = PostgresScheduleStore(empty_store_url("postgresql", request, tmp_path))
    try:
        _declare(store, "a")
        (c,) = _complete_and_claim(store, [])[1]
        with pytest.raises(psycopg.Error):
            _complete_and_claim(store, [(c, "ok")], limit=-1)
        record = store.get("a")
        assert record is not None and record.running_fire == c.fire_time
        assert record.counters["runs"] == 0
        assert store.complete(c, "ok")
    finally:
        store.close()


def _round_trips(conn: psycopg.Connection[object], call: object) -> int:
    """The requests `call()` makes on `conn` that wait for the server (libpq's trace: a
    simple query, or an extended one's Sync)."""
    fd, path = tempfile.mkstemp()
    try:
        conn.pgconn.trace(fd)
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        call()  # type: ignore[operator]
        conn.pgconn.untrace()
        with open(path) as traced:
            sent = [line.split("\t")[2] for line in traced if line.split("\t")[0] == "F"]
    finally:
        os.close(fd)
        os.unlink(path)
    return sum(1 for message in sent if message in ("Query", "Sync"))


def test_postgresql_completes_a_batch_in_one_statement(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A batch of 50 completions costs one statement and its transaction (three requests
    to the server: begin, the statement, commit), not a read and a write per run."""
    store = PostgresScheduleStore(empty_store_url("postgresql", request, tmp_path))
    try:
        for k in range(50):
            _declare(store, f"s{k}")
        claims = _complete_and_claim(store, [])[1]
        assert len(claims) == 50
        trips = _round_trips(store._conn(),
                             lambda: store.complete_many([(c, "ok") for c in claims]))
        assert trips <= 3
        assert all(r.counters["runs"] == 1 for r in store.records())
    finally:
        store.close()


def _changes(store: stores.ScheduleStore, mark: int | None) -> stores.Changes:
    tracking = stores.offered(store, stores.SupportsChangedSince)
    assert tracking is not None, f"{store!r} offers no changed_since"
    return tracking.changed_since(mark)


def test_changed_since_reads_the_rows_written_after_the_mark_and_a_removal_reads_all(
        store: stores.ScheduleStore) -> None:
    """A first look (mark None) is whole; later looks hold only the records written since the
    mark (a claim, a pause); after a removal the next look is whole again (the removed name
    is gone from it); nothing written: nothing read."""
    for name in ("a", "b", "c"):
        _declare(store, name, ago=1.0 if name == "a" else -3600.0)
    first = _changes(store, None)
    assert first.whole and [r.name for r in first.records] == ["a", "b", "c"]
    assert len(_complete_and_claim(store, [])[1]) == 1
    assert store.set_paused("c", True)
    later = _changes(store, first.mark)
    assert not later.whole and [r.name for r in later.records] == ["a", "c"]
    assert later.records[0].running_fire is not None and later.records[1].paused
    quiet = _changes(store, later.mark)
    assert not quiet.whole and quiet.records == []
    if isinstance(store, SQLiteScheduleStore):  # its stamps: nothing written, same mark
        assert quiet.mark == later.mark
    assert store.remove("c")
    after = _changes(store, quiet.mark)
    assert after.whole and [r.name for r in after.records] == ["a", "b"]
    assert _changes(store, after.mark).records == []


def test_postgresql_reads_a_row_committed_after_a_look_by_a_transaction_older_than_it(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A write whose transaction began before a look and committed after it (the look could
    not see it) is in the next look: the mark is held back by the transaction still open."""
    url = empty_store_url("postgresql", request, tmp_path)
    store = PostgresScheduleStore(url)
    try:
        _declare(store, "a", ago=-3600.0)
        with psycopg.connect(url) as other:
            other.execute("UPDATE executors_schedules SET paused = TRUE WHERE name = 'a'")
            look = _changes(store, None)  # `other` is still open: its write is not seen
            assert look.records[0].paused is False
            other.commit()
        seen = _changes(store, look.mark)
        assert not seen.whole and [(r.name, r.paused) for r in seen.records] == [("a", True)]
    finally:
        store.close()
