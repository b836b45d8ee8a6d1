"""The ``executors traverse`` command: walk a stored tree in batched, time-bounded transactions."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import TextIO

from executors import _validate
from executors.aio import Semaphore, Store, Traversal, TraversalStatistics, Visit
from executors.errors import TransactionRetry

from ._urls import redact

__all__ = ("DESCRIPTION", "EPILOG", "HELP", "NAME", "add_arguments", "run")

NAME = "traverse"
HELP = "traverse a tree stored in SQLite or PostgreSQL in batched transactions"
DESCRIPTION = (
    "Visit every node of the tree in the nodes table (see "
    "integrations.traversal_stores.sqlite.SCHEMA) in time-bounded transactions, with "
    "prefetching reads under a fair semaphore; a progress bar on stderr.\n\n"
    "STORE is a SQLite file or a PostgreSQL database. A SQLite file is a plain path (tree.db, "
    "/srv/tree.db) or a URL in SQLAlchemy's form: sqlite:///tree.db (three slashes: a path "
    "relative to the current folder) or sqlite:////srv/tree.db (four slashes: an absolute "
    "path). A PostgreSQL database is postgresql://user@host/dbname."
)
EPILOG = None

_SQLITE = "sqlite:///"
_POSTGRES = ("postgresql://", "postgres://")
_STORE_FORMS = "tree.db, sqlite:///tree.db, sqlite:////srv/tree.db or postgresql://..."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of `executors traverse` on *parser*."""
    parser.add_argument("store", metavar="STORE",
                        help="a SQLite file: tree.db, sqlite:///tree.db (relative) or "
                        "sqlite:////srv/tree.db (absolute); or postgresql://...")
    parser.add_argument("--mode", choices=("strict", "relaxed", "any"), default="strict",
                        help="traversal order (default strict: a directory, its files by name, "
                        "then its subdirectories by name; relaxed and any trade order for "
                        "speed)")
    parser.add_argument("--budget", type=float, default=5.0,
                        help="seconds per transaction, > 0 (default 5, FoundationDB's limit)")
    parser.add_argument("--limit", type=int, default=8,
                        help="concurrent store operations, >= 1 (default 8)")
    parser.add_argument("--window", type=int, default=16,
                        help="listings read ahead, >= 1 (default 16)")
    parser.add_argument("--page-size", type=int, default=64,
                        help="children per listing, >= 1 (default 64)")
    parser.add_argument("--print", action="store_true", dest="print_paths",
                        help="print each visited path on stdout")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


class _Progress:
    """The progress bar: one line redrawn with ``\\r`` on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO, total: int) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._total = total
        self._started = time.monotonic()

    def update(self, stats: TraversalStatistics, *, last: bool = False) -> None:
        total = self._total
        done = min(stats.visits, total) if total else stats.visits
        width = 30
        filled = int(width * done / total) if total else 0
        rate = stats.visits / max(time.monotonic() - self._started, 1e-9)
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} nodes  "
                f"{stats.commits} txns  {stats.retries} retries  {rate:,.0f} nodes/s")
        if self._tty:
            print("\r" + line, end="\n" if last else "", file=self._stream, flush=True)
        elif not last:  # a log already has the last commit's line; the summary follows
            print(line, file=self._stream, flush=True)


def _print_visit(visit: Visit) -> None:
    print("/" + "/".join(visit.path) + ("" if visit.node is not None else "  (gone)"))


async def _traverse_store(args: argparse.Namespace, store: Store, total: int
                          ) -> TraversalStatistics:
    progress = None if args.no_progress else _Progress(sys.stderr, total)
    traversal = Traversal(
        store, _print_visit if args.print_paths else (lambda visit: None), mode=args.mode,
        budget=args.budget, page_size=args.page_size, window=args.window,
        limiter=Semaphore(args.limit),
        on_commit=progress.update if progress is not None else None)
    stats = await traversal.run()
    if progress is not None:
        progress.update(stats, last=True)
    return stats


#: Seconds the first connection to a PostgreSQL STORE may take (asyncpg's default is 60).
CONNECT_TIMEOUT = 10.0


class _Unreachable(Exception):
    """The STORE is well formed but could not be reached: one line, exit status 1."""


def _sqlite_path(store: str) -> str | None:
    """The file a SQLite *store* names, or None for a PostgreSQL URL.

    SQLAlchemy's rule: ``sqlite:///tree.db`` (three slashes) is the relative path tree.db and
    ``sqlite:////srv/tree.db`` (four) the absolute /srv/tree.db. A STORE with no ``://`` is a
    plain path.

    Raises:
        ValueError: *store* is neither (another scheme, ``sqlite://`` with two slashes, or a
            URL with no path).
    """
    if store.startswith(_POSTGRES):
        return None
    if "://" not in store:
        return store
    if store.startswith(_SQLITE) and store[len(_SQLITE):]:
        return store[len(_SQLITE):]
    raise ValueError(f"STORE must be {_STORE_FORMS}, got {store!r}")


def _missing_sqlite(store: str, path: str) -> str:
    """The usage error for a SQLite *store* whose file *path* does not exist.

    Three slashes are a relative path, which many users do not know: when the absolute path
    the URL looks like exists, the error names it and the URL that reaches it.
    """
    message = f"STORE: no SQLite database at {path!r}"
    if not store.startswith(_SQLITE) or os.path.isabs(path):
        return message
    if os.path.exists("/" + path):
        return (f"{message}, relative to the current folder; did you mean "
                f"sqlite:////{path} (four slashes: the absolute path /{path})?")
    return (f"{message} (sqlite:/// with three slashes is a path relative to the current "
            "folder; four slashes make it absolute)")


async def _traverse(args: argparse.Namespace) -> TraversalStatistics:
    url: str = args.store
    path = _sqlite_path(url)
    if path is not None:
        import sqlite3

        from integrations.traversal_stores.sqlite import SQLiteStore

        try:
            store = SQLiteStore(path)
        except sqlite3.Error as exc:  # a directory, a file that is not a database
            raise ValueError(f"STORE {url}: not a SQLite database ({exc})") from None
        try:
            try:
                total = store.count()
            except sqlite3.Error as exc:
                raise ValueError(f"STORE {url}: not a traversal store ({exc})") from None
            return await _traverse_store(args, store, total)
        finally:
            store.close()
    try:
        import asyncpg
    except ImportError:
        raise _Unreachable("a postgresql:// STORE needs asyncpg: pip install asyncpg") from None

    from integrations.traversal_stores.postgres import PostgresStore

    shown = redact(url)
    try:
        pg = PostgresStore(url, readers=max(0, args.limit - 1))
        async with asyncio.timeout(CONNECT_TIMEOUT):
            await pg.open()
    except ValueError as exc:  # asyncpg could not parse the URL
        raise ValueError(f"STORE {shown}: {exc}") from None
    except TimeoutError:
        raise _Unreachable(f"STORE {shown}: no answer within {CONNECT_TIMEOUT:g} s") from None
    except (OSError, TransactionRetry, asyncpg.PostgresError) as exc:
        # Refused, unknown host, bad password, no such database: what the server said.
        reason = exc.__cause__ if isinstance(exc, TransactionRetry) and exc.__cause__ else exc
        raise _Unreachable(f"STORE {shown}: cannot connect: {reason}") from None
    try:
        return await _traverse_store(args, pg, await pg.count())
    finally:
        await pg.close()


def _check_options(args: argparse.Namespace) -> None:
    """Refuse a bad option value before anything starts, naming the flag as typed (exit 2).

    ``--limit 0`` once hung forever (a semaphore with no permit) and ``--limit -1`` reported
    the semaphore's own message: every value is checked here, by the one rule.
    """
    url: str = args.store
    try:
        _validate.seconds(args.budget, "--budget", allow_zero=False)
        _validate.count(args.limit, "--limit")
        _validate.count(args.window, "--window")
        _validate.count(args.page_size, "--page-size")
        path = _sqlite_path(url)
        if path is not None and not os.path.exists(path):
            raise ValueError(_missing_sqlite(url, path))
    except (TypeError, ValueError) as exc:
        args.parser.error(str(exc))


def run(args: argparse.Namespace) -> int:
    """Run `executors traverse` for parsed *args*; return the exit status."""
    _check_options(args)
    try:
        stats = asyncio.run(_traverse(args))
    except (FileNotFoundError, ValueError) as exc:
        print(f"executors traverse: {exc}", file=sys.stderr)
        return 2
    except _Unreachable as exc:
        print(f"executors traverse: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nexecutors traverse: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `--print | head`: the reader has what it wanted
        sys.stderr.close()
        return 0
    print(f"executors traverse: {stats.visits:,} nodes in {stats.commits} transactions, "
          f"{stats.retries} retries, redo ratio {stats.redo_ratio:.3f}, "
          f"{stats.elapsed:.2f}s", file=sys.stderr)
    return 0
