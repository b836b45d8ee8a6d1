"""A SQLite store for `executors.aio.Traversal`: its blocking sqlite3 calls run in threads."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar, final

from executors.aio import Entry, Kind, Lock
from executors.errors import ClosedError, TransactionExpired, TransactionRetry

# The seam to the thread bridge: every blocking sqlite3 call goes through it. A cancelled caller
# waits for its thread (the bridge's default), so the next statement on a connection never
# overlaps a cut-short one.
from integrations.bridge import run_sync as _run_sync

__all__ = ("SQLiteStore", "SQLiteStoreStatistics", "SQLiteTransaction", "SCHEMA")

_T = TypeVar("_T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    id     INTEGER PRIMARY KEY,
    parent INTEGER REFERENCES nodes (id),
    name   TEXT NOT NULL,
    kind   TEXT NOT NULL CHECK (kind IN ('file', 'dir')),
    UNIQUE (parent, name)
);
CREATE INDEX IF NOT EXISTS nodes_by_kind ON nodes (parent, kind, name);
INSERT OR IGNORE INTO nodes (id, parent, name, kind) VALUES (1, NULL, '', 'dir');
"""
ROOT_ID = 1


def _split(path: str) -> tuple[str, ...]:
    parts = tuple(p for p in path.strip("/").split("/") if p)
    if any(p in (".", "..") for p in parts):
        raise ValueError(f"path must not contain '.' or '..', got {path!r}")
    return parts


@dataclasses.dataclass(frozen=True, slots=True)
class SQLiteStoreStatistics:
    """Counters of a `SQLiteStore`: transactions begun, committed, rolled back, expired."""

    #: Transactions begun (their BEGIN succeeded).
    begun: int
    #: Transactions committed.
    committed: int
    #: Transactions rolled back, by `SQLiteTransaction.rollback` or after a failed commit.
    rolled_back: int
    #: Statements refused because their transaction had outlived its time budget (with
    #: ``enforce_timeout``; each refused statement counts one).
    expired: int
    #: Connections the store has opened over its life (its schema connection included;
    #: an in-memory database shares one).
    connections: int
    #: Connections waiting for the next transaction.
    idle_connections: int


@final
class SQLiteTransaction:
    """One transaction on one connection; reads are serialized on it (sqlite3 allows one
    statement at a time per connection), in the order they were issued (a fair lock)."""

    def __init__(self, store: SQLiteStore, conn: sqlite3.Connection, deadline: float) -> None:
        self._store = store
        self._conn = conn
        self._deadline = deadline
        self._lock = Lock()
        self._open = True

    def __repr__(self) -> str:
        state = "open" if self._open else "finished"
        return f"<SQLiteTransaction {state} left={self._deadline - time.monotonic():.3f}s>"

    async def _call(self, fn: Callable[..., _T], *args: object) -> _T:
        async with self._lock:
            if not self._open:
                raise TransactionRetry("the transaction is finished; begin a new one")
            if self._store.enforce_timeout and time.monotonic() > self._deadline:
                self._store._count("expired")
                raise TransactionExpired("the transaction outlived its time budget")
            try:
                return await _run_sync(fn, *args)
            except sqlite3.OperationalError as exc:
                # "database is locked" / "busy": another writer holds the database.
                raise TransactionRetry(f"SQLite: {exc}") from exc

    def _fetch(self, sql: str, params: Sequence[object]) -> list[tuple[object, ...]]:
        return self._conn.execute(sql, params).fetchall()

    async def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """Run one SQL statement in this transaction (a visitor's writes commit with it)."""
        return await self._call(self._fetch, sql, params)

    async def root(self) -> Entry:
        return Entry("", ROOT_ID, Kind.DIR)  # the root row is created with the schema

    async def lookup(self, parent: object, name: str) -> Entry | None:
        rows = await self._call(self._fetch, "SELECT id, kind FROM nodes "
                                "WHERE parent = ? AND name = ?", (parent, name))
        return Entry(name, rows[0][0], Kind(rows[0][1])) if rows else None

    async def list(self, parent: object, kind: Kind, after: str | None,
                   limit: int) -> Sequence[Entry]:
        rows = await self._call(
            self._fetch, "SELECT name, id FROM nodes WHERE parent = ? AND kind = ? AND name > ? "
            "ORDER BY name LIMIT ?", (parent, kind.value, after if after is not None else "",
                                      limit))
        return [Entry(str(name), key, kind) for name, key in rows]

    async def commit(self) -> None:
        try:
            await self._call(self._conn.execute, "COMMIT")
        except BaseException:
            await self.rollback()
            raise
        self._finish()
        self._store._count("committed")

    async def rollback(self) -> None:
        if not self._open:
            return
        try:
            async with self._lock:
                if self._conn.in_transaction:
                    await _run_sync(self._conn.execute, "ROLLBACK")
        except sqlite3.Error:
            pass  # nothing is committed; the connection is idle again
        finally:
            self._finish()
            self._store._count("rolled_back")

    def _finish(self) -> None:
        if self._open:
            self._open = False
            self._store._release(self._conn)


@final
class SQLiteStore:
    """A hierarchy in one SQLite table (`SCHEMA`), as a `executors.aio.Store`.

    Each transaction takes a connection of its own (a file database runs in WAL mode, so a
    transaction reads one snapshot while writers commit; ``":memory:"`` has one connection,
    so its transactions take turns). Blocking sqlite3 calls run in worker threads, never on
    the event loop. With `enforce_timeout` (the default) a transaction refuses to read after
    its time budget with `TransactionExpired`, as FoundationDB does after 5 s.

    The synchronous helpers (`add_tree`, `mkdir`, `create`, `remove`, `move`) build and change
    the tree outside any traversal, for set-up and tests.

    Raises:
        ClosedError: `begin` after `close`.

    Example:
        >>> store = SQLiteStore(":memory:")
        >>> store.add_tree(["etc/", "etc/hosts", "README"])
        >>> store.count()
        4
        >>> store.close()
    """

    def __init__(self, path: str | os.PathLike[str], *, enforce_timeout: bool = True) -> None:
        path = os.fspath(path)
        if not isinstance(path, str):
            raise TypeError(f"path must be a str or os.PathLike[str], got {path!r}")
        self._path = path
        self._memory = path == ":memory:" or path.startswith("file::memory:")
        self.enforce_timeout = enforce_timeout
        self._mutex = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
        self._closed = False
        self._counts = {"begun": 0, "committed": 0, "rolled_back": 0, "expired": 0}
        # One transaction at a time on an in-memory database (it has one connection).
        self._turn: Lock | None = Lock() if self._memory else None
        self._admin = self._connect()
        self._admin.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        if self._memory and self._all:
            return self._all[0]
        # Autocommit mode: transactions are explicit BEGIN/COMMIT, so that a transaction's
        # SELECTs share one snapshot (the legacy mode opens none before a SELECT).
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False,
                               timeout=5.0)
        if not self._memory:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
        self._all.append(conn)
        return conn

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<SQLiteStore {self._path!r} {state} begun={self._counts['begun']} "
                f"committed={self._counts['committed']}>")

    def statistics(self) -> SQLiteStoreStatistics:
        with self._mutex:
            return SQLiteStoreStatistics(connections=len(self._all),
                                         idle_connections=len(self._idle), **self._counts)

    def _count(self, what: str) -> None:
        with self._mutex:
            self._counts[what] += 1

    async def begin(self, *, budget: float) -> SQLiteTransaction:
        """Begin a transaction with a time budget of `budget` seconds."""
        if self._closed:
            raise ClosedError("this SQLiteStore is closed")
        conn: sqlite3.Connection | None
        if self._turn is not None:
            await self._turn.acquire()
            conn = self._admin
        else:
            with self._mutex:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = await _run_sync(self._connect_locked)
        try:
            await _run_sync(conn.execute, "BEGIN")
        except sqlite3.Error as exc:
            self._release(conn)
            raise TransactionRetry(f"SQLite: {exc}") from exc
        self._count("begun")
        return SQLiteTransaction(self, conn, time.monotonic() + budget)

    def _connect_locked(self) -> sqlite3.Connection:
        with self._mutex:
            return self._connect()

    def _release(self, conn: sqlite3.Connection) -> None:
        if self._turn is not None:
            self._turn.release()
            return
        with self._mutex:
            if self._closed:
                conn.close()
            else:
                self._idle.append(conn)

    def close(self) -> None:
        """Close every idle connection (and the rest as their transactions finish)."""
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
        self._admin.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- synchronous set-up helpers -------------------------------------------------------

    def _resolve(self, parts: tuple[str, ...], *, create: bool = False) -> int | None:
        key = ROOT_ID
        for i, name in enumerate(parts):
            row = self._admin.execute("SELECT id, kind FROM nodes WHERE parent = ? AND name = ?",
                                      (key, name)).fetchone()
            if row is None:
                if not create:
                    return None
                key = int(self._admin.execute(
                    "INSERT INTO nodes (parent, name, kind) VALUES (?, ?, 'dir') RETURNING id",
                    (key, name)).fetchone()[0])
            elif row[1] != "dir" and i < len(parts) - 1:
                raise ValueError(f"{'/'.join(parts)!r}: {name!r} is a file, not a directory")
            else:
                key = int(row[0])
        return key

    def _write(self, fn: Callable[[], _T]) -> _T:
        self._admin.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
        except BaseException:
            self._admin.execute("ROLLBACK")
            raise
        self._admin.execute("COMMIT")
        return result

    def add_tree(self, paths: Iterable[str]) -> None:
        """Create every path ("a/b/" a directory, "a/b" a file), with missing parents."""
        self._write(lambda: self._add(paths))

    def _add(self, paths: Iterable[str]) -> None:
        for path in paths:
            parts = _split(path)
            if not parts:
                continue
            parent = self._resolve(parts[:-1], create=True)
            kind = "dir" if path.endswith("/") else "file"
            self._admin.execute("INSERT OR IGNORE INTO nodes (parent, name, kind) "
                                "VALUES (?, ?, ?)", (parent, parts[-1], kind))

    def mkdir(self, path: str) -> None:
        """Create a directory (and missing parents)."""
        self.add_tree([path.rstrip("/") + "/"])

    def create(self, path: str) -> None:
        """Create a file (and missing parent directories)."""
        self.add_tree([path.rstrip("/")])

    def remove(self, path: str) -> bool:
        """Remove the node at `path` and everything under it; False if there was none."""
        parts = _split(path)
        if not parts:
            raise ValueError("path must not be the root")
        key = self._resolve(parts)
        if key is None:
            return False
        self._write(lambda: self._admin.execute(
            "WITH RECURSIVE sub(id) AS (SELECT ? UNION ALL SELECT n.id FROM nodes n "
            "JOIN sub ON n.parent = sub.id) DELETE FROM nodes WHERE id IN (SELECT id FROM sub)",
            (key,)))
        return True

    def move(self, src: str, dst: str) -> None:
        """Move (rename) the node at `src` to `dst`; `dst`'s parent must exist."""
        s, d = _split(src), _split(dst)
        key = self._resolve(s)
        parent = self._resolve(d[:-1])
        if key is None or parent is None or not d:
            raise ValueError(f"cannot move {src!r} to {dst!r}: no such source or parent")
        self._write(lambda: self._admin.execute(
            "UPDATE nodes SET parent = ?, name = ? WHERE id = ?", (parent, d[-1], key)))

    def count(self) -> int:
        """The number of nodes, the root included."""
        return int(self._admin.execute("SELECT count(*) FROM nodes").fetchone()[0])
