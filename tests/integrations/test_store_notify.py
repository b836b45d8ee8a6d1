"""PostgreSQL LISTEN/NOTIFY: a change made by another process reaches a running service at
once (not at its next poll), the listener comes back after its connection is killed, and
closing the store leaves no thread behind. Claims and completions notify nothing."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers import stored_jobs
from helpers.store_urls import empty_store_url

from executors import BackgroundService, Interval
from executors._cli import main
from executors._service import stored
from executors.stores import Plan, ScheduleDefinition, ScheduleRecord
from executors.testing import wait_until
from integrations.schedule_stores.postgres import PostgresScheduleStore

#: The poll interval the service tests raise `stored.POLL` to: a change seen well before it
#: was seen by the notification, not by polling.
SLOW_POLL = 30.0
#: Seen "at once": well under `SLOW_POLL` even on a busy machine (measured: a few ms). Not
#: tighter: status() shows a change at the copy's next refresh, which the 5 % bound puts 20
#: times the last read's length after it: a read of 150 ms under load puts it 3 s away.
AT_ONCE = 10.0


@pytest.fixture
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return empty_store_url("postgresql", request, tmp_path)


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    stored_jobs.SEEN.clear()
    yield
    stored_jobs.SEEN.clear()


def _listener_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("-listener")]


def _definition(name: str) -> ScheduleDefinition:
    return ScheduleDefinition(name, {"type": "interval", "seconds": 3600.0},
                              "helpers.stored_jobs:seen")


def _every_hour(record: ScheduleRecord, now: dt.datetime) -> Plan:
    return Plan(record.next_fire, now + dt.timedelta(hours=1))


def test_a_run_now_and_a_pause_made_elsewhere_reach_a_running_service_at_once(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With polling every 30 s, a run-now written through another store object runs the
    job, and a pause shows in status(), within `AT_ONCE`: the notification woke the loop."""
    monkeypatch.setattr(stored, "POLL", SLOW_POLL)
    other = PostgresScheduleStore(url)
    try:
        with BackgroundService(store=url) as svc:
            svc.schedule(Interval(3600), stored_jobs.seen, "a", name="hourly")
            wait_until(lambda: len(svc.status().store.schedules) == 1,  # type: ignore[union-attr]
                       10)
            assert stored_jobs.SEEN == []
            started = time.monotonic()
            assert other.set_next_fire("hourly", other.now())
            wait_until(lambda: stored_jobs.SEEN, AT_ONCE)
            ran_after = time.monotonic() - started
            # Its end recorded (a pause moves the record's version: a completion written
            # after it would be refused).
            wait_until(lambda: svc.status().store.completed == 1,  # type: ignore[union-attr]
                       AT_ONCE)

            started = time.monotonic()
            assert other.set_paused("hourly", True)
            wait_until(lambda: svc.status().store.schedules[0].paused,  # type: ignore[union-attr]
                       AT_ONCE)
            paused_after = time.monotonic() - started
    finally:
        other.close()
    assert ran_after < AT_ONCE and paused_after < AT_ONCE
    assert _listener_threads() == []  # the service's stop stopped its listener


def test_the_schedules_command_reaches_a_running_service_at_once(
        url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``executors schedules URL run-now NAME`` (its own connection, as from another machine)
    runs the job of a service polling every 30 s within `AT_ONCE`; ``remove`` takes it out of
    the service's status() as fast."""
    monkeypatch.setattr(stored, "POLL", SLOW_POLL)
    with BackgroundService(store=url) as svc:
        svc.schedule(Interval(3600), stored_jobs.seen, "b", name="hourly")
        wait_until(lambda: len(svc.status().store.schedules) == 1,  # type: ignore[union-attr]
                   10)
        assert main(["schedules", url, "run-now", "hourly"]) == 0
        wait_until(lambda: stored_jobs.SEEN, AT_ONCE)
        wait_until(lambda: svc.status().store.completed == 1,  # type: ignore[union-attr]
                   AT_ONCE)
        assert main(["schedules", url, "remove", "hourly"]) == 0
        wait_until(lambda: svc.status().store.schedules == (),  # type: ignore[union-attr]
                   AT_ONCE)
    assert capsys.readouterr().out.splitlines()[-1] == "remove: hourly"


def test_claims_renewals_and_completions_notify_nothing(url: str) -> None:
    """Only the writes other processes must see notify: declarations and a pause do, in
    commit order; a claim, a renewal and a completion (the hot path) do not."""
    store = PostgresScheduleStore(url)
    with psycopg.connect(url, autocommit=True) as listen:
        listen.execute(f'LISTEN "{store.channel}"')
        try:
            store.declare(_definition("job"), lambda now: now)
            store.declare(_definition("other"), lambda now: now + dt.timedelta(hours=1))
            store.declare(_definition("job"), lambda now: now)  # unchanged: no notification
            claims = store.claim("p1", lease=30.0, limit=10, planner=_every_hour,
                                 on_crash=lambda record: "drop")
            assert [c.name for c in claims] == ["job"]
            assert store.renew(claims[0], 30.0)
            assert store.complete(claims[0], "ok")
            assert store.set_paused("other", True)
            payloads: list[str] = []
            for notify in listen.notifies(timeout=10):
                payloads.append(notify.payload)
                if len(payloads) == 3:
                    break
        finally:
            store.close()
    assert payloads == ["job", "other", "other"]


def test_a_listener_whose_connection_is_killed_listens_again_and_close_ends_it(
        url: str) -> None:
    """`watch` calls back on a change; after ``pg_terminate_backend`` kills its connection
    it connects again (calling back once more) and hears the next change; the store's close()
    ends its thread."""
    store = PostgresScheduleStore(url)
    other = PostgresScheduleStore(url)
    calls: list[float] = []
    try:
        store.watch(lambda: calls.append(time.monotonic()))
        wait_until(lambda: len(calls) == 1, 10)  # connected: the first call
        other.declare(_definition("job"), lambda now: now)
        wait_until(lambda: len(calls) == 2, AT_ONCE)
        assert len(_listener_threads()) == 1

        with psycopg.connect(url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'executors schedule listener'").fetchall()
        assert killed == [(True,)]
        wait_until(lambda: len(calls) == 3, 10)  # connected again
        other.set_paused("job", True)
        wait_until(lambda: len(calls) == 4, AT_ONCE)
    finally:
        other.close()
        store.close()
    assert _listener_threads() == []


def test_closing_a_watch_ends_its_thread_and_hears_nothing_more(url: str) -> None:
    """The function `watch` returns stops its listener: the thread is gone at once."""
    store = PostgresScheduleStore(url)
    try:
        calls: list[int] = []
        stop = store.watch(lambda: calls.append(1))
        wait_until(lambda: calls, 10)
        stop()
        assert _listener_threads() == []
        stop()  # twice is harmless
    finally:
        store.close()
