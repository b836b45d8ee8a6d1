"""Opening a SQLite store's file: looked at read-only before anything is written, made 0600.

What a file holds is read through a read-only connection first: a file of a newer format, or
one whose format is not a number, is refused before the store adds a table, a column or an
index to it; a file that is not a store is refused when the caller asked for an existing
store (the command), never altered. A new file is created owner-only (0600), whatever the
umask: SQLite gives its ``-wal`` and ``-shm`` companions the database file's permissions. A
place where no file can be opened (a folder, a missing folder, a read-only location) is a
`ConnectionError` naming the path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import urllib.parse

from ._records import StoreFormatError
from ._shared import check_format, no_store

__all__ = ("Found", "connect_read_only", "open_file", "sqlite_path", "unopenable")

#: The store's tables (a file holding both is a store).
_TABLES = ("executors_meta", "executors_schedules")
#: Columns added after the first format, and what a read-only look reads in their place in a
#: file made before them (it cannot add them: it writes nothing).
_LATER_COLUMNS = {"changed": "0", "claim_token": "NULL"}


_SQLITE_FORMS = ("write sqlite:///jobs.db (a file relative to the working folder) or "
                 "sqlite:////srv/jobs.db (an absolute path)")


def sqlite_path(url: str) -> str:
    """The file of a ``sqlite:`` URL: ``sqlite:///jobs.db`` is relative to the working
    folder, ``sqlite:////srv/jobs.db`` absolute (SQLAlchemy's rule). Those two forms only:
    the URL names a file, nothing else.

    Raises:
        ValueError: the URL names no file, is of another form (``sqlite:/jobs.db``, which
            would be the root's ``/jobs.db``; ``sqlite://host/jobs.db``), or has a query or
            a fragment (``?mode=ro``: no option is read, and none may end up in the file's
            name), each named, with the two accepted forms.
    """
    scheme, colon, rest = url.partition(":")
    if not colon or scheme.lower() != "sqlite":
        raise ValueError(f"store {url!r} is not a sqlite: URL: {_SQLITE_FORMS}")
    if not rest.startswith("///"):
        what = "names no file" if rest in ("", "/", "//") else (
            "has a host" if rest.startswith("//") else "has fewer than three slashes")
        raise ValueError(f"store {url!r} {what}: {_SQLITE_FORMS}")
    path = rest[3:]
    for mark, what in (("?", "a query"), ("#", "a fragment")):
        if mark in path:
            extra = path[path.index(mark):]
            raise ValueError(f"store {url!r} has {what} ({extra!r}), which a sqlite: store "
                             f"does not take: the URL names a file only ({_SQLITE_FORMS})")
    if not path:
        raise ValueError(f"store {url!r} names no file: {_SQLITE_FORMS}")
    return path


@dataclasses.dataclass(frozen=True)
class Found:
    """What a store's file held when it was opened."""

    #: Whether the file holds the store's tables.
    is_store: bool
    #: The store format it was written by, None when it records none.
    format: int | None
    #: The columns of its schedules table (empty when there is none).
    columns: frozenset[str]


def unopenable(shown: str, path: str, reason: str) -> ConnectionError:
    """The error of a store whose file cannot be opened, naming the path and why."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        reason = "it is a folder, not a file"
    elif not os.path.isdir(folder):
        reason = f"the folder {folder!r} does not exist"
    elif (not os.access(folder, os.W_OK)
          or (os.path.exists(path) and not os.access(path, os.W_OK))
          or any(word in reason.lower() for word in ("permission", "read-only", "readonly"))):
        reason += " (a read-only location: the store writes the file and its folder)"
    return ConnectionError(f"cannot open the schedule store {shown} ({path!r}): {reason}")


def connect_read_only(path: str, timeout: float, columns: frozenset[str]
                      ) -> sqlite3.Connection:
    """A connection that cannot write the file (SQLite's ``mode=ro``). In a file made before
    a later column, a temporary view of the same name reads a default in its place: the
    queries are the writer's, and the file is left as it is."""
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None,
                           check_same_thread=False)
    missing = [f"{default} AS {name}" for name, default in _LATER_COLUMNS.items()
               if name not in columns]
    if columns and missing:
        # TEMP objects live in the connection's own temporary database, not in the file; a
        # temporary view shadows the file's table of the same name.
        conn.execute(f"CREATE TEMP VIEW executors_schedules AS SELECT *, {', '.join(missing)} "
                     "FROM main.executors_schedules")
    return conn


def _create_private(path: str, shown: str) -> None:
    """Create `path` empty (SQLite reads an empty file as an empty database), readable and
    writable by its owner only, whatever the umask; nothing if it exists (another process
    made it first)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise unopenable(shown, path, exc.strerror or str(exc)) from None
    try:
        os.fchmod(fd, 0o600)  # a umask such as 0o277 takes the owner's bits away too
    finally:
        os.close(fd)


def open_file(path: str, shown: str, *, create: bool, timeout: float) -> Found:
    """Look at the store's file before anything is written to it: create it (0600) if
    `create` and it is missing, then read what it holds through a read-only connection.

    Raises:
        ConnectionError: no file can be opened there (a folder, a missing folder, a
            read-only location), or there is none and `create` is False; naming the path.
        StoreFormatError: not a SQLite database; a newer format, or one that is not a
            number; or, when not `create`, a database that is not a store.
    """
    if os.path.isdir(path):
        raise unopenable(shown, path, "")
    if create:
        _create_private(path, shown)
    elif not os.path.exists(path):
        raise unopenable(shown, path, "no such file")
    try:
        with contextlib.closing(connect_read_only(path, timeout, frozenset())) as conn:
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                _TABLES)}
            value = None
            if "executors_meta" in tables:
                row = conn.execute(
                    "SELECT value FROM executors_meta WHERE key = 'format'").fetchone()
                value = None if row is None else row[0]
            columns = frozenset(row[1] for row in conn.execute(
                "PRAGMA table_info(executors_schedules)"))
    except sqlite3.OperationalError as exc:
        raise unopenable(shown, path, str(exc)) from None
    except sqlite3.DatabaseError as exc:
        raise StoreFormatError(f"{shown} is not a SQLite database ({exc})") from None
    found = Found(len(tables) == len(_TABLES), check_format(value, shown), columns)
    if not create and not found.is_store:
        raise no_store(shown, f"a SQLite database but no "
                              f"{' or '.join(sorted(set(_TABLES) - tables))} table")
    return found
