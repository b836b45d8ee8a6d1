"""Declaring a batch of schedules in the PostgreSQL store (``declare_many``): one statement
reads the batch's rows, and a batch whose every definition is the stored one costs nothing
more (one round trip: the start of a process whose schedules did not change). The others are
written in one transaction: their rows read again, locked, one ``INSERT`` and one ``UPDATE``
of ``unnest``-ed arrays (the statements' text the same whatever the batch's size) and one
notification for the batch, where one by one each schedule cost a transaction of about seven
statements."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from executors.stores import (
    Declared,
    ScheduleDefinition,
    ScheduleRecord,
    StoreFormatError,
    Unreadable,
    declaration,
    declare_each,
    from_epoch,
    unchanged,
)

__all__ = ("Table", "declare_many")

FirstFire = Callable[[dt.datetime], dt.datetime | None]
Declare = Callable[[ScheduleDefinition, FirstFire], Declared]

# The new records of a batch, one array per column (as the store's `_encode` orders them). ON
# CONFLICT: a name another process inserted since this one read it (no row to lock then) is
# not written here; it is declared again alone, over the row that process wrote.
_INSERT = (
    "INSERT INTO executors_schedules ({columns}) SELECT v.name, v.definition::jsonb, "
    "v.digest, v.paused, v.next_fire, v.version, v.owner, v.lease_until, v.running_fire, "
    "v.attempt, v.state::jsonb, v.claim_token "
    "FROM unnest(%b::text[], %b::text[], %b::text[], %b::bool[], %b::float8[], %b::int8[], "
    "%b::text[], %b::float8[], %b::float8[], %b::int4[], %b::text[], %b::text[]) AS "
    "v(name, definition, digest, paused, next_fire, version, owner, lease_until, "
    "running_fire, attempt, state, claim_token) "
    "ON CONFLICT (name) DO NOTHING RETURNING name")
# The changed declarations: what `redeclared` changes (the definition, its digest, the next
# fire time and the version), nothing of the pause, the counters or a run in progress.
_UPDATE = (
    "UPDATE executors_schedules AS s SET definition = v.definition::jsonb, "
    "digest = v.digest, next_fire = v.next_fire, version = v.version "
    "FROM unnest(%b::text[], %b::text[], %b::text[], %b::float8[], %b::int8[], %b::int8[]) AS "
    "v(name, definition, digest, next_fire, version, old_version) "
    "WHERE s.name = v.name AND s.version = v.old_version RETURNING s.name")


@dataclasses.dataclass(frozen=True)
class Table:
    """What a batch needs of the store: its columns, how a row is decoded and a record
    encoded (in the columns' order), and the SQL of its clock."""

    #: The record's columns, comma-separated, in the order `encode` writes.
    columns: str
    #: What a read selects: `columns` in their order, as `decode` reads them.
    read: str
    #: A row read (`read`) as its record; raises `StoreFormatError` if it cannot be read.
    decode: Callable[[tuple[Any, ...]], ScheduleRecord]
    #: A record as the row's values, in the order of `columns`.
    encode: Callable[[ScheduleRecord], tuple[object, ...]]
    #: The SQL of the store's clock in epoch seconds (the transaction's ``now()``).
    now: str


def declare_many(conn: psycopg.Connection[Any], table: Table, channel: str,
                 unreadable: Unreadable, declare: Declare,
                 declarations: Sequence[tuple[ScheduleDefinition, FirstFire]], *,
                 again: bool = True) -> list[Declared | Exception]:
    """``SupportsDeclareMany.declare_many`` on `conn` (see the module docstring): `declare`
    is the store's one-schedule ``declare``, for what the batch leaves to be declared alone
    (a name repeated in the batch, the rest of a batch whose write the server refused).

    The schedules another process inserted between this one's read and its write (two
    processes starting with the same schedules) are declared again as a batch (`again`),
    over the rows that process wrote: then unchanged, one more read; lost twice, alone."""
    out: list[Declared | Exception | None] = [None] * len(declarations)
    digests: dict[str, tuple[int, str]] = {}  # name -> (its place in the batch, its digest)
    alone: list[int] = []
    for i, (definition, _) in enumerate(declarations):
        if definition.name in digests:
            alone.append(i)  # declared after the batch, as it would be after the first
            continue
        try:
            digests[definition.name] = (i, definition.digest())
        except ValueError as exc:  # not JSON: that schedule's failure alone
            out[i] = exc
    try:
        rows = _read(conn, table.read, sorted(digests))
        pending: list[str] = []
        for name, (i, digest) in digests.items():
            try:
                old = table.decode(rows[name]) if name in rows else None
            except StoreFormatError:
                old = None  # replaced, below: the row is read again, locked
            if old is not None and unchanged(old, declarations[i][0], digest):
                out[i] = Declared(old, "unchanged")
            else:
                pending.append(name)
        if pending:
            try:
                lost = _write(conn, table, channel, declarations, digests, pending, out)
            except psycopg.Error:
                if conn.broken:
                    raise  # the store is unreachable: the caller hears it once
                # The server refused the batch (one record it will not take, as a NUL in a
                # key of its definition): nothing of it is written; each is declared alone,
                # so that record's failure is its own.
                alone += [digests[name][0] for name in pending]
            else:
                if lost and again:
                    retried = declare_many(conn, table, channel, unreadable, declare,
                                           [declarations[i] for i in lost], again=False)
                    for i, retried_result in zip(lost, retried, strict=True):
                        out[i] = retried_result
                else:
                    alone += lost
    finally:
        for name in digests:
            unreadable.written(name)
    alone.sort()
    for i, result in zip(alone, declare_each(declare, [declarations[i] for i in alone]),
                         strict=True):
        out[i] = result
    answers: list[Declared | Exception] = []
    for answer in out:
        assert answer is not None  # each was answered above
        answers.append(answer)
    return answers


def _read(conn: psycopg.Connection[Any], columns: str, names: list[str]
          ) -> dict[str, tuple[Any, ...]]:
    """The stored rows of `names`, in one statement outside any transaction: one round trip
    (a transaction's ``BEGIN`` and ``COMMIT`` are two more)."""
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {columns} FROM executors_schedules WHERE name = ANY(%s)",
                        (names,))
            return {row[0]: row for row in cur.fetchall()}
    finally:
        if not conn.closed:  # a lost connection is opened again, as it was
            conn.autocommit = False


def _write(conn: psycopg.Connection[Any], table: Table, channel: str,
           declarations: Sequence[tuple[ScheduleDefinition, FirstFire]],
           digests: dict[str, tuple[int, str]], pending: list[str],
           out: list[Declared | Exception | None]) -> list[int]:
    """Declare `pending` in one transaction (their rows locked as one declaration locks its
    own), answers in `out`; the places of those left to be declared alone."""
    inserted: list[tuple[int, ScheduleRecord]] = []
    updated: list[tuple[int, ScheduleRecord, int]] = []
    replaced: list[str] = []
    with conn.transaction(), conn.cursor() as cur:
        # Locked in the order of their names: two processes declaring the same batch wait
        # for each other, never for each other both (a deadlock).
        cur.execute(f"SELECT {table.read} FROM executors_schedules WHERE name = ANY(%s) "
                    "ORDER BY name FOR UPDATE", (pending,))
        rows = {row[0]: row for row in cur.fetchall()}
        clock: list[dt.datetime] = []

        def now() -> dt.datetime:  # the transaction's (as one declaration's), read once
            if not clock:
                cur.execute(f"SELECT {table.now}")
                row = cur.fetchone()
                assert row is not None
                clock.append(from_epoch(float(row[0])))
            return clock[0]

        for name in pending:
            i, digest = digests[name]
            definition, first_fire = declarations[i]
            row = rows.get(name)
            old, why = None, ""
            try:
                old = None if row is None else table.decode(row)
            except StoreFormatError as exc:
                why = str(exc)

            def fire(first_fire: FirstFire = first_fire) -> dt.datetime | None:
                return first_fire(now())

            try:
                declared = declaration(definition, old, fire, digest=digest, unreadable=why,
                                       stored_version=row[5] if why and row else None)
            except Exception as exc:  # its first fire time failed: nothing written for it
                out[i] = exc
                continue
            out[i] = declared
            if declared.outcome == "changed" and old is not None:
                updated.append((i, declared.record, old.version))
            elif declared.outcome in ("added", "replaced"):
                inserted.append((i, declared.record))
                if why:
                    replaced.append(name)
        if replaced:
            cur.execute("DELETE FROM executors_schedules WHERE name = ANY(%s)", (replaced,))
        written: set[str] = set()
        if inserted:
            columns = [list(c) for c in zip(*(table.encode(r) for _, r in inserted),
                                            strict=True)]
            cur.execute(_INSERT.format(columns=table.columns), columns)
            written.update(row[0] for row in cur.fetchall())
        if updated:
            encoded = [table.encode(r) for _, r, _ in updated]
            cur.execute(_UPDATE, [[e[0] for e in encoded], [e[1] for e in encoded],
                                  [e[2] for e in encoded], [e[4] for e in encoded],
                                  [e[5] for e in encoded], [v for _, _, v in updated]])
            written.update(row[0] for row in cur.fetchall())
        if written:
            cur.execute("SELECT pg_notify(%s, '')", (channel,))  # one for the batch
    lost = [i for i, r in inserted if r.name not in written]
    lost += [i for i, r, _ in updated if r.name not in written]
    for i in lost:
        out[i] = None
    return lost
