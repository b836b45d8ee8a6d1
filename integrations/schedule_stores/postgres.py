"""The PostgreSQL schedule store (psycopg 3): many processes on many machines, one table.

Time is the server's: "due" and "lease expired" are decided with ``now()`` in the statement
that decides. A claim is one transaction: ``SELECT ... FOR UPDATE SKIP LOCKED`` takes up to
`limit` due rows no other claimer holds (so N processes claim disjoint batches side by side,
instead of queueing on the same rows), reading two partial indexes in order (expired leases,
then idle due records: never a scan of the table), the plans are computed here, and one
``UPDATE ... FROM unnest(...)`` writes them, each conditional on its row's version.

A change other processes must see at once (a declaration, pause, resume, run-now, removal)
also sends ``pg_notify`` in its transaction, on a channel named after the table's oid (two
tables in one database never wake each other); `watch` listens on it. Claims, renewals and
completions notify nothing: they are the hot path, and other processes find due work by
``next_due`` and polling.

For speed, install psycopg with its C implementation (``pip install "psycopg[binary]"``): the
pure-Python one spends about half of a claim's client time in the driver.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, final

import psycopg

from executors.stores import (
    FORMAT_VERSION,
    Changes,
    Claim,
    Claimable,
    Declared,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
    Step,
    StoreFormatError,
    ThreadConnections,
    Unreadable,
    changing,
    check_format,
    declaration,
    from_epoch,
    giving_back,
    no_store,
    redact_url,
    rewrite,
    scrub_url,
    settle_claim,
)

from .postgres_changes import REMOVED, read_changes
from .postgres_connections import Listener, connect, cut
from .postgres_declare import Table, declare_many
from .postgres_owners import OwnerLocks
from .postgres_rows import COLUMNS as _COLUMNS
from .postgres_rows import READ as _READ
from .postgres_rows import Definitions
from .postgres_rows import encode as _encode
from .postgres_rows import encode_claimed as _encode_claimed

__all__ = ("PostgresScheduleStore",)

logger = logging.getLogger("executors.service")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS executors_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS executors_schedules (
    name         TEXT PRIMARY KEY,
    definition   JSONB NOT NULL,
    digest       TEXT NOT NULL,
    paused       BOOLEAN NOT NULL DEFAULT FALSE,
    next_fire    DOUBLE PRECISION,
    version      BIGINT NOT NULL,
    owner        TEXT,
    lease_until  DOUBLE PRECISION,
    running_fire DOUBLE PRECISION,
    attempt      INTEGER NOT NULL DEFAULT 0,
    state        JSONB NOT NULL,
    claim_token  TEXT
);
-- The claims' tokens, in a table made before them (a run in progress there is settled by its
-- lease, as a crashed one).
ALTER TABLE executors_schedules ADD COLUMN IF NOT EXISTS claim_token TEXT;
-- What a claim and next_due read, each an ordered range of a partial index (never a scan
-- of the table): the idle due records by next fire time, the runs in progress by lease end.
CREATE INDEX IF NOT EXISTS executors_schedules_idle
    ON executors_schedules (next_fire) WHERE NOT paused AND running_fire IS NULL;
CREATE INDEX IF NOT EXISTS executors_schedules_leases
    ON executors_schedules (lease_until) WHERE running_fire IS NOT NULL;
-- The first format's index, which a claim's filter on running_fire made it walk past the
-- records with a run in progress.
DROP INDEX IF EXISTS executors_schedules_due;
"""
# The schema is complete when its last index and its last column exist: then a process
# starting up runs no DDL (CREATE INDEX IF NOT EXISTS and ALTER TABLE lock the table, waiting
# for the claims in flight).
_SCHEMA_DONE = ("SELECT to_regclass('executors_schedules_leases') IS NOT NULL AND EXISTS ("
                "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('executors_schedules') "
                "AND attname = 'claim_token' AND NOT attisdropped)")
# Whether the database holds a store (its two tables).
_IS_STORE = ("SELECT to_regclass('executors_schedules') IS NOT NULL "
             "AND to_regclass('executors_meta') IS NOT NULL")
# The notification channel of this table: its oid (stable while the table exists).
_CHANNEL = "SELECT 'executors_schedules'::regclass::oid"
# The server's clock, in epoch seconds rounded to the microsecond (as instants are here).
_NOW = "round(extract(epoch from now())::numeric, 6)::double precision"
# Conditional writes of many rows in one statement: each row is written if its version is
# still the one read. The rows travel as one array per column (``unnest``), so the statement's
# text is the same whatever the batch's size (prepared once; a ``VALUES`` list of N rows would
# be a new statement of 13 N parameters for every batch, parsed again by driver and server).
_WRITE = (
    "UPDATE executors_schedules AS s SET definition = v.definition::jsonb, "
    "digest = v.digest, paused = v.paused, next_fire = v.next_fire, version = v.version, "
    "owner = v.owner, lease_until = v.lease_until, running_fire = v.running_fire, "
    "attempt = v.attempt, state = v.state::jsonb, claim_token = v.claim_token "
    "FROM unnest(%b::text[], %b::text[], %b::text[], %b::bool[], %b::float8[], %b::int8[], "
    "%b::text[], %b::float8[], %b::float8[], %b::int4[], %b::text[], %b::text[], "
    "%b::int8[]) AS "
    "v(name, definition, digest, paused, next_fire, version, owner, lease_until, "
    "running_fire, attempt, state, claim_token, old_version) "
    "WHERE s.name = v.name AND s.version = v.old_version RETURNING s.name")
# A claim's write: what a claim changes (never the definition, its digest or the pause; the
# state only when the claim changed it, `encode_claimed`, and then merged: a key of the state
# this code does not know is kept, as a completion keeps it).
_CLAIM_WRITE = (
    "UPDATE executors_schedules AS s SET next_fire = v.next_fire, version = v.version, "
    "owner = v.owner, lease_until = v.lease_until, running_fire = v.running_fire, "
    "attempt = v.attempt, state = COALESCE(s.state || v.state::jsonb, s.state), "
    "claim_token = v.claim_token "
    "FROM unnest(%b::text[], %b::float8[], %b::int8[], %b::text[], %b::float8[], "
    "%b::float8[], %b::int4[], %b::text[], %b::text[], %b::int8[]) AS "
    "v(name, next_fire, version, owner, lease_until, running_fire, attempt, state, "
    "claim_token, old_version) "
    "WHERE s.name = v.name AND s.version = v.old_version RETURNING s.name")

# `finish_record` as one statement for a batch of ended runs, each fenced by its claim's token
# (`holds`): no read, no decoding, one round trip. The counters the run does not move, and
# any key of the state this code does not know, are kept (``||`` merges objects). The last
# run's fire time and owner are the row's before this statement's own SET (SQL reads the row
# as it was).
_COMPLETE = (
    "UPDATE executors_schedules AS s SET version = s.version + 1, owner = NULL, "
    "lease_until = NULL, running_fire = NULL, claim_token = NULL, "
    "state = s.state || jsonb_build_object("
    "'counters', COALESCE(s.state->'counters', '{}'::jsonb) || jsonb_build_object("
    "'runs', COALESCE((s.state->'counters'->>'runs')::bigint, 0) + 1, "
    "'failures', COALESCE((s.state->'counters'->>'failures')::bigint, 0) + v.failed), "
    "'last_result', v.result, 'last_fire', s.running_fire, 'last_owner', s.owner) "
    "FROM unnest(%b::text[], %b::text[], %b::int4[], %b::text[]) AS "
    "v(name, token, failed, result) "
    "WHERE s.name = v.name AND s.claim_token = v.token AND s.running_fire IS NOT NULL "
    "RETURNING v.name, v.token")

# Up to `limit` claimable rows, locked, none that another claimer holds: the runs whose lease
# expired (to settle) first, then the idle due records, earliest first. Two ordered range scans
# of partial indexes, not one ``OR`` (which PostgreSQL answers by scanning and sorting the whole
# table, every claimer, every batch); SKIP LOCKED lets N claimers take disjoint batches side by
# side. The outer LIMIT stops pulling from the second one once the first filled the batch.
# ``name <> ALL(%s)``: the records a claim found unreadable are left out (`Unreadable`); an
# empty array, the usual case, leaves out nothing. ``{only}``: the records the claimer admits
# (`_admitted`), or nothing.
_CLAIMABLE_SQL = (
    f"WITH expired AS (SELECT {_READ} FROM executors_schedules "
    f"  WHERE running_fire IS NOT NULL AND lease_until < {_NOW}{{only}} "
    "  AND name <> ALL(%s::text[]) ORDER BY lease_until LIMIT %s FOR UPDATE SKIP LOCKED), "
    f"due AS (SELECT {_READ} FROM executors_schedules "
    f"  WHERE NOT paused AND running_fire IS NULL AND next_fire <= {_NOW}{{only}} "
    "  AND name <> ALL(%s::text[]) ORDER BY next_fire LIMIT %s FOR UPDATE SKIP LOCKED) "
    f"SELECT *, {_NOW} FROM (SELECT * FROM expired UNION ALL SELECT * FROM due) AS c LIMIT %s")
_CLAIMABLE = _CLAIMABLE_SQL.format(only="")

# The store's clock, the least next fire time of the idle records and the least lease end of
# the runs in progress: the ends of two partial indexes (walked in order, each row's name
# tested, when `{only}` admits some records only).
_NEXT_DUE_SQL = (
    f"SELECT {_NOW}, (SELECT next_fire FROM executors_schedules "
    "WHERE NOT paused AND running_fire IS NULL AND name <> ALL(%s::text[]){only} "
    "ORDER BY next_fire LIMIT 1), "
    "(SELECT lease_until FROM executors_schedules "
    "WHERE running_fire IS NOT NULL AND name <> ALL(%s::text[]){only} "
    "ORDER BY lease_until LIMIT 1)")
_NEXT_DUE = _NEXT_DUE_SQL.format(only="")

# The names a claimer declares (`Claimable.names`), in a table of its own session.
_CLAIMABLE_TABLE = ("CREATE TEMP TABLE IF NOT EXISTS executors_claimable "
                    "(name TEXT PRIMARY KEY)")
# The condition admitting the declared names (and, with an allowlist, `_ALLOWED`).
_DECLARED = "name IN (SELECT c.name FROM pg_temp.executors_claimable AS c)"
_ALLOWED = (" OR definition->>'target' = ANY(%s::text[]) "
            "OR split_part(definition->>'target', ':', 1) = ANY(%s::text[])")


def _opening_error(exc: psycopg.Error, url: str, shown: str) -> Exception:
    """The documented error of a failed opening: libpq's message (which spans lines, and may
    quote a part of the URL: a password cut by its parser too) scrubbed of the URL's secrets."""
    reason = scrub_url(" ".join(str(exc).split()), url)
    if isinstance(exc, psycopg.ProgrammingError):  # libpq could not read the URL
        return ValueError(f"schedule store {shown}: {reason}")
    return ConnectionError(f"cannot reach the schedule store {shown}: {reason}")


@final
class PostgresScheduleStore:
    """Schedules in a PostgreSQL table.

    Args:
        url: a ``postgresql://`` URL (libpq's connection string).
        connect_timeout: seconds to reach the server at start.
        create: False: the database must already hold a store, and opening writes nothing
            (no table, index or format row; a database without the store is refused).

    Raises:
        ValueError: libpq cannot read the URL (naming it, secrets hidden).
        ConnectionError: the server cannot be reached (naming the URL, secrets hidden).
        StoreFormatError: the table was written by a newer format, or records a format that
            is not a number; or, with `create` False, the database holds no store.
    """

    def __init__(self, url: str, *, connect_timeout: float = 10.0, create: bool = True) -> None:
        self._url = url
        self.display_url = redact_url(url)
        self._connect_timeout = max(1, round(connect_timeout))
        # A new connection is a new session: its table of claimable names starts empty.
        self._conns = ThreadConnections(lambda: connect(self._url, self._connect_timeout),
                                        closed=lambda conn: conn.closed, fresh=_no_names)
        self._local = self._conns.local
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._unreadable = Unreadable()
        self._owners = OwnerLocks()
        self._definitions = Definitions()
        # What a batch declaration (`postgres_declare`) reads and writes of the table.
        self._table = Table(_COLUMNS, _READ, self._definitions.decode, _encode, _NOW)
        failure: Exception | None = None
        oid = row = None
        try:
            with self._tx() as cur:
                if create:
                    cur.execute(_SCHEMA_DONE)
                    done = cur.fetchone()
                    if not (done and done[0]):
                        cur.execute("SELECT pg_advisory_xact_lock(727274)")  # one schema maker
                        cur.execute(_SCHEMA)
                    cur.execute("INSERT INTO executors_meta VALUES ('format', %s) "
                                "ON CONFLICT (key) DO NOTHING", (str(FORMAT_VERSION),))
                cur.execute(_IS_STORE)
                found = cur.fetchone()
                if found and found[0]:
                    cur.execute("SELECT value FROM executors_meta WHERE key = 'format'")
                    row = cur.fetchone()
                    cur.execute(_CHANNEL)
                    oid = cur.fetchone()
        except psycopg.Error as exc:
            failure = _opening_error(exc, url, self.display_url)
        if failure is None and oid is None:
            failure = no_store(self.display_url, "no executors_schedules and executors_meta "
                                                 "tables")
        if failure is None:
            try:
                check_format(row[0] if row else None, self.display_url)
            except StoreFormatError as exc:
                failure = exc
        if failure is not None:
            # Raised out of the handler: the driver's error, which holds its message as it
            # was, is neither the cause nor the context of this one.
            self.close()
            raise failure
        assert oid is not None
        #: The channel `watch` listens on and the store's changes notify.
        self.channel = f"executors_schedules_{oid[0]}"

    def __repr__(self) -> str:
        return f"<PostgresScheduleStore {self.display_url!r}>"

    def _conn(self) -> psycopg.Connection[Any]:
        """This thread's connection (`ThreadConnections`: a connection runs one transaction
        at a time, and never crosses a fork)."""
        return self._conns.get()

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Cursor[Any]]:
        conn = self._conn()
        with conn.transaction(), conn.cursor() as cur:
            yield cur

    def now(self) -> dt.datetime:
        with self._tx() as cur:
            return self._now(cur)

    @staticmethod
    def _now(cur: psycopg.Cursor[Any]) -> dt.datetime:
        cur.execute(f"SELECT {_NOW}")
        row = cur.fetchone()
        assert row is not None
        return from_epoch(float(row[0]))

    def _read(self, cur: psycopg.Cursor[Any], name: str, *, lock: bool = False,
              ) -> ScheduleRecord | None:
        cur.execute(f"SELECT {_READ} FROM executors_schedules WHERE name = %s"
                    + (" FOR UPDATE" if lock else ""), (name,))
        row = cur.fetchone()
        return None if row is None else self._definitions.decode(row)

    def _notify(self, cur: psycopg.Cursor[Any], name: str) -> None:
        """Tell the listeners (`watch`) that `name` changed, when this transaction commits."""
        cur.execute("SELECT pg_notify(%s, %s)", (self.channel, name))

    def _write(self, cur: psycopg.Cursor[Any], records: list[tuple[ScheduleRecord, int]]
               ) -> set[str]:
        """Write each record if its row still has the version given; the names written."""
        if not records:
            return set()
        return self._write_rows(cur, _WRITE, [_encode(record) for record, _ in records],
                                [old for _, old in records])

    def _write_claims(self, cur: psycopg.Cursor[Any],
                      claimed: list[tuple[ScheduleRecord, ScheduleRecord]]) -> set[str]:
        """Write each claimed record (new, as read) if its row still has the version read;
        the names written. Only what a claim changes is sent (`encode_claimed`)."""
        if not claimed:
            return set()
        return self._write_rows(cur, _CLAIM_WRITE,
                                [_encode_claimed(new, old) for new, old in claimed],
                                [old.version for _, old in claimed])

    @staticmethod
    def _write_rows(cur: psycopg.Cursor[Any], statement: str, rows: list[tuple[object, ...]],
                    versions: list[int]) -> set[str]:
        columns = [list(column) for column in zip(*rows, strict=True)]
        columns.append(versions)
        cur.execute(statement, columns)
        return {row[0] for row in cur.fetchall()}

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        name = definition.name
        with self._unreadable.writing(name), self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
            try:
                old, unreadable = self._read(cur, name, lock=True), ""
            except StoreFormatError as exc:  # the row is locked (FOR UPDATE) all the same
                old, unreadable = None, str(exc)
            stored: object = None
            if unreadable:
                cur.execute("DELETE FROM executors_schedules WHERE name = %s RETURNING version",
                            (name,))
                gone = cur.fetchone()
                stored = gone[0] if gone else None
            declared = declaration(definition, old, lambda: first_fire(self._now(cur)),
                                   unreadable=unreadable, stored_version=stored)
            if declared.outcome == "unchanged":
                return declared
            self._notify(cur, name)
            if old is None:
                cur.execute(f"INSERT INTO executors_schedules ({_COLUMNS}) VALUES "
                            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                            _encode(declared.record))
            else:
                self._write(cur, [(declared.record, old.version)])
            return declared

    def declare_many(self, declarations: Sequence[tuple[
            ScheduleDefinition, Callable[[dt.datetime], dt.datetime | None]]]
                     ) -> list[Declared | Exception]:
        """`SupportsDeclareMany`: one statement reads the batch's rows, and an unchanged
        batch costs nothing more; the others are written in one transaction with one
        notification (`postgres_declare`)."""
        return declare_many(self._conn(), self._table, self.channel, self._unreadable, self.declare,
                            declarations)

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None = None) -> list[Claim]:
        return self.complete_and_claim([], owner, lease=lease, limit=limit, planner=planner,
                                       on_crash=on_crash, only=only)[1]

    def complete_and_claim(self, finished: list[tuple[Claim, str]], owner: str, *,
                           lease: float, limit: int, planner: Planner,
                           on_crash: Callable[[ScheduleRecord], OnCrash],
                           only: Claimable | None = None
                           ) -> tuple[list[bool], list[Claim]]:
        """`complete_many(finished)`, then `claim(...)`, in one transaction: the store loop's
        pass pays for one commit, and the runs that ended since the last pass are written
        with the statement that looks for due work (a record completed here is claimable by
        the same statement). Either both are written or neither (the error propagates)."""
        token = uuid.uuid4().hex  # the batch's: unique with each record's name
        mark, skip = self._unreadable.mark(), self._unreadable.names()
        self._owners.hold(self._conn(), owner)  # before this claim writes its name
        admitted, params = self._admitted(only)
        with self._tx() as cur:
            done = self._complete_in(cur, finished)
            self._owners.end_gone_leases(cur, owner)  # then settled as expired, below
            cur.execute(_CLAIMABLE_SQL.format(only=admitted),
                        (*params, skip, limit, *params, skip, limit, limit))
            rows = cur.fetchall()
            writes: list[tuple[ScheduleRecord, ScheduleRecord]] = []
            pending: dict[str, Claim] = {}
            for row in rows:
                try:
                    record = self._definitions.decode(row)
                except StoreFormatError:
                    # Reported by corrupt(); the others still run, and it is left out a while.
                    self._unreadable.add(str(row[0]), mark)
                    continue
                settled = settle_claim(record, owner, from_epoch(float(row[12])), lease,
                                       planner, on_crash, token)
                if settled is None:
                    continue
                writes.append((settled[0], record))
                if settled[1] is not None:
                    pending[record.name] = settled[1]
            won = self._write_claims(cur, writes)
        return done, [claim for name, claim in pending.items() if name in won]

    def complete_many(self, finished: list[tuple[Claim, str]]) -> list[bool]:
        """`complete` for each ``(claim, result)``, in one statement (one round trip for a
        batch of ended runs); each answer as `complete`'s."""
        if not finished:
            return []
        with self._tx() as cur:
            return self._complete_in(cur, finished)

    @staticmethod
    def _complete_in(cur: psycopg.Cursor[Any], finished: list[tuple[Claim, str]]
                     ) -> list[bool]:
        """The completions, in the caller's transaction: which were written (their records
        still held their claims)."""
        if not finished:
            return []
        cur.execute(_COMPLETE, ([claim.name for claim, _ in finished],
                                [claim.token for claim, _ in finished],
                                [int(result != "ok") for _, result in finished],
                                [result for _, result in finished]))
        written = set(cur.fetchall())
        return [(claim.name, claim.token) in written for claim, _ in finished]

    def _admitted(self, only: Claimable | None) -> tuple[str, tuple[object, ...]]:
        """The condition (and its parameters) admitting only what `only` admits, its names
        loaded into this session's temporary table first if they are not yet: 10,000 names
        cost a claim a lookup per row read, not an array sent and searched at every
        statement."""
        if only is None:
            return "", ()
        self._conn()  # a new connection (a new session) has loaded none
        if self._local.only is not only:
            self._load(only)
        if not only.serves_others:
            return f" AND {_DECLARED}", ()
        return (f" AND ({_DECLARED}{_ALLOWED})",
                (sorted(only.targets), sorted(only.modules)))

    def _load(self, only: Claimable) -> None:
        """Make this session's table of claimable names hold `only.names` (the difference
        from what it holds is written)."""
        conn = self._conn()
        loaded: Claimable | None = self._local.only
        old = loaded.names if loaded is not None else frozenset()
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(_CLAIMABLE_TABLE)
            if not old:
                cur.execute("TRUNCATE pg_temp.executors_claimable")
            gone, new = sorted(old - only.names), sorted(only.names - old)
            if gone:
                cur.execute("DELETE FROM pg_temp.executors_claimable WHERE name = ANY(%s)",
                            (gone,))
            if new:
                cur.execute("INSERT INTO pg_temp.executors_claimable "
                            "SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING", (new,))
            if gone or new:
                cur.execute("ANALYZE pg_temp.executors_claimable")  # no autovacuum here
        self._local.only = only

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        skip = self._unreadable.names()
        admitted, params = self._admitted(only)
        with self._tx() as cur:
            cur.execute(_NEXT_DUE_SQL.format(only=admitted), (skip, *params, skip, *params))
            row = cur.fetchone()
        assert row is not None
        earliest = min((float(x) for x in row[1:] if x is not None), default=None)
        return from_epoch(float(row[0])), None if earliest is None else from_epoch(earliest)

    def renew(self, claim: Claim, lease: float) -> bool:
        with self._tx() as cur:
            # Fenced by the claim's token (`holds`), not the version a control op moves.
            cur.execute(f"UPDATE executors_schedules SET lease_until = {_NOW} + %s "
                        "WHERE name = %s AND claim_token = %s AND running_fire IS NOT NULL",
                        (lease, claim.name, claim.token))
            return cur.rowcount == 1

    def complete(self, claim: Claim, result: str) -> bool:
        return self.complete_many([(claim, result)])[0]

    def give_back(self, claim: Claim) -> bool:
        # Notified: a watching owner claims it at once.
        return self._rewrite(claim.name, giving_back(claim, self.now()))

    def set_paused(self, name: str, paused: bool) -> bool:
        return self._rewrite(name, changing(paused=paused))

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        return self._rewrite(name, changing(next_fire=next_fire))

    def _rewrite(self, name: str, step: Step) -> bool:
        """`rewrite` in one transaction, the row locked (``FOR UPDATE``) from the read to the
        write; the listeners are told at commit (not at all if it rolls back)."""
        with self._tx() as cur:
            def write(old: ScheduleRecord, new: ScheduleRecord) -> bool:
                self._notify(cur, name)
                return bool(self._write(cur, [(new, old.version)]))
            return rewrite(lambda: self._read(cur, name, lock=True), step, write)

    def remove(self, name: str) -> bool:
        with self._unreadable.writing(name), self._tx() as cur:
            cur.execute("DELETE FROM executors_schedules WHERE name = %s", (name,))
            if cur.rowcount != 1:
                return False
            cur.execute(REMOVED)  # a later `changed_since` reads the whole store
            self._definitions.cache.forget(name)
            self._notify(cur, name)
            return True

    def get(self, name: str) -> ScheduleRecord | None:
        with self._tx() as cur:
            return self._read(cur, name)

    def changed_since(self, mark: int | None) -> Changes:
        """The records written since `mark` (a `Changes.mark` of an earlier call), or the
        whole store when `mark` is None or a schedule was removed since: what a reader that
        keeps a copy of the store needs to bring it up to date (see `postgres_changes`: the
        rows are found by the transactions that wrote them; a few may be read again)."""
        new_mark, whole, decoded = read_changes(self._conn(), _READ, mark, self._decode_all)
        return Changes(new_mark, whole, [r for _, r in decoded if isinstance(r, ScheduleRecord)],
                       [(name, r) for name, r in decoded if isinstance(r, str)])

    def _decoded(self) -> list[tuple[str, ScheduleRecord | str]]:
        with self._tx() as cur:
            cur.execute(f"SELECT {_READ} FROM executors_schedules ORDER BY name")
            rows = cur.fetchall()
        return self._decode_all(rows)

    def _decode_all(self, rows: list[tuple[Any, ...]]) -> list[tuple[str, ScheduleRecord | str]]:
        out: list[tuple[str, ScheduleRecord | str]] = []
        for row in rows:
            try:
                out.append((str(row[0]), self._definitions.decode(row)))
            except StoreFormatError as exc:
                out.append((str(row[0]), str(exc)))
        return out

    def records(self) -> list[ScheduleRecord]:
        return [r for _, r in self._decoded() if isinstance(r, ScheduleRecord)]

    def corrupt(self) -> list[tuple[str, str]]:
        return [(name, r) for name, r in self._decoded() if isinstance(r, str)]

    def watch(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback` (on a thread of its own) soon after any process commits a change
        to a schedule that others must see: a declaration, pause, resume, run-now or removal
        (``LISTEN`` on `channel`, one more connection). Also called each time the listener
        (re)connects, as changes may have been missed while it was not listening. A lost
        connection is opened again with a backoff (0.1 s doubling to 5 s), logged once per
        loss. Returns the function that stops it (waits up to a second for its thread, which
        is a daemon, and names it as its ``thread``); `close` stops every listener of the
        store.
        """
        listener = Listener(self._url, self.channel, callback, self._connect_timeout)
        with self._lock:
            self._listeners.append(listener)
        listener.start()
        return listener

    def interrupt(self) -> None:
        """Make every call in progress on this store's connections (and its listeners') fail
        at once, from any thread: their sockets are shut down under them. A server that is
        stopped answers no cancel request, so cutting the socket is the one way out; the
        connection is not freed here (libpq's state belongs to the thread using it), it fails
        in that thread, which closes it."""
        with self._lock:
            listening = [x.conn for x in self._listeners if x.conn]
        connections = [*self._conns.all(), *listening]
        for conn in connections:
            cut(conn)

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._owners.release()
        connections = self._conns.take_all()
        with self._lock:
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.close()
        for conn in connections:
            conn.close()


def _no_names(local: threading.local) -> None:
    local.only = None  # the names loaded into this session's table
