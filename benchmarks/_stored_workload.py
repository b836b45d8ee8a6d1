"""Issue 35's workload: stored cron schedules served by one or two processes, peers beside ours.

Two workloads (`WORKLOADS`): **W1**, 1,000 schedules due every second (6-field
``"* * * * * *"``); **W2**, 10,000 schedules spread over each minute (schedule k at second
k % 60, 167 runs due each second). Each runs on a throwaway PostgreSQL with 1 and 2 serving
processes and on one SQLite file with 2 processes (`CONFIGS`).

A **serving process** (a program of its own, `benchmarks._stored_serve`) declares every schedule
of the workload and serves them: ours is ``BackgroundService(store=url)`` with
``svc.cron(expression, record_ours, tz="UTC", name=...)``, the target recording (start, name,
the fire time it was claimed for). Peers: **pgqueuer** on the same PostgreSQL
(``@pgq.schedule(name, "* * * * *")``: its cron has a minute's granularity, so both workloads
are, for it, N schedules due at each minute; its run cannot see its fire time, which is the
minute its claim moved ``next_run`` from) and **APScheduler 3** with its SQLAlchemyJobStore on
the SQLite file, 1 process (it cannot share a store between processes), set up as
`benchmarks.scheduler`'s stored rows set it up. APScheduler 4 is left out: it is the same
distribution as APScheduler 3, and one environment holds one of them.

The parent waits until every serving process is ready, lets a warm-up pass, then measures a
window [w0, w1): the CPU time of each serving process and of PostgreSQL's processes (the
postmaster and its children, the serving processes' backends among them: ``/proc/<pid>/stat``
before and after), and each serving process's resident memory at w1. After a grace period
(runs of fire times late in the window may still start) the processes stop and hand over what
they recorded. Figures per run (`Outcome`):

- **runs done**: distinct (name, fire time) pairs with the fire time in the window, as a
  percentage of those due in it;
- **lateness p50 / p99**: start minus fire time of those runs;
- **duplicates**: (name, fire time) pairs run more than once, over every record of every process
  (warm-up included): checked, not assumed;
- **client / server CPU per run**: CPU seconds in the window over the runs done;
- **memory**: resident set size per serving process (the largest);
- **start-up**: from before the scheduler is made to every schedule declared and planned,
  per process (the slowest).

Run: ``python -m benchmarks._stored_workload [--quick] [--workload W1 W2] [--config ...]
[--contender ...] [--window S]`` prints one JSON line per run; ``--profile DIR`` samples each
serving process with py-spy over the window and writes its collapsed stacks there.
`workload_metrics` gives the harness's rows for ``benchmarks/scheduler.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks._harness import OURS, Metric
from benchmarks._store_claims import _cpu_of, _server_cpu, _server_pids
from benchmarks._stored_serve import APSCHEDULER, FLOOR, PGQUEUER, Workload, workloads

_ROOT = Path(__file__).resolve().parents[1]

__all__ = ("CONFIGS", "WORKLOADS", "Outcome", "Workload", "main", "run", "workload_metrics")

WORKLOADS = workloads(False)


@dataclasses.dataclass(frozen=True)
class Config:
    """Where the schedules are kept and how many processes serve them (ours; a peer that
    cannot share a store serves with one)."""

    label: str
    store: str  # "postgresql" or "sqlite"
    processes: int
    peer: str


CONFIGS = (Config("PostgreSQL, 1 process", "postgresql", 1, PGQUEUER),
           Config("PostgreSQL, 2 processes", "postgresql", 2, PGQUEUER),
           Config("SQLite file, 2 processes", "sqlite", 2, APSCHEDULER))


@dataclasses.dataclass(frozen=True)
class Timing:
    warmup: float
    window: float
    grace: float


def timing(quick: bool) -> Timing:
    # A full window holds a whole minute: W2's every schedule, and pgqueuer's one fire time.
    # The grace lets a run of a fire time late in the window start (pgqueuer started 10,000
    # schedules' runs of one minute over 13 s); one later than that counts as not done.
    return Timing(1.0, 2.0, 1.0) if quick else Timing(5.0, 61.0, 15.0)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One measured run of one contender (see the module's docstring)."""

    contender: str
    workload: str
    config: str
    processes: int
    schedules: int
    due: int
    done: int
    done_pct: float
    p50_ms: float
    p99_ms: float
    duplicates: int
    records: int
    client_cpu_us: float
    server_cpu_us: float | None
    rss_mib: float
    startup_s: float
    load: float


# -- the serving processes -------------------------------------------------------------------


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# -- one run ---------------------------------------------------------------------------------


def _percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] * 1000 if values else float("nan")


def _reset_postgres(url: str) -> None:
    """Empty ours and pgqueuer's schedule tables (pgqueuer's made if missing)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("executors_schedules", "pgqueuer_schedules"):
            exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
            if exists is not None and exists[0] is not None:
                conn.execute(f"TRUNCATE {table}")
        if conn.execute("SELECT to_regclass('pgqueuer_schedules')").fetchone() == (None,):
            asyncio.run(_install_pgqueuer(url))
        conn.execute("VACUUM ANALYZE")


async def _install_pgqueuer(url: str) -> None:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(url)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


def _spies(folder: str | None, pids: list[int], seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy sampling each of `pids` for `seconds`, collapsed stacks written to `folder`;
    none without it. Only the thread holding the GIL is sampled (``--gil``): a thread waiting
    for the server's answer in the driver is not idle to py-spy, and would count its wait."""
    if folder is None:
        return []
    spy = str(Path(sys.executable).with_name("py-spy"))
    return [subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "100",
                              "--gil", "--format", "raw", "-o", f"{folder}/{pid}.txt"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for pid in pids]


def _line(proc: subprocess.Popen[str], deadline: float) -> str:
    """The next line `proc` writes on its standard output, waited for until `deadline`
    (monotonic); an error if it ends first or is still silent then."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
    line = proc.stdout.readline() if ready else ""
    if not line.endswith("\n"):
        raise RuntimeError(f"serving process {proc.pid} wrote no line in time "
                           f"(exit status {proc.poll()})")
    return line


def _ready(proc: subprocess.Popen[str], deadline: float) -> tuple[int, float]:
    """The (pid, seconds to ready) a serving process reports once ready."""
    word, pid, seconds = _line(proc, deadline).split()
    if word != "ready" or int(pid) != proc.pid:
        raise RuntimeError(f"serving process {proc.pid}: unexpected {word} {pid}")
    return proc.pid, float(seconds)


#: How long before a whole minute pgqueuer's window opens (seconds; see `minute_wait`).
MINUTE_LEAD = 2.0


def minute_wait(now: float) -> float:
    """Seconds to wait from `now` (epoch) until pgqueuer's window opens: `MINUTE_LEAD` before a
    whole minute. Its runs of a minute come in one burst after the minute starts (12-15 s of
    it), so the window (61 s) holds the whole burst of one minute and no other minute: opened
    1 s before, a wake-up a millisecond late put the next minute inside its end, its 10,000
    fire times counted due and done (run in the grace) and their burst's CPU not counted, a
    cost per run read at half. Opened anywhere, a late minute's burst ran past its end (one
    W2 run read 225 µs a run where the others read 1,500)."""
    return -(now + MINUTE_LEAD) % 60.0


def run(contender: str, workload: Workload, config: Config, url: str, times: Timing, *,
        profile: str | None = None) -> Outcome:
    """One contender serving `workload` from `url` (a PostgreSQL DSN or a SQLite file's path)
    with `config`'s processes (1 for APScheduler), measured over `times`' window."""
    processes = 1 if contender == APSCHEDULER else config.processes
    if config.store == "postgresql":
        _reset_postgres(url)
    where = url if contender != OURS or config.store == "postgresql" else f"sqlite:///{url}"
    command = [sys.executable, "-m", "benchmarks._stored_serve", contender, where,
               str(workload.schedules), "1" if workload.every_second else "0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    procs = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(processes)]
    try:
        started = dict(_ready(p, time.monotonic() + 900) for p in procs)
        server = _server_pids(url, None) if config.store == "postgresql" else None
        time.sleep(times.warmup)  # the window follows the warm-up: a wall-clock span
        if contender == PGQUEUER:
            time.sleep(minute_wait(time.time()))
        w0, client0, server0 = time.time(), sum(_cpu_of(p) for p in started), \
            _server_cpu(server)
        spies = _spies(profile, list(started), times.window)
        time.sleep(times.window)
        for spy in spies:
            spy.wait(60)
        w1, client1, server1 = time.time(), sum(_cpu_of(p) for p in started), \
            _server_cpu(server)
        rss = max(_rss_mib(p) for p in started)
        time.sleep(times.grace)
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("stop\n")
            p.stdin.flush()
        records = [tuple(r) for p in procs for r in json.loads(_line(p, time.monotonic() + 120))]
    finally:
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for pipe in (p.stdin, p.stdout):
                if pipe is not None:
                    pipe.close()
    seen = collections.Counter((name, fire) for _, name, fire in records)
    first: dict[tuple[str, float], float] = {}
    for start, name, fire in records:
        if w0 <= fire < w1:
            first[(name, fire)] = min(start, first.get((name, fire), start))
    late = sorted(start - fire for (_, fire), start in first.items())
    due = workload.due(w0, w1, minutely=contender == PGQUEUER)
    done = max(1, len(first))
    return Outcome(
        contender, workload.key, config.label, processes, workload.schedules, due, len(first),
        100.0 * len(first) / due if due else float("nan"), _percentile(late, 0.50),
        _percentile(late, 0.99), sum(n - 1 for n in seen.values()), len(records),
        1e6 * (client1 - client0) / done,
        None if server0 is None or server1 is None else 1e6 * (server1 - server0) / done,
        rss, max(started.values()), os.getloadavg()[0])


# -- the stores and the harness's rows -------------------------------------------------------


@contextlib.contextmanager
def stores() -> Iterator[dict[str, str]]:
    """A throwaway PostgreSQL (left out, and said so, where none starts) and a folder for the
    SQLite files, while the block runs: ``{"postgresql": dsn, "sqlite": folder}``."""
    from tests.helpers.postgres import temporary_server

    found: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        try:
            found["postgresql"] = stack.enter_context(temporary_server())
        except (FileNotFoundError, RuntimeError) as exc:
            print(f"[stored workload] no PostgreSQL: {exc}", file=sys.stderr)
        found["sqlite"] = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-w-"))
        yield found


def _where(config: Config, found: dict[str, str], contender: str, workload: Workload) -> str:
    if config.store == "postgresql":
        return found["postgresql"]
    name = f"{contender}-{workload.key}-{time.monotonic_ns()}.db"  # a fresh file per run
    return str(Path(found["sqlite"]) / name)


def _contenders(config: Config) -> tuple[str, ...]:
    """Who serves `config`: ours, its peer, and on PostgreSQL the floor (`serve_floor`)."""
    return (OURS, config.peer, FLOOR) if config.store == "postgresql" else (OURS, config.peer)


#: The figures the floor is measured for: what it has (no memory or start-up of its own).
FLOOR_FIGURES = ("done_pct", "p50_ms", "p99_ms", "client_cpu_us", "server_cpu_us")


def _peer_available(peer: str, quick: bool) -> bool:
    if peer == PGQUEUER:
        # Its fire times fall on whole minutes: a quick window of 2 s holds none.
        if quick:
            return False
        try:
            import pgqueuer  # noqa: F401
        except ImportError:
            return False
    return True


NO_APSCHEDULER_4 = ("APScheduler 4 is not measured: it is the same distribution as APScheduler "
                    "3 (`apscheduler` on PyPI), and one environment holds one version of it")

FLOOR_NOTE = ("floor: the bare claim and completion on the same table and rows, no service "
              "(benchmarks._stored_serve.serve_floor: the server plans; no trigger, policy, "
              "events, status or recovery)")

FIGURES = (("done_pct", "runs done", "% of due", "higher"),
           ("p50_ms", "lateness p50", "ms", "lower"),
           ("p99_ms", "lateness p99", "ms", "lower"),
           ("duplicates", "duplicates", "runs", "lower"),
           ("client_cpu_us", "client CPU per run", "µs", "lower"),
           ("server_cpu_us", "server CPU per run", "µs", "lower"),
           ("rss_mib", "memory per process", "MiB", "lower"),
           ("startup_s", "start-up to ready", "s", "lower"))


def workload_metrics(quick: bool) -> list[Metric]:
    """The rows: per workload and configuration, ours and its peer, each figure of `Outcome`
    (server CPU on PostgreSQL only; memory and start-up for W2, the 10,000 schedules)."""
    stack = contextlib.ExitStack()
    found = stack.enter_context(stores())
    import atexit

    atexit.register(stack.close)
    times = timing(quick)
    outcomes: dict[tuple[str, str, str], list[Outcome]] = {}
    reads: collections.Counter[tuple[str, str, str, str]] = collections.Counter()

    def sampler(contender: str, workload: Workload, config: Config,
                key: str) -> Callable[[], float]:
        def sample() -> float:
            at = (contender, workload.key, config.label)
            k = reads[(*at, key)]
            reads[(*at, key)] += 1
            done = outcomes.setdefault(at, [])
            while len(done) <= k:
                outcome = run(contender, workload, config,
                              _where(config, found, contender, workload), times)
                print(f"[stored workload] {json.dumps(dataclasses.asdict(outcome))}",
                      file=sys.stderr, flush=True)
                if outcome.duplicates and contender == OURS:
                    raise AssertionError(f"ours ran fire times twice: {outcome}")
                done.append(outcome)
            value = getattr(done[k], key)
            return float("nan") if value is None else float(value)

        return sample

    metrics = []
    for workload in workloads(quick).values():
        for config in CONFIGS:
            if config.store not in found:
                continue
            peer = config.peer if _peer_available(config.peer, quick) else None
            peer_note = {PGQUEUER: "pgqueuer: `* * * * *`, its cron's finest (a minute): "
                         f"{workload.schedules:,} schedules due at each minute; its fire "
                         "time is the minute its claim moved next_run from",
                         APSCHEDULER: "APScheduler 3: SQLAlchemyJobStore on its own SQLite "
                         "file, 1 process (it cannot share a store)"}[config.peer]
            if peer is None:
                peer_note = f"{config.peer}: not measured (quick mode, or not installed)"
            peer_note += f"; {NO_APSCHEDULER_4}"
            for key, title, unit, better in FIGURES:
                if key == "server_cpu_us" and config.store != "postgresql":
                    continue
                if key in ("rss_mib", "startup_s") and workload.every_second:
                    continue
                contenders: dict[str, Callable[[], float] | None] = {
                    OURS: sampler(OURS, workload, config, key),
                    config.peer: None if peer is None else
                    sampler(config.peer, workload, config, key)}
                floor = None
                if FLOOR in _contenders(config) and key in FLOOR_FIGURES:
                    floor = FLOOR
                    contenders[FLOOR] = sampler(FLOOR, workload, config, key)
                metrics.append(Metric(
                    f"stored {workload.key} {title}, {workload.schedules:,} schedules, "
                    f"{config.label}", unit, better, contenders, floor=floor,
                    note=peer_note + (f"; {FLOOR_NOTE}" if floor else "")))
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._stored_workload")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workload", nargs="+", default=["W1", "W2"])
    parser.add_argument("--config", nargs="+", default=[c.label for c in CONFIGS])
    parser.add_argument("--contender", nargs="+", default=[OURS, PGQUEUER, APSCHEDULER, FLOOR])
    parser.add_argument("--window", type=float, default=None)
    parser.add_argument("--profile", default=None,
                        help="a folder for py-spy's collapsed stacks of the serving processes")
    args = parser.parse_args(argv)
    times = timing(args.quick)
    if args.window is not None:
        times = dataclasses.replace(times, window=args.window)
    with stores() as found:
        for key in args.workload:
            workload = workloads(args.quick)[key]
            for config in (c for c in CONFIGS if c.label in args.config):
                for contender in _contenders(config):
                    if contender not in args.contender or config.store not in found:
                        continue
                    outcome = run(contender, workload, config,
                                  _where(config, found, contender, workload), times,
                                  profile=args.profile)
                    print(json.dumps(dataclasses.asdict(outcome)), flush=True)


if __name__ == "__main__":
    main()
