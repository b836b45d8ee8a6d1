"""Many processes on one store, for real: SIGKILLed at random and restarted, clocks skewed by
up to +-5 s (+-0.5 s on SQLite, whose clock is each process's own), stalled with SIGSTOP past
their lease, all stopped and started again; a store that goes away and comes back (MongoDB
behind a proxy, PostgreSQL stopped and restarted); and the server stores' bad input (a newer
format, a corrupt record).

Each worker is ``python -m helpers.stored_jobs``: one schedule due every second whose runs
append ``start`` and ``end`` lines (name, fire time, attempt, pid) to one log with O_APPEND.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import stored_jobs
from helpers.store_urls import corrupt

from executors import BackgroundService, Interval
from executors._clock import SKEW_ENV
from executors.service import ScheduleChanged
from executors.stores import Claimable, ScheduleStore, open_store
from executors.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _pause(seconds: float) -> None:
    """Pace the chaos (the gap between two kills): nothing is awaited here."""
    threading.Event().wait(seconds)


@dataclasses.dataclass
class Fleet:
    """Worker processes on one store, each with its own skewed clock."""

    url: str
    log: Path
    on_crash: str
    lease: float
    hold: float = 0.3
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    procs: list[subprocess.Popen[bytes]] = dataclasses.field(default_factory=list)
    kills: int = 0
    missed: str = "all"

    @property
    def skew(self) -> float:
        """The most a process's clock is skewed, seconds. The hook reaches SQLite's clock,
        which is each process's own: there two clocks may differ by less than the lease minus
        its renewal period (2/3 of a 3 s lease) before a live lease reads expired, so SQLite
        gets +-0.5 s, as on one machine (a shared kernel clock) it would get 0. A server
        store's clock is the server's: +-5 s there moves what decides nothing."""
        return 0.5 if self.url.startswith("sqlite:") else 5.0

    def spawn(self) -> subprocess.Popen[bytes]:
        skew = self.rng.uniform(-self.skew, self.skew)
        env = {**os.environ, SKEW_ENV: f"{skew:.3f}",
               "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        errors = open(self.log.with_suffix(f".{len(self.procs)}.err"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "helpers.stored_jobs", self.url, str(self.log),
             self.on_crash, "1", str(self.hold), str(self.lease), self.missed],
            env=env, stdout=subprocess.DEVNULL, stderr=errors, cwd=ROOT)
        errors.close()
        self.procs.append(proc)
        return proc

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def kill_one(self) -> int:
        """SIGKILL a process: half the time the one running now (mid-run), else any; its
        pid."""
        alive = self.alive()
        victim = self.rng.choice(alive)
        if self.rng.random() < 0.5:
            lines = self.lines()
            ended = {(x["fire"], x["pid"]) for x in lines if x["event"] == "end"}
            running = {x["pid"] for x in lines
                       if x["event"] == "start" and (x["fire"], x["pid"]) not in ended}
            victim = next((p for p in alive if p.pid in running), victim)
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        self.kills += 1
        return victim.pid

    def stop(self) -> None:
        for proc in self.alive():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def lines(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]


@pytest.fixture
def fleet_factory(tmp_path: Path) -> Iterator[list[Fleet]]:
    fleets: list[Fleet] = []
    yield fleets
    for fleet in fleets:
        fleet.stop()


def _fires(lines: list[dict[str, object]], event: str) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = collections.defaultdict(list)
    for line in lines:
        if line["event"] == event:
            out[str(line["fire"])].append(line)
    return out


#: The race: how many processes serve the store, and for how long they are killed at random.
RACE_PROCESSES = 6
RACE_SECONDS = 30.0
#: One on_crash policy per store in CI (each run is ~45 s on each of 3 interpreters): "drop",
#: the default, on SQLite, the default store; "rerun" on both servers, whose claim of an
#: expired lease takes its own query path (MongoDB: a query of its own; PostgreSQL: FOR UPDATE
#: SKIP LOCKED over both kinds). The policy itself is one pure function for every store
#: (`store.settle_claim`), pinned for each store by the contract suite.
RACE_CASES = [("sqlite", "drop"), ("mongodb", "rerun"), ("postgresql", "rerun")]


def _killed_mid_run(lines: list[dict[str, object]], killed: set[int]) -> set[str]:
    """Fire times a killed process started and never ended."""
    ended = {(x["fire"], x["pid"]) for x in lines if x["event"] == "end"}
    return {str(x["fire"]) for x in lines if x["event"] == "start" and x["pid"] in killed
            and (x["fire"], x["pid"]) not in ended}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("shared_store_url", "on_crash"), RACE_CASES,
                         indirect=["shared_store_url"])
def test_processes_killed_at_random_with_skewed_clocks_claim_each_fire_time_once(
        shared_store_url: str, on_crash: str, tmp_path: Path,
        fleet_factory: list[Fleet]) -> None:
    """6 processes serve one schedule due every second for 30 s while one of them is
    SIGKILLed and replaced every 1.5-3 s, each clock skewed by up to +-5 s (+-0.5 s on SQLite,
    whose clock is each process's: `Fleet.skew`); every run logs
    (name, fire time, attempt, pid). Every fire time in the window runs exactly once, except
    runs whose owner was killed: under "drop" at most once (the store's `lost` counter covers
    them), under "rerun" at least once (a later attempt runs it to the end). Nothing is
    dropped (``missed="all"``): a fire time held up by a killed owner's lease is missed (run
    late) and runs, every miss announced with as many run."""
    seed = random.randrange(2**32)
    fleet = Fleet(shared_store_url, tmp_path / "runs.log", on_crash, lease=3.0,
                  rng=random.Random(seed))
    fleet_factory.append(fleet)
    for _ in range(RACE_PROCESSES):
        fleet.spawn()
    wait_until(lambda: any(x["event"] == "end" for x in fleet.lines()), 60)
    chaos_until = threading.Event()
    timer = threading.Timer(RACE_SECONDS, chaos_until.set)
    timer.start()
    killed: set[int] = set()
    while not chaos_until.is_set():
        _pause(fleet.rng.uniform(1.5, 3.0))
        killed.add(fleet.kill_one())
        fleet.spawn()
    # No kills for a lease and more: the last killed run is settled while others serve.
    settled_after = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=fleet.lease + 2)
    wait_until(lambda: any(dt.datetime.fromisoformat(str(x["fire"])) > settled_after
                           for x in fleet.lines() if x["event"] == "end"), 30)
    fleet.stop()
    lines = fleet.lines()
    starts, ends = _fires(lines, "start"), _fires(lines, "end")
    instants = sorted(dt.datetime.fromisoformat(f) for f in starts)
    first, last = instants[0], instants[-1] - dt.timedelta(seconds=2)
    window = [(first + dt.timedelta(seconds=k)).isoformat()
              for k in range(int((last - first).total_seconds()) + 1)]
    store = open_store(shared_store_url)
    record = store.get("tick")
    store.close()
    assert record is not None
    absent = [f for f in window if f not in starts]
    unended = [f for f in window if f in starts and f not in ends]
    doubled = [f for f in window if len(starts.get(f, [])) > 1]
    exact = [f for f in window if len(starts.get(f, [])) == 1 and f in ends]
    mid_run = _killed_mid_run(lines, killed) & set(window)
    # An owner that stalled past its lease on this busy machine (not killed) is a stale owner:
    # its completion was refused and reported, and its run counts as lost or rerun too.
    stale = sum(1 for x in lines if x["event"] == "lease_lost")
    report = (f"{shared_store_url.partition(':')[0]} on_crash={on_crash} seed={seed} "
              f"processes={RACE_PROCESSES} kills={fleet.kills} stale={stale} "
              f"window={len(window)} exactly_once={len(exact)} "
              f"killed_mid_run={len(mid_run)} absent={len(absent)} unended={len(unended)} "
              f"doubled={len(doubled)} counters={dict(record.counters)}")
    print(report)  # the race test's counts, for the docs' closing note
    assert all(dt.datetime.fromisoformat(f).microsecond == 0 for f in starts), report
    assert len(window) >= RACE_SECONDS * 0.8, report
    missed = [(x["count"], x["ran"]) for x in lines if x["event"] == "missed"]
    assert all(count == ran for count, ran in missed), (missed, report)
    # Every fire time not run exactly once is one a killed (or stale) owner held.
    assert len(window) - len(exact) <= fleet.kills + stale, report
    if on_crash == "drop":
        assert doubled == [], report
        assert mid_run <= set(unended), report
        assert len(absent) + len(unended) <= record.counters["lost"], report
        assert record.counters["lost"] <= fleet.kills + stale, report
        assert all(x["attempt"] == 1 for x in lines if x["event"] == "start"), report
    else:
        assert absent == [] and unended == [], report
        assert record.counters["lost"] == 0, report
        assert len(doubled) <= fleet.kills + stale, report
        # Each fire time a killed owner left mid-run ran again, to its end, as attempt 2+.
        for fire in mid_run:
            assert max(int(str(x["attempt"])) for x in starts[fire]) >= 2, report
        for fire in doubled:
            attempts = [int(str(x["attempt"])) for x in starts[fire]]
            # Each attempt once, later ones after earlier ones (attempt 1 may have died
            # before its start line).
            assert attempts == sorted(set(attempts)), report
            assert ends[fire], report


@pytest.mark.slow
@pytest.mark.timeout(90)
@pytest.mark.parametrize("on_crash", ["drop", "rerun"])
def test_a_stale_owner_stopped_past_its_lease_is_refused_and_reported(
        on_crash: str, tmp_path: Path, fleet_factory: list[Fleet]) -> None:
    """A process is SIGSTOPped in the middle of a run, past its 5 s lease; another process
    takes over. On SIGCONT its run ends, its renewal/completion is refused and reported as a
    lost lease. The fire time was run again by the other process only under "rerun".

    The lease leaves the live owner's renewals (every lease / 3) 3.3 s of slack. A loaded CI
    machine stalled them past a 1 s lease once, and past a 2.5 s lease (1.6 s of slack) once
    more; each time the resumed process rightly claimed the fire time a third time."""
    fleet = Fleet(f"sqlite:///{tmp_path / 'jobs.db'}", tmp_path / "runs.log", on_crash,
                  lease=5.0, hold=6.0)
    fleet_factory.append(fleet)
    stale = fleet.spawn()
    wait_until(lambda: any(x["event"] == "start" for x in fleet.lines()), 60)
    stale.send_signal(signal.SIGSTOP)
    (started,) = [x for x in fleet.lines() if x["event"] == "start"]
    fire = str(started["fire"])
    store = open_store(fleet.url)
    try:
        fleet.spawn()
        if on_crash == "rerun":
            wait_until(lambda: len(_fires(fleet.lines(), "start")[fire]) == 2, 60)
        else:
            wait_until(lambda: store.get("tick").counters["lost"] == 1, 60)  # type: ignore[union-attr]
            wait_until(lambda: len(_fires(fleet.lines(), "start")) >= 2, 60)
        stale.send_signal(signal.SIGCONT)
        wait_until(lambda: any(x["event"] == "lease_lost" and x["pid"] == stale.pid
                               for x in fleet.lines()), 30)
    finally:
        stale.send_signal(signal.SIGCONT)
        store.close()
    fleet.stop()
    lines = fleet.lines()
    runs = _fires(lines, "start")[fire]
    lost = [x for x in lines if x["event"] == "lease_lost"]
    assert [(x["pid"], x["fire"]) for x in lost] == [(stale.pid, fire)]
    if on_crash == "rerun":
        assert [(x["attempt"], x["pid"] == stale.pid) for x in runs] == [(1, True), (2, False)]
    else:
        assert [x["pid"] for x in runs] == [stale.pid]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_restart_after_every_process_stopped_applies_the_missed_policy_once(
        shared_store_url: str, tmp_path: Path, fleet_factory: list[Fleet]) -> None:
    """Every process stops; for 3 minutes nobody serves the store; three start at once:
    ``missed="latest"`` runs the latest fire time once and counts the rest missed once (one
    RunMissed among all processes, reason "stopped"), then the schedule runs on time.

    The 3 minutes are the store's, not waited for: the claim compares the record's next fire
    time with the store's clock (SQLite's C clock, PostgreSQL's now(), MongoDB's server
    time), and no process keeps anything across a stop, so a next fire time 3 minutes behind
    the store's now is what the store holds after 3 minutes of nobody serving. (The wall-skew
    hook moves process clocks, which decide nothing on a server store, and SQLite's clock by
    at most 0.5 s: nothing against 3 minutes.)"""
    fleet = Fleet(shared_store_url, tmp_path / "runs.log", "drop", lease=3.0, hold=0.0,
                  missed="latest")
    fleet_factory.append(fleet)
    for _ in range(2):
        fleet.spawn()
    wait_until(lambda: sum(x["event"] == "end" for x in fleet.lines()) >= 2, 60)
    fleet.stop()
    store = open_store(shared_store_url)
    try:
        before = store.get("tick")
        assert before is not None and before.next_fire is not None and before.owner is None
        assert store.set_next_fire("tick", before.next_fire - dt.timedelta(minutes=3))
        stopped = len(fleet.lines())
        for _ in range(3):
            fleet.spawn()
        wait_until(lambda: sum(x["event"] == "end" for x in fleet.lines()[stopped:]) >= 3, 60)
        fleet.stop()
        after = store.get("tick")
    finally:
        store.close()
    assert after is not None
    lines = fleet.lines()[stopped:]
    # One announcement of the stop among all processes (a claim this busy machine made late,
    # after the restart, would be a small one of its own).
    stop = [x for x in lines if x["event"] == "missed" and int(str(x["count"])) >= 100]
    assert len(stop) == 1, lines
    ((count, ran, reason),) = [(int(str(x["count"])), x["ran"], x["reason"]) for x in stop]
    # 180 fire times (and the few that passed while the processes started) were due, give or
    # take the sub-second phase of the moment the next fire time was moved back: the record's
    # next fire time was up to 1 s ahead of the store's clock then, and a restart quicker than
    # that second leaves 179 or 180 of them due at the first claim (seen: 179).
    assert 178 <= count <= 300 and (ran, reason) == (1, "stopped")
    assert after.counters["missed"] - before.counters["missed"] >= count - 1
    # One catch-up run (the latest due), then on: a policy applied by a second process would
    # have run an earlier or the same fire time again.
    runs = [dt.datetime.fromisoformat(str(x["fire"])) for x in lines if x["event"] == "start"]
    assert runs == sorted(set(runs)) and len(runs) >= 3, runs


@pytest.mark.timeout(120)
def test_the_store_lost_and_restored_the_service_keeps_going_without_a_double_run(
        tcp_proxy: object, mongo_server: object) -> None:
    """The MongoDB server goes away under a running service: status() turns unhealthy, the
    service keeps running; when it returns the service is healthy again and goes on claiming,
    with no fire time run twice."""
    from integrations.schedule_stores.mongo import MongoScheduleStore

    port = tcp_proxy.port  # type: ignore[attr-defined]
    store = MongoScheduleStore(f"mongodb://127.0.0.1:{port}/lost_{os.getpid()}",
                               connect_timeout=1)
    _lose_and_restore(store, tcp_proxy.down, tcp_proxy.up)  # type: ignore[attr-defined]
    store.close()


def _lose_and_restore(store: ScheduleStore, down: Callable[[], object],
                      up: Callable[[], object]) -> None:
    """Serve a schedule due every 0.5 s from `store`, take the store `down` and bring it
    `up`: unhealthy while down (the error named), healthy after, claiming again, and no fire
    time run twice (in order)."""
    stored_jobs.SEEN.clear()
    with BackgroundService("lost", store=store, store_lease=3) as svc:
        svc.schedule(Interval(0.5), stored_jobs.seen, "l", name="half", missed="all")
        wait_until(lambda: len(stored_jobs.SEEN) >= 2, 20)
        assert svc.status().healthy
        down()
        wait_until(lambda: not svc.status().healthy, 30)
        # A call hanging past a third of the lease reads unhealthy before one fails.
        wait_until(lambda: svc.status().store.store_errors >= 1, 30)  # type: ignore[union-attr]
        status = svc.status().store
        assert status is not None and status.last_error and status.store_errors >= 1
        before = len(stored_jobs.SEEN)
        up()
        wait_until(lambda: svc.status().healthy, 30)
        wait_until(lambda: len(stored_jobs.SEEN) >= before + 3, 30)
        assert svc.status().healthy
    fires = [fire for _, fire, _ in stored_jobs.SEEN]
    assert len(fires) == len(set(fires)) and fires == sorted(fires)


@pytest.fixture
def pg_server() -> Iterator[object]:
    """A PostgreSQL server of this test's own (the session's stays up), that it may stop and
    start again on the same data directory and port."""
    from helpers.postgres import restartable_server, unavailable

    try:
        with restartable_server() as server:
            yield server
    except FileNotFoundError as exc:
        unavailable(exc)


@pytest.mark.timeout(120)
def test_postgresql_stopped_and_restarted_the_service_keeps_going_without_a_double_run(
        pg_server: object) -> None:
    """The PostgreSQL server is stopped (immediate shutdown) under a running service, then
    started again on the same data directory and port: status() turns unhealthy while it is
    down (the error named), the service keeps running; when it is back the service is healthy
    again and goes on claiming, with no fire time run twice."""
    from integrations.schedule_stores.postgres import PostgresScheduleStore

    store = PostgresScheduleStore(pg_server.dsn, connect_timeout=1)  # type: ignore[attr-defined]
    _lose_and_restore(store, pg_server.stop, pg_server.start)  # type: ignore[attr-defined]
    store.close()
    # A new store object: this thread's connection died with the server (the service's own
    # threads found that out and retried).
    store = PostgresScheduleStore(pg_server.dsn)  # type: ignore[attr-defined]
    record = store.get("half")
    store.close()
    assert record is not None and record.counters["lost"] == 0


# -- bad input on the server stores (SQLite's are in tests/test_service_store.py and the
# -- contract suite) -------------------------------------------------------------------------


SERVER_STORES = pytest.mark.parametrize("shared_store_url", ["mongodb", "postgresql"],
                                        indirect=True)


@SERVER_STORES
def test_a_server_store_of_a_newer_format_is_refused_naming_both_versions(
        shared_store_url: str) -> None:
    """A MongoDB database or PostgreSQL table written by a newer store format is refused
    when opened (and by BackgroundService), naming both versions."""
    from executors.stores import FORMAT_VERSION, StoreFormatError

    open_store(shared_store_url).close()
    corrupt(shared_store_url, "", {}, format_version=FORMAT_VERSION + 1)
    try:
        pattern = f"store format {FORMAT_VERSION + 1}.*format {FORMAT_VERSION} and older"
        with pytest.raises(StoreFormatError, match=pattern):
            open_store(shared_store_url)
        with pytest.raises(StoreFormatError, match=pattern):
            BackgroundService("new", store=shared_store_url)
    finally:
        corrupt(shared_store_url, "", {}, format_version=FORMAT_VERSION)


@SERVER_STORES
def test_a_server_store_whose_format_is_not_a_number_is_refused_naming_it(
        shared_store_url: str) -> None:
    """A MongoDB database or PostgreSQL table whose recorded format is not a number is refused
    as a store this code cannot read (`StoreFormatError` naming the value, the check every
    store shares), not with int()'s bare ValueError."""
    from executors.stores import FORMAT_VERSION, StoreFormatError

    open_store(shared_store_url).close()
    corrupt(shared_store_url, "", {}, format_version="new")
    try:
        with pytest.raises(StoreFormatError, match="records store format 'new', not a number"):
            open_store(shared_store_url)
    finally:
        corrupt(shared_store_url, "", {}, format_version=FORMAT_VERSION)


class CountingStore:
    """A real store whose `next_due` calls are counted: one per pass of the serving loop."""

    def __init__(self, store: ScheduleStore) -> None:
        self.store = store
        self.passes = 0

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        self.passes += 1
        return self.store.next_due(only)

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)


YEARLY = Interval(365 * 86400)


def _store_with_a_corrupt_record(url: str) -> None:
    """Schedules "bad" and "good" in the store at `url`, due in months, then "bad" made
    unreadable and due at once; `stored_jobs.SEEN` empty. (A service that claimed "good" as
    it closed would leave a lease keeping the next service from it for 30 s: the tests
    declare "good" again, every 0.2 s, in the service they watch.)"""
    with BackgroundService("a", store=url) as svc:
        for name in ("bad", "good"):
            svc.schedule(YEARLY, stored_jobs.seen, name, name=name)
    corrupt(url, "bad", {"trigger": 3})
    stored_jobs.SEEN.clear()


def test_a_corrupt_record_is_reported_and_skipped_and_the_others_run_with_no_spin(
        shared_store_url: str) -> None:
    """One unreadable record in SQLite, MongoDB or PostgreSQL, due at once, is listed in
    status().store.corrupt and logged, never run; the other schedule runs; and the serving
    loop does not spin on the store for it (its passes are a few per run, not thousands)."""
    _store_with_a_corrupt_record(shared_store_url)
    store = CountingStore(open_store(shared_store_url))
    try:
        with BackgroundService("b", store=store) as svc:
            svc.schedule(Interval(0.2), stored_jobs.seen, "good", name="good")
            wait_until(lambda: len(stored_jobs.SEEN) >= 1, 10)
            passes = store.passes
            wait_until(lambda: len(stored_jobs.SEEN) >= 4, 10)
            passes = store.passes - passes
            wait_until(lambda: svc.status().store.corrupt != (), 10)  # type: ignore[union-attr]
            ((name, reason),) = svc.status().store.corrupt  # type: ignore[union-attr]
            listed = [s.name for s in svc.status().store.schedules]  # type: ignore[union-attr]
    finally:
        store.store.close()  # a store given as an object is its giver's to close
    assert passes <= 3 * 10, f"{passes} passes of the serving loop for 3 runs"
    assert name == "bad" and "'trigger' must be a dict" in reason
    assert listed == ["good"]
    assert {tag for tag, _, _ in stored_jobs.SEEN} == {"good"}


def test_declaring_a_schedule_whose_record_is_unreadable_replaces_it(
        shared_store_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A process that declares a schedule whose stored record cannot be read writes its
    declaration over it (logged as an error, ScheduleChanged emitted) and both schedules
    run; the service stays healthy (it used to fail every pass on that record)."""
    _store_with_a_corrupt_record(shared_store_url)
    changed: list[ScheduleChanged] = []
    with BackgroundService("b", store=shared_store_url) as svc:
        svc.subscribe(changed.append, ScheduleChanged)  # type: ignore[arg-type]
        svc.schedule(Interval(0.2), stored_jobs.seen, "good", name="good")
        svc.schedule(Interval(0.2), stored_jobs.seen, "bad", name="bad")
        wait_until(lambda: {"good", "bad"} <= {tag for tag, _, _ in stored_jobs.SEEN}, 10)
        wait_until(lambda: svc.status().store.corrupt == () and  # type: ignore[union-attr]
                   len(svc.status().store.schedules) == 2, 10)  # type: ignore[union-attr]
        assert svc.status().store.healthy  # type: ignore[union-attr]
    assert sorted(e.name for e in changed) == ["bad", "good"]  # replaced; changed
    replaced = [r.getMessage() for r in caplog.records if "is replaced" in r.getMessage()]
    assert len(replaced) == 1 and "'trigger' must be a dict, got 3" in replaced[0], replaced
