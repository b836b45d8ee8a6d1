"""Declarations in a SQLite store's write transaction: one schedule, or a batch of them in one
transaction (one commit, where one transaction a schedule paid a commit each)."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from ._records import Declared, ScheduleDefinition, ScheduleRecord, StoreFormatError, from_epoch
from ._shared import declaration
from ._sqlite_sql import COLUMNS, NOW
from ._transitions import unchanged

__all__ = ("all_unchanged", "declare_all", "declare_in")

#: How a store reads one record by name on a connection (None: no such record; raises
#: `StoreFormatError` when it cannot be read).
Read = Callable[[sqlite3.Connection, str], ScheduleRecord | None]
#: How a store writes a record: inserted (`expect_version` None) or over that version.
Put = Callable[[sqlite3.Connection, ScheduleRecord, int | None], bool]
FirstFire = Callable[[dt.datetime], dt.datetime | None]
#: How a store decodes a row read (`COLUMNS`); raises `StoreFormatError`.
Decode = Callable[[tuple[Any, ...]], ScheduleRecord]


def _clock(conn: sqlite3.Connection) -> dt.datetime:
    (seconds,) = conn.execute(f"SELECT {NOW}").fetchone()
    return from_epoch(float(seconds))


def declare_in(conn: sqlite3.Connection, definition: ScheduleDefinition, first_fire: FirstFire,
               read: Read, put: Put, now: Callable[[], dt.datetime] | None = None) -> Declared:
    """``declare(definition, first_fire)`` inside the write transaction of `conn`; `now`
    reads the store's clock (by default, once for this declaration if it needs it)."""
    name, stored = definition.name, None
    try:
        old, unreadable = read(conn, name), ""
    except StoreFormatError as exc:
        # Written over inside this write transaction: no other writer in between.
        (stored,) = conn.execute(
            "SELECT version FROM executors_schedules WHERE name = ?", (name,)).fetchone()
        old, unreadable = None, str(exc)

    clock = now if now is not None else lambda: _clock(conn)
    declared = declaration(definition, old, lambda: first_fire(clock()), unreadable=unreadable,
                           stored_version=stored)
    if declared.outcome == "replaced":
        conn.execute("DELETE FROM executors_schedules WHERE name = ?", (name,))
    if declared.outcome != "unchanged":
        put(conn, declared.record, None if old is None else old.version)
    return declared


def declare_all(conn: sqlite3.Connection,
                declarations: Sequence[tuple[ScheduleDefinition, FirstFire]],
                read: Read, put: Put) -> list[Declared | Exception]:
    """`declare_in` for each of `declarations`, inside the write transaction of `conn`, each
    in a savepoint of its own: one the file refuses (a trigger, a constraint), or whose
    definition or first fire time fails, is rolled back and answered with its exception
    alone, and the others are written (``SupportsDeclareMany.declare_many``)."""
    out: list[Declared | Exception] = []
    read_at: list[dt.datetime] = []

    def now() -> dt.datetime:  # one reading of the clock for the batch's one transaction
        if not read_at:
            read_at.append(_clock(conn))
        return read_at[0]

    for definition, first_fire in declarations:
        conn.execute("SAVEPOINT declaring")
        try:
            out.append(declare_in(conn, definition, first_fire, read, put, now))
        except Exception as exc:
            conn.execute("ROLLBACK TO declaring")
            out.append(exc)
        conn.execute("RELEASE declaring")
    return out


def all_unchanged(conn: sqlite3.Connection,
                  declarations: Sequence[tuple[ScheduleDefinition, FirstFire]],
                  decode: Decode) -> list[Declared | Exception] | None:
    """Each of `declarations` "unchanged", if the file holds each as declared: read in one
    statement, outside any write transaction (a process starting again with the schedules
    it had waits for no other process's write lock, nor holds it); else None (the batch is
    then declared in a write transaction, which reads each again)."""
    names = [definition.name for definition, _ in declarations]
    if len(set(names)) != len(names):
        return None
    rows = conn.execute(f"SELECT {COLUMNS} FROM executors_schedules WHERE name IN "
                        "(SELECT value FROM json_each(?))", (json.dumps(names),)).fetchall()
    found = {row[0]: row for row in rows}
    kept: list[Declared | Exception] = []
    for definition, _ in declarations:
        row = found.get(definition.name)
        try:
            old = None if row is None else decode(row)
            if old is None or not unchanged(old, definition, definition.digest()):
                return None
        except (StoreFormatError, ValueError):  # declared in the transaction: its own answer
            return None
        kept.append(Declared(old, "unchanged"))
    return kept
