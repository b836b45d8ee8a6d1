"""The schedule store contract, run against every store: memory, SQLite, MongoDB (nx-27017
started by the tests, or the server of ``MONGODB_URI``) and PostgreSQL (a throwaway server
from the installed binaries)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import multiprocessing
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from helpers import stored_jobs
from helpers.store_urls import corrupt, empty_store_url, rewrite

from executors import BackgroundService, Interval, ScheduleChanged, ServiceEvent
from executors.stores import (
    FORMAT_VERSION,
    Claim,
    Claimable,
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    ScheduleStore,
    SQLiteScheduleStore,
    StoreFormatError,
    Unreadable,
    from_epoch,
    open_store,
    record_fields,
)
from executors.testing import wait_until
from integrations.schedule_stores import postgres as pg
from integrations.schedule_stores.mongo import MongoScheduleStore
from integrations.schedule_stores.postgres import PostgresScheduleStore

PERIOD = dt.timedelta(seconds=1)


def definition(name: str = "job", period: float = 1.0, **options: object) -> ScheduleDefinition:
    return ScheduleDefinition(name, {"type": "interval", "seconds": period},
                              "tests.test_schedule_stores:target", [1, "a"], {"k": None},
                              dict(options))


def every_period(record: ScheduleRecord, now: dt.datetime) -> Plan:
    """Run the latest due fire time, count the earlier ones as missed (``missed="latest"``)."""
    assert record.next_fire is not None
    fire, missed = record.next_fire, 0
    while fire + PERIOD <= now:
        fire += PERIOD
        missed += 1
    return Plan(fire, fire + PERIOD, missed)


def drop(record: ScheduleRecord) -> str:
    return "drop"


def rerun(record: ScheduleRecord) -> str:
    return "rerun"


def claim(store: ScheduleStore, owner: str = "p1", *, lease: float = 30.0, limit: int = 100,
          on_crash: Callable[[ScheduleRecord], str] = drop) -> list[Claim]:
    return store.claim(owner, lease=lease, limit=limit, planner=every_period,
                       on_crash=on_crash)  # type: ignore[arg-type]


def declare_due(store: ScheduleStore, name: str = "job", ago: float = 0.0) -> ScheduleRecord:
    """Declare `name` with its first fire time `ago` seconds before the store's now."""
    result = store.declare(definition(name),
                           lambda now: now - dt.timedelta(seconds=ago))
    return result.record


@pytest.fixture(params=["memory", "sqlite", "mongodb", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty store of each kind."""
    return empty_store_url(request.param, request, tmp_path)


@pytest.fixture
def store(store_url: str) -> Iterator[ScheduleStore]:
    made = open_store(store_url)
    try:
        yield made
    finally:
        made.close()


def test_declare_adds_keeps_unchanged_state_and_replaces_a_changed_definition(
        store: ScheduleStore) -> None:
    """An unchanged declaration keeps the stored state (next fire, pause, counters); a changed
    one replaces the definition and keeps the pause and the counters."""
    added = store.declare(definition(), lambda now: now + dt.timedelta(hours=1))
    assert added.outcome == "added" and added.record.version == 1
    assert store.set_paused("job", True)
    again = store.declare(definition(), lambda now: now)  # would move next_fire if used
    assert again.outcome == "unchanged"
    assert again.record.next_fire == added.record.next_fire and again.record.paused
    changed = store.declare(definition(period=2.0), lambda now: now)
    assert changed.outcome == "changed" and changed.record.paused
    assert changed.record.definition.trigger == {"type": "interval", "seconds": 2.0}
    assert changed.record.version > again.record.version


def test_a_definition_round_trips_as_plain_data(store: ScheduleStore) -> None:
    """What is declared is what is read back: JSON data, no pickles."""
    store.declare(definition(), lambda now: now)
    record = store.get("job")
    assert record is not None and record.definition == definition()
    json.dumps(record.definition.as_data())


def test_a_definition_that_is_not_json_is_refused_naming_the_schedule() -> None:
    """A non-JSON argument (or NaN) is refused with the schedule's name and the reason."""
    bad = ScheduleDefinition("bad", {"type": "date"}, "m:f", [object()])
    with pytest.raises(ValueError, match="'bad' is not plain JSON"):
        bad.digest()
    with pytest.raises(ValueError, match="'nan' is not plain JSON"):
        ScheduleDefinition("nan", {"type": "date"}, "m:f", [float("nan")]).digest()


def test_claim_takes_a_due_fire_time_once_and_moves_the_record_forward(
        store: ScheduleStore) -> None:
    """A due fire time is claimed once: the next claim finds the record not due."""
    first = declare_due(store)
    claims = claim(store)
    assert [c.fire_time for c in claims] == [first.next_fire]
    assert claims[0].attempt == 1 and claims[0].definition == definition()
    assert claim(store, "p2") == []
    record = store.get("job")
    assert record is not None and record.owner == "p1" and record.running_fire == first.next_fire
    assert record.next_fire == first.next_fire + PERIOD  # type: ignore[operator]


def test_claim_applies_the_plan_once_counting_misses(store: ScheduleStore) -> None:
    """Five fire times overdue: one claim runs the latest and counts four missed, once."""
    first = declare_due(store, ago=4.5)
    claims = claim(store)
    assert len(claims) == 1
    assert claims[0].fire_time == first.next_fire + 4 * PERIOD  # type: ignore[operator]
    record = store.get("job")
    assert record is not None and record.counters["missed"] == 4


def test_claim_skips_paused_not_due_and_leased_records_and_honours_the_limit(
        store: ScheduleStore) -> None:
    """Paused and future records are not claimed; a batch claims at most `limit`."""
    for i in range(5):
        declare_due(store, f"due{i}")
    store.declare(definition("future"), lambda now: now + dt.timedelta(hours=1))
    declare_due(store, "paused")
    store.set_paused("paused", True)
    batch = claim(store, limit=3)
    assert len(batch) == 3
    rest = claim(store, limit=100)
    assert sorted(c.name for c in batch + rest) == [f"due{i}" for i in range(5)]


def test_completion_is_fenced_by_the_claims_version(store: ScheduleStore) -> None:
    """`complete` clears the lease and counts the run; a second (stale) completion is refused."""
    declare_due(store)
    (c,) = claim(store)
    assert store.complete(c, "ok")
    assert not store.complete(c, "ok")
    record = store.get("job")
    assert record is not None and record.owner is None and record.running_fire is None
    assert record.counters["runs"] == 1 and record.last_result == "ok"
    assert record.last_fire == c.fire_time


def test_a_crashed_owners_run_is_dropped_once_and_its_late_completion_refused(
        store: ScheduleStore) -> None:
    """on_crash="drop": once the lease expires, the run is counted lost by the next claim;
    the stale owner's completion is then refused (the record moved on)."""
    declare_due(store)
    (c,) = claim(store, "stale", lease=0.05)
    wait_until(lambda: store.now() > c.lease_until, 5)
    assert claim(store, "p2") == []
    record = store.get("job")
    assert record is not None and record.counters["lost"] == 1 and record.last_result == "lost"
    assert record.running_fire is None
    assert not store.complete(c, "ok")
    assert not store.renew(c, 30)


def test_a_crashed_owners_run_is_rerun_once_with_the_next_attempt(store: ScheduleStore) -> None:
    """on_crash="rerun": the same fire time goes to one other owner with attempt 2."""
    declare_due(store)
    (c,) = claim(store, "stale", lease=0.05)
    wait_until(lambda: store.now() > c.lease_until, 5)
    (again,) = claim(store, "p2", on_crash=rerun)
    assert again.fire_time == c.fire_time and again.attempt == 2
    assert claim(store, "p3", on_crash=rerun) == []
    assert not store.complete(c, "ok")
    assert store.complete(again, "ok")


def test_a_claim_given_back_is_due_again_at_once_with_nothing_counted(
        store: ScheduleStore) -> None:
    """`give_back` (an owner closing before it started the run): no run is in progress, the
    fire time is due again for any owner (attempt 1, nothing lost, no lease to wait out); it
    is fenced like a completion."""
    declare_due(store)
    (c,) = claim(store)
    assert store.give_back(c)
    assert not store.give_back(c)
    record = store.get("job")
    assert record is not None and record.running_fire is None and record.owner is None
    assert record.lease_until is None and record.next_fire == c.fire_time
    assert record.counters["lost"] == 0 and record.counters["runs"] == 0
    store_now, earliest = store.next_due()
    assert earliest is not None and earliest <= store_now
    (again,) = claim(store, "p2")
    assert again.fire_time == c.fire_time and again.attempt == 1
    assert not store.give_back(c) and not store.complete(c, "ok")
    assert store.complete(again, "ok")


def test_a_claim_given_back_takes_back_the_count_of_its_late_fire_time_only(
        store: ScheduleStore) -> None:
    """A claim that counted its own fire time missed (it was to run late) and is given back
    unstarted takes that one count back: the next claim judges the fire time again, so it is
    counted once; the fire times the claim dropped stay counted (a closing service once made a
    restart count 181 missed for 180)."""
    declare_due(store, ago=3 * PERIOD.total_seconds())

    def late(record: ScheduleRecord, now: dt.datetime) -> Plan:
        # Three due fire times: two dropped, the latest run late (all three missed).
        plan = every_period(record, now)
        return Plan(plan.run, plan.next_fire, plan.missed + 1, run_late=True)

    (c,) = store.claim("p1", lease=30, limit=10, planner=late, on_crash=drop)  # type: ignore[arg-type]
    assert c.run_late
    record = store.get("job")
    assert record is not None and record.counters["missed"] == 4
    assert store.give_back(c)
    record = store.get("job")
    assert record is not None and record.counters["missed"] == 3
    assert record.next_fire == c.fire_time
    (again,) = claim(store, "p2")  # judged again: on time now, by this planner
    assert again.fire_time >= c.fire_time and not again.run_late
    assert store.complete(again, "ok")


def test_a_rerun_given_back_is_rerun_by_the_next_claim(store: ScheduleStore) -> None:
    """A rerun's claim given back leaves the crash it came from to the next claim."""
    declare_due(store)
    (c,) = claim(store, "stale", lease=0.05)
    wait_until(lambda: store.now() > c.lease_until, 5)
    (again,) = claim(store, "p2", on_crash=rerun)
    assert store.give_back(again)
    (third,) = claim(store, "p3", on_crash=rerun)
    assert third.fire_time == c.fire_time and third.attempt == 3
    assert not store.complete(again, "ok") and store.complete(third, "ok")


def test_renew_extends_a_live_lease(store: ScheduleStore) -> None:
    """A renewed lease is not settled as a crash."""
    declare_due(store)
    (c,) = claim(store, lease=0.3)
    assert store.renew(c, 30)
    record = store.get("job")
    assert record is not None and record.lease_until is not None
    assert record.lease_until > c.lease_until
    assert claim(store, "p2") == []


def test_pause_resume_reschedule_and_remove(store: ScheduleStore) -> None:
    """The control operations change the record and say whether it existed."""
    declare_due(store)
    assert store.set_paused("job", True) and claim(store) == []
    assert store.set_paused("job", False)
    later = store.now() + dt.timedelta(hours=1)
    assert store.set_next_fire("job", later) and claim(store) == []
    assert store.remove("job") and store.get("job") is None
    assert not store.remove("job") and not store.set_paused("job", True)
    assert not store.set_next_fire("job", later)


def _race(url: str, owner: str, out: multiprocessing.Queue[list[str]],
          start: Any) -> None:
    s = open_store(url)
    start.wait()
    got: list[str] = []
    for _ in range(50):
        got.extend(f"{c.name}@{c.fire_time.isoformat()}" for c in claim(s, owner, limit=7))
    out.put(got)
    s.close()


def test_processes_racing_on_one_store_claim_each_fire_time_once(shared_store_url: str) -> None:
    """Four real processes claim 40 due records of one store at once: each exactly once."""
    store_url = shared_store_url
    s = open_store(store_url)
    for i in range(40):
        declare_due(s, f"job{i}")
    s.close()
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[list[str]] = ctx.Queue()
    start = ctx.Event()
    procs = [ctx.Process(target=_race, args=(store_url, f"p{i}", out, start)) for i in range(4)]
    for p in procs:
        p.start()
    start.set()
    claimed = [c for _ in procs for c in out.get(timeout=60)]
    for p in procs:
        p.join(30)
    assert len(claimed) == 40 and len(set(claimed)) == 40


def test_threads_racing_on_one_store_claim_each_fire_time_once(store: ScheduleStore) -> None:
    """Eight threads claim 200 due records at once: each exactly once."""
    for i in range(200):
        declare_due(store, f"job{i}")
    claimed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(owner: str) -> None:
        barrier.wait()
        for _ in range(20):
            got = claim(store, owner, limit=5)
            with lock:
                claimed.extend(c.name for c in got)

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(claimed) == sorted(f"job{i}" for i in range(200))


def test_sqlite_refuses_a_store_of_a_newer_format_naming_both(tmp_path: Path) -> None:
    """A file written by a newer format is refused, naming both versions."""
    path = str(tmp_path / "new.db")
    SQLiteScheduleStore(path).close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE executors_meta SET value = ? WHERE key = 'format'",
                     (str(FORMAT_VERSION + 1),))
    with pytest.raises(StoreFormatError,
                       match=f"format {FORMAT_VERSION + 1}.*format {FORMAT_VERSION}"):
        SQLiteScheduleStore(path)


def test_sqlite_a_corrupt_record_is_reported_and_skipped(tmp_path: Path) -> None:
    """One unreadable record is listed by `corrupt()`; the others are still claimed."""
    path = str(tmp_path / "bad.db")
    s = SQLiteScheduleStore(path)
    declare_due(s, "good")
    declare_due(s, "bad")
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE executors_schedules SET definition = '{\"trigger\": 3}' "
                     "WHERE name = 'bad'")
    assert [c.name for c in claim(s)] == ["good"]
    ((name, reason),) = s.corrupt()
    assert name == "bad" and "'trigger' must be a dict" in reason
    assert [r.name for r in s.records()] == ["good"]
    s.close()


@pytest.mark.parametrize(("options", "reason"), [
    ({"missed": "bogus"}, "option 'missed' must be one of 'latest', 'all', 'skip', got 'bogus'"),
    ({"on_error": "halt"}, "option 'on_error' must be one of 'continue', 'stop', got 'halt'"),
    ({"on_crash": "rerun "}, "option 'on_crash' must be one of 'drop', 'rerun', got 'rerun '"),
    ({"max_missed": "10"}, "option max_missed must be an int, got str"),
    ({"max_missed": 0}, "option max_missed must be >= 1, got 0"),
    ({"grace": -1}, "option grace must be > 0 seconds, got -1"),
])
def test_a_record_with_a_policy_schedule_would_refuse_is_unreadable_naming_it(
        tmp_path: Path, options: dict[str, object], reason: str) -> None:
    """A policy edited by hand into a value `schedule()` refuses is reported, not run under
    another policy (``missed="bogus"`` used to run as ``"latest"``); a key this code does not
    know is left alone."""
    path = str(tmp_path / "policy.db")
    s = SQLiteScheduleStore(path)
    declare_due(s, "bad")
    declare_due(s, "other")
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        for name, extra in (("bad", options), ("other", {"a_newer_option": 1})):
            (text,) = conn.execute("SELECT definition FROM executors_schedules WHERE name = ?",
                                   (name,)).fetchone()
            data = json.loads(text)
            data["options"].update(extra)
            conn.execute("UPDATE executors_schedules SET definition = ? WHERE name = ?",
                         (json.dumps(data), name))
    assert [c.name for c in claim(s)] == ["other"]
    ((name, why),) = s.corrupt()
    assert name == "bad" and why == f"schedule 'bad': {reason}"
    s.close()


@pytest.mark.parametrize("kind", ["sqlite", "mongodb", "postgresql"])
def test_an_unreadable_due_record_is_left_out_of_next_due_and_a_declaration_replaces_it(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A corrupt record keeps its next fire time, so it stays due at once. Once a claim has
    met it, `next_due` leaves it out (else every pass of the serving loop is due now: a loop
    spinning on the store) and so do the claims; a record repaired by another writer is
    read again after the recheck; declaring the name again replaces an unreadable record."""
    url = empty_store_url(kind, request, tmp_path)
    s = open_store(url)

    def claim(store: ScheduleStore) -> list[Claim]:
        """Claim every due record's fire time (the raw edits make them due at 0)."""
        return store.claim("p1", lease=30.0, limit=100, on_crash=drop,  # type: ignore[arg-type]
                           planner=lambda record, now: Plan(record.next_fire, now + PERIOD, 0))

    try:
        s._unreadable = Unreadable(recheck=0.5)  # type: ignore[attr-defined]
        declare_due(s, "good")
        good_data = record_fields(declare_due(s, "bad"))["definition"]
        corrupt(url, "bad", {"trigger": 3})
        assert s.next_due()[1] == from_epoch(0)  # not read yet: the earliest due
        assert [c.name for c in claim(s)] == ["good"]
        now, earliest = s.next_due()
        assert earliest is not None and earliest > now  # good's lease end, not bad's 0
        assert claim(s) == []
        # Repaired by another writer (due at once): read again once the recheck is over.
        corrupt(url, "bad", good_data)  # type: ignore[arg-type]
        wait_until(lambda: [c.name for c in claim(s)] == ["bad"], 10)
        assert s.corrupt() == []

        corrupt(url, "bad", {"trigger": 4})
        assert claim(s) == []
        declared = s.declare(definition("bad"), lambda now: now)
        assert declared.outcome == "replaced"
        assert "'trigger' must be a dict, got 4" in declared.unreadable
        assert declared.record.version > 1 and declared.record.counters["runs"] == 0
        assert [c.name for c in claim(s)] == ["bad"]  # served at once, no recheck to wait
        assert s.corrupt() == [] and [r.name for r in s.records()] == ["bad", "good"]
    finally:
        s.close()


def test_unreadable_names_are_left_out_until_their_recheck_or_a_write() -> None:
    """`Unreadable` keeps a name for `recheck` seconds, or until it is written here; a read
    begun before a write does not leave the written record out."""
    unreadable = Unreadable(recheck=0.2)
    assert unreadable.names() == []
    mark = unreadable.mark()
    unreadable.add("a", mark)
    unreadable.add("b", mark)
    assert sorted(unreadable.names()) == ["a", "b"]
    unreadable.written("a")
    unreadable.written("missing")
    assert unreadable.names() == ["b"]
    unreadable.add("a", mark)  # read before the write: the old record's failure
    assert unreadable.names() == ["b"]
    unreadable.add("a", unreadable.mark())  # read after it: unreadable again
    assert sorted(unreadable.names()) == ["a", "b"]
    wait_until(lambda: unreadable.names() == [], 10)


def test_unreadable_reading_is_a_mark_then_the_names_left_out() -> None:
    """`Unreadable.reading` is what a claim takes before it reads, in one call: a new mark
    (a write after it is seen, one before it is not) and the names left out now."""
    unreadable = Unreadable(recheck=30.0)
    first, names = unreadable.reading()
    assert names == []
    unreadable.add("a", first)
    unreadable.written("b")
    mark, names = unreadable.reading()
    assert mark > first and names == ["a"]
    unreadable.add("b", mark)  # written before this read's mark: unreadable since
    assert sorted(unreadable.reading()[1]) == ["a", "b"]


def test_an_unknown_store_scheme_is_refused_naming_it_and_the_known_ones() -> None:
    """A typo in the scheme names the scheme and lists the ones that exist."""
    with pytest.raises(ValueError, match=r"'redis' is not one of: memory, mongodb.*sqlite"):
        open_store("redis://localhost/0")
    with pytest.raises(TypeError, match="store must be a URL or a store object"):
        open_store(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"names no file.*sqlite:///jobs\.db"):
        open_store("sqlite://")


@pytest.mark.parametrize("url", ["mongodb://alice:s3cret@127.0.0.1:{port}/db",
                                 "postgresql://alice:s3cret@127.0.0.1:{port}/db"])
def test_an_unreachable_store_is_one_clear_error_with_the_password_hidden(url: str) -> None:
    """Nothing listens there: one ConnectionError naming the URL, never the password."""
    from executors.testing import free_port

    target = url.format(port=free_port())
    store_cls = MongoScheduleStore if target.startswith("mongodb") else PostgresScheduleStore
    with pytest.raises(ConnectionError) as info:
        store_cls(target, connect_timeout=1)
    message = str(info.value)
    assert "cannot reach the schedule store" in message and "alice:***@127.0.0.1" in message
    assert "s3cret" not in message


def test_next_due_is_the_earliest_claimable_instant_on_the_stores_clock(
        store: ScheduleStore) -> None:
    """next_due(): the store's now and the least next fire of unpaused idle records, or the
    least lease end of runs in progress; None for an empty store."""
    now, earliest = store.next_due()
    assert earliest is None and now.tzinfo is not None
    store.declare(definition("later"), lambda now: now + dt.timedelta(hours=2))
    first = store.declare(definition("soon"), lambda now: now + dt.timedelta(hours=1))
    store.declare(definition("paused"), lambda now: now + dt.timedelta(minutes=1))
    store.set_paused("paused", True)
    assert store.next_due()[1] == first.record.next_fire
    declare_due(store, "running")
    (c,) = claim(store, lease=600)
    assert store.next_due()[1] == c.lease_until


def _pause(store: ScheduleStore) -> None:
    assert store.set_paused("job", True)


def _run_later(store: ScheduleStore) -> None:
    assert store.set_next_fire("job", store.now() + dt.timedelta(hours=5))


def _redeclare(store: ScheduleStore) -> None:
    outcome = store.declare(definition(period=7.0),
                            lambda now: now + dt.timedelta(hours=6)).outcome
    assert outcome == "changed"


@pytest.mark.parametrize("control", [_pause, _run_later, _redeclare],
                         ids=["pause", "set_next_fire", "redeclare"])
def test_a_control_operation_during_a_run_keeps_its_lease_and_its_end_is_recorded(
        store: ScheduleStore, control: Callable[[ScheduleStore], None]) -> None:
    """A pause, a run-now/reschedule or a changed declaration made while a run is in flight
    does not fence that run out: its renewal and completion succeed, the run is counted, and
    the completion keeps what the control operation wrote (pause, next fire, definition)."""
    declare_due(store)
    (c,) = claim(store)
    control(store)
    changed = store.get("job")
    assert changed is not None and changed.running_fire == c.fire_time
    assert changed.owner == "p1" and changed.lease_until is not None
    assert store.renew(c, 60)
    assert store.complete(c, "ok")
    record = store.get("job")
    assert record is not None and record.owner is None and record.running_fire is None
    assert record.lease_until is None
    assert record.counters["runs"] == 1 and record.counters["lost"] == 0
    assert record.last_fire == c.fire_time and record.last_result == "ok"
    assert (record.paused, record.next_fire, record.definition) == (
        changed.paused, changed.next_fire, changed.definition)
    assert not store.complete(c, "ok")  # once only
    assert not store.renew(c, 60)


def test_a_rerun_claims_old_owner_is_refused_and_the_new_one_survives_a_pause(
        store: ScheduleStore) -> None:
    """A stalled owner whose run was handed out again (rerun) is refused its renewal and
    completion, even after a control operation; the new owner's completion is written."""
    declare_due(store)
    (stale,) = claim(store, "stale", lease=0.05)
    wait_until(lambda: store.now() > stale.lease_until, 5)
    (again,) = claim(store, "p2", on_crash=rerun)
    assert store.set_paused("job", True)
    assert not store.renew(stale, 30) and not store.complete(stale, "ok")
    assert store.renew(again, 30)
    assert store.complete(again, "error: E: x")
    record = store.get("job")
    assert record is not None and record.paused and record.running_fire is None
    assert record.counters["runs"] == 1 and record.counters["failures"] == 1
    assert record.last_result == "error: E: x" and record.attempt == 2
    assert not store.complete(stale, "ok")


def test_a_dropped_runs_old_owner_is_refused_after_a_control_operation(
        store: ScheduleStore) -> None:
    """A stalled owner whose run was settled as lost (drop) stays refused when the record is
    changed afterwards (the record's run fields are not the stale owner's any more)."""
    declare_due(store)
    (stale,) = claim(store, "stale", lease=0.05)
    wait_until(lambda: store.now() > stale.lease_until, 5)
    assert claim(store, "p2") == []
    assert store.set_next_fire("job", store.now() - dt.timedelta(seconds=1))
    (fresh,) = claim(store, "p3")
    assert store.set_paused("job", True)
    assert not store.renew(stale, 30) and not store.complete(stale, "ok")
    assert store.complete(fresh, "ok")
    record = store.get("job")
    assert record is not None and record.counters["lost"] == 1
    assert record.counters["runs"] == 1 and record.paused


def _drop_claim_tokens(kind: str, url: str) -> None:
    """Make the table as the format before claim tokens had it (no ``claim_token`` column)."""
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute("ALTER TABLE executors_schedules DROP COLUMN claim_token")
        return
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE executors_schedules DROP COLUMN claim_token")
    assert not _schema_done(url)  # so the next process to start completes the schema


def _schema_done(url: str) -> bool:
    """Whether a PostgreSQL store opening `url` would find its schema complete (no DDL)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(pg._SCHEMA_DONE).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_table_made_before_claim_tokens_gains_them_and_fences_runs_by_them(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Opening a table that lacks the ``claim_token`` column adds it and keeps the records;
    a run claimed afterwards renews and completes across a pause."""
    url = empty_store_url(kind, request, tmp_path)
    old = open_store(url)
    old.declare(definition("kept"), lambda now: now - dt.timedelta(seconds=1))
    old.close()
    _drop_claim_tokens(kind, url)
    upgraded = open_store(url)
    try:
        assert [r.name for r in upgraded.records()] == ["kept"]
        assert kind != "postgresql" or _schema_done(url)
        (c,) = claim(upgraded)
        assert upgraded.set_paused("kept", True)
        assert upgraded.renew(c, 30) and upgraded.complete(c, "ok")
        record = upgraded.get("kept")
        assert record is not None and record.paused and record.counters["runs"] == 1
    finally:
        upgraded.close()


def _shows_no_secret(exc: BaseException, *secrets: str) -> str:
    """The traceback `exc` prints, checked for `secrets` (none may show), with the chain."""
    import traceback

    printed = "".join(traceback.format_exception(exc))
    for secret in secrets:
        assert secret not in printed, printed
    # Not chained to the driver's error (which holds its message as it was).
    assert exc.__cause__ is None and exc.__context__ is None
    return printed


@pytest.mark.parametrize(("url", "error", "shown"), [
    # pymongo's InvalidURI: an unescaped "@" in the password.
    ("mongodb://user:a@b@127.0.0.1:{port}/db", ValueError, "mongodb://user:***@127.0.0.1"),
    # libpq cannot read it (a space in the password; an unknown option).
    ("postgresql://user:s3c ret@127.0.0.1:{port}/db", ValueError, "postgresql://user:***@127"),
    ("postgresql://alice@127.0.0.1:{port}/db?password=s3cret&bogus=1", ValueError,
     "?password=***&bogus=1"),
    # Unreachable, the password in the query.
    ("postgresql://alice@127.0.0.1:{port}/db?password=s3cret", ConnectionError,
     "?password=***"),
    ("postgresql://user:s3c/ret@127.0.0.1:{port}/db", ConnectionError,
     "postgresql://user:***@127.0.0.1"),
])
def test_a_drivers_configuration_error_is_the_documented_error_with_secrets_hidden(
        url: str, error: type[Exception], shown: str) -> None:
    """Every driver error at opening (pymongo's InvalidURI, libpq's unreadable URL or
    option, no server) is `open_store`'s ValueError or ConnectionError, from `open_store`
    and from the service, naming the URL with every secret hidden, in its message, its chain
    and its traceback."""
    from executors import BackgroundService
    from executors.testing import free_port

    target = url.format(port=free_port())
    for opening in (open_store, lambda u: BackgroundService("s", store=u)):
        with pytest.raises(error) as info:
            opening(target)
        assert shown in str(info.value), str(info.value)
        _shows_no_secret(info.value, "s3cret", "s3c", "ret@", "a@b")


def test_a_postgres_password_in_the_query_shows_nowhere(pg_dsn: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """``?password=`` in a reachable store's URL is hidden in its `display_url`, the
    service's status and its logs."""
    import logging

    from executors import BackgroundService
    from executors.triggers import Interval

    url = pg_dsn + ("&" if "?" in pg_dsn else "?") + "password=s3cret"
    caplog.set_level(logging.DEBUG)
    with BackgroundService("s", store=url) as svc:
        svc.schedule(Interval(3600), print, name="hourly")
        status = svc.status()
    assert "password=***" in status.store.url  # type: ignore[union-attr]
    assert "s3cret" not in repr(status) and "s3cret" not in caplog.text


def test_the_last_runs_owner_is_kept_through_claims_and_control_operations(
        store: ScheduleStore) -> None:
    """A finished run records who ran it (`last_owner`), kept by the next claims and by a
    pause; a run lost by a crashed owner names that owner."""
    declare_due(store)
    assert store.get("job").last_owner is None  # type: ignore[union-attr]
    (c,) = claim(store, "p1")
    assert store.complete(c, "error: E: x")
    assert store.set_paused("job", True) and store.set_paused("job", False)
    record = store.get("job")
    assert record is not None and record.last_owner == "p1"
    assert record.last_result == "error: E: x"
    assert store.set_next_fire("job", store.now() - dt.timedelta(seconds=0.5))
    (c,) = claim(store, "crashed", lease=0.05)
    assert store.get("job").last_owner == "p1"  # type: ignore[union-attr]
    wait_until(lambda: store.now() > c.lease_until, 5)
    claim(store, "p2")
    record = store.get("job")
    assert record is not None and record.last_result == "lost"
    assert record.last_owner == "crashed"


@pytest.mark.parametrize("kind", ["sqlite", "mongodb", "postgresql"])
def test_a_record_written_before_the_last_owner_was_kept_reads_none(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """A finished run stored without ``last_owner`` (an older version's record) reads as
    None, and the next completion records it."""
    url = empty_store_url(kind, request, tmp_path)
    store = open_store(url)
    try:
        declare_due(store)
        (c,) = claim(store, "p1")
        assert store.complete(c, "ok")
        _forget_last_owner(kind, url)
        record = store.get("job")
        assert record is not None and record.last_owner is None
        assert record.last_result == "ok" and record.counters["runs"] == 1
        assert store.set_next_fire("job", store.now() - dt.timedelta(seconds=0.5))
        (c,) = claim(store, "p2")
        assert store.complete(c, "ok")
        assert store.get("job").last_owner == "p2"  # type: ignore[union-attr]
    finally:
        store.close()


def _forget_last_owner(kind: str, url: str) -> None:
    """Remove ``last_owner`` from every stored record, as an older version wrote them."""
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute("UPDATE executors_schedules SET state = json_remove(state, "
                         "'$.last_owner'), changed = changed + 1000")
    elif kind == "mongodb":
        import pymongo

        with pymongo.MongoClient(url) as client:
            client.get_default_database()["executors_schedules"].update_many(
                {}, {"$unset": {"last_owner": ""}})
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE executors_schedules SET state = state - 'last_owner'")


@pytest.mark.parametrize("kind", ["mongodb", "postgresql"])
def test_the_command_on_a_database_without_a_store_is_refused_and_writes_nothing(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """``executors schedules`` (run as a child process) on a server database that holds no
    store refuses to list or act, one line, and creates nothing in it (no table, collection,
    index or format record); once a store is there, it lists it."""
    import subprocess
    import sys

    url = empty_store_url(kind, request, tmp_path)
    for args in ([], ["pause", "nightly"]):
        proc = subprocess.run([sys.executable, "-m", "executors", "schedules", url, *args],
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 1 and "holds no schedule store" in proc.stderr, proc
        assert len(proc.stderr.splitlines()) == 1
    assert _store_objects(kind, url) == []
    open_store(url).close()
    proc = subprocess.run([sys.executable, "-m", "executors", "schedules", url],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("no schedules in"), proc


def _store_objects(kind: str, url: str) -> list[str]:
    """The store's tables or collections in the database at `url`."""
    if kind == "mongodb":
        import pymongo

        with pymongo.MongoClient(url) as client:
            return sorted(client.get_default_database().list_collection_names())
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT relname FROM pg_class WHERE relname LIKE 'executors%'")
        return sorted(row[0] for row in rows)


# -- the trust rule: what the store can and cannot make a process do ---------------------------


def _targeted(name: str, target: str, *args: object) -> ScheduleDefinition:
    return ScheduleDefinition(name, {"type": "interval", "seconds": 3600.0}, target,
                              list(args), {}, {})


def test_a_claim_reads_only_the_records_it_admits(store: ScheduleStore) -> None:
    """Given a `Claimable`, a claim takes only the declared names: an undeclared due record is
    not claimed (its state does not move: version, next fire time, no owner), and
    `next_due` does not wake a claimer for it."""
    declare_due(store, "undeclared", ago=5.0)
    mine = store.declare(definition("mine"), lambda now: now + dt.timedelta(hours=1)).record
    before = store.get("undeclared")
    only = Claimable(frozenset({"mine"}))
    assert store.claim("p1", lease=30, limit=100, planner=every_period,
                       on_crash=drop, only=only) == []  # type: ignore[arg-type]
    _, earliest = store.next_due(only)
    assert earliest == mine.next_fire
    assert store.get("undeclared") == before
    declare_due(store, "due-mine")
    claimed = store.claim("p1", lease=30, limit=100, planner=every_period, on_crash=drop,  # type: ignore[arg-type]
                          only=Claimable(frozenset({"mine", "due-mine"})))
    assert [c.name for c in claimed] == ["due-mine"]
    assert store.get("undeclared") == before


def test_an_allowlist_admits_undeclared_records_by_target_only(store: ScheduleStore) -> None:
    """`Claimable.targets` admits records of exactly that target, `modules` every target of
    that module; a record of any other target (``os:system``) is left alone whatever its
    name."""
    for name, target in (("exact", "pkg.jobs:refresh"), ("module", "pkg.tasks:anything"),
                         ("shell", "os:system"), ("near", "pkg.jobs:refresh_all"),
                         ("sub", "pkg.tasks.deep:f")):
        store.declare(_targeted(name, target, "x"), lambda now: now - dt.timedelta(seconds=1))
    only = Claimable(frozenset(), frozenset({"pkg.jobs:refresh"}), frozenset({"pkg.tasks"}))
    claimed = store.claim("p1", lease=30, limit=100, planner=every_period,  # type: ignore[arg-type]
                          on_crash=drop, only=only)
    assert sorted(c.name for c in claimed) == ["exact", "module"]
    shell = store.get("shell")
    assert shell is not None and shell.owner is None and shell.version == 1


def test_a_declaration_judges_the_stored_definition_not_its_digest_field(
        store: ScheduleStore, store_url: str) -> None:
    """Arguments rewritten in the store with the digest field left alone are found by the
    next declaration (it recomputes the stored definition's digest): the declaration is
    written back ("changed"), its state kept (next fire time: the trigger is the same)."""
    first = store.declare(definition(), lambda now: now + dt.timedelta(hours=1)).record
    rewrite(store, store_url, "job", args=["rm -rf /"], target="os:system")
    tampered = store.get("job")
    assert tampered is not None and tampered.definition.target == "os:system"
    assert tampered.digest == first.digest  # the writer left the digest field as it was
    again = store.declare(definition(), lambda now: now)  # would move next_fire if used
    assert again.outcome == "changed"
    record = store.get("job")
    assert record is not None and record.definition == definition()
    assert record.next_fire == first.next_fire
    assert store.declare(definition(), lambda now: now).outcome == "unchanged"


def _lines(path: Path) -> int:
    """How many runs of ``stored_jobs.append`` wrote to `path` (a trace left by each run)."""
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_service_never_claims_imports_nor_runs_a_record_its_code_does_not_declare(
        store: ScheduleStore, tmp_path: Path) -> None:
    """A record another writer added (its target a function that leaves a trace, as
    ``os:system`` would run a command), due at once, is never run by a serving process, nor
    claimed (its state does not move); status() lists it as not declared here. The process's
    own schedule runs meanwhile."""
    trace, mine = tmp_path / "intruder.log", tmp_path / "mine.log"
    store.declare(_targeted("intruder", "helpers.stored_jobs:append", str(trace)),
                  lambda now: now - dt.timedelta(seconds=1))
    before = store.get("intruder")
    with BackgroundService("trust", store=store) as svc:
        svc.schedule(Interval(0.05), stored_jobs.append, str(mine), name="mine")
        wait_until(lambda: _lines(mine) >= 3, 10)  # passes of the loop, claims made
        wait_until(lambda: len(svc.status().store.schedules) == 2, 10)  # type: ignore[union-attr]
        listed = {s.name: s.declared for s in svc.status().store.schedules}  # type: ignore[union-attr]
    assert listed == {"intruder": False, "mine": True}
    assert not trace.exists()
    assert store.get("intruder") == before


def test_a_service_runs_the_arguments_of_its_code_not_those_rewritten_in_the_store(
        store: ScheduleStore, store_url: str, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """The target and arguments of a served schedule rewritten in the store (its digest field
    left alone) change nothing that runs: every run calls the code's function with the code's
    arguments; the record is written back to the declaration, logged once and announced
    (ScheduleChanged)."""
    good, bad = tmp_path / "good.log", tmp_path / "bad.log"
    with caplog.at_level(logging.WARNING, "executors.service"), \
            BackgroundService("trust", store=store) as svc:
        changed: list[ServiceEvent] = []
        svc.subscribe(changed.append, ScheduleChanged)
        svc.schedule(Interval(0.05), stored_jobs.append, str(good), name="job")
        wait_until(lambda: _lines(good) >= 1, 10)
        rewrite(store, store_url, "job", args=[str(bad)], target="helpers.stored_jobs:record")
        runs = _lines(good)
        wait_until(lambda: _lines(good) >= runs + 3, 10)
        wait_until(lambda: changed and store.get("job").definition.args  # type: ignore[union-attr]
                   == (str(good),), 10)
    assert not bad.exists()
    record = store.get("job")
    assert record is not None and record.definition.target == "helpers.stored_jobs:append"
    assert caplog.text.count("differs from this process's declaration") == 1


def test_a_schedule_removed_from_the_code_stops_running_where_it_is_not_declared(
        store: ScheduleStore, tmp_path: Path) -> None:
    """Two services share the store: "old" declares ``gone``, "new" (the code that removed
    it) does not. Once "old" stops, ``gone`` runs no more: "new" keeps running its own
    schedule and never runs ``gone`` (its record stays, listed as not declared)."""
    gone, own = tmp_path / "gone.log", tmp_path / "own.log"
    new = BackgroundService("new", store=store).start()
    try:
        new.schedule(Interval(0.05), stored_jobs.append, str(own), name="own")
        with BackgroundService("old", store=store) as old:
            old.schedule(Interval(0.05), stored_jobs.append, str(gone), name="gone")
            wait_until(lambda: _lines(gone) >= 2, 10)
        stopped = _lines(gone)
        runs = _lines(own)
        wait_until(lambda: _lines(own) >= runs + 5, 10)  # "new" served the store meanwhile
        assert _lines(gone) == stopped
        wait_until(lambda: len(new.status().store.schedules) == 2, 10)  # type: ignore[union-attr]
        listed = {s.name: s.declared for s in new.status().store.schedules}  # type: ignore[union-attr]
        assert listed == {"gone": False, "own": True}
    finally:
        new.shutdown()


def test_serve_runs_the_admitted_records_and_logs_and_counts_each_refused_one_once(
        store: ScheduleStore, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``serve=("helpers.stored_jobs:append",)`` a record written elsewhere with that
    target runs here (its stored target and arguments); one of another target is never run,
    and is logged and counted once (`StoreStatus.refused`) however many times the loop looks
    at the store."""
    from executors._service import stored_status

    monkeypatch.setattr(stored_status, "SNAPSHOT_EVERY", 0.05)  # many looks in a short test
    admitted, refused, own = tmp_path / "admitted.log", tmp_path / "refused.log", \
        tmp_path / "own.log"
    due = lambda now: now - dt.timedelta(seconds=1)  # noqa: E731
    store.declare(_targeted("admitted", "helpers.stored_jobs:append", str(admitted)), due)
    store.declare(_targeted("refused", "helpers.stored_jobs:record", str(refused)), due)
    with caplog.at_level(logging.WARNING, "executors.service"), \
            BackgroundService("trust", store=store,
                              serve=("helpers.stored_jobs:append",)) as svc:
        svc.schedule(Interval(0.05), stored_jobs.append, str(own), name="own")
        wait_until(lambda: _lines(admitted) == 1, 10)
        wait_until(lambda: svc.status().store.refused == 1, 10)  # type: ignore[union-attr]
        runs = _lines(own)
        wait_until(lambda: _lines(own) >= runs + 10, 10)
        status = svc.status().store
    assert status is not None and status.refused == 1
    assert not refused.exists()
    assert caplog.text.count("not in serve=") == 1
    record = store.get("refused")
    assert record is not None and record.owner is None and record.counters["runs"] == 0
