"""One stored schedule that a real store refuses, or whose plan outlasts its budget, is that
schedule's failure alone: logged, counted, retried on its own backoff, and the other schedules
of the process keep being claimed and run. The bounds checked at ``schedule()`` are ones every
store keeps."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import stored_jobs
from helpers.store_urls import empty_store_url

from executors import (
    AllOf,
    AnyOf,
    BackgroundService,
    Cron,
    Date,
    Interval,
    RunMissed,
    ServiceEvent,
)
from executors._service import stored_declare, stored_failing, stored_plan
from executors._service.limits import ARGS_DEPTH_MAX, ARGS_SIZE_MAX, NAME_MAX
from executors.stores import ScheduleDefinition, open_store, sqlite_path
from executors.testing import wait_until

UTC = dt.UTC


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    stored_jobs.SEEN.clear()
    yield
    stored_jobs.SEEN.clear()


def _ticks() -> int:
    return sum(1 for tag, _, _ in stored_jobs.SEEN if tag == "t")


def _nested(depth: int) -> object:
    value: object = "v"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mongodb"])
def test_values_at_the_bounds_are_kept_by_every_store(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """What schedule() accepts, every store keeps: a name of NAME_MAX 4-byte characters
    that do not compress (800 bytes: PostgreSQL's b-tree entry limit is about 2,700), an
    argument nested ARGS_DEPTH_MAX levels, and arguments of ARGS_SIZE_MAX bytes of JSON,
    declared through the service on SQLite, PostgreSQL and nx-27017, and read back equal."""
    url = empty_store_url(kind, request, tmp_path)
    rng = random.Random(7)
    name = "".join(chr(rng.randrange(0x1F300, 0x1F5FF)) for _ in range(NAME_MAX))
    big = "x" * (ARGS_SIZE_MAX - 9 - len('"e",'))  # [["e","x..."],{}] is ARGS_SIZE_MAX bytes
    with BackgroundService(store=url) as svc:
        svc.schedule(Interval(3600), stored_jobs.seen, "d", _nested(ARGS_DEPTH_MAX),
                     name=name)
        svc.schedule(Interval(3600), stored_jobs.seen, "e", big, name="big")
        status = svc.status().store
        assert status is not None and status.declarations_failing == ()
    store = open_store(url)
    try:
        record = store.get(name)
        assert record is not None and record.definition.args == ("d", _nested(ARGS_DEPTH_MAX))
        record = store.get("big")
        assert record is not None and record.definition.args == ("e", big)
    finally:
        store.close()


def _poison(kind: str, url: str) -> None:
    """Make the store at `url` refuse any write of the record "poisoned" (SQLite: a trigger
    that RAISEs; the other stores refuse the NUL key `_poisoned` puts in its definition)."""
    open_store(url).close()  # the schema
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn, conn:
            conn.execute("CREATE TRIGGER poison BEFORE INSERT ON executors_schedules "
                         "WHEN NEW.name = 'poisoned' "
                         "BEGIN SELECT RAISE(ABORT, 'poisoned declaration'); END")


def _heal(kind: str, url: str) -> None:
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(sqlite_path(url))) as conn, conn:
            conn.execute("DROP TRIGGER poison")


def _poisoned(definition: ScheduleDefinition) -> ScheduleDefinition:
    """`definition` with a keyword named with NUL: PostgreSQL's jsonb and MongoDB's BSON
    refuse it (past the check at schedule(), as a declaration from an older version could)."""
    return dataclasses.replace(definition, kwargs={"k\x00": 1})


@pytest.mark.parametrize("kind", ["sqlite", "postgresql", "mongodb"])
def test_a_declaration_the_store_refuses_stops_no_other_schedule(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    """A store that refuses one declaration (SQLite: a trigger RAISEs for its name;
    PostgreSQL and MongoDB: a NUL in a key of its definition, injected past schedule()'s
    check) fails that schedule alone: the other schedule of the process is claimed and runs
    again and again, the failure is logged once as an ERROR naming the schedule, listed in
    `declarations_failing` with the store's error, counted in `declaration_errors` (a few
    tries on its backoff, not one a pass), and the service reads unhealthy with the
    schedule named in `last_error`. Once the store takes it, it is declared and served, and
    the service is healthy again."""
    url = empty_store_url(kind, request, tmp_path)
    _poison(kind, url)
    svc = BackgroundService(store=url)
    svc.schedule(Interval(0.1), stored_jobs.seen, "t", name="tick")
    job = svc.schedule(Interval(0.1), stored_jobs.seen, "p", name="poisoned")
    assert job._stored is not None
    good = job._stored.definition
    if kind != "sqlite":
        job._stored.definition = _poisoned(good)
    try:
        svc.start()
        wait_until(lambda: _ticks() >= 5, 10)
        status = svc.status()
        store = status.store
        assert store is not None
        assert [name for name, _ in store.declarations_failing] == ["poisoned"]
        error = store.declarations_failing[0][1]
        assert ("poisoned declaration" in error if kind == "sqlite" else
                "NUL" in error or "\\u0000" in error or "0x00" in error), error
        assert 1 <= store.declaration_errors <= 8  # its own backoff: not once per pass
        assert not store.healthy and not status.healthy
        assert store.last_error is not None and "'poisoned'" in store.last_error
        assert not any(tag == "p" for tag, _, _ in stored_jobs.SEEN)
        logged = [r for r in caplog.records
                  if r.levelname == "ERROR" and "'poisoned'" in r.getMessage()]
        assert len(logged) == 1 and "the other schedules go on" in logged[0].getMessage()
        _heal(kind, url)
        if kind != "sqlite":
            job._stored.definition = good
            svc._store.declare(good, job)  # type: ignore[union-attr]
        wait_until(lambda: any(tag == "p" for tag, _, _ in stored_jobs.SEEN), 10)
        store = svc.status().store
        assert store is not None and store.declarations_failing == () and store.healthy
        ticks = _ticks()
        wait_until(lambda: _ticks() >= ticks + 2, 10)
    finally:
        svc.shutdown()


def test_a_declaration_refused_while_serving_stops_no_other_schedule(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The same for a schedule added while the service runs, on PostgreSQL (an 8,000-byte
    ``pg_notify`` payload is refused: a name that long, past schedule()'s check, is declared
    by the service's own thread): the service goes on claiming the other schedule."""
    url = empty_store_url("postgresql", request, tmp_path)
    with BackgroundService(store=url) as svc:
        svc.schedule(Interval(0.1), stored_jobs.seen, "t", name="tick")
        wait_until(lambda: _ticks() >= 2, 10)
        job = svc.schedule(Interval(0.1), stored_jobs.seen, "p", name="long")
        assert job._stored is not None and svc._store is not None
        long = dataclasses.replace(job._stored.definition, name="n" * 8_000)
        svc._store.declare(long, job)
        ticks = _ticks()
        wait_until(lambda: _ticks() >= ticks + 5, 10)
        store = svc.status().store
        assert store is not None
        assert [(n[:3], "payload string too long" in e)
                for n, e in store.declarations_failing] == [("nnn", True)]


def _slow_after(first: dt.datetime) -> AllOf:
    """Fires at `first`, then searches without agreement for all its MAX_ROUNDS rounds
    (midnight against half past midnight): a plan from `first` is long, a first fire time
    before it is found in one round."""
    return AllOf(AnyOf(Date(first), Cron("0 0 * * *", tz="UTC")),
                 AnyOf(Date(first), Cron("30 0 * * *", tz="UTC")),
                 max_rounds=AllOf.MAX_ROUNDS)


def _assert_unmoved(url: str, first: dt.datetime) -> None:
    """The record "slow" is as declared: due at `first`, not claimed, nothing counted."""
    other = open_store(url)
    try:
        record = other.get("slow")
        assert record is not None and record.next_fire == first
        assert record.running_fire is None and record.counters["missed"] == 0
        assert record.counters["runs"] == 0
    finally:
        other.close()


def test_a_plan_over_its_time_budget_is_that_schedules_failure_and_loses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stored schedule whose plan (the search after its due fire time) outlasts the plan's
    time budget (lowered to 20 ms here; its search takes about a second) is left as it was:
    not claimed, its next fire time and counters unmoved (no fire time lost), listed in
    `plans_failing` and counted, retried on its own backoff (a few tries, not one a pass);
    the other schedule keeps running meanwhile. Paused (no longer due, so no longer
    planned), it is forgotten once its retry is overdue, and the service is healthy again."""
    monkeypatch.setattr(stored_plan, "PLAN_BUDGET", 0.02)
    monkeypatch.setattr(stored_declare, "_STALE", 0.3)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    first = (dt.datetime.now(UTC) + dt.timedelta(seconds=0.3)).replace(microsecond=0) \
        + dt.timedelta(seconds=1)
    with BackgroundService(store=url) as svc:
        svc.schedule(Interval(0.1), stored_jobs.seen, "t", name="tick")
        slow = svc.schedule(_slow_after(first), stored_jobs.seen, "s", name="slow")
        wait_until(lambda: (s := svc.status().store) is not None and bool(s.plans_failing),
                   10)
        ticks = _ticks()
        wait_until(lambda: _ticks() >= ticks + 5, 10)
        store = svc.status().store
        assert store is not None
        assert [n for n, _ in store.plans_failing] == ["slow"]
        assert "budget of 0.02 s" in store.plans_failing[0][1]
        assert 1 <= store.plan_errors <= 8
        assert not store.healthy and store.declarations_failing == ()
        _assert_unmoved(url, first)
        slow.pause()
        wait_until(lambda: (s := svc.status().store) is not None and s.healthy, 10)
        assert svc.status().store.plans_failing == ()  # type: ignore[union-attr]
    _assert_unmoved(url, first)
    assert not any(tag == "s" for tag, _, _ in stored_jobs.SEEN)


def test_slow_plans_due_together_share_one_budget_a_pass_and_stall_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten schedules whose plans each outlast the budget (0.1 s here), due at the same
    instant: a pass's plans search for one budget in all, the others wait for a later pass
    (unmoved, not counted failed), so no pass lasts ten budgets: the 0.1 s schedule beside
    them misses no run of about ten fire times from then on, as a pass of ten searches made
    it miss each time they were retried. All ten end up listed in plans_failing, each left
    as it was."""
    monkeypatch.setattr(stored_plan, "PLAN_BUDGET", 0.1)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    first = (dt.datetime.now(UTC) + dt.timedelta(seconds=0.3)).replace(microsecond=0) \
        + dt.timedelta(seconds=1)
    missed: list[ServiceEvent] = []
    with BackgroundService(store=url) as svc:
        svc.subscribe(missed.append, RunMissed)
        svc.schedule(Interval(0.1), stored_jobs.seen, "t", name="tick")
        for i in range(10):
            svc.schedule(_slow_after(first), stored_jobs.seen, "s", name=f"slow{i}")
        wait_until(lambda: len(svc.status().store.plans_failing) == 10, 20)  # type: ignore[union-attr]
        ticks = _ticks()
        wait_until(lambda: _ticks() >= ticks + 3, 10)
    # From the instant the ten came due (what happens before is the machine's load).
    groups = [e.count for e in missed  # type: ignore[attr-defined]
              if e.name == "tick" and e.first >= first]  # type: ignore[attr-defined]
    # A pass of ten searches misses about ten each time they retry together; one such group
    # may be this machine's load.
    assert sum(1 for count in groups if count >= 8) <= 1, groups
    other = open_store(url)
    try:
        for i in range(10):
            record = other.get(f"slow{i}")
            assert record is not None and record.next_fire == first
            assert record.counters["missed"] == record.counters["runs"] == 0
    finally:
        other.close()


def test_a_first_fire_time_over_the_budget_fails_that_declaration_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Declaring searches the trigger for its first fire time under the same budget: an
    `AllOf` that does not agree within it fails that declaration (listed, retried), never the
    loop: the other schedule runs."""
    monkeypatch.setattr(stored_plan, "PLAN_BUDGET", 0.02)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    never = AllOf(Cron("0 0 * * *", tz="UTC"), Cron("30 0 * * *", tz="UTC"),
                  max_rounds=AllOf.MAX_ROUNDS)
    with BackgroundService(store=url) as svc:
        svc.schedule(Interval(0.1), stored_jobs.seen, "t", name="tick")
        svc.schedule(never, stored_jobs.seen, "n", name="never")
        wait_until(lambda: _ticks() >= 5, 10)
        store = svc.status().store
        assert store is not None
        assert [(n, "budget" in e) for n, e in store.declarations_failing] == [("never", True)]


def test_a_declaration_failed_by_an_outage_is_retried_as_soon_as_the_store_is_back(
        tcp_proxy: Any, mongo_server: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule added while the store is unreachable fails its declaration like any other
    (its own backoff, here stretched to 30 s); when the store answers again every failing
    declaration is tried at the next pass, not after its backoff: it runs within seconds."""
    from integrations.schedule_stores.mongo import MongoScheduleStore

    monkeypatch.setattr(stored_failing, "DECLARE_BACKOFF_FIRST", 30.0)
    store = MongoScheduleStore(f"mongodb://127.0.0.1:{tcp_proxy.port}/outage_{os.getpid()}",
                               connect_timeout=1)
    try:
        with BackgroundService(store=store) as svc:
            svc.schedule(Interval(0.2), stored_jobs.seen, "t", name="tick")
            wait_until(lambda: _ticks() >= 2, 10)
            tcp_proxy.down()
            wait_until(lambda: (s := svc.status().store) is not None and s.store_errors >= 1,
                       30)
            svc.schedule(Interval(0.2), stored_jobs.seen, "l", name="late")
            status = svc.status().store
            assert status is not None and [n for n, _ in status.declarations_failing] == [
                "late"]
            tcp_proxy.up()
            began = time.monotonic()
            wait_until(lambda: any(tag == "l" for tag, _, _ in stored_jobs.SEEN), 20)
            assert time.monotonic() - began < 10  # not the 30 s backoff
    finally:
        store.close()
