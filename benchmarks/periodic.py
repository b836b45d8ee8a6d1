"""Periodic executors: ours, PyMongo's, and the floor (a bare SimpleQueue hand-off), one run.

Measures, interleaved round by round:
- idle wake-ups per second per executor (interval 60 s, min_interval 0.5 s);
- process CPU of 1,000 idle executors (% of one core);
- wake() -> target latency;
- close() -> thread exit latency;
- process exit time with 300 idle + 5 busy executors (subprocesses).

Run: ``python -m benchmarks.periodic [--quick]`` or ``executors bench periodic``.
"""

from __future__ import annotations

import queue
import random
import resource
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import types
from collections.abc import Callable
from typing import Protocol

import pymongo
import pymongo.periodic_executor as pymongo_pe

from benchmarks._harness import OURS, Metric, run_area
from executors import PeriodicExecutor

PYMONGO = f"pymongo {pymongo.version}"
FLOOR = "floor (SimpleQueue)"


class Executor(Protocol):
    def open(self) -> None: ...
    def close(self, dummy: object = None) -> object: ...
    def wake(self) -> None: ...
    def join(self, timeout: float | None = None) -> object: ...


class FloorExecutor:
    """The physical floor: a thread blocked in SimpleQueue.get, woken by put. No features."""

    def __init__(self, interval: float, min_interval: float, target: Callable[[], object],
                 name: str | None = None) -> None:
        self._interval = interval
        self._target = target
        self._q: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self.loops = 0

    def _run(self) -> None:
        while True:
            self._target()
            try:
                msg = self._q.get(timeout=self._interval)
            except queue.Empty:
                msg = "run"
            self.loops += 1
            if msg == "close":
                return

    def open(self) -> None:
        self._thread.start()

    def close(self, dummy: object = None) -> None:
        self._q.put("close")

    def wake(self) -> None:
        self._q.put("run")

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


FACTORIES: dict[str, Callable[..., Executor]] = {
    OURS: PeriodicExecutor,
    PYMONGO: pymongo_pe.PeriodicExecutor,
    FLOOR: FloorExecutor,
}


class _CountingTime:
    """Stands in for the `time` module inside pymongo.periodic_executor to count its sleeps."""

    def __init__(self) -> None:
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        time.sleep(seconds)

    monotonic = staticmethod(time.monotonic)


def _close_all(execs: list[Executor]) -> None:
    for ex in execs:
        ex.close()
    for ex in execs:
        ex.join(5)


def idle_wakeups(kind: str, count: int, window: float) -> float:
    """Wake-ups per second per idle executor over `window` seconds."""
    first_runs = threading.Semaphore(0)

    def target() -> bool:
        first_runs.release()
        return True

    shim = _CountingTime()
    saved = pymongo_pe.time
    if kind == PYMONGO:
        pymongo_pe.time = types.SimpleNamespace(sleep=shim.sleep, monotonic=time.monotonic)  # type: ignore[assignment]
    execs = [FACTORIES[kind](60, 0.5, target, name=f"idle-{i}") for i in range(count)]
    try:
        for ex in execs:
            ex.open()
        for _ in execs:
            first_runs.acquire()

        def woken() -> int:
            if kind == OURS:
                return sum(e.statistics().wakeups for e in execs)  # type: ignore[attr-defined]
            if kind == PYMONGO:
                return shim.sleeps
            return sum(e.loops for e in execs)  # type: ignore[attr-defined]

        before = woken()
        time.sleep(window)
        return (woken() - before) / window / count
    finally:
        _close_all(execs)
        pymongo_pe.time = saved  # type: ignore[assignment]


def idle_cpu(kind: str, count: int, window: float) -> float:
    """Process CPU (% of one core) while `count` executors sit idle for `window` seconds."""
    first_runs = threading.Semaphore(0)

    def target() -> bool:
        first_runs.release()
        return True

    execs = [FACTORIES[kind](60, 0.5, target, name=f"cpu-{i}") for i in range(count)]
    try:
        for ex in execs:
            ex.open()
        for _ in execs:
            first_runs.acquire()
        time.sleep(0.6)  # let every PyMongo thread reach its steady polling phase
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        time.sleep(window)
        r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        return 100.0 * cpu / (t1 - t0)
    finally:
        _close_all(execs)


def wake_latency(kind: str, min_interval: float, samples: int) -> float:
    """Median ms from wake() to the target running, woken at a random phase."""
    stamps: queue.SimpleQueue[float] = queue.SimpleQueue()

    def target() -> bool:
        stamps.put(time.perf_counter())
        return True

    ex = FACTORIES[kind](60, min_interval, target)
    ex.open()
    stamps.get(timeout=5)
    lat = []
    try:
        for _ in range(samples):
            # Past min_interval (ours throttles earlier wakes by design), at a random phase of
            # PyMongo's polling sleep.
            time.sleep(min_interval + random.uniform(0, min_interval))
            t0 = time.perf_counter()
            ex.wake()
            lat.append((stamps.get(timeout=10) - t0) * 1000)
    finally:
        _close_all([ex])
    return statistics.median(lat)


def close_latency(kind: str, min_interval: float, samples: int) -> float:
    """Median ms from close() until join() returns, closed at a random phase."""
    lat = []
    for _ in range(samples):
        ran = threading.Event()
        ex = FACTORIES[kind](60, min_interval, lambda ev=ran: ev.set() or True)
        ex.open()
        ran.wait(5)
        time.sleep(random.uniform(0, min_interval))
        t0 = time.perf_counter()
        ex.close()
        ex.join(10)
        lat.append((time.perf_counter() - t0) * 1000)
    return statistics.median(lat)


EXIT_SCRIPT = """
import threading, time, sys
kind = sys.argv[1]
if kind == "ours":
    from executors import PeriodicExecutor as Ex
elif kind == "pymongo":
    import pymongo
    from pymongo.periodic_executor import PeriodicExecutor as Ex
else:
    import queue
    class Ex:
        def __init__(self, interval, min_interval, target, name=None):
            self.t = threading.Thread(target=self.run, daemon=True)
            self.target, self.q = target, queue.SimpleQueue()
        def run(self):
            while True:
                self.target()
                try:
                    self.q.get(timeout=60)
                except queue.Empty:
                    pass
        def open(self):
            self.t.start()
keep = []
for i in range({idle}):
    ex = Ex(60, 0.5, lambda: True)
    ex.open()
    keep.append(ex)
started = threading.Barrier({busy} + 1)
def busy():
    started.wait()
    time.sleep(60)
    return True
for i in range({busy}):
    ex = Ex(60, 0.5, busy)
    ex.open()
    keep.append(ex)
started.wait()
print(time.monotonic(), flush=True)
"""


def exit_time(kind: str, idle: int, busy: int) -> float:
    """Seconds from the end of the main script to the process having exited."""
    arg = {OURS: "ours", PYMONGO: "pymongo", FLOOR: "floor"}[kind]
    code = textwrap.dedent(EXIT_SCRIPT).format(idle=idle, busy=busy)
    proc = subprocess.Popen([sys.executable, "-c", code, arg], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    ended = time.monotonic()  # CLOCK_MONOTONIC is system-wide on Linux
    if proc.returncode != 0 or err.strip():
        raise RuntimeError(f"{kind} exit script failed ({proc.returncode}): {err[-2000:]}")
    return ended - float(out.split()[-1])


def metrics(quick: bool) -> list[Metric]:
    window = 0.5 if quick else 3.0
    n_cpu = 100 if quick else 1000
    mi = 0.05 if quick else 0.5
    samples = 1 if quick else 3
    idle, busy = (30, 2) if quick else (300, 5)
    kinds = list(FACTORIES)
    return [
        Metric("idle wake-ups per executor", "1/s", "lower",
               {k: (lambda k=k: idle_wakeups(k, 20, window)) for k in kinds}, floor=FLOOR,
               note="interval 60 s, min_interval 0.5 s; 20 executors"),
        Metric(f"CPU of {n_cpu} idle executors", "% core", "lower",
               {k: (lambda k=k: idle_cpu(k, n_cpu, window)) for k in kinds}, floor=FLOOR),
        Metric("wake() -> target", "ms", "lower",
               {k: (lambda k=k: wake_latency(k, mi, samples)) for k in kinds}, floor=FLOOR,
               note=f"min_interval {mi} s; woken at a random phase after it"),
        Metric("close() -> thread exit", "ms", "lower",
               {k: (lambda k=k: close_latency(k, mi, samples)) for k in kinds}, floor=FLOOR),
        Metric(f"process exit, {idle} idle + {busy} busy", "s", "lower",
               {k: (lambda k=k: exit_time(k, idle, busy)) for k in kinds}, floor=FLOOR,
               note="from the end of the script to the process having exited"),
    ]


def main(argv: list[str] | None = None) -> None:
    run_area("periodic", metrics, argv, default_rounds=3)


if __name__ == "__main__":
    main()
