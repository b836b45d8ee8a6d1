"""Tests of the SQLite and PostgreSQL stores under executors.aio.Traversal (real databases)."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from executors.aio import Entry, Kind, Semaphore, Store, Transaction, Traversal, Visit, traverse
from executors.errors import ClosedError, TransactionExpired, TransactionRetry
from integrations.traversal_stores.sqlite import SQLiteStore

TREE = ["etc/", "etc/hosts", "etc/passwd", "usr/", "usr/bin/", "usr/bin/env", "usr/lib/",
        "README", "a/", "a/b/", "a/b/c", "a/z"]
STRICT = ["", "README", "a", "a/z", "a/b", "a/b/c", "etc", "etc/hosts", "etc/passwd", "usr",
          "usr/bin", "usr/bin/env", "usr/lib"]


def collect(into: list[str]) -> object:
    def visit(v: Visit) -> None:
        into.append("/".join(v.path))
    return visit


# -- SQLite ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["memory", "file"])
@pytest.mark.parametrize("mode", ["strict", "relaxed", "any"])
def test_sqlite_traversal_per_mode(tmp_path: Path, where: str, mode: str) -> None:
    """The SQLite store serves every mode; strict gives the pre-order, others the same set."""
    store = SQLiteStore(":memory:" if where == "memory" else tmp_path / "t.db")
    store.add_tree(TREE)
    seen: list[str] = []
    stats = asyncio.run(traverse(store, collect(seen), mode=mode, page_size=2,  # type: ignore[arg-type]
                                 window=4))
    assert stats.done
    assert seen == STRICT if mode == "strict" else sorted(seen) == sorted(STRICT)
    store.close()


def test_sqlite_snapshot_and_batches_under_concurrent_writes(tmp_path: Path) -> None:
    """A file database: each transaction reads one snapshot while another connection moves
    and deletes nodes between transactions; visits are path-consistent, none is repeated."""
    store = SQLiteStore(tmp_path / "t.db")
    store.add_tree([f"d{i:02}/f{j}" for i in range(20) for j in range(5)])
    writer = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    seen: list[str] = []
    moved = [0]

    def on_commit(_: object) -> None:
        # Between transactions: rename a later directory, delete another.
        i = 19 - moved[0]
        if i > 10:
            store.move(f"d{i:02}", f"x{i:02}")
            store.remove(f"d{i - 5:02}/f0")
            moved[0] += 1

    async def visit(v: Visit) -> None:
        txn = v.transaction
        if v.node is not None:
            # Path consistency: in this very transaction the path leads to this node.
            entry = await txn.root()
            for name in v.path:
                found = await txn.lookup(entry.key, name)
                assert found is not None
                entry = found
            assert entry.key == v.node.key
        seen.append("/".join(v.path))

    t = Traversal(store, visit, budget=5.0, max_batch=4, page_size=3, window=4,
                  on_commit=on_commit)
    stats = asyncio.run(t.run())
    writer.close()
    assert len(seen) == len(set(seen))
    assert stats.commits > 1
    assert all(p in seen for p in ("d00", "d00/f0", "d05/f4"))
    assert store.statistics().committed == stats.commits
    store.close()


def test_sqlite_expires_a_transaction_after_its_budget() -> None:
    """With enforce_timeout, a read after the budget raises TransactionExpired."""
    store = SQLiteStore(":memory:")

    async def main() -> None:
        txn = await store.begin(budget=0.0)
        await asyncio.sleep(0.01)
        with pytest.raises(TransactionExpired):
            await txn.lookup(1, "x")
        await txn.rollback()

    asyncio.run(main())
    assert store.statistics().expired == 1
    store.close()


def test_sqlite_visitor_writes_commit_with_the_cursor(tmp_path: Path) -> None:
    """A visitor writing through the transaction commits with the batch: one row per node."""
    store = SQLiteStore(tmp_path / "t.db")
    store.add_tree(TREE)
    store._admin.execute("CREATE TABLE seen (path TEXT PRIMARY KEY)")

    async def visit(v: Visit) -> None:
        await v.transaction.execute("INSERT INTO seen VALUES (?)",  # type: ignore[attr-defined]
                                    ("/".join(v.path),))

    asyncio.run(traverse(store, visit, budget=0.02, page_size=1))
    rows = store._admin.execute("SELECT path FROM seen ORDER BY path").fetchall()
    assert [r[0] for r in rows] == sorted(STRICT)
    store.close()


class FlakyStore:
    """Wraps a real store: each read or commit fails first with probability `rate` (the
    commit before it reaches the database, as a conflict would), raising TransactionRetry."""

    def __init__(self, inner: Store, rate: float, seed: int) -> None:
        self.inner = inner
        self.rate = rate
        self.rng = random.Random(seed)
        self.injected = 0

    async def begin(self, *, budget: float) -> FlakyTransaction:
        return FlakyTransaction(self, await self.inner.begin(budget=budget))

    def maybe_fail(self) -> None:
        if self.rng.random() < self.rate:
            self.injected += 1
            raise TransactionRetry("injected")


class FlakyTransaction:
    def __init__(self, store: FlakyStore, inner: Transaction) -> None:
        self.store = store
        self.inner = inner

    async def root(self) -> Entry:
        self.store.maybe_fail()
        return await self.inner.root()

    async def lookup(self, parent: object, name: str) -> Entry | None:
        self.store.maybe_fail()
        return await self.inner.lookup(parent, name)

    async def list(self, parent: object, kind: Kind, after: str | None,
                   limit: int) -> Sequence[Entry]:
        self.store.maybe_fail()
        return await self.inner.list(parent, kind, after, limit)

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> object:
        return await self.inner.execute(sql, params)  # type: ignore[attr-defined]

    async def commit(self) -> None:
        self.store.maybe_fail()
        await self.inner.commit()

    async def rollback(self) -> None:
        await self.inner.rollback()


@pytest.mark.parametrize("mode", ["strict", "relaxed", "any"])
def test_sqlite_failed_transactions_roll_back_and_retry_from_the_cursor(
        tmp_path: Path, mode: str) -> None:
    """Failures injected into reads and commits of a real SQLite store: every failed batch is
    rolled back (the visitor's writes with it) and redone from the cursor, so each node's row,
    under a primary key, is written exactly once, and every node is visited."""
    store = SQLiteStore(tmp_path / "t.db")
    paths = [f"d{i}/e{j}/f{k}" for i in range(4) for j in range(3) for k in range(3)]
    store.add_tree(paths)
    store._admin.execute("CREATE TABLE seen (path TEXT PRIMARY KEY)")
    flaky = FlakyStore(store, rate=0.05, seed=11)

    async def visit(v: Visit) -> None:
        await v.transaction.execute("INSERT INTO seen VALUES (?)",  # type: ignore[attr-defined]
                                    ("/".join(v.path),))

    t = Traversal(flaky, visit, mode=mode, budget=5.0, max_batch=10,  # type: ignore[arg-type]
                  page_size=2, window=4, retry_delay=0, max_retries=100)
    stats = asyncio.run(t.run())
    rows = [r[0] for r in store._admin.execute("SELECT path FROM seen ORDER BY path")]
    # Several reads may fail in one transaction, and a failed read ahead of what a batch
    # commits is not needed by it: at most one retry per injected failure.
    assert stats.done and 0 < stats.retries <= flaky.injected
    assert rows == sorted(rows) and len(rows) == store.count() == stats.visits
    assert store.statistics().committed == stats.commits
    store.close()


def test_sqlite_helpers_and_repr(tmp_path: Path) -> None:
    """The set-up helpers create, move and remove; repr and statistics show the state."""
    store = SQLiteStore(tmp_path / "t.db")
    assert isinstance(store, Store)
    store.mkdir("a/b")
    store.create("a/b/c")
    store.move("a/b", "a/d")
    assert store.count() == 4
    assert store.remove("a") and not store.remove("a")
    assert store.count() == 1
    with pytest.raises(ValueError, match="path"):
        store.create("a/../b")
    assert "open" in repr(store)
    store.close()
    assert "closed" in repr(store)
    with pytest.raises(ClosedError):
        asyncio.run(store.begin(budget=1))


# -- PostgreSQL ---------------------------------------------------------------------------------


async def _fresh(dsn: str, paths: list[str], **kwargs: object) -> object:
    from integrations.traversal_stores.postgres import PostgresStore

    store = PostgresStore(dsn, **kwargs)  # type: ignore[arg-type]
    await store.open()
    conn = await store._take()
    await conn.execute("TRUNCATE nodes CASCADE")
    await store._give(conn)
    await store.open()  # the root row again
    await store.add_tree(paths)
    return store


@pytest.mark.parametrize("mode", ["strict", "relaxed", "any"])
def test_postgres_traversal_per_mode(pg_dsn: str, mode: str) -> None:
    """The PostgreSQL store serves every mode with parallel snapshot readers."""

    async def main() -> None:
        store = await _fresh(pg_dsn, TREE, readers=3)
        seen: list[str] = []
        stats = await traverse(store, collect(seen), mode=mode, page_size=2,  # type: ignore[arg-type]
                               window=6, limiter=Semaphore(8))
        assert stats.done
        assert seen == STRICT if mode == "strict" else sorted(seen) == sorted(STRICT)
        await store.close()  # type: ignore[attr-defined]

    asyncio.run(main())


def test_postgres_readers_share_one_snapshot(pg_dsn: str) -> None:
    """Reads on the extra connections see the transaction's snapshot, not later commits."""

    async def main() -> None:
        from integrations.traversal_stores.postgres import ROOT_ID

        store = await _fresh(pg_dsn, [f"f{i}" for i in range(10)], readers=4)
        txn = await store.begin(budget=5)  # type: ignore[attr-defined]
        before = await txn.list(ROOT_ID, Kind.FILE, None, 100)
        await store.add_tree(["f99"])  # type: ignore[attr-defined]
        pages = await asyncio.gather(*(txn.list(ROOT_ID, Kind.FILE, None, 100)
                                       for _ in range(8)))
        assert all(p == before for p in pages) and len(before) == 10
        assert len(txn._conns) > 1
        await txn.commit()
        assert await store.count() == 12  # type: ignore[attr-defined]
        await store.close()  # type: ignore[attr-defined]

    asyncio.run(main())


def test_postgres_batches_with_concurrent_moves(pg_dsn: str) -> None:
    """Small budgets make many transactions; moves between them never cause a repeat."""

    async def main() -> None:
        store = await _fresh(pg_dsn, [f"d{i:02}/f{j}" for i in range(15) for j in range(4)],
                             readers=2)
        seen: list[str] = []
        moved: list[int] = []

        async def visit(v: Visit) -> None:
            seen.append("/".join(v.path))
            if len(seen) % 10 == 0 and len(moved) < 4:
                i = 14 - len(moved)
                moved.append(i)
                # Another client moves a later directory (committed independently).
                await store.move(f"d{i:02}", f"e{i:02}")  # type: ignore[attr-defined]

        stats = await Traversal(store, visit, budget=5.0, max_batch=4, page_size=3,  # type: ignore[arg-type]
                                window=4).run()
        assert stats.commits > 1 and len(seen) == len(set(seen))
        assert all(f"e{i:02}" in seen or f"d{i:02}" in seen for i in moved)
        await store.close()  # type: ignore[attr-defined]

    asyncio.run(main())


def test_postgres_cancelled_read_lets_its_query_finish(pg_dsn: str) -> None:
    """A read cancelled while its query runs waits for the query to end (no cancel request,
    which costs a new server connection), then is cancelled; the transaction goes on."""

    async def main() -> None:
        store = await _fresh(pg_dsn, ["f"], readers=0)
        watch = await store._take()  # type: ignore[attr-defined]
        txn = await store.begin(budget=5)  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        started = loop.time()
        read = asyncio.ensure_future(txn.execute("SELECT pg_sleep(0.3)"))
        deadline = started + 5
        while not await watch.fetchval("SELECT count(*) FROM pg_stat_activity WHERE "
                                       "state = 'active' AND query LIKE 'SELECT pg_sleep%'"):
            assert loop.time() < deadline, "the query never started"
            await asyncio.sleep(0.005)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        assert loop.time() - started >= 0.25  # the query ran to its end
        assert [tuple(r) for r in await txn.execute("SELECT 1")] == [(1,)]
        await txn.commit()
        await store._give(watch)  # type: ignore[attr-defined]
        await store.close()  # type: ignore[attr-defined]

    asyncio.run(main())


def test_postgres_simulated_round_trip_applies_to_every_statement(pg_dsn: str) -> None:
    """`simulated_rtt` delays begin (two round trips), a reader joining the snapshot (one
    more), every read, and the commit (the connections end in parallel)."""

    async def main() -> None:
        from integrations.traversal_stores.postgres import ROOT_ID

        rtt = 0.05
        store = await _fresh(pg_dsn, ["f"], readers=2, simulated_rtt=rtt)
        loop = asyncio.get_running_loop()
        t = loop.time()
        txn = await store.begin(budget=5)  # type: ignore[attr-defined]
        assert loop.time() - t >= 2 * rtt
        t = loop.time()
        pages = await asyncio.gather(*(txn.list(ROOT_ID, Kind.FILE, None, 10) for _ in range(3)))
        assert loop.time() - t >= 2 * rtt and len(txn._conns) == 3
        assert all([e.name for e in p] == ["f"] for p in pages)
        t = loop.time()
        await txn.commit()
        assert loop.time() - t >= rtt
        await store.close()  # type: ignore[attr-defined]

    asyncio.run(main())


def test_cli_traverse_prints_paths_and_a_summary(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`executors traverse sqlite:///db --print` prints every path in strict order, a progress
    bar and a summary on stderr; a missing database is a usage error (exit 2)."""
    from executors._cli import main

    store = SQLiteStore(tmp_path / "t.db")
    store.add_tree(TREE)
    store.close()
    assert main(["traverse", f"sqlite:///{tmp_path / 't.db'}", "--print", "--budget", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["/" + p for p in STRICT]
    assert "13/13 nodes" in err and "executors traverse: 13 nodes" in err
    for bad in (f"sqlite:///{tmp_path / 'missing.db'}", "mysql://x"):  # usage errors
        with pytest.raises(SystemExit) as exit_info:
            main(["traverse", bad])
        assert exit_info.value.code == 2


def test_cli_traverse_a_postgres_store(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`executors traverse postgresql://... --mode relaxed --print` visits every node of the
    server's tree, with a progress bar and a summary on stderr."""
    from executors._cli import main

    async def fill() -> None:
        store = await _fresh(pg_dsn, TREE)
        await store.close()  # type: ignore[attr-defined]

    asyncio.run(fill())
    assert main(["traverse", pg_dsn, "--mode", "relaxed", "--print", "--limit", "3"]) == 0
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == sorted("/" + p for p in STRICT)
    assert "13/13 nodes" in err and "executors traverse: 13 nodes" in err
