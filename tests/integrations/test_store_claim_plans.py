"""The PostgreSQL store's claim and next_due read index ranges, never the whole table: their
plans on a store of many records (the benchmark's 100,000 claims per minute depend on it)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import psycopg
import pytest
from helpers.store_urls import empty_store_url

from executors.stores import Plan, ScheduleDefinition, ScheduleRecord, new_record
from integrations.schedule_stores import postgres as pg

ROWS = 5_000


def _plan(cur: psycopg.Cursor[tuple[str]], sql: str, params: tuple[object, ...] = ()) -> str:
    cur.execute("EXPLAIN (COSTS OFF) " + sql, params)
    return "\n".join(str(row[0]) for row in cur.fetchall())


@pytest.fixture
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A PostgreSQL store of ROWS records, half due, a tenth of them with a run in progress."""
    url = empty_store_url("postgresql", request, tmp_path)
    pg.PostgresScheduleStore(url).close()  # the schema
    now = dt.datetime.now(dt.UTC)
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.cursor() as cur, cur.copy(
                f"COPY executors_schedules ({pg._COLUMNS}) FROM STDIN") as copy:
            for k in range(ROWS):
                definition = ScheduleDefinition(f"s{k}", {"type": "interval", "seconds": 60.0},
                                                "m:f")
                row = list(pg._encode(new_record(definition, now + dt.timedelta(
                    seconds=k - ROWS / 2))))
                if k % 10 == 0:  # running: owner, lease_until, running_fire
                    row[6], row[7], row[8] = "p", now.timestamp() + 30, now.timestamp()
                copy.write_row(row)
        conn.execute("ANALYZE executors_schedules")
    return url


def test_a_claim_reads_two_index_ranges_and_no_table_scan(filled: str) -> None:
    """The claim's select walks the partial indexes (idle records by next fire time, runs in
    progress by lease end) in order, with no sequential scan and no sort of the table."""
    with psycopg.connect(filled) as conn, conn.cursor() as cur:
        plan = _plan(cur, pg._CLAIMABLE, ([], 100, [], 100, 100))
    assert "Seq Scan" not in plan and "Sort" not in plan, plan
    assert "executors_schedules_idle" in plan and "executors_schedules_leases" in plan, plan


def test_next_due_reads_the_ends_of_the_indexes(filled: str) -> None:
    """next_due's two minima are index reads (the claimer's sleep costs no table scan)."""
    store = pg.PostgresScheduleStore(filled)
    try:
        now, earliest = store.next_due()
    finally:
        store.close()
    assert earliest is not None and earliest < now  # half the records are due
    with psycopg.connect(filled) as conn, conn.cursor() as cur:
        plan = _plan(cur, pg._NEXT_DUE, ([], []))
        skipping = _plan(cur, pg._NEXT_DUE, (["s1", "s2"], ["s1", "s2"]))
    assert "Seq Scan" not in plan and "Seq Scan" not in skipping, (plan, skipping)


def minute_later(record: ScheduleRecord, now: dt.datetime) -> Plan:
    """Run the due fire time; the next is a minute later."""
    assert record.next_fire is not None
    return Plan(record.next_fire, record.next_fire + dt.timedelta(minutes=1))


def test_a_claim_takes_expired_leases_first_then_the_earliest_due(filled: str) -> None:
    """A run whose lease expired comes first (settled: counted lost, then, being due, claimed
    again), then the idle due records, earliest first; a live lease is left alone."""
    with psycopg.connect(filled, autocommit=True) as conn:
        conn.execute("UPDATE executors_schedules SET lease_until = lease_until - 3600 "
                     "WHERE name = 's10'")
    store = pg.PostgresScheduleStore(filled)
    try:
        claims = store.claim("me", lease=30, limit=3, planner=minute_later,
                             on_crash=lambda record: "drop")
        settled = store.get("s10")
    finally:
        store.close()
    # s0 is due too, but its run's lease is live.
    assert [c.name for c in claims] == ["s10", "s1", "s2"]
    assert settled is not None and settled.counters["lost"] == 1 and settled.owner == "me"


def test_a_claim_of_the_declared_names_still_walks_the_indexes(filled: str) -> None:
    """Filtered to the names a process declares (a table of its session), the claim's and
    next_due's reads still walk the partial indexes in order, each row's name looked up in
    that table's key: no scan or sort of the schedules."""
    with psycopg.connect(filled) as conn, conn.cursor() as cur:
        cur.execute(pg._CLAIMABLE_TABLE)
        cur.execute("INSERT INTO pg_temp.executors_claimable SELECT 's' || k "
                    "FROM generate_series(0, %s, 2) AS k", (ROWS,))
        cur.execute("ANALYZE pg_temp.executors_claimable")
        only = " AND " + pg._DECLARED
        claim = _plan(cur, pg._CLAIMABLE_SQL.format(only=only), ([], 100, [], 100, 100))
        due = _plan(cur, pg._NEXT_DUE_SQL.format(only=only), ([], []))
    for plan in (claim, due):
        assert "Seq Scan on executors_schedules" not in plan and "Sort" not in plan, plan
    assert "executors_schedules_idle" in claim and "executors_schedules_leases" in claim, claim


def test_a_claim_writes_the_state_only_when_it_changes_it_and_keeps_unknown_keys(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A claim that misses nothing leaves the row's state as stored (no JSON written: most
    claims); one that counts missed fire times writes its counters, merged into the stored
    state; either way a key this code does not know stays, as a completion keeps it."""
    url = empty_store_url("postgresql", request, tmp_path)
    store = pg.PostgresScheduleStore(url)
    try:
        now = store.now()
        due = now - dt.timedelta(seconds=5)
        for name in ("calm", "late"):
            store.declare(ScheduleDefinition(name, {"type": "interval", "seconds": 60.0}, "m:f"),
                          lambda _now: due)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE executors_schedules SET state = state || "
                         "'{\"note\": \"kept\"}'::jsonb")
            before = dict(conn.execute(
                "SELECT name, state::text FROM executors_schedules").fetchall())

        def plan(record: ScheduleRecord, now: dt.datetime) -> Plan:
            assert record.next_fire is not None
            return Plan(record.next_fire, record.next_fire + dt.timedelta(minutes=1),
                        2 if record.name == "late" else 0)

        claims = store.claim("me", lease=30, limit=10, planner=plan,
                             on_crash=lambda record: "drop")
        assert sorted(c.name for c in claims) == ["calm", "late"]
        with psycopg.connect(url, autocommit=True) as conn:
            after = dict(conn.execute(
                "SELECT name, state::text FROM executors_schedules").fetchall())
            late = conn.execute("SELECT state FROM executors_schedules "
                                "WHERE name = 'late'").fetchone()
        assert after["calm"] == before["calm"]  # the very text: not written again
        assert late is not None and late[0]["note"] == "kept"
        assert late[0]["counters"]["missed"] == 2 and late[0]["counters"]["runs"] == 0
        for name in ("calm", "late"):
            record = store.get(name)
            assert record is not None and record.owner == "me" and record.running_fire is not None
        assert store.complete(claims[0], "ok") and store.complete(claims[1], "ok")
        with psycopg.connect(url, autocommit=True) as conn:
            states = [row[0] for row in conn.execute("SELECT state FROM executors_schedules")]
        assert all(s["note"] == "kept" and s["counters"]["runs"] == 1 for s in states)
    finally:
        store.close()
