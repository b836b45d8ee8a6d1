"""Tree traversal in time-bounded transactions: ours against sequential peers, one run.

A 100k-node tree (quick: ~2k) is stored in SQLite (a file database) and, where the server
binaries are installed, in a throwaway PostgreSQL server. Measured, interleaved round by round:

- nodes visited per second, for our strict-mode `Traversal` (prefetching reads under a shared
  fair semaphore of 8 permits), a naive sequential pre-order in one long transaction (which a
  store with FoundationDB's 5 s limit would refuse), and sequential batches (the same pre-order,
  one read at a time, committing when the budget is 80% spent);
- the redo ratio: reads issued but not committed, or repeated to re-establish the cursor, per
  useful read.

PostgreSQL runs twice: on loopback, and with a simulated 1 ms round trip per statement (a
read, and each statement of begin, commit and of a reader joining the snapshot; the connection
held meanwhile), as from a client to a remote server. The transaction budget is
0.5 s here (FoundationDB's is 5 s), so that a 100k-node tree takes many transactions.
Run: ``python -m benchmarks.traversal [--quick]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from benchmarks._harness import OURS, Metric, quick_mode, run_area
from executors.aio import Kind, Semaphore, Store, Transaction, Traversal, Visit
from integrations.traversal_stores.sqlite import SQLiteStore

# Test tooling, shared with the store tests; imported here so a broken path fails loudly instead
# of passing for "PostgreSQL skipped" below.
from tests.helpers.postgres import temporary_server

BUDGET = 0.5
LIMIT = 8
PAGE = 64
RTT = 0.001  # a remote store's round trip (FoundationDB reads take about 1 ms)
LONG = "one long transaction"
BATCHES = "sequential batches"


def tree_rows(nodes: int) -> list[tuple[int, int, str, str]]:
    """(id, parent, name, kind) rows of a tree: 3 levels of directories, files in each."""
    fan = max(2, round((nodes / 90) ** (1 / 3)))
    rows: list[tuple[int, int, str, str]] = []
    next_id = 2
    level = [1]
    for _ in range(3):
        below = []
        for parent in level:
            for i in range(fan):
                rows.append((next_id, parent, f"dir{i:03}", "dir"))
                below.append(next_id)
                next_id += 1
        level = below
    dirs = [1, *(r[0] for r in rows)]
    per_dir = max(1, (nodes - len(dirs)) // len(dirs))
    for parent in dirs:
        for j in range(per_dir):
            rows.append((next_id, parent, f"file{j:04}", "file"))
            next_id += 1
    return rows


async def sequential(store: Store, *, batched: bool) -> tuple[int, int, int]:
    """The peers: pre-order, one read at a time; in batches of BUDGET, or one transaction.

    Returns (visits, reads, useful reads)."""
    stack: list[tuple[tuple[str, ...], str, str | None]] = [((), "file", None)]
    visits = reads = useful = 0
    while stack:
        txn = await store.begin(budget=BUDGET if batched else 3600.0)
        deadline = time.monotonic() + BUDGET * 0.8
        keys: dict[tuple[str, ...], object] = {}
        work = list(stack)
        n_reads = n_useful = n_visits = 0

        async def key_of(path: tuple[str, ...], txn: Transaction = txn,
                         keys: dict[tuple[str, ...], object] = keys) -> object:
            nonlocal n_reads
            if path not in keys:
                if not path:
                    n_reads += 1
                    keys[path] = (await txn.root()).key
                else:
                    parent = await key_of(path[:-1])
                    n_reads += 1
                    entry = await txn.lookup(parent, path[-1])
                    keys[path] = entry.key if entry else None
            return keys[path]

        while work and (not batched or time.monotonic() < deadline):
            path, phase, after = work.pop()
            key = await key_of(path)
            if key is None:
                continue
            n_reads += 1
            n_useful += 1
            page = await txn.list(key, Kind(phase), after, PAGE)
            if after is None and phase == "file":
                n_visits += 1  # the directory itself
                work.append((path, "dir", None))
            if len(page) == PAGE:
                work.append((path, phase, page[-1].name))
            if phase == "file":
                n_visits += len(page)
            else:
                for child in reversed(page):
                    keys[(*path, child.name)] = child.key
                    work.append(((*path, child.name), "file", None))
        await txn.commit()
        stack = work
        visits, reads, useful = visits + n_visits, reads + n_reads, useful + n_useful
    return visits, reads, useful


def ours(store: Store) -> Callable[[], Traversal]:
    def make() -> Traversal:
        def visit(_: Visit) -> None:
            pass
        return Traversal(store, visit, mode="strict", budget=BUDGET, page_size=PAGE, window=16,
                         limiter=Semaphore(LIMIT))
    return make


def contenders(label: str, open_store: Callable[[], contextlib.AbstractAsyncContextManager[Store]],
               nodes: int) -> list[Metric]:
    redo: dict[str, list[float]] = {OURS: [], BATCHES: []}

    def run_ours() -> float:
        async def main() -> float:
            async with open_store() as store:
                started = time.perf_counter()
                stats = await ours(store)().run()
                elapsed = time.perf_counter() - started
            assert stats.visits == nodes, (stats.visits, nodes)
            redo[OURS].append(stats.redo_ratio)
            return stats.visits / elapsed
        return asyncio.run(main())

    def run_peer(batched: bool) -> float:
        async def main() -> float:
            async with open_store() as store:
                started = time.perf_counter()
                visits, reads, useful = await sequential(store, batched=batched)
                elapsed = time.perf_counter() - started
            assert visits == nodes, (visits, nodes)
            if batched:
                redo[BATCHES].append((reads - useful) / useful)
            return visits / elapsed
        return asyncio.run(main())

    return [
        Metric(f"{label}: nodes visited per second ({nodes:,} nodes)", "nodes/s", "higher",
               {OURS: run_ours, LONG: lambda: run_peer(False), BATCHES: lambda: run_peer(True)},
               note=f"strict pre-order, budget {BUDGET}s, {LIMIT} permits, page {PAGE}"),
        Metric(f"{label}: redo ratio", "redone reads per useful read", "lower",
               {OURS: lambda: redo[OURS].pop(0), BATCHES: lambda: redo[BATCHES].pop(0)},
               note="reads repeated or discarded across transactions; 0 in one long "
               "transaction"),
    ]


@contextlib.asynccontextmanager
async def _sqlite(path: str) -> Iterator[Store]:  # type: ignore[misc]
    store = SQLiteStore(path, enforce_timeout=False)
    try:
        yield store
    finally:
        store.close()


def main() -> None:
    quick = quick_mode()
    nodes_wanted = 2_000 if quick else 100_000
    rows = tree_rows(nodes_wanted)
    nodes = len(rows) + 1
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="executors-bench-"))
        db = os.path.join(tmp, "tree.db")
        seed = SQLiteStore(db)
        seed._admin.execute("BEGIN")
        seed._admin.executemany("INSERT INTO nodes (id, parent, name, kind) VALUES (?,?,?,?)",
                                rows)
        seed._admin.execute("COMMIT")
        seed.close()
        metrics = contenders("SQLite", lambda: _sqlite(db), nodes)
        try:
            import asyncpg  # noqa: F401

            from integrations.traversal_stores.postgres import PostgresStore
            dsn = stack.enter_context(temporary_server())
        except (ImportError, FileNotFoundError) as exc:
            print(f"[traversal] PostgreSQL skipped: {exc}", file=sys.stderr)
        else:
            async def load() -> None:
                async with PostgresStore(dsn) as store:
                    await store.copy_nodes(rows)
            asyncio.run(load())

            def pg(rtt: float) -> Callable[[], contextlib.AbstractAsyncContextManager[Store]]:
                @contextlib.asynccontextmanager
                async def open_pg() -> Iterator[Store]:  # type: ignore[misc]
                    store = PostgresStore(dsn, readers=LIMIT - 1, enforce_timeout=False,
                                          simulated_rtt=rtt)
                    await store.open()
                    try:
                        yield store
                    finally:
                        await store.close()
                return open_pg

            metrics += contenders("PostgreSQL (loopback)", pg(0.0), nodes)
            metrics += contenders(f"PostgreSQL ({RTT * 1000:.0f} ms round trip)", pg(RTT), nodes)
        run_area("traversal", lambda _quick: metrics, default_rounds=3)


if __name__ == "__main__":
    main()
