"""A PostgreSQL store for `executors.aio.Traversal` (asyncpg), reading one snapshot in parallel."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar, final

from executors.aio import Entry, Kind, Lock
from executors.errors import ClosedError, TransactionExpired, TransactionRetry

if TYPE_CHECKING:
    import asyncpg

__all__ = ("PostgresStore", "PostgresStoreStatistics", "PostgresTransaction", "SCHEMA")

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    id     BIGSERIAL PRIMARY KEY,
    parent BIGINT REFERENCES nodes (id) ON DELETE CASCADE,
    name   TEXT COLLATE "C" NOT NULL,
    kind   TEXT NOT NULL CHECK (kind IN ('file', 'dir')),
    UNIQUE (parent, name)
);
CREATE INDEX IF NOT EXISTS nodes_by_kind ON nodes (parent, kind, name);
INSERT INTO nodes (id, parent, name, kind) VALUES (1, NULL, '', 'dir') ON CONFLICT DO NOTHING;
SELECT setval('nodes_id_seq', GREATEST((SELECT max(id) FROM nodes), 1));
"""
ROOT_ID = 1
_T = TypeVar("_T")
_SNAPSHOT_ID = re.compile(r"^[0-9A-Fa-f]+-[0-9A-Fa-f]+(-[0-9]+)?$")


def _retryable(exc: BaseException) -> BaseException:
    import asyncpg

    if isinstance(exc, asyncpg.exceptions.QueryCanceledError):
        return TransactionExpired(f"PostgreSQL: {exc} (the transaction's budget ran out)")
    if isinstance(exc, (asyncpg.exceptions.SerializationError,
                        asyncpg.exceptions.DeadlockDetectedError,
                        asyncpg.exceptions.PostgresConnectionError,
                        asyncpg.exceptions.InterfaceError, ConnectionError, OSError)):
        return TransactionRetry(f"PostgreSQL: {exc}")
    return exc


async def _uncancelled(query: Awaitable[_T]) -> _T:
    """Await `query`; if the caller is cancelled meanwhile, let the query finish first.

    Cancelling a running asyncpg query sends a cancel request over a new connection (a new
    backend process on the server) and leaves the connection unusable until that is done:
    far dearer than letting one read finish. The traversal engine cancels the reads it no
    longer wants at every commit, so the query runs to its end (it holds its connection, and
    the commit or rollback waits for it) and then the cancellation goes on. A second
    cancellation while waiting does cancel the query.
    """
    task = asyncio.ensure_future(query)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not task.done():
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError:
                task.cancel()
                raise
        if not task.cancelled():
            task.exception()  # retrieved: the caller is gone, nobody else will look
        raise


@dataclasses.dataclass(frozen=True, slots=True)
class PostgresStoreStatistics:
    """Counters of a `PostgresStore`."""

    #: Transactions begun (BEGIN and the snapshot export both succeeded).
    begun: int
    #: Transactions committed.
    committed: int
    #: Transactions rolled back, by `PostgresTransaction.rollback` or after a failed commit.
    rolled_back: int
    #: The most extra read-only connections one transaction may use beside its first
    #: (``PostgresStore(readers=...)``): a setting, not a count.
    reader_connections: int
    #: Connections to the server open now, in use or idle.
    connections: int
    #: Of `connections`, those waiting in the pool for the next transaction.
    idle_connections: int


@final
class PostgresTransaction:
    """A REPEATABLE READ transaction whose snapshot is shared by up to `readers` extra
    read-only connections (``pg_export_snapshot`` / ``SET TRANSACTION SNAPSHOT``, as parallel
    pg_dump does), so concurrent reads see one consistent state; writes (`execute`) and the
    commit go through the first connection."""

    def __init__(self, store: PostgresStore, leader: asyncpg.Connection, snapshot: str,
                 deadline: float) -> None:
        self._store = store
        self._snapshot = snapshot
        self._deadline = deadline
        self._leader = leader
        self._conns: list[tuple[asyncpg.Connection, Lock]] = [(leader, Lock())]
        self._growing = 0
        self._open = True

    def __repr__(self) -> str:
        state = "open" if self._open else "finished"
        return f"<PostgresTransaction {state} connections={len(self._conns)}>"

    async def _reader(self) -> tuple[asyncpg.Connection, Lock]:
        for pair in self._conns:
            if not pair[1].locked():
                return pair
        if len(self._conns) + self._growing <= self._store.readers:
            self._growing += 1
            try:
                conn = await self._store._take()
                try:
                    # One round trip: a simple query may hold several statements.
                    await self._store._round_trip()
                    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
                                       f"SET TRANSACTION SNAPSHOT '{self._snapshot}'")
                except BaseException:
                    await self._store._give(conn, broken=True)
                    raise
            finally:
                self._growing -= 1
            if not self._open:
                await self._store._round_trip()
                await conn.execute("ROLLBACK")
                await self._store._give(conn)
                raise TransactionRetry("the transaction is finished; begin a new one")
            pair = (conn, Lock())
            self._conns.append(pair)
            return pair
        return min(self._conns, key=lambda p: p[1].statistics().waiting)

    async def _fetch(self, sql: str, *args: object,
                     leader: bool = False) -> list[asyncpg.Record]:
        if not self._open:
            raise TransactionRetry("the transaction is finished; begin a new one")
        if self._store.enforce_timeout and time.monotonic() > self._deadline:
            raise TransactionExpired("the transaction outlived its time budget")
        try:
            conn, lock = self._conns[0] if leader else await self._reader()
            async with lock:
                await self._store._round_trip()  # the connection is busy meanwhile
                return list(await _uncancelled(conn.fetch(sql, *args)))
        except Exception as exc:
            mapped = _retryable(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def execute(self, sql: str, *args: object) -> list[asyncpg.Record]:
        """Run one statement on the writing connection (it commits with the transaction)."""
        return await self._fetch(sql, *args, leader=True)

    async def root(self) -> Entry:
        return Entry("", ROOT_ID, Kind.DIR)

    async def lookup(self, parent: object, name: str) -> Entry | None:
        rows = await self._fetch("SELECT id, kind FROM nodes WHERE parent = $1 AND name = $2",
                                 parent, name)
        return Entry(name, rows[0][0], Kind(rows[0][1])) if rows else None

    async def list(self, parent: object, kind: Kind, after: str | None,
                   limit: int) -> Sequence[Entry]:
        rows = await self._fetch(
            "SELECT name, id FROM nodes WHERE parent = $1 AND kind = $2 AND name > $3 "
            "ORDER BY name LIMIT $4", parent, kind.value, after or "", limit)
        return [Entry(r[0], r[1], kind) for r in rows]

    async def commit(self) -> None:
        if not self._open:
            raise TransactionRetry("the transaction is finished; begin a new one")

        async def end(conn: asyncpg.Connection, lock: Lock, sql: str) -> None:
            async with lock:
                await self._store._round_trip()
                await conn.execute(sql)

        try:
            # The readers are read-only (nothing to commit, only the imported snapshot to
            # drop): they end in parallel with the leader's commit, in one round trip rather
            # than one per connection.
            await asyncio.gather(end(*self._conns[0], "COMMIT"),
                                 *(end(conn, lock, "ROLLBACK") for conn, lock in self._conns[1:]))
        except Exception as exc:
            await self.rollback()
            mapped = _retryable(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        self._open = False
        for conn, _ in self._conns:
            await self._store._give(conn)
        self._store._counts["committed"] += 1

    async def rollback(self) -> None:
        if not self._open:
            return
        self._open = False

        async def end(conn: asyncpg.Connection, lock: Lock) -> None:
            try:
                # A read cut short holds the connection's lock until it has unwound.
                async with lock:
                    await self._store._round_trip()
                    await conn.execute("ROLLBACK")
                await self._store._give(conn)
            except Exception:
                await self._store._give(conn, broken=True)

        await asyncio.gather(*(end(conn, lock) for conn, lock in self._conns))
        self._store._counts["rolled_back"] += 1


@final
class PostgresStore:
    """A hierarchy in one PostgreSQL table (`SCHEMA`), as an `executors.aio.Store`.

    Each transaction is REPEATABLE READ on one connection, plus up to `readers` connections
    that import its snapshot, so up to ``readers + 1`` reads run in parallel on one consistent
    state. The transaction's budget becomes its ``statement_timeout``, and a read after the
    budget raises `TransactionExpired` (as FoundationDB does after 5 s). Names sort bytewise
    (``COLLATE "C"``), like SQLite's and FoundationDB's keys.

    `simulated_rtt` adds that many seconds to every round trip (a read, and each statement of
    `begin`, a reader joining the snapshot, `commit` and `rollback`), with its connection held,
    to model a remote server on loopback (for benchmarks).

    Use as ``async with PostgresStore(dsn) as store:``; the async helpers `add_tree`,
    `remove` and `move` change the tree outside any traversal.

    Raises:
        ClosedError: `begin` on a closed store.
    """

    def __init__(self, dsn: str, *, readers: int = 7, enforce_timeout: bool = True,
                 simulated_rtt: float = 0.0) -> None:
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str, got {dsn!r}")
        if not isinstance(readers, int) or readers < 0:
            raise ValueError(f"readers must be an int >= 0, got {readers!r}")
        self._dsn = dsn
        self.readers = readers
        self.enforce_timeout = enforce_timeout
        if not isinstance(simulated_rtt, (int, float)) or not 0 <= simulated_rtt < 1:
            raise ValueError(f"simulated_rtt must be in [0, 1) seconds, got {simulated_rtt!r}")
        # For benchmarks: every round trip keeps its connection busy this much longer, as one
        # to a remote server would (loopback has almost none).
        self.simulated_rtt = float(simulated_rtt)
        self._idle: list[asyncpg.Connection] = []
        self._all = 0
        self._open = False
        self._counts = {"begun": 0, "committed": 0, "rolled_back": 0}

    def __repr__(self) -> str:
        return (f"<PostgresStore {'open' if self._open else 'closed'} readers={self.readers} "
                f"connections={self._all} begun={self._counts['begun']}>")

    def statistics(self) -> PostgresStoreStatistics:
        return PostgresStoreStatistics(reader_connections=self.readers, connections=self._all,
                                       idle_connections=len(self._idle), **self._counts)

    async def open(self) -> None:
        """Connect and create the schema if it is missing."""
        conn = await self._take(opening=True)
        await conn.execute(SCHEMA)
        await self._give(conn)
        self._open = True

    async def close(self) -> None:
        self._open = False
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()
        self._all -= len(idle)

    async def __aenter__(self) -> PostgresStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _take(self, opening: bool = False) -> asyncpg.Connection:
        import asyncpg

        if not self._open and not opening:
            raise ClosedError("this PostgresStore is closed; use `async with` or open()")
        if self._idle:
            return self._idle.pop()
        try:
            conn = await asyncpg.connect(self._dsn)
        except (OSError, asyncpg.exceptions.PostgresConnectionError) as exc:
            raise TransactionRetry(f"PostgreSQL: cannot connect: {exc}") from exc
        self._all += 1
        return conn

    async def _round_trip(self) -> None:
        # The simulated part of a round trip (see `simulated_rtt`); nothing on a real server.
        if self.simulated_rtt:
            await asyncio.sleep(self.simulated_rtt)

    async def _give(self, conn: asyncpg.Connection, broken: bool = False) -> None:
        if broken or not self._open or conn.is_closed():
            self._all -= 1
            conn.terminate() if broken else await conn.close()
        else:
            self._idle.append(conn)

    async def begin(self, *, budget: float) -> PostgresTransaction:
        """Begin a transaction with a time budget of `budget` seconds."""
        conn = await self._take()
        try:
            begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
            if self.enforce_timeout:
                begin += f"; SET LOCAL statement_timeout = {max(1, int(budget * 1000))}"
            await self._round_trip()
            await conn.execute(begin)  # one round trip: a simple query may hold statements
            await self._round_trip()
            snapshot = await conn.fetchval("SELECT pg_export_snapshot()")
        except BaseException as exc:
            await self._give(conn, broken=True)  # cancelled too: its state is unknown
            if not isinstance(exc, Exception):
                raise
            mapped = _retryable(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        if not isinstance(snapshot, str) or not _SNAPSHOT_ID.match(snapshot):
            await self._give(conn, broken=True)
            raise TransactionRetry(f"PostgreSQL returned an unexpected snapshot id {snapshot!r}")
        self._counts["begun"] += 1
        return PostgresTransaction(self, conn, snapshot, time.monotonic() + budget)

    # -- set-up helpers -------------------------------------------------------------------

    async def add_tree(self, paths: Iterable[str]) -> None:
        """Create every path ("a/b/" a directory, "a/b" a file), with missing parents."""
        conn = await self._take()
        try:
            async with conn.transaction():
                known: dict[tuple[str, ...], int] = {(): ROOT_ID}
                for path in paths:
                    parts = tuple(p for p in path.strip("/").split("/") if p)
                    for i in range(1, len(parts) + 1):
                        sub = parts[:i]
                        if sub in known:
                            continue
                        kind = "dir" if i < len(parts) or path.endswith("/") else "file"
                        key = await conn.fetchval(
                            "INSERT INTO nodes (parent, name, kind) VALUES ($1, $2, $3) "
                            "ON CONFLICT (parent, name) DO UPDATE SET name = EXCLUDED.name "
                            "RETURNING id", known[sub[:-1]], sub[-1], kind)
                        known[sub] = int(key)
        finally:
            await self._give(conn)

    async def copy_nodes(self, rows: Iterable[tuple[int, int, str, str]]) -> None:
        """Bulk-load (id, parent, name, kind) rows with COPY (ids above 1; for benchmarks)."""
        conn = await self._take()
        try:
            await conn.copy_records_to_table("nodes", records=list(rows),
                                             columns=["id", "parent", "name", "kind"])
            await conn.execute("SELECT setval('nodes_id_seq', (SELECT max(id) FROM nodes))")
        finally:
            await self._give(conn)

    async def _resolve(self, conn: asyncpg.Connection, path: str) -> int | None:
        key: int | None = ROOT_ID
        for name in (p for p in path.strip("/").split("/") if p):
            key = await conn.fetchval("SELECT id FROM nodes WHERE parent = $1 AND name = $2",
                                      key, name)
            if key is None:
                return None
        return key

    async def remove(self, path: str) -> bool:
        """Remove the node at `path` and everything under it; False if there was none."""
        conn = await self._take()
        try:
            key = await self._resolve(conn, path)
            if key is None or key == ROOT_ID:
                return False
            await conn.execute("DELETE FROM nodes WHERE id = $1", key)
            return True
        finally:
            await self._give(conn)

    async def move(self, src: str, dst: str) -> None:
        """Move (rename) the node at `src` to `dst`; `dst`'s parent must exist."""
        conn = await self._take()
        try:
            key = await self._resolve(conn, src)
            parent_path, _, name = dst.strip("/").rpartition("/")
            parent = await self._resolve(conn, parent_path)
            if key is None or parent is None or not name:
                raise ValueError(f"cannot move {src!r} to {dst!r}: no such source or parent")
            await conn.execute("UPDATE nodes SET parent = $1, name = $2 WHERE id = $3",
                               parent, name, key)
        finally:
            await self._give(conn)

    async def count(self) -> int:
        conn = await self._take()
        try:
            return int(await conn.fetchval("SELECT count(*) FROM nodes"))
        finally:
            await self._give(conn)

