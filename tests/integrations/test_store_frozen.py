"""A store that stops answering: reported unhealthy while a call hangs, interrupted at the
shutdown deadline; and the connection bounds each store's sessions carry.

"Stops answering" is done for real: the PostgreSQL server (postmaster and backends) and
nx-27017 are stopped with SIGSTOP, a SQLite file's write lock is held by another process's
``BEGIN IMMEDIATE``. Each freeze is short: the service's hung-call bound follows the lease
(a third of it), and these services have a 1.5 s lease.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import stored_jobs
from helpers.freezing import frozen, holding_write_lock, postmaster_pid
from helpers.store_urls import empty_store_url, stored_record

from executors import BackgroundService, Date, Interval
from executors.stores import MemoryStore, SQLiteScheduleStore, sqlite_path
from executors.testing import wait_until

Freeze = Callable[[], contextlib.AbstractContextManager[Any]]
KINDS = ["sqlite", "postgresql", "mongodb"]


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    stored_jobs.SEEN.clear()
    yield
    stored_jobs.SEEN.clear()


def _frozen_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path
                  ) -> tuple[str, Freeze]:
    """An empty store of `kind` and how to make it stop answering for a while."""
    url = empty_store_url(kind, request, tmp_path)
    if kind == "sqlite":
        path = sqlite_path(url)
        return url, lambda: holding_write_lock(path)
    if kind == "postgresql":
        dsn: str = request.getfixturevalue("pg_dsn")
        pid = postmaster_pid(dsn)
        return url, lambda: frozen(pid, children=True)
    server = request.getfixturevalue("mongo_server")
    if server.external:
        pytest.skip("MONGODB_URI points at a server this test cannot stop")
    pid = int((server.log_file.parent / "server.pid").read_text().split()[0])
    return url, lambda: frozen(pid)


def _serving(name: str, url: str) -> BackgroundService:
    svc = BackgroundService(name=name, store=url, store_lease=1.5)
    svc.schedule(Interval(0.2), stored_jobs.seen, "f", name="tick")
    svc.start()
    wait_until(lambda: len(stored_jobs.SEEN) >= 1, 10)
    return svc


def _blocked(svc: BackgroundService) -> str | None:
    store = svc.status().store
    assert store is not None
    return store.blocked


@pytest.mark.parametrize("kind", KINDS)
def test_a_hung_store_call_makes_status_unhealthy_with_the_reason(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """While the store does not answer, status() turns unhealthy once a call has hung past
    the bound (a third of the lease), saying which call and for how long, without that call
    returning; once the store answers again it is healthy again."""
    url, freeze = _frozen_store(kind, request, tmp_path)
    svc = _serving(f"hung-{kind}", url)
    try:
        assert svc.status().healthy
        with freeze():
            wait_until(lambda: _blocked(svc) is not None, 5)
            status = svc.status()
            assert not status.healthy
            assert status.store is not None and status.store.blocked is not None
            assert status.store.blocked.startswith("store call blocked ")
            assert f"on hung-{kind}-" in status.store.blocked  # the thread that waits
        wait_until(lambda: svc.status().healthy, 15)
        assert _blocked(svc) is None
    finally:
        svc.shutdown(10)


@pytest.mark.parametrize("kind", KINDS)
def test_shutdown_interrupts_hung_store_calls_by_its_deadline(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """shutdown(2) with the store not answering: the hung calls are interrupted before the
    deadline, so shutdown returns by it, reports completed, and no thread of the service
    (store thread, snapshot thread, the PostgreSQL listener) is alive after it."""
    url, freeze = _frozen_store(kind, request, tmp_path)
    svc = _serving(f"stop-{kind}", url)
    loop = svc._store
    assert loop is not None
    wait_until(lambda: (svc.status(), loop.snapshots.reader)[1] is not None, 10)
    with freeze():
        wait_until(lambda: _blocked(svc) is not None, 5)
        report = svc.shutdown(2)
        left = [t.name for t in threading.enumerate() if t.name.startswith(f"stop-{kind}-")
                or t is loop.listener]
    assert left == [], report
    assert report.completed, report
    assert report.elapsed < 2.5, report


def test_postgres_sessions_carry_tcp_and_server_side_bounds(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Every PostgreSQL connection of the store has TCP keepalives and tcp_user_timeout
    (libpq parameters) and statement, lock and idle-in-transaction timeouts (session
    settings); a URL's own options win over the store's."""
    from integrations.schedule_stores.postgres import PostgresScheduleStore

    url = empty_store_url("postgresql", request, tmp_path)
    store = PostgresScheduleStore(url)
    try:
        conn = store._conn()
        params = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
        assert (params["keepalives"], params["keepalives_idle"], params["keepalives_interval"],
                params["keepalives_count"], params["tcp_user_timeout"]) == (
                    "1", "10", "5", "3", "20000")
        shown = [conn.execute(f"SHOW {name}").fetchone()[0] for name in  # type: ignore[index]
                 ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")]
        conn.rollback()
        assert shown == ["30s", "10s", "30s"]
    finally:
        store.close()
    sep = "&" if "?" in url else "?"
    store = PostgresScheduleStore(f"{url}{sep}options=-c%20statement_timeout%3D5s"
                                  "&keepalives_idle=7")
    try:
        conn = store._conn()
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "5s"  # type: ignore[index]
        conn.rollback()
        params = {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}
        assert params["keepalives_idle"] == "7"
    finally:
        store.close()


def test_mongo_client_has_a_socket_timeout(request: pytest.FixtureRequest,
                                           tmp_path: Path) -> None:
    """The MongoDB store's client has a socket timeout of 30 s (pymongo waits for ever by
    default); a URL's own socketTimeoutMS wins."""
    from integrations.schedule_stores.mongo import MongoScheduleStore

    url = empty_store_url("mongodb", request, tmp_path)
    store = MongoScheduleStore(url)
    try:
        assert store._client.options.pool_options.socket_timeout == 30.0
    finally:
        store.close()
    store = MongoScheduleStore(f"{url}?socketTimeoutMS=4000")
    try:
        assert store._client.options.pool_options.socket_timeout == 4.0
    finally:
        store.close()


def _leases_expired(loop: Any) -> bool:
    """Whether every lease this loop holds has expired (the store's clock is this machine's
    clock on every store here; the stopped store cannot be asked)."""
    with loop.lock:
        ends = [f.claim.lease_until.timestamp() for f in loop.in_flight.values()]
    return bool(ends) and max(ends) + 0.05 < time.time()


@pytest.mark.parametrize("on_crash", ["rerun", "drop"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_run_that_ended_while_the_store_hung_is_written_not_settled_as_a_crash(
        kind: str, on_crash: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The store stops answering while a run is in progress, long enough for its lease to
    expire; the run ends meanwhile (its completion waits), and the store answers again while
    the loop waits in its claim. The run's own completion is written first: it is not run
    again (``"rerun"``) nor counted lost (``"drop"``), and no lease is lost."""
    url, freeze = _frozen_store(kind, request, tmp_path)
    stored_jobs.GATE_ENTERED.clear()
    stored_jobs.GATE_OPEN.clear()
    svc = BackgroundService(name=f"own-{kind}-{on_crash}", store=url, store_lease=1.5)
    loop = svc._store
    assert loop is not None
    # No renewals (the private knob): the lease expires while the store hangs, and the loop
    # waits in its claim (a renewal would renew the lease as the store comes back).
    loop.renew_every = 3600.0
    try:
        # Due in an hour, run now (once): a fire time in the near future could pass before
        # the declaration under load, and a Date with none left never runs.
        when = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        job = svc.schedule(Date(when), stored_jobs.gated, "g", name="once",
                           on_crash=on_crash)  # type: ignore[arg-type]
        svc.start()
        job.wake()
        assert stored_jobs.GATE_ENTERED.wait(10)
        with freeze():
            wait_until(lambda: _leases_expired(loop), 10)
            stored_jobs.GATE_OPEN.set()  # the run ends while the store hangs
            # Its completion is handed to the loop (SQLite) or being written (the others).
            wait_until(lambda: bool(loop.finished or loop.completing), 5)
        wait_until(lambda: loop.completed + loop.lease_lost >= 1, 15)
        claims, lease_lost = loop.claims, loop.lease_lost
    finally:
        stored_jobs.GATE_OPEN.set()
        svc.shutdown(10)
    record = stored_record(url, "once")
    assert record is not None
    assert [s[0] for s in stored_jobs.SEEN] == ["g"]  # ran once: no rerun
    assert (claims, lease_lost) == (1, 0)
    assert record.counters["runs"] == 1 and record.counters["lost"] == 0, record
    assert record.last_result == "ok" and record.attempt == 1, record


def test_sqlite_waits_for_the_write_lock_in_attempts_and_an_interrupt_ends_the_wait(
        tmp_path: Path) -> None:
    """A SQLite write waits for another process's write lock `busy_timeout` in all (in
    short attempts) and then fails with "database is locked"; an interrupt from another
    thread ends a longer wait after the attempt in progress (SQLite's own wait ignores
    ``Connection.interrupt()``)."""
    path = str(tmp_path / "jobs.db")
    quick, slow = SQLiteScheduleStore(path, busy_timeout=1.0), SQLiteScheduleStore(path)
    try:
        with holding_write_lock(path):
            began = time.monotonic()
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                quick.set_paused("x", True)
            assert 0.9 < time.monotonic() - began < 3.0
            failed: list[BaseException] = []

            def write() -> None:
                try:
                    slow.set_paused("x", True)
                except BaseException as exc:
                    failed.append(exc)

            writer = threading.Thread(target=write)
            writer.start()
            began = time.monotonic()
            slow.interrupt()
            writer.join(10)
            assert not writer.is_alive() and time.monotonic() - began < 2.0
            assert len(failed) == 1 and "locked" in str(failed[0])
    finally:
        quick.close()
        slow.close()


class _StuckListener:
    """A memory store whose listener (`watch`) cannot stop when asked, as one waiting on a
    server that does not answer, until the store is interrupted."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.released = threading.Event()
        self.thread = threading.Thread(target=self.released.wait, args=(30,), daemon=True,
                                       name="stuck-listener")

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)  # the rest of the store, as it is

    def watch(self, callback: Callable[[], object]) -> Callable[[], None]:
        self.thread.start()
        unwatch = _Unwatch()
        unwatch.thread = self.thread
        return unwatch

    def interrupt(self) -> None:
        self.released.set()


class _Unwatch:
    thread: threading.Thread

    def __call__(self) -> None:
        """Asked to stop: it cannot while its server does not answer."""


def test_shutdown_interrupts_a_listener_that_cannot_stop(tmp_path: Path) -> None:
    """A store listener asked to stop that is still waiting on its store near the deadline
    (no other call of the store hangs) is interrupted too: shutdown returns by its deadline,
    complete, and the listener thread has ended."""
    store = _StuckListener()
    svc = BackgroundService(name="stuck", store=store).start()  # type: ignore[arg-type]
    wait_until(lambda: store.thread.is_alive(), 5)
    report = svc.shutdown(2)
    assert report.completed and report.elapsed < 2.5, report
    assert not store.thread.is_alive()
