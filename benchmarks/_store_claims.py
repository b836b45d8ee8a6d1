"""Claims per second of a schedule store with 1, 2 and 4 processes, double runs checked.

Issue 22's benchmark rows: "claims per second for 100,000 schedules due within one minute with
1, 2 and 4 processes on PostgreSQL and on MongoDB (nx-27017, and a real server where
``MONGODB_URI`` is set); start-up time with 100,000 stored schedules", with the targets "4
processes claim at least 3x what one claims on PostgreSQL" and "zero double runs in every
benchmark run (checked, not assumed)".

**Claims.** The store is filled with N records due within the last minute (bulk-written with the
stores' own encoders: declaring 100,000 schedules one transaction each would measure
declaring), then P spawned processes, started together behind a barrier, each call the real
store class's ``claim`` in batches (100, the service's `BATCH`) until nothing is due; each claim
moves its record a day ahead. Every claim is recorded as ``(name, fire time, pid)``; the parent
counts the ``(name, fire time)`` pairs claimed more than once (**double runs**, which must be
0) and the records never claimed (**missing**, which must be 0 too: the run is over only when
every record was claimed). Claims per second counts every process, from the barrier to the last
one done. Where the time goes is measured too: each claimer's CPU time (the client), the CPU
time of the server's processes (PostgreSQL's postmaster children, nx-27017's process; unknown
for a remote server) and the batches (a batch is 4 round trips on PostgreSQL: BEGIN, the
locking select, the conditional update, COMMIT).

**Start-up.** A freshly spawned process with the N records stored opens the store (importing
its driver, connecting, checking the schema) and claims its first batch; the time from before
``open_store`` to that first batch in hand.

Entry points: `claims_metrics(quick)` gives the harness's `Metric`s (for
``benchmarks/scheduler.py``: ``metrics += claims_metrics(quick)``, servers started and stopped
by it); `measure` one configuration; ``python -m benchmarks._store_claims [--quick] [URL ...]``
prints the rows for the given URLs (or a throwaway PostgreSQL and nx-27017) as JSON lines,
with ``--batch`` and ``--processes`` to vary them.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import dataclasses
import datetime as dt
import json
import multiprocessing
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks._harness import OURS, Metric
from executors.stores import (
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    new_record,
    open_store,
    sqlite_path,
)

__all__ = ("ClaimRun", "claims_metrics", "fill", "main", "measure", "servers", "startup")

DAY = dt.timedelta(days=1)
#: Records per claim (the service's ``stored.BATCH``).
BATCH = 100
FULL_SCHEDULES = 100_000
QUICK_SCHEDULES = 1_000
PROCESSES = (1, 2, 4)


def _definition(k: int) -> ScheduleDefinition:
    return ScheduleDefinition(f"s{k:06d}", {"type": "interval", "seconds": 86400.0},
                              f"{__name__}:ran", [k], {}, {"missed": "latest"})


_RAN = threading.Event()


def ran(k: int) -> None:
    """The stored schedules' target: says a run started (what service start-up waits for)."""
    _RAN.set()


def fill(url: str, n: int) -> None:
    """Replace the store's records by `n` records due within the last minute."""
    store = open_store(url)  # creates the schema (tables, indexes) if it is new
    now = store.now()
    records = [new_record(_definition(k), now - dt.timedelta(seconds=60 * k / n))
               for k in range(n)]
    scheme = url.partition(":")[0]
    if scheme == "sqlite":
        import sqlite3

        from executors.stores import _sqlite_sql as sq

        conn = sqlite3.connect(sqlite_path(url))
        with conn:
            conn.execute("DELETE FROM executors_schedules")
            marks = ", ".join("?" for _ in sq.COLUMNS.split(","))
            conn.executemany(f"INSERT INTO executors_schedules ({sq.COLUMNS}) "
                             f"VALUES ({marks})", [sq.record_params(r) for r in records])
        conn.close()
    elif scheme.startswith("postgres"):
        import psycopg

        from integrations.schedule_stores import postgres as pg

        with psycopg.connect(url, autocommit=True) as pg_conn:
            with pg_conn.transaction(), pg_conn.cursor() as cur:
                cur.execute("TRUNCATE executors_schedules")  # no dead rows left from a last run
                with cur.copy(f"COPY executors_schedules ({pg._COLUMNS}) FROM STDIN") as copy:
                    for record in records:
                        copy.write_row(pg._encode(record))
            pg_conn.execute("VACUUM ANALYZE executors_schedules")  # as a table that has lived
    else:
        from integrations.schedule_stores import mongo

        collection = store._records  # type: ignore[attr-defined]
        collection.delete_many({})
        for i in range(0, n, 5_000):
            collection.insert_many([mongo._to_doc(r) for r in records[i:i + 5_000]])
    store.close()


def _a_day_later(record: ScheduleRecord, now: dt.datetime) -> Plan:
    assert record.next_fire is not None
    return Plan(record.next_fire, record.next_fire + DAY, 0)


def _drop(record: ScheduleRecord) -> str:
    return "drop"


# -- CPU time of the server's processes ----------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of process `pid` (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _children(parent: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == parent:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _server_pids(url: str, nx_pid: int | None) -> list[int] | None:
    """The processes doing the server's work: PostgreSQL's postmaster and its children (the
    backends, the WAL writer, autovacuum) on this machine; nx-27017's process; else None."""
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            backend = conn.info.backend_pid
            try:
                with open(f"/proc/{backend}/stat") as f:
                    postmaster = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                return None  # a server on another machine
        # The backends of the claimers are counted by the claimers (they exit with them).
        return [postmaster, *_children(postmaster)]
    return None if nx_pid is None else [nx_pid]


def _server_cpu(pids: list[int] | None) -> float | None:
    return None if pids is None else sum(_cpu_of(p) for p in pids)


def _backend_cpu(store: object) -> float:
    """CPU seconds of this process's PostgreSQL backend so far (0 for other stores): read
    before the connection closes, since a backend's time leaves with it."""
    local = getattr(store, "_local", None)
    conn = getattr(local, "conn", None)
    return 0.0 if conn is None else _cpu_of(conn.info.backend_pid)


# -- the claimers -------------------------------------------------------------------------------


def _claimer(url: str, owner: str, batch: int, ready: Any, start: Any, out: Any) -> None:
    store = open_store(url)
    store.now()  # connected before the barrier
    ready.put(owner)
    start.wait()
    got: list[tuple[str, float, int]] = []
    pid = os.getpid()
    batches = lost = 0
    cpu, backend = time.process_time(), _backend_cpu(store)
    began = time.perf_counter()
    while True:
        claims = store.claim(owner, lease=600, limit=batch, planner=_a_day_later,
                             on_crash=_drop)  # type: ignore[arg-type]
        batches += 1
        if not claims:
            # Nothing won: nothing due, or (MongoDB, no SKIP LOCKED) every record of the batch
            # went to another process first. Done only when the store says nothing is due.
            now, earliest = store.next_due()
            if earliest is None or earliest > now:
                break
            lost += 1
            continue
        got.extend((c.name, c.fire_time.timestamp(), pid) for c in claims)
    ended = time.perf_counter()
    out.put((owner, began, ended, time.process_time() - cpu, batches, got,
             _backend_cpu(store) - backend, lost))
    store.close()


@dataclasses.dataclass(frozen=True)
class ClaimRun:
    """One measured run: P processes claiming N due records until none is left."""

    url: str
    processes: int
    schedules: int
    batch: int
    #: Claims handed out, all processes (N when every record was claimed once).
    claims: int
    seconds: float
    claims_per_s: float
    #: ``(name, fire time)`` pairs claimed more than once: must be 0.
    double_runs: int
    #: Records never claimed: must be 0.
    missing: int
    #: Claim calls, all processes (the last, empty one of each included).
    batches: int
    #: Claim calls that won nothing while records were still due (lost every race).
    lost_batches: int
    #: CPU seconds of the claimers, all processes.
    client_cpu: float
    #: CPU seconds of the server's processes, or None for a server elsewhere.
    server_cpu: float | None
    #: The machine's 1-minute load average at the end.
    load: float

    def row(self) -> dict[str, object]:
        """The run as JSON-able data, with the per-claim costs in microseconds."""
        data = dataclasses.asdict(self)
        data["url"] = _label(self.url)
        data["client_cpu_us_per_claim"] = 1e6 * self.client_cpu / max(1, self.claims)
        if self.server_cpu is not None:
            data["server_cpu_us_per_claim"] = 1e6 * self.server_cpu / max(1, self.claims)
        data["wall_ms_per_batch_per_process"] = (
            1e3 * self.seconds * self.processes / max(1, self.batches))
        return data


def _label(url: str) -> str:
    return url.split("@")[-1].split("?")[0]


def measure(url: str, n: int, processes: int, *, batch: int = BATCH,
            nx_pid: int | None = None) -> ClaimRun:
    """Fill the store with `n` due records, then claim them all with `processes` processes.

    Args:
        nx_pid: the pid of an nx-27017 serving `url`, to count its CPU time.
    """
    fill(url, n)
    ctx = multiprocessing.get_context("spawn")
    ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    pids = _server_pids(url, nx_pid)  # before the claimers' backends start
    procs = [ctx.Process(target=_claimer, args=(url, f"p{i}", batch, ready, start, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=120)  # every claimer connected: the barrier starts them together
        server_before = _server_cpu(pids)
        start.set()
        results = [out.get(timeout=1800) for _ in procs]
        server_after = _server_cpu(pids)
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    began = min(r[1] for r in results)
    ended = max(r[2] for r in results)
    claimed = collections.Counter((name, fire) for r in results for name, fire, _ in r[5])
    claims = sum(claimed.values())
    names = {name for name, _ in claimed}
    server_cpu = None if server_before is None or server_after is None else \
        server_after - server_before + sum(r[6] for r in results)
    return ClaimRun(url, processes, n, batch, claims, ended - began, claims / (ended - began),
                    sum(c - 1 for c in claimed.values()), n - len(names),
                    sum(r[4] for r in results), sum(r[7] for r in results),
                    sum(r[3] for r in results), server_cpu, os.getloadavg()[0])


def _first_claim(url: str, batch: int, out: Any) -> None:
    began = time.perf_counter()
    store = open_store(url)
    claims = store.claim("starter", lease=600, limit=batch, planner=_a_day_later,
                         on_crash=_drop)  # type: ignore[arg-type]
    out.put((time.perf_counter() - began, len(claims)))
    store.close()


def _first_run(url: str, out: Any) -> None:
    from executors import BackgroundService

    began = time.perf_counter()
    # The stored records are written here, not declared by this process's code: it serves
    # them through the allowlist of records written elsewhere.
    service = BackgroundService("startup", store=url, serve=(_definition(0).target,)).start()
    ok = _RAN.wait(600)
    took = time.perf_counter() - began
    service.close()
    out.put((took, int(ok)))


def startup(url: str, n: int, *, batch: int = BATCH, service: bool = False,
            filled: bool = False) -> float:
    """Seconds from opening the store to the first batch claimed, in a fresh process, with `n`
    records stored (the store is filled first, unless `filled`: then enough are still due).

    With `service`: from ``BackgroundService(store=url)`` to its first stored run started
    (``start()``, the store loop's first pass, a run on the pool).

    Raises:
        RuntimeError: the first batch was not a full one, or no run started.
    """
    if not filled:
        fill(url, n)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_first_run if service else _first_claim,
                       args=(url, out) if service else (url, batch, out))
    proc.start()
    try:
        seconds, got = out.get(timeout=900)
    finally:
        proc.join(60)
    expected = 1 if service else min(batch, n)
    if got != expected:
        raise RuntimeError(f"start-up on {_label(url)}: got {got}, not {expected}")
    return float(seconds)


# -- the servers and the harness's metrics ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Server:
    """A store to measure: its label in the table, its URL, nx-27017's pid if it is one."""

    label: str
    url: str
    nx_pid: int | None = None


@contextlib.contextmanager
def servers() -> Iterator[list[Server]]:
    """A throwaway PostgreSQL, an embedded nx-27017, and the server of ``MONGODB_URI`` if set,
    while the block runs (a server that cannot start here is left out, and said so)."""
    from executors._cli._demo_server import EmbeddedServer
    from tests.helpers.postgres import temporary_server

    found: list[Server] = []
    with contextlib.ExitStack() as stack:
        try:
            dsn = stack.enter_context(temporary_server())
            found.append(Server("PostgreSQL", dsn))
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"[store claims] no PostgreSQL: {exc}", file=sys.stderr)
        try:
            nx = stack.enter_context(EmbeddedServer())
            pid = nx._proc.pid if nx._proc is not None else None
            found.append(Server("nx-27017", f"mongodb://127.0.0.1:{nx.port}/bench_claims"
                                "?directConnection=true", pid))
        except RuntimeError as exc:
            print(f"[store claims] no nx-27017: {exc}", file=sys.stderr)
        uri = os.environ.get("MONGODB_URI")
        if uri:
            # Its own database: filling a store empties its collection first.
            parts = urllib.parse.urlsplit(uri)
            found.append(Server("MongoDB", urllib.parse.urlunsplit(
                parts._replace(path="/executors_bench_claims"))))
        yield found


class _Rounds:
    """Samples of one server, measured a round at a time: 1, 2 and 4 processes in turn (so the
    ratio compares runs of one round), handed to the metrics in order."""

    def __init__(self, server: Server, n: int, startup_n: int) -> None:
        self.server = server
        self.n = n
        self.startup_n = startup_n
        self.queued: dict[str, list[float]] = collections.defaultdict(list)
        self.runs: list[ClaimRun] = []

    def _round(self) -> None:
        # Start-up first, on one fill: the first claims take a few batches of N due records.
        fill(self.server.url, self.startup_n)
        self.queued["startup"].append(1e3 * startup(self.server.url, self.startup_n,
                                                    filled=True))
        self.queued["service"].append(1e3 * startup(self.server.url, self.startup_n,
                                                    service=True, filled=True))
        runs = {p: measure(self.server.url, self.n, p, nx_pid=self.server.nx_pid)
                for p in PROCESSES}
        for p, run in runs.items():
            print(f"[store claims] {self.server.label}: {json.dumps(run.row())}",
                  file=sys.stderr, flush=True)
            self.queued[f"{p}"].append(run.claims_per_s)
            if run.double_runs or run.missing:
                # Checked, not assumed: a benchmark that double-runs is a failed benchmark.
                raise RuntimeError(f"{self.server.label}: claims were not each record once: "
                                   f"{run.row()}")
        self.runs.extend(runs.values())
        self.queued["ratio"].append(runs[PROCESSES[-1]].claims_per_s / runs[1].claims_per_s)
        self.queued["doubles"].append(sum(r.double_runs for r in runs.values()))

    def sample(self, key: str) -> float:
        if not self.queued[key]:
            self._round()
        return self.queued[key].pop(0)

    def sampler(self, key: str) -> Callable[[], float]:
        return lambda: self.sample(key)


def claims_metrics(quick: bool) -> list[Metric]:
    """The claims rows for the harness: per server, claims/s with 1, 2 and 4 processes, the
    4/1 ratio, the double runs (0, checked) and the start-up time.

    The servers (a throwaway PostgreSQL, an embedded nx-27017, ``MONGODB_URI``'s) start on the
    first call and stop at interpreter exit. Full: 100,000 schedules; quick: 5,000.
    """
    stack = contextlib.ExitStack()
    found = stack.enter_context(servers())
    atexit.register(stack.close)
    n = QUICK_SCHEDULES if quick else FULL_SCHEDULES
    metrics = []
    for server in found:
        rounds = _Rounds(server, n, n)
        where = f"{server.label}, {n:,} due"
        for p in PROCESSES:
            metrics.append(Metric(
                f"store claims/s, {where}, {p} process{'es' if p > 1 else ''}", "1/s",
                "higher", {OURS: rounds.sampler(f"{p}")},
                note=f"batches of {BATCH}, spawned processes, every claim checked"))
        metrics += [
            Metric(f"store claims {PROCESSES[-1]}/1 processes, {where}", "x", "higher",
                   {OURS: rounds.sampler("ratio")}, note="target on PostgreSQL: >= 3"),
            Metric(f"store double runs, {where}", "runs", "lower",
                   {OURS: rounds.sampler("doubles")},
                   note="(name, fire time) claimed twice, all runs of the round; must be 0"),
            Metric(f"store start-up, {where}", "ms", "lower",
                   {OURS: rounds.sampler("startup")},
                   note="fresh process: open the store, first batch claimed"),
            Metric(f"service start-up, {where}", "ms", "lower",
                   {OURS: rounds.sampler("service")},
                   note="fresh process: BackgroundService(store=...) to its first run"),
        ]
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._store_claims")
    parser.add_argument("urls", nargs="*", help="stores (default: throwaway PostgreSQL and "
                        "nx-27017, and MONGODB_URI's server)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SCHEDULES:,} schedules")
    parser.add_argument("-n", "--schedules", type=int, default=None)
    parser.add_argument("--processes", type=int, nargs="+", default=list(PROCESSES))
    parser.add_argument("--batch", type=int, nargs="+", default=[BATCH])
    parser.add_argument("--no-startup", action="store_true")
    args = parser.parse_args(argv)
    n = args.schedules or (QUICK_SCHEDULES if args.quick else FULL_SCHEDULES)
    with contextlib.ExitStack() as stack:
        found = [Server(_label(u), u) for u in args.urls] or stack.enter_context(servers())
        for server in found:
            for batch in args.batch:
                for p in args.processes:
                    run = measure(server.url, n, p, batch=batch, nx_pid=server.nx_pid)
                    print(json.dumps({"server": server.label, **run.row()}), flush=True)
                    if run.double_runs or run.missing:
                        raise SystemExit(f"claims were not each record once: {run.row()}")
            if not args.no_startup:
                ms = 1e3 * startup(server.url, n)
                service_ms = 1e3 * startup(server.url, n, service=True, filled=True)
                print(json.dumps({"server": server.label, "schedules": n, "startup_ms": ms,
                                  "service_startup_ms": service_ms}), flush=True)


if __name__ == "__main__":
    main()
