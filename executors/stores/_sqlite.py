"""The SQLite schedule store: one file, several processes, the stdlib's sqlite3 (WAL).

A claim reads the due records with the time SQLite itself reads (``julianday('now')``: the C
library's clock in this process, not a Python-level one that freezegun may shift; processes
on one machine share it, a faked one such as libfaketime's or the wall-skew test hook shifts
it) and plans them with no lock held (a slow trigger search never holds the file: the read is
a WAL snapshot, which no writer waits for). Then one short ``BEGIN IMMEDIATE`` transaction writes
each claim as an update conditional on the record being as it was read (its version and its
lease), and commits. Two processes never hold the write lock at once, so of any number racing
for one fire time exactly one moves the record forward; a record written meanwhile (claimed,
paused, declared again, renewed) is left to the next claim. Only the records the claimer
admits (`Claimable`: the names its code declares, kept in a temporary table of its
connection, and its allowlist of targets) are read at all.

Every write also stamps the rows it touches with a change stamp (one more than the largest
stamp, or than the stamp of the latest removal kept in ``executors_meta``; read through an
index, so a write adds no page of its own), so `changed_since` reads only the rows written
since a reader's last look: the service's status snapshot costs what changed, not what is
stored. Parsed definitions are kept by their JSON text, so a claim does not parse an unchanged
definition again; claims rewrite the state columns only, and a completion is one conditional
``UPDATE`` computed by SQLite (`finish_record` in SQL), with no read.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, final

from ._claimable import Claimable
from ._liveness import LIVENESS_EVERY
from ._owner_files import OwnerFiles
from ._protocol import Changes, SupportsLost
from ._records import (
    FORMAT_VERSION,
    Claim,
    Declared,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
    StoreFormatError,
    from_epoch,
    record_from_fields,
)
from ._shared import (
    DefinitionCache,
    Step,
    ThreadConnections,
    changing,
    check_format,
    giving_back,
    rewrite,
)
from ._sqlite_checkpoint import LOG_LIMIT, Checkpoints
from ._sqlite_declare import all_unchanged, declare_all, declare_in
from ._sqlite_files import connect_read_only, open_file, unopenable
from ._sqlite_sql import (
    CHANGED_INDEX,
    CLAIMABLE_TABLE,
    COLUMNS,
    COMPLETE,
    COMPLETE_STAMPED,
    DUE,
    EXPIRED,
    LATEST,
    NOW,
    SCHEMA,
    UPDATE_STATE,
    not_in,
    record_params,
    state_json,
    state_params,
)
from ._transitions import (
    settle_claim,
)
from ._unreadable import Unreadable

__all__ = ("BUSY_ATTEMPT", "SQLiteScheduleStore")

#: The longest one attempt to take the file's write lock waits (seconds); `busy_timeout` is
#: spent in attempts of this length.
BUSY_ATTEMPT = 0.5

#: A claim whose plan took longer than this (seconds) starts its leases when it is written,
#: not when its records were read.
_REBASE_AFTER = 1.0
#: How many decoded records a store keeps (one per schedule is what it needs).
_KEPT = 100_000


@dataclasses.dataclass(frozen=True)
class _Planned:
    """A claim's plans, made with no lock held, for `SQLiteScheduleStore._write_claims`."""

    now: dt.datetime  # the store's clock at the read
    read_at: float  # this process's monotonic clock at the read
    planner: Planner
    # Per record: the row read, its record, the record to write over it, the claim it makes
    # (or None).
    items: list[tuple[tuple[Any, ...], ScheduleRecord, ScheduleRecord, Claim | None]]


@final
class SQLiteScheduleStore:
    """Schedules in a SQLite file shared by the processes of one machine.

    Args:
        path: the database file (created if missing, readable and writable by its owner
            only).
        busy_timeout: seconds a write waits in all for another process's write lock before
            it fails with ``sqlite3.OperationalError: database is locked`` (the service then
            reports the store unhealthy and retries with its backoff). It waits in attempts
            of `BUSY_ATTEMPT`: SQLite's own wait for a lock does not heed
            ``Connection.interrupt()``, and the store must stop waiting when it is
            interrupted (`interrupt`, at a service's shutdown deadline).
        create: False: the file must already be a store (refused otherwise, nothing written).
        read_only: open the file read-only: nothing is ever written to it (no table, column
            or index added; a write raises `sqlite3.OperationalError`). Implies not `create`.

    The file is looked at read-only before anything is written (`sqlite_files.open_file`).

    Raises:
        ConnectionError: no file can be opened at `path` (a folder, a missing folder, a
            read-only location), naming it.
        StoreFormatError: the file was written by a newer format of this library or records
            a format that is not a number, is not a SQLite database, or (with `create` False)
            is not a store.
    """

    def __init__(self, path: str, *, busy_timeout: float = 5.0, create: bool = True,
                 read_only: bool = False) -> None:
        self._path = path
        self.display_url = f"sqlite:///{path}"  # four slashes for an absolute path
        self._busy_timeout = busy_timeout
        self._interrupted = False
        # Each connection's table of claimable names starts empty (`_only`).
        self._conns = ThreadConnections(self._connect, fresh=_no_names)
        # Created before the schema's first write, which counts its rows.
        self._checkpoints = Checkpoints(self._connect, "executors-sqlite", f"{path}-wal")
        self._local = self._conns.local
        # A record read again with its definition's text unchanged reuses the definition.
        self._definitions = DefinitionCache()
        # name -> (a hash of its row, the record decoded from it): a row read again unchanged
        # (a due row the status copy read since it last changed, a whole look) is not decoded
        # again. The row's hash and its version both must match; the row itself is not kept
        # (10,000 rows held 8 MB beside their records).
        self._records: dict[str, tuple[int, ScheduleRecord]] = {}
        self._unreadable = Unreadable()
        self._owners = OwnerFiles(path)
        self._owners_seen = -math.inf  # when `_end_gone_leases` looked last (monotonic)
        # Read-only, before any DDL: a newer format is refused before it is altered.
        found = open_file(path, self.display_url, create=create and not read_only,
                          timeout=busy_timeout)
        #: None: connections write; else the columns a read-only connection finds.
        self._read_only = found.columns if read_only else None
        if not read_only:
            deadline = time.monotonic() + busy_timeout
            while True:
                try:
                    self._make_schema()
                    break
                except sqlite3.OperationalError as exc:  # a read-only file or folder
                    # Or another process holding the file's lock (making its schema, writing
                    # its first declarations): waited for, as a write waits, until the
                    # timeout. Every step of the schema can be made again.
                    if "locked" in str(exc) and time.monotonic() < deadline:
                        for conn in self._conns.take_all():  # a fresh start, not a half one
                            conn.close()
                        time.sleep(0.02)  # a lock the busy handler does not wait for
                        continue
                    self.close()
                    raise unopenable(self.display_url, path, str(exc)) from None

    def _make_schema(self) -> None:
        """Create the tables, or bring a file of an older format up to date."""
        conn = self._conn()
        # executescript commits first: the schema is made outside the format check's
        # transaction (every statement is IF NOT EXISTS, so racing processes agree).
        conn.executescript(SCHEMA)
        with self._write(conn):
            row = conn.execute("SELECT value FROM executors_meta WHERE key = 'format'").fetchone()
            if row is None:
                conn.execute("INSERT INTO executors_meta VALUES ('format', ?)",
                             (str(FORMAT_VERSION),))
            # The change stamps' column, in a file made before it was added (an older writer
            # leaves a row's stamp as it was: a whole look still finds its writes).
            conn.execute("INSERT OR IGNORE INTO executors_meta VALUES ('removed', '0')")
            columns = {r[1] for r in conn.execute("PRAGMA table_info(executors_schedules)")}
            if "changed" not in columns:
                conn.execute("ALTER TABLE executors_schedules "
                             "ADD COLUMN changed INTEGER NOT NULL DEFAULT 0")
            # The claims' tokens, in a file made before them (a run in progress there has no
            # token: this code never renews or completes it, and settles it once its lease
            # expires).
            if "claim_token" not in columns:
                conn.execute("ALTER TABLE executors_schedules ADD COLUMN claim_token TEXT")
        conn.executescript(CHANGED_INDEX)
        try:
            # Read before any DDL already; read again for a newer process that made the
            # file between that look and this one.
            check_format(None if row is None else row[0], self.display_url)
        except StoreFormatError:
            self.close()  # nothing is left open behind the error
            raise

    def __repr__(self) -> str:
        return f"<SQLiteScheduleStore {self.display_url!r}>"

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection (`ThreadConnections`: one a thread, none across a fork).
        ``check_same_thread=False`` only lets `close` close them all from one thread."""
        return self._conns.get()

    def _connect(self) -> sqlite3.Connection:
        # A short wait per attempt (see `_begin`), never longer than the whole.
        attempt = min(BUSY_ATTEMPT, self._busy_timeout)
        if self._read_only is not None:
            return connect_read_only(self._path, attempt, self._read_only)
        conn = sqlite3.connect(self._path, timeout=attempt, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA temp_store=MEMORY")  # the claimable names: no temp file
            conn.execute("PRAGMA wal_autocheckpoint=0")  # `Checkpoints` does it, off the commit
            conn.execute(f"PRAGMA journal_size_limit={LOG_LIMIT}")
        except sqlite3.Error:  # the file locked meanwhile: closed, not left behind
            conn.close()
            raise
        return conn

    @contextmanager
    def _write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        conn = conn or self._conn()
        self._begin(conn)
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._checkpoints.committed(conn)

    def _begin(self, conn: sqlite3.Connection) -> None:
        """Take the write lock: attempts of `BUSY_ATTEMPT` until `busy_timeout` has passed
        or the store is interrupted."""
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if self._interrupted or time.monotonic() >= deadline or \
                        "locked" not in str(exc):
                    raise

    def interrupt(self) -> None:
        """Stop every wait for the write lock after its attempt (from now on a write waits
        one attempt at most) and interrupt the statements in progress. From any thread."""
        self._interrupted = True
        for conn in self._conns.all():
            try:
                conn.interrupt()
            except sqlite3.ProgrammingError:  # closed meanwhile
                pass

    def now(self) -> dt.datetime:
        return self._now(self._conn())

    def _decode(self, row: tuple[Any, ...]) -> ScheduleRecord:
        """Decode one row; a row that cannot be decoded raises `StoreFormatError` naming it."""
        name = str(row[0])
        fingerprint = hash(row)
        kept = self._records.get(name)
        if kept is not None and kept[0] == fingerprint and kept[1].version == row[5]:
            return kept[1]
        try:
            definition = self._definitions.decode(name, row[1])
            state = json.loads(row[10])
            fields = {"name": name, "definition": definition, "digest": row[2],
                      "paused": bool(row[3]), "next_fire": row[4], "version": row[5],
                      "owner": row[6], "lease_until": row[7], "running_fire": row[8],
                      "attempt": row[9], "claim_token": row[11], **state}
        except (ValueError, TypeError) as exc:
            raise StoreFormatError(f"schedule {name!r}: unreadable record ({exc})") from None
        record = record_from_fields(fields)  # checks the other fields as every store does
        if len(self._records) >= _KEPT:  # names another process removed are never popped
            self._records.clear()
        self._records[name] = (fingerprint, record)
        return record

    def _read(self, conn: sqlite3.Connection, name: str) -> ScheduleRecord | None:
        row = conn.execute(f"SELECT {COLUMNS} FROM executors_schedules WHERE name = ?",
                           (name,)).fetchone()
        return None if row is None else self._decode(row)

    @staticmethod
    def _bump(conn: sqlite3.Connection) -> int:
        """The next change stamp (inside a write transaction: the writes are serialised)."""
        (seq,) = conn.execute(f"SELECT {LATEST} + 1").fetchone()
        return int(seq)

    def _put(self, conn: sqlite3.Connection, record: ScheduleRecord,
             expect_version: int | None) -> bool:
        params = record_params(record)
        changed = self._bump(conn)
        if expect_version is None:
            conn.execute(f"INSERT INTO executors_schedules ({COLUMNS}, changed) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (*params, changed))
            return True
        cur = conn.execute(
            "UPDATE executors_schedules SET definition = ?, digest = ?, paused = ?, "
            "next_fire = ?, version = ?, owner = ?, lease_until = ?, running_fire = ?, "
            "attempt = ?, state = ?, claim_token = ?, changed = ? "
            "WHERE name = ? AND version = ?",
            (*params[1:], changed, record.name, expect_version))
        return cur.rowcount == 1

    def _put_state(self, conn: sqlite3.Connection, record: ScheduleRecord,
                   was: ScheduleRecord, row: tuple[Any, ...], changed: int) -> bool:
        """Write `record`'s state (its definition is the stored one) over `was`, read from
        `row`, if the row is still as read (its state column written again as it is when the
        counters and last run agree)."""
        state = row[10]
        if (record.counters != was.counters or record.last_fire != was.last_fire
                or record.last_result != was.last_result or record.last_owner != was.last_owner):
            state = state_json(record)
        cur = conn.execute(UPDATE_STATE, state_params(record, changed, row, state))
        return cur.rowcount == 1

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        with self._unreadable.writing(definition.name), self._write() as conn:
            return declare_in(conn, definition, first_fire, self._read, self._put)

    def declare_many(self, declarations: Sequence[tuple[
            ScheduleDefinition, Callable[[dt.datetime], dt.datetime | None]]]
                     ) -> list[Declared | Exception]:
        """`SupportsDeclareMany`: one read, and an unchanged batch takes no write lock
        (`_sqlite_declare.all_unchanged`); else the batch in one write transaction, each
        schedule alone in it (`_sqlite_declare.declare_all`)."""
        try:
            kept = all_unchanged(self._conn(), declarations, self._decode)
            if kept is not None:
                return kept
            with self._write() as conn:
                return declare_all(conn, declarations, self._read, self._put)
        finally:
            for definition, _ in declarations:
                self._unreadable.written(definition.name)

    @staticmethod
    def _now(conn: sqlite3.Connection) -> dt.datetime:
        (seconds,) = conn.execute(f"SELECT {NOW}").fetchone()
        return from_epoch(float(seconds))

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None = None) -> list[Claim]:
        conn = self._conn()  # once: the read, the plans and the write share this thread's
        planned = self._plan(conn, owner, lease, limit, planner, on_crash, only)
        if not planned.items:
            return []
        with self._write(conn):
            return self._write_claims(conn, planned, lease)

    def complete_and_claim(self, finished: list[tuple[Claim, str]], owner: str, *,
                           lease: float, limit: int, planner: Planner,
                           on_crash: Callable[[ScheduleRecord], OnCrash],
                           only: Claimable | None = None
                           ) -> tuple[list[bool], list[Claim]]:
        """`complete_many(finished)`, then `claim(...)`, in one transaction: the store loop's
        pass pays for one commit, not two (a commit costs more than a claimed row). Either
        both are written or neither (the error propagates). The claim is planned before the
        transaction, as `claim`'s is; a pass with nothing to write takes no lock."""
        conn = self._conn()
        planned = self._plan(conn, owner, lease, limit, planner, on_crash, only)
        if not finished and not planned.items:
            return [], []
        with self._write(conn):
            done = self._complete_in(conn, finished)
            return done, self._write_claims(conn, planned, lease)

    def _only(self, conn: sqlite3.Connection, only: Claimable | None
              ) -> tuple[str, tuple[object, ...]]:
        """The condition (and its parameters) admitting only what `only` admits, its names
        loaded into this connection's temporary table first if they are not yet: a 10,000
        names condition costs a claim nothing (a parameter list of them would be read into a
        new index at every statement). ``+name``: SQLite walks the due index and tests each
        row's name, instead of looking every declared name up and sorting the result."""
        if only is None:
            return "", ()
        loaded: Claimable | None = self._local.only
        if loaded is not only:
            old = loaded.names if loaded is not None else frozenset()
            conn.execute(CLAIMABLE_TABLE)
            conn.execute("BEGIN")  # the temporary database only: the file is not locked
            try:
                if loaded is None:
                    conn.execute("DELETE FROM temp.executors_claimable")
                conn.executemany("DELETE FROM temp.executors_claimable WHERE name = ?",
                                 [(name,) for name in old - only.names])
                conn.executemany("INSERT OR IGNORE INTO temp.executors_claimable VALUES (?)",
                                 [(name,) for name in only.names - old])
            except BaseException:
                conn.execute("ROLLBACK")  # the table holds `loaded`'s names, as before
                raise
            conn.execute("COMMIT")
            self._local.only = only
        sql = "+name IN temp.executors_claimable"
        params: tuple[object, ...] = ()
        target = "json_extract(definition, '$.target')"
        if only.targets:
            sql += f" OR {target} IN ({', '.join('?' * len(only.targets))})"
            params += tuple(sorted(only.targets))
        if only.modules:
            sql += (f" OR substr({target}, 1, instr({target}, ':') - 1) "
                    f"IN ({', '.join('?' * len(only.modules))})")
            params += tuple(sorted(only.modules))
        return f" AND ({sql})", params

    def _plan(self, conn: sqlite3.Connection, owner: str, lease: float, limit: int,
              planner: Planner, on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None) -> _Planned:
        """Read the claimable records and plan them, holding no lock (see the module
        docstring): what `_write_claims` writes if the records are still as read."""
        self._end_gone_leases(conn, owner)
        token = uuid.uuid4().hex  # the batch's: unique with each record's name
        admitted, admitted_params = self._only(conn, only)
        now = self._now(conn)
        read_at = time.monotonic()
        mark, skip = self._unreadable.reading()
        # Runs whose lease expired (to settle them once), then the due records, earliest
        # first: two ordered walks of partial indexes that stop at `limit` (one query with an
        # OR would sort every due record, every claim).
        at = now.timestamp()  # `to_epoch` without its check: `_now` reads an aware instant
        where = admitted + not_in(skip) if skip else admitted  # usually none: no call
        rows = conn.execute(EXPIRED.format(where=where),
                            (at, *admitted_params, *skip, limit)).fetchall()
        if len(rows) < limit:
            rows += conn.execute(DUE.format(where=where), (
                at, *admitted_params, *skip, limit - len(rows))).fetchall()
        items: list[tuple[tuple[Any, ...], ScheduleRecord, ScheduleRecord, Claim | None]] = []
        for row in rows:
            try:
                record = self._decode(row)
            except StoreFormatError:
                # Reported by corrupt(); the others still run, and it is left out for a while.
                self._unreadable.add(str(row[0]), mark)
                continue
            settled = settle_claim(record, owner, now, lease, planner, on_crash, token)
            if settled is not None:
                items.append((row, record, *settled))
        return _Planned(now, read_at, planner, items)

    def _write_claims(self, conn: sqlite3.Connection, planned: _Planned, lease: float
                      ) -> list[Claim]:
        """Write `planned`, inside the caller's write transaction, each record only if its
        row is still as read; the claims made."""
        items = planned.items
        if time.monotonic() - planned.read_at > _REBASE_AFTER:
            # A slow plan: the leases start now, not at the read (their full length ahead).
            until = self._now(conn) + dt.timedelta(seconds=lease)
            items = [(row, was, record, claim) if claim is None else
                     (row, was, dataclasses.replace(record, lease_until=until),
                      dataclasses.replace(claim, lease_until=until))
                     for row, was, record, claim in items]
        claims: list[Claim] = []
        changed = self._bump(conn)  # one counter value for the whole batch
        # A planner that keeps its plans is told of those not written.
        lost = planned.planner if isinstance(planned.planner, SupportsLost) else None
        for row, was, record, claim in items:
            if not self._put_state(conn, record, was, row, changed):
                if lost is not None:
                    lost.lost(record.name, record.version)
            elif claim is not None:
                claims.append(claim)
        return claims

    def _end_gone_leases(self, conn: sqlite3.Connection, owner: str) -> None:
        """End the leases of the runs whose owner died (`OwnerFiles`: its file lock is free),
        in a short write transaction of its own, before a claim looks for work: the claim then
        settles them as any expired lease (``on_crash``). At most every `LIVENESS_EVERY`."""
        self._owners.hold(owner)  # before a claim writes this owner's name into a record
        at = time.monotonic()
        if at < self._owners_seen + LIVENESS_EVERY:
            return
        self._owners_seen = at
        owners = [row[0] for row in conn.execute(
            "SELECT DISTINCT owner FROM executors_schedules WHERE running_fire IS NOT NULL "
            f"AND lease_until >= {NOW} AND owner IS NOT NULL AND owner <> ?", (owner,))]
        gone = sorted(self._owners.gone(owners))
        if gone:
            with self._write(conn):
                conn.execute(
                    f"UPDATE executors_schedules SET lease_until = {NOW} - 0.000001, "
                    f"changed = ? WHERE running_fire IS NOT NULL "
                    f"AND owner IN ({', '.join('?' * len(gone))})",
                    (self._bump(conn), *gone))
            self._owners.sweep(owners)  # the files of owners that died and hold no run

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        conn = self._conn()
        admitted, params = self._only(conn, only)
        skip = self._unreadable.names()
        now, fire, lease = conn.execute(
            f"SELECT {NOW}, (SELECT MIN(next_fire) FROM executors_schedules "
            f"WHERE paused = 0 AND running_fire IS NULL{admitted}{not_in(skip)}), (SELECT "
            "MIN(lease_until) FROM executors_schedules WHERE running_fire IS NOT NULL"
            f"{admitted}{not_in(skip)})", (*params, *skip, *params, *skip)).fetchone()
        earliest = min((x for x in (fire, lease) if x is not None), default=None)
        return from_epoch(float(now)), None if earliest is None else from_epoch(float(earliest))

    def renew(self, claim: Claim, lease: float) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE executors_schedules SET lease_until = {NOW} + ?, changed = ? "
                "WHERE name = ? AND claim_token = ? AND running_fire IS NOT NULL",
                (lease, self._bump(conn), claim.name, claim.token))
            return cur.rowcount == 1

    def complete(self, claim: Claim, result: str) -> bool:
        # `finish_record` as one conditional statement, its own transaction: no read, no
        # decoding, one round of the write lock (the pool threads complete concurrently).
        cur = self._conn().execute(COMPLETE, (int(result != "ok"), result, claim.name,
                                               claim.token))
        return cur.rowcount == 1

    def complete_many(self, finished: list[tuple[Claim, str]]) -> list[bool]:
        """`complete` for each ``(claim, result)``, in one transaction (one commit for a
        batch of ended runs); each answer as `complete`'s."""
        with self._write() as conn:
            return self._complete_in(conn, finished)

    def _complete_in(self, conn: sqlite3.Connection,
                     finished: list[tuple[Claim, str]]) -> list[bool]:
        """The completions, inside the caller's write transaction, under one change stamp."""
        if not finished:
            return []
        changed = self._bump(conn)
        return [conn.execute(COMPLETE_STAMPED, (changed, int(result != "ok"), result,
                                                 claim.name, claim.token)).rowcount == 1
                for claim, result in finished]

    def give_back(self, claim: Claim) -> bool:
        return self._rewrite(claim.name, lambda conn: giving_back(claim, self._now(conn)))

    def set_paused(self, name: str, paused: bool) -> bool:
        return self._rewrite(name, lambda conn: changing(paused=paused))

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        return self._rewrite(name, lambda conn: changing(next_fire=next_fire))

    def _rewrite(self, name: str, step: Callable[[sqlite3.Connection], Step]) -> bool:
        """`rewrite` inside one write transaction (no other writer between the read and the
        write): `step(conn)` makes the step (it may read the store's clock)."""
        with self._write() as conn:
            return rewrite(lambda: self._read(conn, name), step(conn),
                           lambda old, new: self._put(conn, new, old.version))

    def remove(self, name: str) -> bool:
        with self._unreadable.writing(name), self._write() as conn:
            # Stamped before the row goes: the stamp then exceeds the removed row's own.
            stamp = self._bump(conn)
            cur = conn.execute("DELETE FROM executors_schedules WHERE name = ?", (name,))
            self._definitions.forget(name)
            self._records.pop(name, None)
            if cur.rowcount != 1:
                return False
            # A reader whose mark is older than this removal takes a whole look next time.
            conn.execute("UPDATE executors_meta SET value = ? WHERE key = 'removed'", (stamp,))
            return True

    def get(self, name: str) -> ScheduleRecord | None:
        return self._read(self._conn(), name)

    def _rows(self) -> list[tuple[Any, ...]]:
        return self._conn().execute(
            f"SELECT {COLUMNS} FROM executors_schedules ORDER BY name").fetchall()

    def _split(self, rows: list[tuple[Any, ...]]
               ) -> tuple[list[ScheduleRecord], list[tuple[str, str]]]:
        good, bad = [], []
        for row in rows:
            try:
                good.append(self._decode(row))
            except StoreFormatError as exc:
                bad.append((str(row[0]), str(exc)))
        return good, bad

    def records(self) -> list[ScheduleRecord]:
        return self._split(self._rows())[0]

    def corrupt(self) -> list[tuple[str, str]]:
        return self._split(self._rows())[1]

    def changed_since(self, mark: int | None) -> Changes:
        """The records written since `mark` (a `Changes.mark` of an earlier call), or the
        whole store when `mark` is None or a schedule was removed since: what a reader that
        keeps a copy of the store needs to bring it up to date.

        Writes by this code stamp their rows; a row written otherwise (an older version of
        this library, a hand-made edit) is found by a whole look (``mark=None``).
        """
        conn = self._conn()
        conn.execute("BEGIN")  # one read snapshot: the stamps and the rows agree
        try:
            seq, removed = conn.execute(
                f"SELECT {LATEST}, (SELECT CAST(value AS INTEGER) FROM executors_meta "
                "WHERE key = 'removed')").fetchone()
            whole = mark is None or removed > mark
            if whole:
                rows = conn.execute(f"SELECT {COLUMNS} FROM executors_schedules "
                                    "ORDER BY name").fetchall()
            else:
                rows = conn.execute(f"SELECT {COLUMNS} FROM executors_schedules "
                                    "WHERE changed > ? ORDER BY name", (mark,)).fetchall()
        finally:
            conn.execute("COMMIT")
        good, bad = self._split(rows)
        return Changes(int(seq), whole, good, bad)

    def close(self) -> None:
        self._checkpoints.close()
        self._owners.release()
        for conn in self._conns.take_all():
            conn.close()


def _no_names(local: threading.local) -> None:
    local.only = None  # the names loaded into this connection's table
