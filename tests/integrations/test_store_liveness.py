"""A SIGKILLed owner's schedule runs on within seconds, not a lease later, on every store.

Two worker processes (``python -m helpers.stored_jobs``) serve one schedule due every second
whose runs last 3 s and append ``start``/``end`` lines (fire time, attempt, pid, wall time) to
one log with O_APPEND; the lease is the default 30 s. The owner of a run is SIGKILLed as soon
as its run starts; the other process must start the next run within 2 s, and no fire time may
run twice (each attempt once under ``on_crash="rerun"``). Before owners' liveness, the
schedule stood still for the whole 30 s lease.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from helpers.store_urls import stored_record

from executors.stores import (
    Claim,
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    ScheduleStore,
)
from executors.testing import wait_until
from integrations.schedule_stores.postgres_owners import OWNERS_LOCK_SPACE

ROOT = Path(__file__).resolve().parents[2]
#: The target: the next run starts this soon after its owner's SIGKILL (wall clock).
WITHIN = 2.0


class Workers:
    """Worker processes serving one per-second schedule on one store."""

    def __init__(self, url: str, log: Path, on_crash: str, hold: float = 3.0) -> None:
        self.url, self.log, self.on_crash, self.hold = url, log, on_crash, hold
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        errors = open(self.log.with_suffix(f".{len(self.procs)}.err"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "helpers.stored_jobs", self.url, str(self.log),
             self.on_crash, "1", str(self.hold), "30", "all"],
            env=env, stdout=subprocess.DEVNULL, stderr=errors, cwd=ROOT)
        errors.close()
        self.procs.append(proc)
        return proc

    def lines(self, event: str | None = None) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [x for x in lines if event is None or x["event"] == event]

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def workers_factory() -> Iterator[list[Workers]]:
    made: list[Workers] = []
    yield made
    for workers in made:
        workers.kill_all()


def _two_serving_one_running(workers: Workers) -> tuple[dict[str, object],
                                                       subprocess.Popen[bytes]]:
    """Start two workers and wait until both serve and one starts a run (after both serve:
    it is surely in progress): that run's start line and its process."""
    for _ in range(2):
        workers.spawn()
    wait_until(lambda: len(workers.lines("up")) == 2, 60)
    seen = len(workers.lines("start"))
    wait_until(lambda: len(workers.lines("start")) > seen, 30)
    started = workers.lines("start")[seen]
    (running,) = [p for p in workers.procs if p.pid == started["pid"]]
    return started, running


def _kill_owner_mid_run(workers: Workers) -> tuple[dict[str, object], float]:
    """Start two workers, wait until both serve and one runs, SIGKILL that one: its start
    line and the wall time of the kill."""
    started, victim = _two_serving_one_running(workers)
    killed_at = time.time()
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    return started, killed_at


@pytest.mark.timeout(90)
@pytest.mark.parametrize("on_crash", ["drop", "rerun"])
@pytest.mark.parametrize("shared_store_url", ["sqlite", "postgresql", "mongodb"],
                         indirect=True)
def test_a_sigkilled_owner_s_per_second_schedule_runs_again_within_2_s_and_once(
        shared_store_url: str, on_crash: str, tmp_path: Path,
        workers_factory: list[Workers]) -> None:
    """The owner of a per-second schedule's run is SIGKILLed mid-run (lease 30 s): the other
    process starts the next run within 2 s of the kill (its owner is known gone: SQLite's
    file lock, PostgreSQL's advisory lock, MongoDB's heartbeat), not a lease later. Under
    "rerun" that run is the killed fire time again (attempt 2), once; under "drop" it is a
    later fire time, and the killed one is counted lost once. No fire time runs twice."""
    workers = Workers(shared_store_url, tmp_path / "runs.log", on_crash)
    workers_factory.append(workers)
    killed, killed_at = _kill_owner_mid_run(workers)
    wait_until(lambda: any(float(str(x["at"])) > killed_at for x in workers.lines("start")),
               40)
    after = [x for x in workers.lines("start") if float(str(x["at"])) > killed_at]
    took = float(str(after[0]["at"])) - killed_at
    report = f"next run {took:.2f} s after the kill: {after[0]}"
    print(report)
    assert took <= WITHIN, report
    assert after[0]["pid"] != killed["pid"], report
    if on_crash == "rerun":
        assert (after[0]["fire"], after[0]["attempt"]) == (killed["fire"], 2), report
    else:
        assert after[0]["fire"] > killed["fire"] and after[0]["attempt"] == 1, report  # type: ignore[operator]
    record = stored_record(shared_store_url, "tick")
    assert record is not None
    assert record.counters["lost"] == (1 if on_crash == "drop" else 0), record.counters
    runs = [(x["fire"], x["attempt"]) for x in workers.lines("start")]
    assert len(runs) == len(set(runs)), runs
    if on_crash == "drop":
        fires = [fire for fire, _ in runs]
        assert len(fires) == len(set(fires)), runs


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared_store_url", ["sqlite", "postgresql"], indirect=True)
def test_a_sigstopped_owner_is_not_taken_for_gone_on_sqlite_and_postgresql(
        shared_store_url: str, tmp_path: Path, workers_factory: list[Workers]) -> None:
    """A SIGSTOPped owner still holds its SQLite file lock or its PostgreSQL session: for 3 s
    (longer than a killed owner takes to be settled) nobody settles its run nor runs the
    schedule; it is waited for by its lease, as a live owner that stalls always was."""
    workers = Workers(shared_store_url, tmp_path / "runs.log", "rerun", hold=2.0)
    workers_factory.append(workers)
    _, stopped = _two_serving_one_running(workers)
    stopped_at = time.time()
    stopped.send_signal(signal.SIGSTOP)
    try:
        threading.Event().wait(3.0)  # a window in which nothing must happen
        others = [x for x in workers.lines("start") if float(str(x["at"])) > stopped_at]
    finally:
        stopped.send_signal(signal.SIGCONT)
    assert others == []
    record = stored_record(shared_store_url, "tick")
    assert record is not None and record.counters["lost"] == 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared_store_url", ["mongodb"], indirect=True)
def test_a_sigstopped_owner_on_mongodb_is_gone_after_its_heartbeat_and_runs_nothing_twice(
        shared_store_url: str, tmp_path: Path, workers_factory: list[Workers]) -> None:
    """On MongoDB a SIGSTOPped owner stops beating and is taken for gone (the judgement the
    Schedules page states): under "drop" its run is counted lost and the next fire time runs
    elsewhere within 2 s. On SIGCONT its run ends, its completion is refused by the claim's
    token and reported as a lost lease: its fire time ran once."""
    workers = Workers(shared_store_url, tmp_path / "runs.log", "drop")
    workers_factory.append(workers)
    started, stopped = _two_serving_one_running(workers)
    stopped_at = time.time()
    stopped.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: any(float(str(x["at"])) > stopped_at
                               for x in workers.lines("start")), 30)
    finally:
        stopped.send_signal(signal.SIGCONT)
    (other, *_) = [x for x in workers.lines("start") if float(str(x["at"])) > stopped_at]
    assert float(str(other["at"])) - stopped_at <= WITHIN, other
    assert other["pid"] != started["pid"] and other["fire"] > started["fire"], other  # type: ignore[operator]
    wait_until(lambda: any(x["pid"] == started["pid"] for x in workers.lines("lease_lost")), 30)
    lost = [(x["pid"], x["fire"]) for x in workers.lines("lease_lost")]
    assert lost == [(started["pid"], started["fire"])]
    fires = [x["fire"] for x in workers.lines("start")]
    assert len(fires) == len(set(fires)), fires


@pytest.fixture
def pg_server() -> Iterator[object]:
    """A PostgreSQL server of this test's own, that it may stop and start again."""
    from helpers.postgres import restartable_server, unavailable

    try:
        with restartable_server() as server:
            yield server
    except FileNotFoundError as exc:
        unavailable(exc)


def _latest(record: ScheduleRecord, now: dt.datetime) -> Plan:
    """``missed="latest"`` for a schedule due every second."""
    assert record.next_fire is not None
    fire = record.next_fire
    while fire + dt.timedelta(seconds=1) <= now:
        fire += dt.timedelta(seconds=1)
    return Plan(fire, fire + dt.timedelta(seconds=1))


def _claim(store: ScheduleStore, owner: str) -> list[Claim]:
    """`owner`'s claim (once the store answers again: a connection that died with the
    server raises once, and the next call connects again)."""
    claimed: list[list[Claim]] = []

    def attempt() -> bool:
        try:
            claimed.append(store.claim(owner, lease=30.0, limit=10, planner=_latest,
                                       on_crash=lambda record: "drop"))
        except psycopg.OperationalError:
            return False
        return True

    wait_until(attempt, 20)
    return claimed[0]


@pytest.mark.timeout(90)
def test_postgresql_judges_an_owner_by_its_session_lock_and_not_across_a_server_restart(
        pg_server: object) -> None:
    """PostgreSQL: an owner whose claiming session holds its advisory lock is alive; after
    the server restarts (every lock gone) it is not taken for gone until it has claimed
    again (its row predates the server's start); once its session ends
    (``pg_terminate_backend``: what the server does when the process dies), the next claim of
    another owner settles its run at once (``"drop"``: counted lost) and runs the schedule."""
    from integrations.schedule_stores.postgres import PostgresScheduleStore

    dsn = pg_server.dsn  # type: ignore[attr-defined]
    a, b = PostgresScheduleStore(dsn), PostgresScheduleStore(dsn)
    try:
        a.declare(ScheduleDefinition("job", {"type": "interval", "seconds": 1.0},
                                     "helpers.stored_jobs:seen", ["x"]), lambda now: now)
        (running,) = _claim(a, "a")
        assert _claim(b, "b") == []
        assert repr(a._owners) == "<OwnerLocks owners=['a']>"
        pg_server.stop()  # type: ignore[attr-defined]
        pg_server.start()  # type: ignore[attr-defined]
        # "a" holds no lock (the server is new) and has not claimed since: not gone.
        threading.Event().wait(0.3)  # past LIVENESS_EVERY: b looks at the owners again
        assert _claim(b, "b") == []
        assert _claim(a, "a") == []  # takes its lock again on a new connection
        threading.Event().wait(0.3)
        assert _claim(b, "b") == []
        record = b.get("job")
        assert record is not None and record.claim_token == running.token
        with psycopg.connect(dsn, autocommit=True) as admin:  # "a"'s session ends
            row = admin.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND "
                f"classid = {OWNERS_LOCK_SPACE} AND objid = hashtext('a')::oid").fetchone()
            assert row is not None
            admin.execute("SELECT pg_terminate_backend(%s)", (row[0],))
        claims: list[Claim] = []
        wait_until(lambda: bool(claims.extend(_claim(b, "b")) or claims), 5)
        record = b.get("job")
        assert record is not None and record.counters["lost"] == 1
        assert claims[0].fire_time > running.fire_time and record.owner == "b"
    finally:
        a.close()
        b.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("shared_store_url", ["mongodb"], indirect=True)
def test_a_mongodb_owner_beats_while_its_store_is_open_and_leaves_when_it_closes(
        shared_store_url: str) -> None:
    """A MongoDB owner's first claim writes its heartbeat document, a thread of the store
    keeps it fresh on the server's clock (every 0.25 s), and a clean close stops the thread
    and removes the document."""
    from integrations.schedule_stores.mongo import MongoScheduleStore

    store = MongoScheduleStore(shared_store_url)
    watcher = MongoScheduleStore(shared_store_url)
    owners = watcher._client.get_default_database()["executors_owners"]
    try:
        assert _claim(store, "a") == [] and repr(store._owners).startswith("<OwnerBeats beating")
        (first,) = owners.find({"_id": "a"})
        wait_until(lambda: owners.find_one({"_id": "a"})["beat"] > first["beat"], 5)
        beat = owners.find_one({"_id": "a"})["beat"]
        assert abs(beat - watcher.now().timestamp()) < 1.0
    finally:
        store.close()
    assert owners.find_one({"_id": "a"}) is None
    assert repr(store._owners) == "<OwnerBeats idle owners=[] failing=False>"
    watcher.close()
