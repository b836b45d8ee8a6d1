"""Wall-clock schedules: BackgroundService's cron jobs beside APScheduler 3, and next-fire walks.

Two service experiments, each contender in turn (round-robin, several rounds), both with a
trivial body that records its start time and the fire time it was due for, all in the zone
Europe/Berlin:

- **cron over the minute**: N cron jobs, job k due once a minute at second k % 60 (6-field
  ``"<k % 60> * * * * *"``), so N/60 runs are due each second (167 for N = 10,000);
- **every second**: M jobs due every second (6-field ``"* * * * * *"``).

Contenders: ``executors``, one `BackgroundService` (4 workers) with ``svc.cron``; the body
reads the nominal fire time from `executors.current_run()`. ``APScheduler``: APScheduler
3.11's ``BackgroundScheduler`` with its memory job store and its default thread pool of 10,
one ``CronTrigger(second=...)`` per job, ``coalesce=True``, ``max_instances=1`` and the default
1 s misfire grace; its body cannot see its fire time, so a listener for ``EVENT_JOB_EXECUTED``
(called on the worker thread right after the run) records the event's
``scheduled_run_time``, paired with the body's start time per job, in order.

Measured over a window that follows a warm-up (set-up and first runs count for nobody):

- **CPU per run**: process CPU time (user + system, every thread) during the window divided
  by the runs that started in it, in microseconds. The main thread sleeps through the window.
- **lateness p99 / p50**: start time (``time.time()``) minus the nominal fire time, of the
  runs that started in the window, in milliseconds.
- **runs done**: those runs as a percentage of the runs due in the window (APScheduler drops a
  run later than its 1 s grace: this row shows it).
- **memory per job**: bytes of Python heap held after adding the jobs and starting the
  scheduler (``tracemalloc``, current size once every first fire time is computed, minus the
  size before), divided by the number of jobs; measured in its own round with a no-op body,
  on 1,000 minute-spread jobs (tracemalloc slows every allocation). ``tracemalloc`` counts
  Python allocations only (no thread stacks, no allocator slack), the same for both.

Schedules kept in a SQLite file (issue 22's benchmark): N cron schedules, schedule k due once
every 10 minutes at second k mod 600 of each period (``"<s> <m>-59/10 * * * *"``, 16.7 runs
due each second for N = 10,000), each contender on a fresh SQLite file in a temporary folder,
both with the same file settings (write-ahead log, ``synchronous=NORMAL``: our store's own).
``executors``: ``BackgroundService(store="sqlite:///...")`` (4 workers), ``svc.cron`` with the
importable target ``benchmarks._stored_jobs:record_ours``, which records its start, name and
``current_run().fire_time``. ``APScheduler``: ``BackgroundScheduler`` with a
``SQLAlchemyJobStore`` on an SQLAlchemy engine for the file (the pragmas set on connect), its
pool of 10, ``coalesce=True``, ``max_instances=1``, the job ``record_apscheduler(job_id)``
named by reference (its store pickles jobs), paired with ``EVENT_JOB_EXECUTED``'s scheduled
run times. Rows: **CPU per due run** (process CPU in the window over the runs started in it),
lateness p99/p50 and runs done, as above. **Double runs** are checked, not assumed: every run
of every round (warm-up included) is keyed by (schedule, fire time); the count is in the
rows' note, and one double run of ours raises `DoubleRun` (the benchmark fails). Full mode:
10,000 schedules, a 5 s warm-up after the set-up and a 60 s window; quick mode: 300 schedules
due every minute, a 3 s window.

And the cost of the trigger alone: the time to compute one year of fire times (2024, with both
of Berlin's clock changes) for one expression, walking ``next_after`` from fire time to fire
time: ``executors`` (``Cron(...).next_after``), ``APScheduler``
(``CronTrigger.from_crontab(...).get_next_fire_time(previous, previous)``), ``cronsim``
(``CronSim(expression, aware start)``: its zone-aware mode) and ``cronsim (naive)`` (iterating
naive local times: the field matching alone, no zone handling; listed as a floor, not a peer).
The number of fire times each one finds is in the metric's note (they differ where a library
mishandles a clock change).

Full mode: 10,000 cron jobs over a 60 s window (a whole minute, so every job is due once)
after a 62 s warm-up (every job has run once: ours runs a job's first run on its pool, then a
short job on the scheduler thread), and 1,000 jobs due every second over 15 s, 2 rounds; a
full run takes about 17 minutes on a busy 2-core machine. Quick mode (CI's smoke check): 600
and 100 jobs over 2 s windows, one round, a month of fire times.

Run: ``python -m benchmarks.scheduler [--quick]`` or ``executors bench scheduler``.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import gc
import logging
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from zoneinfo import ZoneInfo

from apscheduler.events import EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor as APThreadPool
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from cronsim import CronSim

from benchmarks import _stored_jobs
from benchmarks._harness import OURS, Metric, run_area
from benchmarks._store_claims import claims_metrics
from benchmarks._stored_apscheduler import ZONE, StoredRuns, StoredScenario, stored_apscheduler
from benchmarks._stored_workload import workload_metrics
from executors import BackgroundService, current_run
from executors.testing import wait_until
from executors.triggers import Cron

__all__ = ("main", "metrics")

WORKERS = 4
APSCHEDULER = "APScheduler"
CRONSIM = "cronsim"
CRONSIM_NAIVE = "cronsim (naive)"

Result = dict[str, float]
_BASE_THREADS = threading.active_count()


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A set of cron jobs: job k's 6-field expression, its APScheduler trigger arguments."""

    title: str
    jobs: int
    warmup: float
    window: float
    second: Callable[[int], str]  # job k's seconds field, e.g. "17" or "*"

    def expression(self, k: int) -> str:
        return f"{self.second(k)} * * * * *"

    def due(self, w0: float, w1: float) -> int:
        """Runs due in the wall-clock window [w0, w1): one per matching (job, whole second)."""
        per_second = [0] * 60
        for k in range(self.jobs):
            field = self.second(k)
            if field == "*":
                per_second = [n + 1 for n in per_second]
            else:
                per_second[int(field)] += 1
        first = int(w0) + (w0 != int(w0))
        return sum(per_second[t % 60] for t in range(first, int(w1) + (w1 != int(w1))))


@dataclasses.dataclass
class _Runs:
    """What one contender's jobs recorded: (start, nominal fire time), both Unix seconds."""

    pairs: list[tuple[float, float]] = dataclasses.field(default_factory=list)


def _settle() -> None:
    # The previous contender's threads (its pool, its scheduler) may still be exiting: wait for
    # them, so neither their CPU nor their memory counts against the next one.
    limit = time.monotonic() + 30
    while threading.active_count() > _BASE_THREADS and time.monotonic() < limit:
        time.sleep(0.05)
    gc.collect()


# -- the contenders' set-ups: each returns (teardown, finish), finish() fills the runs -----------

Setup = Callable[[Scenario, Callable[[], object] | None, _Runs],
                 tuple[Callable[[], None], Callable[[], None]]]


def _setup_ours(scenario: Scenario, body: Callable[[], object] | None,
                runs: _Runs) -> tuple[Callable[[], None], Callable[[], None]]:
    # As for APScheduler's logger below: a run missed while the machine is overloaded is
    # counted and announced, and a WARNING per job per second would measure the logging.
    logging.getLogger("executors.service").setLevel(logging.ERROR)
    raw: list[tuple[float, object]] = []
    append = raw.append
    now = time.time

    def record() -> None:
        append((now(), current_run()))

    svc = BackgroundService("bench-scheduler", workers=WORKERS)
    fn = body if body is not None else record
    for k in range(scenario.jobs):
        svc.cron(scenario.expression(k), fn, tz=ZONE, name=f"job-{k}")
    jobs = svc.jobs
    svc.start()
    # The first fire time of each job is computed after start: wait for all of them, so the
    # warm-up and the window see the steady state (APScheduler computes them in start()).
    wait_until(lambda: all(job.next_fire is not None for job in jobs), 300,
               interval=0.05, message="the service computed every first fire time")

    def teardown() -> None:
        svc.shutdown(30)

    def finish() -> None:
        for start, info in raw:
            fire = getattr(info, "fire_time", None)
            if isinstance(fire, datetime.datetime):
                runs.pairs.append((start, fire.timestamp()))

    return teardown, finish


def _setup_apscheduler(scenario: Scenario, body: Callable[[], object] | None,
                       runs: _Runs) -> tuple[Callable[[], None], Callable[[], None]]:
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    starts: dict[str, list[float]] = {}
    fires: dict[str, list[float]] = {}
    sched = BackgroundScheduler(
        executors={"default": APThreadPool(10)},
        jobstores={"default": {"type": "memory"}},
        job_defaults={"coalesce": True, "max_instances": 1},
        timezone=ZONE,
    )
    tz = ZoneInfo(ZONE)
    now = time.time
    for k in range(scenario.jobs):
        job_id = str(k)
        if body is None:
            append = starts.setdefault(job_id, []).append

            def fn(append: Callable[[float], None] = append) -> None:
                append(now())
        else:
            fn = body  # type: ignore[assignment]
        sched.add_job(fn, CronTrigger(second=scenario.second(k), timezone=tz), id=job_id)
    if body is None:
        def executed(event: JobExecutionEvent) -> None:
            fires.setdefault(event.job_id, []).append(event.scheduled_run_time.timestamp())

        sched.add_listener(executed, EVENT_JOB_EXECUTED)
    sched.start()

    def teardown() -> None:
        sched.shutdown(wait=True)

    def finish() -> None:
        for job_id, ts in starts.items():
            # One job's runs never overlap (max_instances=1): both lists are in run order.
            runs.pairs.extend(zip(sorted(ts), sorted(fires.get(job_id, ())), strict=False))

    return teardown, finish


SETUPS: dict[str, Setup] = {OURS: _setup_ours, APSCHEDULER: _setup_apscheduler}


def _window(setup: Setup, scenario: Scenario) -> Result:
    """Run `scenario` under one contender: warm up, measure a window, tear down, summarise."""
    _settle()
    runs = _Runs()
    teardown, finish = setup(scenario, None, runs)
    w0, w1, cpu = _measured(teardown, scenario.warmup, scenario.window)
    finish()
    return _summarised(runs.pairs, w0, w1, cpu, scenario.due(w0, w1))


def _measured(teardown: Callable[[], None], warmup: float,
              window: float) -> tuple[float, float, float]:
    """Sleep through the warm-up and the window, then tear down: the window's wall-clock
    bounds and the process CPU seconds spent in it."""
    try:
        time.sleep(warmup)
        w0 = time.time()
        cpu0 = time.process_time()
        time.sleep(window)
        w1 = time.time()
        cpu1 = time.process_time()
    finally:
        teardown()
    return w0, w1, cpu1 - cpu0


def _summarised(pairs: list[tuple[float, float]], w0: float, w1: float, cpu: float,
                due: int) -> Result:
    """CPU per run, lateness and runs done of the runs (start, fire time) started in the window."""
    inside = [(s, f) for s, f in pairs if w0 <= s < w1]
    late = sorted(s - f for s, f in inside)
    return {
        "cpu": cpu / len(inside) * 1e6 if inside else float("nan"),
        "p50": _percentile(late, 0.50),
        "p99": _percentile(late, 0.99),
        "done": 100.0 * len(inside) / max(1, due),
    }


def _memory(setup: Setup, scenario: Scenario) -> float:
    """Bytes of Python heap per job held by a started scheduler (tracemalloc)."""
    _settle()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        teardown, _ = setup(scenario, _noop, _Runs())
        try:
            time.sleep(0.3)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            teardown()
    finally:
        tracemalloc.stop()
    return held / scenario.jobs


def _noop() -> None:
    pass


# -- schedules kept in a SQLite file ---------------------------------------------------------


class DoubleRun(AssertionError):
    """A fire time of one schedule ran more than once: the benchmark fails, loudly."""


def _stored_ours(scenario: StoredScenario, path: Path,
                 runs: StoredRuns) -> tuple[Callable[[], None], Callable[[], None]]:
    logging.getLogger("executors.service").setLevel(logging.ERROR)
    # The store's own settings: WAL, synchronous=NORMAL (executors/stores/_sqlite.py).
    svc = BackgroundService("bench-stored", workers=WORKERS, store=f"sqlite:///{path}")
    for k in range(scenario.jobs):
        svc.cron(scenario.expression(k), _stored_jobs.record_ours, tz=ZONE, name=f"job-{k}")
    svc.start()

    def teardown() -> None:
        svc.shutdown(30)

    def finish() -> None:
        runs.runs.extend(_stored_jobs.OURS_RUNS)

    return teardown, finish


StoredSetup = Callable[[StoredScenario, Path, StoredRuns],
                       tuple[Callable[[], None], Callable[[], None]]]


STORED_SETUPS: dict[str, StoredSetup] = {OURS: _stored_ours, APSCHEDULER: stored_apscheduler}


def _double_runs(runs: StoredRuns) -> int:
    """Fire times run more than once (each extra run counts one)."""
    seen = collections.Counter((name, fire) for _, name, fire in runs.runs)
    return sum(n - 1 for n in seen.values() if n > 1)


def _stored_window(name: str, scenario: StoredScenario) -> Result:
    """One contender's round on a fresh SQLite file: set up, warm up, measure a window."""
    _settle()
    _stored_jobs.reset()
    runs = StoredRuns()
    with tempfile.TemporaryDirectory(prefix="executors-bench-") as folder:
        teardown, finish = STORED_SETUPS[name](scenario, Path(folder) / "schedules.db", runs)
        w0, w1, cpu = _measured(teardown, scenario.warmup, scenario.window)
        finish()
    doubles = _double_runs(runs)
    if doubles and name == OURS:
        raise DoubleRun(f"{name}: {doubles} fire time(s) ran more than once on the SQLite "
                        f"store ({scenario.title})")
    pairs = [(start, fire) for start, _, fire in runs.runs]
    return {**_summarised(pairs, w0, w1, cpu, scenario.due(w0, w1)),
            "doubles": float(doubles), "runs": float(len(runs.runs))}


def _percentile(late: list[float], p: float) -> float:
    """The `p` quantile of sorted lateness `late` (seconds), in milliseconds."""
    return late[min(len(late) - 1, int(p * len(late)))] * 1000 if late else float("nan")


def _stored_scenario(quick: bool) -> StoredScenario:
    if quick:
        return StoredScenario(300, 1, 1.0, 3.0)
    return StoredScenario(10_000, 10, 5.0, 60.0)


def _stored_metrics(quick: bool) -> list[Metric]:
    """CPU per due run, lateness and runs done of ours and APScheduler on SQLite files; the
    double runs found (of every run, warm-up included) are in the notes and fail ours."""
    scenario = _stored_scenario(quick)
    results: dict[str, list[Result]] = {}
    reads: dict[tuple[str, str], int] = {}
    out: list[Metric] = []

    def note() -> str:
        counts = {name: sum(r["doubles"] for r in done) for name, done in results.items()}
        checked = {name: sum(r["runs"] for r in done) for name, done in results.items()}
        return ("double runs (a fire time run twice), checked over every run of every round: "
                + ", ".join(f"{n} {counts[n]:.0f} of {checked[n]:,.0f}" for n in counts))

    def sampler(name: str, key: str) -> Callable[[], float]:
        def sample() -> float:
            k = reads.get((name, key), 0)
            reads[(name, key)] = k + 1
            done = results.setdefault(name, [])
            while len(done) <= k:
                done.append(_stored_window(name, scenario))
                for metric in out:  # read once the rounds are done: every round counted
                    metric.note = note()
            return done[k][key]

        return sample

    rows = [("cpu", "CPU per due run", "µs", "lower"),
            ("p99", "lateness p99", "ms", "lower"),
            ("p50", "lateness p50", "ms", "lower"),
            ("done", "runs done", "% of due", "higher")]
    out += [Metric(f"{title}, {scenario.title}", unit, better,
                   {name: sampler(name, key) for name in STORED_SETUPS})
            for key, title, unit, better in rows]
    # Then the claims of many processes on one PostgreSQL or MongoDB store (no peer), and the
    # stored W1 and W2 served by 1 and 2 processes, peers beside (benchmarks._stored_workload).
    return out + claims_metrics(quick) + workload_metrics(quick)


# -- next fire times -----------------------------------------------------------------------


def _walk_ours(expression: str, start: datetime.datetime, end: datetime.datetime) -> int:
    next_after = Cron(expression, tz=ZONE).next_after
    count = 0
    t = next_after(start)
    while t is not None and t < end:
        count += 1
        t = next_after(t)
    return count


def _walk_apscheduler(expression: str, start: datetime.datetime,
                      end: datetime.datetime) -> int:
    trigger = CronTrigger.from_crontab(expression, timezone=ZoneInfo(ZONE))
    count = 0
    # get_next_fire_time(None, now) may return `now` itself: ask from just after `start`, so
    # every walk counts the fire times strictly after it, as next_after and cronsim do.
    t = trigger.get_next_fire_time(None, start + datetime.timedelta(microseconds=1))
    while t is not None and t < end:
        count += 1
        t = trigger.get_next_fire_time(t, t)
    return count


def _walk_cronsim(expression: str, start: datetime.datetime, end: datetime.datetime) -> int:
    count = 0
    for t in CronSim(expression, start):
        if t >= end:
            break
        count += 1
    return count


def _walk_cronsim_naive(expression: str, start: datetime.datetime,
                        end: datetime.datetime) -> int:
    naive_end = end.replace(tzinfo=None)
    count = 0
    for t in CronSim(expression, start.replace(tzinfo=None)):
        if t >= naive_end:
            break
        count += 1
    return count


WALKS: dict[str, Callable[[str, datetime.datetime, datetime.datetime], int]] = {
    OURS: _walk_ours,
    APSCHEDULER: _walk_apscheduler,
    CRONSIM: _walk_cronsim,
    CRONSIM_NAIVE: _walk_cronsim_naive,
}


def _fire_metrics(quick: bool) -> Iterator[Metric]:
    tz = ZoneInfo(ZONE)
    start = datetime.datetime(2024, 1, 1, tzinfo=tz)
    end = datetime.datetime(2024, 2, 1, tzinfo=tz) if quick else start.replace(year=2025)
    span = "a month" if quick else "1 year"
    for expression in ("30 2 * * *", "*/15 * * * *"):
        metric = Metric(f"{span} of fire times, `{expression}` {ZONE}", "ms", "lower", {},
                        floor=CRONSIM_NAIVE)
        found: dict[str, int] = {}

        def timed(name: str, metric: Metric = metric, found: dict[str, int] = found,
                  expression: str = expression) -> Callable[[], float]:
            walk = WALKS[name]

            def sample() -> float:
                t0 = time.perf_counter()
                found[name] = walk(expression, start, end)
                elapsed = (time.perf_counter() - t0) * 1000
                # The note is read once the rounds are done: it says what each one found.
                metric.note = ("fire times found (strictly after the start, before the end): "
                               + ", ".join(f"{n} {c:,}" for n, c in found.items()))
                return elapsed

            return sample

        metric.contenders = {name: timed(name) for name in WALKS}
        yield metric


# -- the metrics -----------------------------------------------------------------------------


def _spread(k: int) -> str:
    return str(k % 60)


def _every(k: int) -> str:
    return "*"


def _scenarios(quick: bool) -> list[Scenario]:
    if quick:
        return [Scenario("cron jobs, one run a minute each", 600, 1.0, 2.0, _spread),
                Scenario("jobs due every second", 100, 1.0, 2.0, _every)]
    # The warm-up of the minute-spread jobs lasts a minute: every job has run once before the
    # window (ours measures a job's first run on the pool, then runs a short job on the
    # scheduler thread), so the window sees the steady state a long-running service is in.
    return [Scenario("cron jobs, one run a minute each", 10_000, 62.0, 60.0, _spread),
            Scenario("jobs due every second", 1_000, 5.0, 15.0, _every)]


def metrics(quick: bool) -> list[Metric]:
    # One experiment per contender, scenario and round yields four metrics: the first metric's
    # rounds run them (interleaved by the harness); the later metrics read the same rounds.
    results: dict[tuple[str, str], list[Result]] = {}
    reads: dict[tuple[str, str, str], int] = {}

    def sampler(name: str, scenario: Scenario, key: str) -> Callable[[], float]:
        def sample() -> float:
            k = reads.get((name, scenario.title, key), 0)
            reads[(name, scenario.title, key)] = k + 1
            done = results.setdefault((name, scenario.title), [])
            while len(done) <= k:
                done.append(_window(SETUPS[name], scenario))
            return done[k][key]

        return sample

    def memory(name: str, scenario: Scenario) -> Callable[[], float]:
        return lambda: _memory(SETUPS[name], scenario)

    rows = [("cpu", "CPU per run", "µs", "lower"),
            ("p99", "lateness p99", "ms", "lower"),
            ("p50", "lateness p50", "ms", "lower"),
            ("done", "runs done", "% of due", "higher")]
    out: list[Metric] = []
    for scenario in _scenarios(quick):
        label = f"{scenario.jobs:,} {scenario.title}"
        out += [Metric(f"{title}, {label}", unit, better,
                       {name: sampler(name, scenario, key) for name in SETUPS})
                for key, title, unit, better in rows]
    # Memory: the heap per job is the same at 1,000 jobs as at 10,000, and tracemalloc slows
    # every allocation, so it is measured on 1,000 minute-spread jobs (100 in quick mode).
    held = Scenario("cron jobs, one run a minute each", 100 if quick else 1_000, 0.0, 0.0,
                    _spread)
    out.append(Metric(f"memory per job, {held.jobs:,} {held.title}", "bytes", "lower",
                      {name: memory(name, held) for name in SETUPS},
                      note="tracemalloc: the Python heap held after adding the jobs and "
                      "starting (every first fire time computed), per job"))
    out += _stored_metrics(quick)
    out += _fire_metrics(quick)
    return out


def main(argv: list[str] | None = None) -> None:
    run_area("scheduler", metrics, argv, default_rounds=2, quick_rounds=1)


if __name__ == "__main__":
    main()
