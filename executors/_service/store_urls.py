"""A schedule store from its URL: the scheme table (`open_store`), and the file a ``sqlite:``
URL names (two forms, SQLAlchemy's, and nothing else)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from executors._urls import redact

if TYPE_CHECKING:
    from .store import ScheduleStore

__all__ = ("open_store", "sqlite_path")

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


# scheme -> (module, class), imported only when a URL names it: the core imports no driver.
_BACKENDS = {
    "sqlite": ("executors._service.sqlite_schedules", "SQLiteScheduleStore", None),
    "mongodb": ("integrations.schedule_stores.mongo", "MongoScheduleStore", "mongo"),
    "mongodb+srv": ("integrations.schedule_stores.mongo", "MongoScheduleStore", "mongo"),
    "postgresql": ("integrations.schedule_stores.postgres", "PostgresScheduleStore",
                   "postgres"),
    "postgres": ("integrations.schedule_stores.postgres", "PostgresScheduleStore", "postgres"),
}


def open_store(url: str, *, create: bool = True) -> ScheduleStore:
    """The store a URL names: ``memory:``, ``sqlite:///path``, ``mongodb://...``,
    ``postgresql://...``. `create` False: the store must already exist; where there is
    none, nothing is created (no file, table, collection, index or format record) and it is
    refused (`StoreFormatError`; a missing SQLite file: ConnectionError).

    Raises:
        TypeError: `url` is not a string.
        ValueError: an unknown scheme (naming it and the known ones), or a URL its driver
            cannot read (naming it, secrets hidden).
        ImportError: the scheme's driver is not installed (naming the extra to install).
        ConnectionError: the store cannot be reached (naming the URL, secrets hidden).

    Every message names the URL with its password and secret query values (``password``,
    ``sslpassword``, ``passfile``, ``token``, ``secret``) hidden, and is not chained to the
    driver's error.
    """
    if not isinstance(url, str):
        raise TypeError(f"store must be a URL or a store object, got {type(url).__name__}")
    scheme = url.partition(":")[0].lower()
    if scheme == "memory":  # found as the other backends are: memory_schedules imports this
        memory = importlib.import_module("executors._service.memory_schedules")
        return memory.MemoryStore()  # type: ignore[no-any-return]
    backend = _BACKENDS.get(scheme)
    if backend is None:
        known = ", ".join(["memory", *sorted(_BACKENDS)])
        raise ValueError(f"store URL scheme {scheme!r} is not one of: {known} "
                         f"(in {redact(url)!r})")
    module_name, class_name, extra = backend
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"the {scheme}:// store needs a driver that is not installed "
                          f"({exc.name}): pip install 'executors[{extra}]'") from exc
    factory: Callable[..., ScheduleStore] = getattr(module, class_name)
    return factory(sqlite_path(url) if scheme == "sqlite" else url, create=create)
