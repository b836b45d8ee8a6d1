"""The scheme table: which backend a store URL names, imported only when a URL names it.

`BACKENDS` is data, so that the import arrows test can read it: its module paths are the one
place the core names `integrations` (a lazy, string import: the core imports no driver until a
URL asks for it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from executors._urls import redact

from ._memory import MemoryStore
from ._protocol import ScheduleStore
from ._sqlite_files import sqlite_path

__all__ = ("BACKENDS", "Backend", "open_store")


class Backend(NamedTuple):
    """Where the store class of a URL scheme lives."""

    #: The module to import (``"integrations.schedule_stores.postgres"``).
    module: str
    #: The store class in it; called as ``cls(url, create=create)``.
    attribute: str
    #: The ``pip install 'executors[extra]'`` that brings its driver (None: the stdlib's).
    extra: str | None


#: URL scheme -> its backend, imported only when a URL names it. ``memory:`` is not here: it
#: takes no URL and is always at hand.
BACKENDS: Mapping[str, Backend] = MappingProxyType({
    "sqlite": Backend("executors.stores", "SQLiteScheduleStore", None),
    "mongodb": Backend("integrations.schedule_stores.mongo", "MongoScheduleStore", "mongo"),
    "mongodb+srv": Backend("integrations.schedule_stores.mongo", "MongoScheduleStore",
                           "mongo"),
    "postgresql": Backend("integrations.schedule_stores.postgres", "PostgresScheduleStore",
                          "postgres"),
    "postgres": Backend("integrations.schedule_stores.postgres", "PostgresScheduleStore",
                        "postgres"),
})


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
    if scheme == "memory":
        return MemoryStore()
    backend = BACKENDS.get(scheme)
    if backend is None:
        known = ", ".join(["memory", *sorted(BACKENDS)])
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
