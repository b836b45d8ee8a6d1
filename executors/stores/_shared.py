"""What every store repeated, written once: the format check, the per-thread connection, the
read and conditional write of one record, and the outcome of a declaration.

A store author builds on these; the four stores of this library do. They are functions and one
small class, not a base class: the stores differ in exactly the place a base class would put its
template (SQLite and PostgreSQL write inside a transaction that cannot lose, MongoDB writes
conditionally and reads again when it lost; a declaration is an upsert in one and a delete and
insert in another), so each store keeps its own I/O and shares the decisions.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, final

from executors._urls import redact, scrub

from ._records import (
    FORMAT_VERSION,
    Claim,
    Declared,
    ScheduleDefinition,
    ScheduleRecord,
    StoreFormatError,
)
from ._transitions import (
    finish_claim,
    given_back,
    holds,
    new_record,
    redeclared,
    replacing,
    unchanged,
)

__all__ = (
    "redact_url",
    "scrub_url",
    "check_format",
    "no_store",
    "ThreadConnections",
    "Step",
    "finishing",
    "giving_back",
    "changing",
    "rewrite",
    "declaration",
    "declare_each",
    "DefinitionCache",
)

C = TypeVar("C")


def redact_url(url: str) -> str:
    """`url` as a message may show it: its password and secret query values (``password``,
    ``sslpassword``, ``passfile``, ``token``, ``secret``, ...) replaced by ``***``. A URL that
    does not parse shows its scheme and host only. A store's ``display_url`` is this.

    Example:
        >>> redact_url("postgresql://app:s3cret@db/jobs")
        'postgresql://app:***@db/jobs'
    """
    return redact(url)


def scrub_url(text: str, url: str) -> str:
    """`text` (a driver's message about `url`) with every secret of `url` hidden, also as a
    driver may have echoed it (cut into pieces by its parser, or percent-decoded)."""
    return scrub(text, url)


def check_format(value: object, shown: str) -> int | None:
    """The store format a store records (`value`, as read: a number or its text, None when the
    store records none), checked: a newer format or one that is not a number is refused.

    Raises:
        StoreFormatError: naming the store (`shown`, its ``display_url``), both formats, or
            the value read.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not re.fullmatch(r"[0-9]{1,9}", str(value)):
        raise StoreFormatError(f"{shown} records store format {str(value)!r:.40}, not a "
                               "number: it is no store this code can read")
    version = int(str(value))
    if version > FORMAT_VERSION:
        raise StoreFormatError(
            f"{shown} was written by store format {version}; this version of executors "
            f"reads format {FORMAT_VERSION} and older: upgrade executors")
    return version


def no_store(shown: str, missing: str) -> StoreFormatError:
    """The error of a store opened with ``create=False`` where there is none: `missing` says
    what was looked for and not found."""
    return StoreFormatError(f"{shown} holds no schedule store ({missing}): refused, "
                            "nothing written")


@final
class ThreadConnections(Generic[C]):
    """One connection per thread, opened by `connect` on first use, never crossing a fork.

    A database connection serves one statement (or transaction) at a time, so each thread has
    its own; a forked child finds its parent's connection under the same thread and must not
    use it (it shares the parent's socket or file locks), so a connection is opened again
    when the process id changed. Every connection made is kept for `all` (a store's
    ``interrupt``) and `take_all` (its ``close``), from any thread.

    Per-thread state that belongs to the connection (a temporary table's contents) is kept in
    `local`, reset with each new connection by `fresh`.

    Example:
        >>> conns = ThreadConnections(lambda: object())
        >>> conns.get() is conns.get()
        True
    """

    def __init__(self, connect: Callable[[], C], *, closed: Callable[[C], bool] | None = None,
                 fresh: Callable[[threading.local], None] | None = None) -> None:
        self._connect = connect
        self._closed = closed
        self._fresh = fresh
        self.local = threading.local()
        self._lock = threading.Lock()
        self._made: list[C] = []

    def __repr__(self) -> str:
        return f"<ThreadConnections open={len(self._made)}>"

    def get(self) -> C:
        """This thread's connection, opened now if it has none, or none in this process, or
        its connection was closed."""
        local = self.local
        conn: C | None = getattr(local, "conn", None)
        if conn is None or getattr(local, "pid", None) != os.getpid() or (
                self._closed is not None and self._closed(conn)):
            conn = self._connect()
            local.conn = conn
            local.pid = os.getpid()
            if self._fresh is not None:
                self._fresh(local)
            with self._lock:
                self._made.append(conn)
        return conn

    def all(self) -> list[C]:
        """Every connection made (from any thread), still open or not."""
        with self._lock:
            return list(self._made)

    def take_all(self) -> list[C]:
        """Every connection made, forgotten here: the caller closes them."""
        with self._lock:
            made, self._made = self._made, []
        return made


#: One step of `rewrite`: the record to write in place of the one read, or None to write
#: nothing (the answer is then False).
Step = Callable[[ScheduleRecord | None], ScheduleRecord | None]


def finishing(claim: Claim, result: str) -> Step:
    """The step of ``complete(claim, result)``: `finish_record`, if the record `holds` it."""
    return lambda record: finish_claim(record, claim, result)


def giving_back(claim: Claim, now: dt.datetime) -> Step:
    """The step of ``give_back(claim)`` at the store's `now`: `given_back`, if the record
    `holds` it."""
    return lambda record: given_back(record, claim, now) if holds(record, claim) else None


def changing(**changes: object) -> Step:
    """The step of a control operation (``set_paused``, ``set_next_fire``): `changes` written
    and the version moved, if there is a record."""
    def step(record: ScheduleRecord | None) -> ScheduleRecord | None:
        if record is None:
            return None
        return dataclasses.replace(record, version=record.version + 1,
                                   **changes)  # type: ignore[arg-type]
    return step


def rewrite(read: Callable[[], ScheduleRecord | None], step: Step,
            write: Callable[[ScheduleRecord, ScheduleRecord], bool]) -> bool:
    """Read one record, apply `step`, write the result conditionally; read again while the
    write lost to another writer. False when `step` writes nothing.

    `write(old, new)` writes `new` only if the stored record is still `old` (its version) and
    says whether it did. A store whose write cannot lose (it holds a lock or a transaction
    since `read`) returns True, and the loop runs once.
    """
    while True:
        old = read()
        new = step(old)
        if new is None or old is None:
            return False
        if write(old, new):
            return True


def declaration(definition: ScheduleDefinition, old: ScheduleRecord | None,
                first_fire: Callable[[], dt.datetime | None], *, digest: str | None = None,
                unreadable: str = "", stored_version: object = None) -> Declared:
    """What declaring `definition` does to the stored `old` (None: no record, or one that
    could not be read, `unreadable` saying why and `stored_version` its version as read):
    ``"unchanged"`` (`old` itself: write nothing), ``"added"`` (insert), ``"changed"`` (write
    over `old`, conditionally on its version) or ``"replaced"`` (write over the unreadable
    record). `first_fire()` (the trigger's first fire time at the store's now) is called only
    when a new next fire time is needed.
    """
    digest = digest or definition.digest()
    if old is not None and unchanged(old, definition, digest):
        return Declared(old, "unchanged")
    next_fire = first_fire()
    if old is not None:
        return Declared(redeclared(old, definition, next_fire, digest=digest), "changed")
    if unreadable:
        return Declared(replacing(definition, next_fire, stored_version, digest=digest),
                        "replaced", unreadable)
    return Declared(new_record(definition, next_fire, digest=digest), "added")


def declare_each(declare: Callable[[ScheduleDefinition, Callable[[dt.datetime],
                                                                  dt.datetime | None]], Declared],
                 declarations: Sequence[tuple[ScheduleDefinition,
                                              Callable[[dt.datetime], dt.datetime | None]]]
                 ) -> list[Declared | Exception]:
    """`declare` (a store's ``declare``) called for each ``(definition, first_fire)`` on its
    own, each answer or exception kept apart: what ``declare_many`` answers
    (`SupportsDeclareMany`) for a store with no faster way, or for the part of a batch that
    must be declared alone (a batch a store refused as a whole: one bad declaration then
    fails only itself).

    Example:
        >>> from executors.stores import MemoryStore, ScheduleDefinition
        >>> good = ScheduleDefinition("good", {"type": "date"}, "m:f")
        >>> bad = ScheduleDefinition("bad", {"type": "date"}, "m:f", [float("nan")])
        >>> [getattr(r, "outcome", type(r).__name__) for r in declare_each(
        ...     MemoryStore().declare, [(good, lambda now: now), (bad, lambda now: now)])]
        ['added', 'ValueError']
    """
    out: list[Declared | Exception] = []
    for definition, first_fire in declarations:
        try:
            out.append(declare(definition, first_fire))
        except Exception as exc:  # that schedule's failure alone: the others are declared
            out.append(exc)
    return out


@final
class DefinitionCache:
    """The definitions a store decoded, by schedule name, each beside a hash of the stored
    text it came from (BLAKE2b, 128 bits): a record read again with the same text reuses its
    decoded definition. A claim reads every record it takes, and most are read again
    unchanged, run after run; the cache keys on the text itself, not on the digest its writer
    wrote, and keeps 16 bytes a schedule where the text kept whole held 400 (a row kept to
    compare, a kilobyte). Shared by a store's threads: a dict's get and set are atomic, and
    two threads decoding one text agree."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[str, tuple[bytes, ScheduleDefinition]] = {}

    def decode(self, name: str, text: str) -> ScheduleDefinition:
        """The definition of schedule `name` stored as `text` (a JSON object).

        Raises:
            ValueError: `text` is not JSON.
            StoreFormatError: it is not a definition's object (what is wrong, named).
        """
        seen = hashlib.blake2b(text.encode(), digest_size=16).digest()
        known = self._known.get(name)
        if known is not None and known[0] == seen:
            return known[1]
        data = json.loads(text)
        if not isinstance(data, dict):
            raise StoreFormatError(f"schedule {name!r}: 'definition' is not an object")
        definition = ScheduleDefinition.from_data(name, data)
        self._known[name] = (seen, definition)
        return definition

    def forget(self, name: str) -> None:
        """Drop what is kept of `name` (a removed schedule)."""
        self._known.pop(name, None)

    def __len__(self) -> int:
        return len(self._known)
