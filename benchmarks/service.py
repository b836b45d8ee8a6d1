"""Many periodic jobs: BackgroundService vs one PeriodicExecutor per job, APScheduler, Timer loops.

N periodic jobs (interval 1 s, a trivial body that records the time) run for a measuring
window, after a warm-up, with each contender in turn (round-robin, several rounds):

- ``executors``: one `BackgroundService` (4 workers, default 1 ms timer slack, so its
  lateness includes up to 1 ms by design); first runs spread over the interval with
  ``delay=i/N`` (the grid keeps that phase).
- ``PeriodicExecutor per job``: our own executor, one thread per job (what PyMongo does for
  each of its periodic duties).
- ``APScheduler``: APScheduler 3's ``BackgroundScheduler`` with its default thread pool of
  10 and the same phases (``next_run_time``); ``coalesce=True``. APScheduler drops runs later
  than ``misfire_grace_time`` (1 s): the "runs done" row shows how many happened.
- ``Timer loop``: the hand-rolled pattern, each run re-arms a ``threading.Timer`` (one
  thread per pending timer, a new thread per run).

Measured in the window: threads used (peak ``threading.active_count()`` minus the baseline),
process CPU time (user + system, all threads: the contender's threads, their kernel wake-ups,
and the same 20 Hz sampling loop of the main thread for everyone) as a percentage of one core,
read only over the window, so set-up, first runs and warm-up count for nobody; runs done as
a percentage of runs due, and the lateness of each run in milliseconds (p50, p99): for the
grid schedulers (ours, APScheduler) the start time minus its grid time (the grid's origin is
the job's earliest implied origin, so a late first run counts against no later run); for the
start-to-start ones (PeriodicExecutor, Timer) the gap to the previous run minus the interval.

N = 2,000 for a 10 s window for all four, and 10,000 for the pooled schedulers (ours and
APScheduler): on the 2-core VM this runs on, starting 10,000 threads stalls near 6,000-7,000,
and 5,000 threads running their first runs at once convoy on the GIL for minutes. (Re-checked
with 24 GiB of RAM and no thread limit in sight: 10,000 ``PeriodicExecutor``s stalled at 8,600
threads after 3 minutes, the main thread's ``Thread.start()`` waiting for a new thread to take
the GIL from hundreds of runnable ones, load average 435, 70% of the CPU in the kernel. The
Timer loop, which starts a thread per run, was not tried at 10,000.)
Quick mode: 500 jobs, 2 s. Thread-per-job contenders get a 256 KiB thread stack.

Run: ``python -m benchmarks.service [--quick]`` or ``executors bench service``.
"""

from __future__ import annotations

import datetime
import gc
import itertools
import logging
import statistics
import threading
import time
from collections.abc import Callable

from apscheduler.executors.pool import ThreadPoolExecutor as APThreadPool
from apscheduler.schedulers.background import BackgroundScheduler

from benchmarks._harness import OURS, Metric, run_area
from executors import BackgroundService, PeriodicExecutor

__all__ = ("main", "metrics")

INTERVAL = 1.0
WORKERS = 4
mono = time.monotonic

PERIODIC = "PeriodicExecutor per job"
APSCHEDULER = "APScheduler"
TIMER = "Timer loop"

Result = dict[str, float]
_BASE_THREADS = threading.active_count()


def _window(n: int, warmup: float, seconds: float,
            setup: Callable[[list[list[float]]], Callable[[], None]],
            grid: bool) -> Result:
    """Start `n` recording jobs with `setup`, measure a window, tear down, summarise."""
    # The previous contender's threads (cancelled timers, pool threads) may still be exiting:
    # wait for them, or they would count against this one's baseline.
    limit = mono() + 30
    while threading.active_count() > _BASE_THREADS and mono() < limit:
        time.sleep(0.05)
    gc.collect()
    baseline = threading.active_count()
    times: list[list[float]] = [[] for _ in range(n)]
    teardown = setup(times)
    try:
        time.sleep(warmup)
        w0 = mono()
        cpu0 = time.process_time()
        peak = threading.active_count()
        while mono() - w0 < seconds:
            time.sleep(0.05)
            peak = max(peak, threading.active_count())
        w1 = mono()
        cpu1 = time.process_time()
    finally:
        teardown()
    late: list[float] = []
    runs = 0
    for ts in times:
        ts = list(ts)
        if grid:
            origin = min(t - k * INTERVAL for k, t in enumerate(ts)) if ts else 0.0
            for k, t in enumerate(ts):
                if w0 <= t < w1:
                    runs += 1
                    late.append(t - (origin + k * INTERVAL))
        else:
            for prev, t in itertools.pairwise(ts):
                if w0 <= t < w1:
                    runs += 1
                    late.append(max(0.0, t - prev - INTERVAL))
    late.sort()
    due = n * (w1 - w0) / INTERVAL

    def pct(p: float) -> float:
        return late[min(len(late) - 1, int(p * len(late)))] * 1000 if late else float("nan")

    return {
        "threads": float(peak - baseline),
        "cpu": 100.0 * (cpu1 - cpu0) / (w1 - w0),
        "done": 100.0 * runs / due,
        "p50": pct(0.50),
        "p99": pct(0.99),
        "median_check": statistics.median(late) * 1000 if late else float("nan"),
    }


def _recorder(ts: list[float]) -> Callable[[], bool]:
    append = ts.append

    def body() -> bool:
        append(mono())
        return True

    return body


def run_ours(n: int, warmup: float, seconds: float) -> Result:
    def setup(times: list[list[float]]) -> Callable[[], None]:
        svc = BackgroundService("bench", workers=WORKERS)
        for i, ts in enumerate(times):
            svc.every(INTERVAL, _recorder(ts), name=str(i), delay=INTERVAL * i / n)
        svc.start()

        def teardown() -> None:
            svc.shutdown(10)

        return teardown

    return _window(n, warmup, seconds, setup, grid=True)


def run_periodic(n: int, warmup: float, seconds: float) -> Result:
    def setup(times: list[list[float]]) -> Callable[[], None]:
        old = threading.stack_size(256 * 1024)
        try:
            executors = [PeriodicExecutor(INTERVAL, 0.0, _recorder(ts), name=f"job-{i}")
                         for i, ts in enumerate(times)]
            for ex in executors:
                ex.open()
        finally:
            threading.stack_size(old)

        def teardown() -> None:
            for ex in executors:
                ex.close()
            for ex in executors:
                ex.join(10)

        return teardown

    return _window(n, warmup, seconds, setup, grid=False)


def run_apscheduler(n: int, warmup: float, seconds: float) -> Result:
    logging.getLogger("apscheduler").setLevel(logging.ERROR)

    def setup(times: list[list[float]]) -> Callable[[], None]:
        sched = BackgroundScheduler(
            executors={"default": APThreadPool(10)},
            job_defaults={"coalesce": True, "max_instances": 1},
        )
        now = datetime.datetime.now(datetime.UTC)
        for i, ts in enumerate(times):
            sched.add_job(_recorder(ts), "interval", seconds=INTERVAL,
                          next_run_time=now + datetime.timedelta(seconds=INTERVAL * i / n))
        sched.start()

        def teardown() -> None:
            sched.shutdown(wait=True)

        return teardown

    return _window(n, warmup, seconds, setup, grid=True)


def run_timer(n: int, warmup: float, seconds: float) -> Result:
    def setup(times: list[list[float]]) -> Callable[[], None]:
        stop = threading.Event()
        timers: list[threading.Timer | None] = [None] * n

        def make(i: int, ts: list[float]) -> Callable[[], None]:
            append = ts.append

            def tick() -> None:
                if stop.is_set():
                    return
                t = threading.Timer(INTERVAL, tick)
                t.daemon = True
                t.start()
                timers[i] = t
                append(mono())

            return tick

        old = threading.stack_size(256 * 1024)
        try:
            for i, ts in enumerate(times):
                make(i, ts)()
        finally:
            threading.stack_size(old)

        def teardown() -> None:
            stop.set()
            for t in list(timers):
                if t is not None:
                    t.cancel()
            for t in list(timers):
                if t is not None:
                    try:
                        t.join(10)
                    except RuntimeError:  # re-armed a moment ago, not yet started
                        pass

        return teardown

    return _window(n, warmup, seconds, setup, grid=False)


CONTENDERS: dict[str, Callable[[int, float, float], Result]] = {
    OURS: run_ours,
    PERIODIC: run_periodic,
    APSCHEDULER: run_apscheduler,
    TIMER: run_timer,
}


def metrics(quick: bool) -> list[Metric]:
    n, warmup, seconds = (500, 0.5, 2.0) if quick else (2_000, 2.0, 10.0)
    big = None if quick else 10_000
    # One experiment per contender, size and round yields every metric: the first metric's
    # rounds run them (interleaved by the harness); the later metrics read the same rounds.
    results: dict[tuple[str, int], list[Result]] = {}
    reads: dict[tuple[str, int, str], int] = {}

    def sampler(name: str, size: int, key: str) -> Callable[[], float]:
        def sample() -> float:
            k = reads.get((name, size, key), 0)
            reads[(name, size, key)] = k + 1
            done = results.setdefault((name, size), [])
            while len(done) <= k:
                done.append(CONTENDERS[name](size, warmup, seconds))
            return done[k][key]

        return sample

    def metric(size: int, key: str, title: str, unit: str, better: str,
               only: tuple[str, ...] | None = None) -> Metric:
        return Metric(f"{title}, {size:,} jobs", unit, better,
                      {c: sampler(c, size, key) if only is None or c in only else None
                       for c in CONTENDERS})

    rows = [("threads", "threads used", "threads", "lower"),
            ("cpu", "CPU", "% of one core", "lower"),
            ("done", "runs done", "% of due", "higher"),
            ("p50", "lateness p50", "ms", "lower"),
            ("p99", "lateness p99", "ms", "lower")]
    out = [metric(n, *row) for row in rows]
    if big is not None:
        # Thread-per-job contenders stall with thousands of threads on a 2-core VM (see the
        # module docstring), so the 10,000 jobs are measured for the pooled ones only.
        out += [metric(big, *row, only=(OURS, APSCHEDULER)) for row in rows]
    return out


def main(argv: list[str] | None = None) -> None:
    run_area("service", metrics, argv, default_rounds=2, quick_rounds=1)


if __name__ == "__main__":
    main()
