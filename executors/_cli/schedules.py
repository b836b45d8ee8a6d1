"""The ``executors schedules`` command: list and steer the schedules kept in a store."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sqlite3
import sys

from executors._service.stored import UNWATCHED_AFTER, resume_record
from executors.stores import (
    ScheduleRecord,
    ScheduleStore,
    SQLiteScheduleStore,
    StoreFormatError,
    open_store,
    sqlite_path,
)
from executors.stores import redact_url as redact
from executors.stores import scrub_url as scrub

from ._words import plural

__all__ = ("DESCRIPTION", "EPILOG", "HELP", "NAME", "add_arguments", "run")

NAME = "schedules"
HELP = "list the schedules of a store; pause, resume, run now or remove one"
DESCRIPTION = (
    "Read the schedules a BackgroundService keeps in STORE and change them. Without an action, "
    "list every schedule: its trigger as written, the next fire time in its zone and in UTC "
    "(none while paused; OVERDUE when it passed unclaimed), the last run, its result and the "
    "process that ran it, and who holds a run in progress (the owner and what is left of its "
    "lease). Stored text is shown escaped, never obeyed by the terminal. STORE must hold a "
    "store: a database that holds none is refused, nothing written; listing a SQLite file "
    "never writes to it. Changes reach every process serving the store."
)
EPILOG = """\
STORE:
  sqlite:///jobs.db          a file relative to the current folder (three slashes)
  sqlite:////srv/jobs.db     an absolute path (four slashes)
  mongodb://host/db          MongoDB (the mongo extra)
  postgresql://user@host/db  PostgreSQL (the postgres extra)

examples:
  executors schedules sqlite:///jobs.db
  executors schedules sqlite:///jobs.db pause nightly-report
  executors schedules mongodb://db.example/app run-now nightly-report
"""

_ACTIONS = ("list", "pause", "resume", "run-now", "remove")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the arguments of `executors schedules` on *parser*."""
    parser.add_argument("store", metavar="STORE", help="the store's URL (see below)")
    parser.add_argument("action", nargs="?", default="list", choices=_ACTIONS,
                        metavar="ACTION", help="list (default), pause, resume, run-now, remove")
    parser.add_argument("name", nargs="?", metavar="NAME", help="the schedule to act on")


# What a stored text must not send to a terminal as it is: C0 and C1 controls (an ANSI
# escape clears the screen, a newline forges a line), DEL, line and paragraph separators,
# the bidirectional overrides (they reorder what follows) and lone surrogates (they cannot
# be encoded: the listing would end in a traceback).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")


def _safe(text: object) -> str:
    r"""*text* with every character a terminal would act on written as an escape
    (``\x1b``, ``\n``, ``\u202e``): a stored name, target, owner or result is shown, never
    obeyed.

    Example:
        >>> _safe("report\x1b[2J\nnightly  [active]")
        'report\\x1b[2J\\nnightly  [active]'
    """
    return _UNSAFE.sub(_escape, str(text))


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in "\n\r\t":
        return repr(char)[1:-1]
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"


def _span(seconds: float) -> str:
    """A duration as people read it: ``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, _ = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def _local(instant: dt.datetime | None, record: ScheduleRecord) -> str:
    if instant is None:
        return "-"
    from executors.triggers import trigger_from_data

    try:
        zone = trigger_from_data(record.definition.trigger).tz
    except (ValueError, TypeError):
        zone = None
    utc = instant.strftime("%Y-%m-%d %H:%M:%S UTC")
    if zone is None:
        return utc
    return f"{instant.astimezone(zone).strftime('%Y-%m-%d %H:%M:%S %Z')} ({utc})"


def _trigger(record: ScheduleRecord) -> str:
    from executors.triggers import trigger_from_data

    try:
        return trigger_from_data(record.definition.trigger).describe()
    except (ValueError, TypeError) as exc:
        return f"unreadable trigger ({exc})"


def _next_fire(record: ScheduleRecord, now: dt.datetime) -> str:
    """The next fire time as it will happen: none while paused (resuming skips the fire
    times passed by then), overdue when it passed with no run in progress."""
    if record.paused:
        if record.next_fire is None:
            return "none (paused; the trigger is exhausted)"
        return (f"none while paused (stored {_local(record.next_fire, record)}; "
                "resuming skips the fire times passed by then)")
    shown = _local(record.next_fire, record)
    if record.next_fire is None or record.running_fire is not None or record.next_fire > now:
        return shown
    late = (now - record.next_fire).total_seconds()
    # Within the time a serving process takes to claim (the service's own bound: past it,
    # a fire time "passed unwatched"), due is not yet late.
    if late <= UNWATCHED_AFTER:
        return f"{shown}  (due now)"
    return f"{shown}  OVERDUE by {_span(late)} (no process has claimed it)"


def _describe(record: ScheduleRecord, now: dt.datetime) -> list[str]:
    state = "paused" if record.paused else "active"
    lines = [f"{record.name}  [{state}]  {_trigger(record)}  -> {record.definition.target}",
             f"  next fire  {_next_fire(record, now)}"]
    if record.last_fire is not None:
        by = f" on {record.last_owner}" if record.last_owner else ""
        lines.append(f"  last run   {_local(record.last_fire, record)}: "
                     f"{record.last_result}{by}")
    else:
        lines.append("  last run   never")
    if record.running_fire is not None and record.lease_until is not None:
        left = (record.lease_until - now).total_seconds()
        lease = f"lease {left:.0f} s left" if left >= 0 else f"lease expired {-left:.0f} s ago"
        lines.append(f"  running    {_local(record.running_fire, record)} on {record.owner} "
                     f"(attempt {record.attempt}, {lease})")
    counters = record.counters
    lines.append(f"  counts     runs {counters.get('runs', 0)}, failures "
                 f"{counters.get('failures', 0)}, missed {counters.get('missed', 0)}, lost "
                 f"{counters.get('lost', 0)}")
    # Each line escaped whole: every part but the labels is read from the store.
    return [_safe(line) for line in lines]


def _list(store: ScheduleStore) -> int:
    now = store.now()
    records = store.records()
    corrupt = store.corrupt()
    shown = _safe(store.display_url)
    if not records and not corrupt:
        print(f"no schedules in {shown}")
        return 0
    for record in records:
        print("\n".join(_describe(record, now)))
    for name, reason in corrupt:
        print(_safe(f"{name}  [unreadable]  {reason}"))
    print(f"{plural(len(records), 'schedule')} in {shown}"
          + (f", {len(corrupt)} unreadable" if corrupt else ""))
    return 0


def _act(store: ScheduleStore, action: str, name: str) -> bool:
    if action == "pause":
        return store.set_paused(name, True)
    if action == "resume":  # passed fire times are skipped, as the service's resume does
        return resume_record(store, name)[0]
    if action == "run-now":
        return store.set_next_fire(name, store.now())
    return store.remove(name)


def _store_errors() -> tuple[type[Exception], ...]:
    """The errors a store raises when it fails under a call: the OS's, SQLite's, and the
    driver's of a server store (whichever is loaded: a store's module loads its driver)."""
    errors: list[type[Exception]] = [OSError, sqlite3.Error]
    if "psycopg" in sys.modules:
        errors.append(sys.modules["psycopg"].Error)
    if "pymongo.errors" in sys.modules:
        errors.append(sys.modules["pymongo.errors"].PyMongoError)
    return tuple(errors)


def _open(url: str, action: str) -> ScheduleStore:
    """The store of `url`, which must exist (a database that holds none is refused, nothing
    written). A SQLite file is opened read-only to list: nothing written, not even the
    schema's upgrade."""
    if not url.lower().startswith("sqlite:"):
        # An existing store only: nothing is created in a database that holds none.
        return open_store(url, create=False)
    path = sqlite_path(url)
    if not os.path.exists(path):
        # Opening would create an empty store: a typo must not look like "no schedules".
        raise FileNotFoundError(f"no SQLite store at {path!r} "
                                "(sqlite:///relative.db, sqlite:////absolute.db)")
    return SQLiteScheduleStore(path, create=False, read_only=action == "list")


def run(args: argparse.Namespace) -> int:
    """Run `executors schedules`; return its exit status (2: usage, 1: store or name)."""
    parser: argparse.ArgumentParser = args.parser
    if args.action == "list" and args.name is not None:
        parser.error("list takes no NAME")
    if args.action != "list" and not args.name:
        parser.error(f"{args.action} needs the NAME of a schedule")
    try:
        store = _open(args.store, args.action)
    except (ValueError, TypeError) as exc:
        parser.error(f"STORE: {exc}")
    except FileNotFoundError as exc:
        print(f"executors schedules: {_safe(exc)}", file=sys.stderr)
        return 1
    except ConnectionError as exc:  # its message names the URL, secrets hidden
        print(f"executors schedules: {_safe(exc)}", file=sys.stderr)
        return 1
    except (ImportError, StoreFormatError, OSError, sqlite3.Error) as exc:
        print(f"executors schedules: {_safe(redact(args.store))}: {_safe(exc)}",
              file=sys.stderr)
        return 1
    shown = _safe(store.display_url)
    try:
        if args.action == "list":
            return _list(store)
        acted = _act(store, args.action, args.name)
    except StoreFormatError as exc:  # an unreadable record: only `remove` reaches it
        print(_safe(f"executors schedules: cannot {args.action} {args.name!r} in "
                    f"{shown}: {exc}; remove it, or declare it again in code"),
              file=sys.stderr)
        return 1
    except _store_errors() as exc:  # the store failed under the command: one line
        reason = scrub(" ".join(str(exc).split()), args.store)
        print(_safe(f"executors schedules: {args.action} in {shown} failed: "
                    f"{type(exc).__name__}: {reason}"), file=sys.stderr)
        return 1
    finally:
        store.close()
    if not acted:
        print(f"executors schedules: no schedule named {args.name!r} in {shown}",
              file=sys.stderr)
        return 1
    print(_safe(f"{args.action}: {args.name}"))
    return 0
