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

__all__ = ("APSCHEDULER", "FLOOR", "PGQUEUER", "WORKERS", "Workload", "main", "workloads")

OURS = "executors"
PGQUEUER = "pgqueuer"
APSCHEDULER = "APScheduler"
#: The bare mechanism under ours, on PostgreSQL (`serve_floor`).
FLOOR = "floor"
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


#: The floor's batch: ours' (`executors._service.stored.BATCH`).
FLOOR_BATCH = 100
# The floor's claim: up to a batch of idle due rows, locked as ours are, moved one step on and
# marked with the batch's token in one statement, the plan computed by the server.
_FLOOR_CLAIM = (
    "UPDATE executors_schedules AS s SET next_fire = s.next_fire + %s, "
    "running_fire = s.next_fire, version = s.version + 1, owner = %s, "
    "lease_until = extract(epoch from now()) + 30, attempt = 1, claim_token = %s "
    "FROM (SELECT name FROM executors_schedules WHERE NOT paused AND running_fire IS NULL "
    "AND next_fire <= extract(epoch from now()) ORDER BY next_fire LIMIT %s "
    "FOR UPDATE SKIP LOCKED) AS c WHERE s.name = c.name RETURNING s.name, s.running_fire")
_FLOOR_NEXT = ("SELECT extract(epoch from now()), (SELECT next_fire FROM executors_schedules "
               "WHERE NOT paused AND running_fire IS NULL ORDER BY next_fire LIMIT 1)")


def serve_floor(url: str, workload: Workload) -> Runs:
    """The floor of a stored run on PostgreSQL: the mechanism ours is built on with none of its
    features, on the same table and rows (declared by ours' store: same width, same indexes).

    One loop thread, a pool of `WORKERS` threads and a queue between them; each pass, one
    transaction writes the runs ended since the last pass (ours' completion statement, fenced
    by token) and claims up to `FLOOR_BATCH` due rows in one statement (the next fire time is
    the fire time plus the workload's step, computed by the server: no trigger, no plan, no
    rows sent to the client and back), then sleeps until the earliest next fire time (at most
    a second). No missed-run policy, renewals, events, status, trust checks or crash recovery.
    """
    import queue
    import threading
    import uuid

    import psycopg

    from executors.stores import ScheduleDefinition, open_store
    from executors.triggers import Cron
    from integrations.schedule_stores.postgres import _COMPLETE

    began = time.perf_counter()
    store = open_store(url)
    try:
        target = "benchmarks._stored_jobs:record_ours"
        triggers = [Cron(workload.expression(k), tz="UTC") for k in range(workload.schedules)]
        definitions = [(ScheduleDefinition(f"s{k:05d}", trigger.to_data(), target),
                        trigger.next_after) for k, trigger in enumerate(triggers)]
        for i in range(0, len(definitions), 1000):
            store.declare_many(definitions[i:i + 1000])  # type: ignore[attr-defined]
    finally:
        store.close()
    step = 1.0 if workload.every_second else 60.0
    owner = f"floor-{os.getpid()}"
    runs: Runs = []
    work: queue.SimpleQueue[tuple[str, float, str] | None] = queue.SimpleQueue()
    ended: list[tuple[str, str]] = []
    lock = threading.Lock()
    stop = threading.Event()

    def worker() -> None:
        while (item := work.get()) is not None:
            name, fire, token = item
            runs.append((time.time(), name, fire))
            with lock:
                ended.append((name, token))

    def loop() -> None:
        with psycopg.connect(url) as conn:
            while not stop.is_set():
                token = uuid.uuid4().hex
                with lock:
                    done, ended[:] = ended[:], []
                with conn.transaction(), conn.cursor() as cur:
                    if done:
                        cur.execute(_COMPLETE, ([n for n, _ in done], [t for _, t in done],
                                                [0] * len(done), ["ok"] * len(done)))
                    cur.execute(_FLOOR_CLAIM, (step, owner, token, FLOOR_BATCH))
                    claimed = cur.fetchall()
                for name, fire in claimed:
                    work.put((name, fire, token))
                if len(claimed) >= FLOOR_BATCH:
                    continue
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute(_FLOOR_NEXT)
                    row = cur.fetchone()
                assert row is not None
                now, earliest = float(row[0]), row[1]
                stop.wait(1.0 if earliest is None else max(0.0, min(1.0, earliest - now)))

    workers = [threading.Thread(target=worker) for _ in range(WORKERS)]
    looping = threading.Thread(target=loop)
    for thread in [*workers, looping]:
        thread.start()
    _ready(began)
    _stop_asked()
    stop.set()
    looping.join()
    for _ in workers:
        work.put(None)
    for thread in workers:
        thread.join()
    return runs


SERVERS: dict[str, Callable[[str, Workload], Runs]] = {
    OURS: serve_ours, PGQUEUER: serve_pgqueuer, APSCHEDULER: serve_apscheduler,
    FLOOR: serve_floor}


def main(argv: list[str] | None = None) -> None:
    contender, where, schedules, every_second = argv if argv is not None else sys.argv[1:]
    if contender not in SERVERS:
        raise SystemExit(f"unknown contender {contender!r}: one of {sorted(SERVERS)}")
    workload = Workload("W", int(schedules), every_second == "1")
    runs = SERVERS[contender](where, workload)
    print(json.dumps(runs), flush=True)


if __name__ == "__main__":
    main()
