"""The SQLite schedule store: one file, several processes, the stdlib's sqlite3 (WAL).

Every claim is one ``BEGIN IMMEDIATE`` transaction: it takes the file's write lock, reads the
due records with the time SQLite itself reads (``julianday('now')``: the C library's clock,
not a Python-level one that a test or a time-freezing library may shift), writes each claim as
an update conditional on the record's version, and commits. Two processes never hold the write
lock at once, so of any number racing for one fire time exactly one moves the record forward.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, final

from .store import (
    FORMAT_VERSION,
    Claim,
    Declared,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
    StoreFormatError,
    finish_record,
    from_epoch,
    new_record,
    record_fields,
    record_from_fields,
    redeclared,
    settle_claim,
    to_epoch,
)

__all__ = ("SQLiteScheduleStore",)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executors_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS executors_schedules (
    name         TEXT PRIMARY KEY,
    definition   TEXT NOT NULL,
    digest       TEXT NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_fire    REAL,
    version      INTEGER NOT NULL,
    owner        TEXT,
    lease_until  REAL,
    running_fire REAL,
    attempt      INTEGER NOT NULL DEFAULT 0,
    state        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS executors_schedules_due
    ON executors_schedules (next_fire) WHERE paused = 0;
CREATE INDEX IF NOT EXISTS executors_schedules_running
    ON executors_schedules (lease_until) WHERE running_fire IS NOT NULL;
"""

# The store's clock, read by SQLite's C library in the same statement that decides.
# Rounded to the microsecond, as instants are everywhere else (a float that round-trips through
# a datetime must compare equal to itself).
_NOW = "round((julianday('now') - 2440587.5) * 86400.0, 6)"
_COLUMNS = ("name, definition, digest, paused, next_fire, version, owner, lease_until, "
            "running_fire, attempt, state")


def _row_to_record(row: tuple[Any, ...]) -> ScheduleRecord:
    """Decode one row; a row that cannot be decoded raises `StoreFormatError` naming it."""
    name = str(row[0])
    try:
        state = json.loads(row[10])
        fields = {"name": name, "definition": json.loads(row[1]), "digest": row[2],
                  "paused": bool(row[3]), "next_fire": row[4], "version": row[5],
                  "owner": row[6], "lease_until": row[7], "running_fire": row[8],
                  "attempt": row[9], **state}
    except (ValueError, TypeError) as exc:
        raise StoreFormatError(f"schedule {name!r}: unreadable record ({exc})") from None
    return record_from_fields(fields)


def _record_params(record: ScheduleRecord) -> tuple[object, ...]:
    f = record_fields(record)
    state = {"counters": f["counters"], "last_result": f["last_result"],
             "last_fire": f["last_fire"]}
    return (f["name"], json.dumps(f["definition"], sort_keys=True), f["digest"],
            int(record.paused), f["next_fire"], f["version"], f["owner"], f["lease_until"],
            f["running_fire"], f["attempt"], json.dumps(state, sort_keys=True))


@final
class SQLiteScheduleStore:
    """Schedules in a SQLite file shared by the processes of one machine.

    Args:
        path: the database file (created if missing, with its folder's permission).
        busy_timeout: seconds a statement waits for another process's write lock.

    Raises:
        StoreFormatError: the file was written by a newer format of this library.
        sqlite3.Error: the file cannot be opened (the message names the path).
    """

    def __init__(self, path: str, *, busy_timeout: float = 30.0) -> None:
        self._path = path
        self.display_url = f"sqlite:///{path}"  # four slashes for an absolute path
        self._busy_timeout = busy_timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        conn = self._conn()
        # executescript commits first: the schema is made outside the format check's
        # transaction (every statement is IF NOT EXISTS, so racing processes agree).
        conn.executescript(_SCHEMA)
        with self._write(conn):
            row = conn.execute("SELECT value FROM executors_meta WHERE key = 'format'").fetchone()
            if row is None:
                conn.execute("INSERT INTO executors_meta VALUES ('format', ?)",
                             (str(FORMAT_VERSION),))
        if row is not None and int(row[0]) > FORMAT_VERSION:
            self.close()  # nothing is left open behind the error
            raise StoreFormatError(
                f"{self.display_url} was written by store format {row[0]}; this version "
                f"of executors reads format {FORMAT_VERSION} and older: upgrade executors")

    def __repr__(self) -> str:
        return f"<SQLiteScheduleStore {self.display_url!r}>"

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection: a connection serves one statement at a time, so each
        thread has its own (and a forked child opens new ones: a connection never crosses a
        fork). ``check_same_thread=False`` only lets `close` close them all from one thread."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(self._path, timeout=self._busy_timeout,
                                   isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
            self._local.pid = os.getpid()
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        conn = conn or self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def now(self) -> dt.datetime:
        (seconds,) = self._conn().execute(f"SELECT {_NOW}").fetchone()
        return from_epoch(float(seconds))

    def _read(self, conn: sqlite3.Connection, name: str) -> ScheduleRecord | None:
        row = conn.execute(f"SELECT {_COLUMNS} FROM executors_schedules WHERE name = ?",
                           (name,)).fetchone()
        return None if row is None else _row_to_record(row)

    def _put(self, conn: sqlite3.Connection, record: ScheduleRecord,
             expect_version: int | None) -> bool:
        params = _record_params(record)
        if expect_version is None:
            conn.execute(f"INSERT INTO executors_schedules ({_COLUMNS}) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", params)
            return True
        cur = conn.execute(
            "UPDATE executors_schedules SET definition = ?, digest = ?, paused = ?, "
            "next_fire = ?, version = ?, owner = ?, lease_until = ?, running_fire = ?, "
            "attempt = ?, state = ? WHERE name = ? AND version = ?",
            (*params[1:], record.name, expect_version))
        return cur.rowcount == 1

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        digest = definition.digest()
        with self._write() as conn:
            old = self._read(conn, definition.name)
            if old is not None and old.digest == digest:
                return Declared(old, "unchanged")
            (seconds,) = conn.execute(f"SELECT {_NOW}").fetchone()
            record = new_record(definition, first_fire(from_epoch(float(seconds))))
            if old is None:
                self._put(conn, record, None)
                return Declared(record, "added")
            record = redeclared(old, definition, record.next_fire)
            self._put(conn, record, old.version)
            return Declared(record, "changed")

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash]) -> list[Claim]:
        claims: list[Claim] = []
        with self._write() as conn:
            (seconds,) = conn.execute(f"SELECT {_NOW}").fetchone()
            now = from_epoch(float(seconds))
            # Due records first, then runs whose lease expired (to settle them once).
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM executors_schedules "
                "WHERE (paused = 0 AND running_fire IS NULL AND next_fire <= :now) "
                "   OR (running_fire IS NOT NULL AND lease_until < :now) "
                "ORDER BY COALESCE(running_fire, next_fire) LIMIT :limit",
                {"now": to_epoch(now), "limit": limit}).fetchall()
            for row in rows:
                try:
                    record = _row_to_record(row)
                except StoreFormatError:
                    continue  # reported by corrupt(); the others still run
                settled = settle_claim(record, owner, now, lease, planner, on_crash)
                if settled is None:
                    continue
                if self._put(conn, settled[0], record.version) and settled[1] is not None:
                    claims.append(settled[1])
        return claims

    def next_due(self) -> tuple[dt.datetime, dt.datetime | None]:
        now, fire, lease = self._conn().execute(
            f"SELECT {_NOW}, (SELECT MIN(next_fire) FROM executors_schedules "
            "WHERE paused = 0 AND running_fire IS NULL), (SELECT MIN(lease_until) FROM "
            "executors_schedules WHERE running_fire IS NOT NULL)").fetchone()
        earliest = min((x for x in (fire, lease) if x is not None), default=None)
        return from_epoch(float(now)), None if earliest is None else from_epoch(float(earliest))

    def renew(self, claim: Claim, lease: float) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE executors_schedules SET lease_until = {_NOW} + ? "
                "WHERE name = ? AND version = ?", (lease, claim.name, claim.version))
            return cur.rowcount == 1

    def complete(self, claim: Claim, result: str) -> bool:
        with self._write() as conn:
            record = self._read(conn, claim.name)
            if record is None or record.version != claim.version:
                return False
            return self._put(conn, finish_record(record, result), record.version)

    def _change(self, name: str, **changes: object) -> bool:
        with self._write() as conn:
            record = self._read(conn, name)
            if record is None:
                return False
            updated = dataclasses.replace(record, version=record.version + 1,
                                          **changes)  # type: ignore[arg-type]
            return self._put(conn, updated, record.version)

    def set_paused(self, name: str, paused: bool) -> bool:
        return self._change(name, paused=paused)

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        return self._change(name, next_fire=next_fire)

    def remove(self, name: str) -> bool:
        with self._write() as conn:
            cur = conn.execute("DELETE FROM executors_schedules WHERE name = ?", (name,))
            return cur.rowcount == 1

    def get(self, name: str) -> ScheduleRecord | None:
        return self._read(self._conn(), name)

    def _rows(self) -> list[tuple[Any, ...]]:
        return self._conn().execute(
            f"SELECT {_COLUMNS} FROM executors_schedules ORDER BY name").fetchall()

    def records(self) -> list[ScheduleRecord]:
        out = []
        for row in self._rows():
            try:
                out.append(_row_to_record(row))
            except StoreFormatError:
                continue
        return out

    def corrupt(self) -> list[tuple[str, str]]:
        bad = []
        for row in self._rows():
            try:
                _row_to_record(row)
            except StoreFormatError as exc:
                bad.append((str(row[0]), str(exc)))
        return bad

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
