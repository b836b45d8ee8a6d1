"""Claims per second of a schedule store, with 1, 2 and 4 processes, double runs checked.

Not an area of the harness yet (hence the underscore): a tool for issue 22's benchmark row
"claims per second for N schedules due within one minute with 1, 2 and 4 processes". It fills
an empty store with N records due in the last minute (bulk-written with the stores' own
encoders: declaring 100,000 schedules one transaction each would measure declaring), then
starts P processes that claim in batches of 100 until nothing is due, each claim moving its
record a day ahead. It reports claims per second (all processes, from the start barrier to
the last one done) and checks that the claims are exactly the N records, none twice.

Run: ``python -m benchmarks._store_claims URL [N] [P ...]``, e.g.
``python -m benchmarks._store_claims postgresql://localhost/bench 100000 1 2 4``.
"""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import sys
import time
from typing import Any

from executors._service.store import (
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    new_record,
    open_store,
    sqlite_path,
)

__all__ = ("fill", "main", "measure")

DAY = dt.timedelta(days=1)


def _definition(k: int) -> ScheduleDefinition:
    return ScheduleDefinition(f"s{k:06d}", {"type": "interval", "seconds": 86400.0},
                              "operator:add", [k, 1], {}, {"missed": "latest"})


def fill(url: str, n: int) -> None:
    """Replace the store's records by `n` records due within the last minute."""
    store = open_store(url)
    now = store.now()
    records = [new_record(_definition(k), now - dt.timedelta(seconds=60 * k / n))
               for k in range(n)]
    scheme = url.partition(":")[0]
    if scheme == "sqlite":
        import sqlite3

        from executors._service import sqlite_schedules as sq

        conn = sqlite3.connect(sqlite_path(url))
        with conn:
            conn.execute("DELETE FROM executors_schedules")
            conn.executemany(f"INSERT INTO executors_schedules ({sq._COLUMNS}) VALUES "
                             "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             [sq._record_params(r) for r in records])
        conn.close()
    elif scheme.startswith("postgres"):
        import psycopg

        from integrations.schedule_stores import postgres as pg

        with psycopg.connect(url, autocommit=False) as pg_conn, pg_conn.cursor() as cur:
            cur.execute("DELETE FROM executors_schedules")
            cur.executemany(f"INSERT INTO executors_schedules ({pg._COLUMNS}) VALUES "
                            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                            [pg._encode(r) for r in records])
    else:
        from integrations.schedule_stores import mongo

        collection = store._records  # type: ignore[attr-defined]
        collection.delete_many({})
        for i in range(0, n, 10_000):
            collection.insert_many([mongo._to_doc(r) for r in records[i:i + 10_000]])
    store.close()


def _a_day_later(record: ScheduleRecord, now: dt.datetime) -> Plan:
    assert record.next_fire is not None
    return Plan(record.next_fire, record.next_fire + DAY, 0)


def _drop(record: ScheduleRecord) -> str:
    return "drop"


def _claimer(url: str, owner: str, start: Any, out: Any) -> None:
    store = open_store(url)
    store.now()  # connected before the barrier
    start.wait()
    got: list[str] = []
    began = time.perf_counter()
    while True:
        claims = store.claim(owner, lease=600, limit=100, planner=_a_day_later,
                             on_crash=_drop)  # type: ignore[arg-type]
        if not claims:
            break
        got.extend(f"{c.name}@{c.fire_time.isoformat()}" for c in claims)
    out.put((owner, began, time.perf_counter(), got))
    store.close()


def measure(url: str, n: int, processes: int) -> dict[str, float]:
    """Fill, then claim everything with `processes` processes: claims/s and the check."""
    fill(url, n)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [ctx.Process(target=_claimer, args=(url, f"p{i}", start, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    time.sleep(1.0)  # let every process connect: the barrier starts them together
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    began = min(r[1] for r in results)
    ended = max(r[2] for r in results)
    claims = [c for r in results for c in r[3]]
    doubles = len(claims) - len(set(claims))
    missing = n - len(set(claims))
    return {"processes": processes, "schedules": n, "claims": len(claims),
            "seconds": ended - began, "claims_per_s": len(claims) / (ended - began),
            "double_runs": doubles, "missing": missing}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    url = args[0]
    n = int(args[1]) if len(args) > 1 else 100_000
    for p in [int(a) for a in args[2:]] or [1, 2, 4]:
        result = measure(url, n, p)
        print(json.dumps(result))
        if result["double_runs"] or result["missing"]:
            raise SystemExit(f"claims were not each record once: {result}")


if __name__ == "__main__":
    main()
