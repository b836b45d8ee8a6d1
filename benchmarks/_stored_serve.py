"""One serving process of issue 35's workload (`benchmarks._stored_workload`), as its own program.

``python -m benchmarks._stored_serve CONTENDER WHERE SCHEDULES EVERY_SECOND``: `CONTENDER`
(``executors``, ``pgqueuer`` or ``APScheduler``) declares `SCHEDULES` cron schedules in
`WHERE` (a PostgreSQL DSN or a SQLite file's path; ours takes a store URL) and serves them.
Once every schedule is declared and planned it writes ``ready <pid> <seconds>`` on standard
output (`seconds` from before the scheduler is made), then serves until a line arrives on
standard input, stops, and writes what its schedules recorded, ``(start, name, fire time)``
per run, as one JSON line.

A program of its own, importing what its contender needs and nothing else: the parent
measures each serving process's resident memory, and a process started by `multiprocessing`
imports its parent's main module first (the scheduler benchmark's, with APScheduler,
SQLAlchemy, the bridge's peers and asyncio: 24 MiB before any schedule) — a figure of the
harness, not of the contender.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ("APSCHEDULER", "PGQUEUER", "WORKERS", "Workload", "main", "workloads")

OURS = "executors"
PGQUEUER = "pgqueuer"
APSCHEDULER = "APScheduler"
#: The workers of each serving process of ours (the scheduler benchmark's).
WORKERS = 4


@dataclasses.dataclass(frozen=True)
class Workload:
    """N stored schedules; schedule k's seconds field is ``"*"`` or ``str(k % 60)``."""

    key: str
    schedules: int
    every_second: bool

    def second(self, k: int) -> str:
        return "*" if self.every_second else str(k % 60)

    def expression(self, k: int) -> str:
        return f"{self.second(k)} * * * * *"

    def due(self, w0: float, w1: float, *, minutely: bool = False) -> int:
        """Fire times in [w0, w1): per whole second (ours, APScheduler), or N at each whole
        minute (`minutely`: pgqueuer's granularity)."""
        seconds = range(int(w0) + (w0 != int(w0)), int(w1) + (w1 != int(w1)))
        if minutely:
            return self.schedules * sum(1 for t in seconds if t % 60 == 0)
        if self.every_second:
            return self.schedules * len(seconds)
        per_second = collections.Counter(k % 60 for k in range(self.schedules))
        return sum(per_second[t % 60] for t in seconds)


def workloads(quick: bool) -> dict[str, Workload]:
    if quick:
        return {"W1": Workload("W1", 20, True), "W2": Workload("W2", 120, False)}
    return {"W1": Workload("W1", 1_000, True), "W2": Workload("W2", 10_000, False)}


Runs = list[tuple[float, str, float]]


def _ready(began: float) -> None:
    print(f"ready {os.getpid()} {time.perf_counter() - began}", flush=True)


def _stop_asked() -> str:
    return sys.stdin.readline()  # the parent's line, or the end of the pipe if it is gone


def serve_ours(url: str, workload: Workload) -> Runs:
    from benchmarks import _stored_jobs
    from executors import BackgroundService

    logging.getLogger("executors.service").setLevel(logging.ERROR)
    began = time.perf_counter()
    svc = BackgroundService("bench-w", workers=WORKERS, store=url)
    for k in range(workload.schedules):
        svc.cron(workload.expression(k), _stored_jobs.record_ours, tz="UTC", name=f"s{k:05d}")
    jobs = svc.jobs
    svc.start()
    # Ready: every schedule declared in the store and planned (its next fire time known).
    deadline = time.monotonic() + 600
    while any(job.next_fire is None for job in jobs) and time.monotonic() < deadline:
        time.sleep(0.02)
    _ready(began)
    _stop_asked()
    svc.shutdown(30)
    return list(_stored_jobs.OURS_RUNS)


def serve_pgqueuer(url: str, workload: Workload) -> Runs:
    import asyncio
    import contextlib

    import asyncpg
    from pgqueuer import PgQueuer

    logging.getLogger("pgqueuer").setLevel(logging.ERROR)
    runs: Runs = []

    def target(name: str) -> Callable[[Any], Any]:
        async def run(schedule: Any) -> None:
            start = time.time()
            # Its claim set next_run to the next whole minute (truncated to the second): the
            # fire time it ran for is the minute before.
            runs.append((start, name, round(schedule.next_run.timestamp() / 60) * 60 - 60))

        return run

    async def main() -> None:
        began = time.perf_counter()
        conn = await asyncpg.connect(url)
        pgq = PgQueuer.from_asyncpg_connection(conn)
        for k in range(workload.schedules):
            pgq.schedule(f"s{k:05d}", "* * * * *")(target(f"s{k:05d}"))
        queries = pgq.sm.queries
        insert = queries.insert_schedule

        async def inserted(*args: Any) -> Any:
            # Its scheduler inserts every schedule before its first poll: ready then.
            result = await insert(*args)
            _ready(began)
            return result

        queries.insert_schedule = inserted  # type: ignore[method-assign,assignment]
        task = asyncio.create_task(pgq.sm.run())
        await asyncio.get_running_loop().run_in_executor(None, _stop_asked)
        pgq.sm.shutdown.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        await conn.close()

    asyncio.run(main())
    return runs


def serve_apscheduler(path: str, workload: Workload) -> Runs:
    from pathlib import Path

    from benchmarks._stored_apscheduler import StoredRuns, StoredScenario, stored_apscheduler

    class Scenario(StoredScenario):
        def fields(self, k: int) -> tuple[str, str]:
            return workload.second(k), "*"

    began = time.perf_counter()
    runs = StoredRuns()
    teardown, finish = stored_apscheduler(Scenario(workload.schedules, 1, 0.0, 0.0),
                                          Path(path), runs)
    _ready(began)
    _stop_asked()
    teardown()
    finish()
    return runs.runs


SERVERS: dict[str, Callable[[str, Workload], Runs]] = {
    OURS: serve_ours, PGQUEUER: serve_pgqueuer, APSCHEDULER: serve_apscheduler}


def main(argv: list[str] | None = None) -> None:
    contender, where, schedules, every_second = argv if argv is not None else sys.argv[1:]
    if contender not in SERVERS:
        raise SystemExit(f"unknown contender {contender!r}: one of {sorted(SERVERS)}")
    workload = Workload("W", int(schedules), every_second == "1")
    runs = SERVERS[contender](where, workload)
    print(json.dumps(runs), flush=True)


if __name__ == "__main__":
    main()
