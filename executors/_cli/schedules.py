"""The ``executors schedules`` command: list and steer the schedules kept in a store."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sqlite3
import sys

from executors._service.store import (
    ScheduleRecord,
    ScheduleStore,
    StoreFormatError,
    open_store,
    sqlite_path,
)
from executors._service.stored import resume_record
from executors._urls import redact

from ._words import plural

__all__ = ("DESCRIPTION", "EPILOG", "HELP", "NAME", "add_arguments", "run")

NAME = "schedules"
HELP = "list the schedules of a store; pause, resume, run now or remove one"
DESCRIPTION = (
    "Read the schedules a BackgroundService keeps in STORE and change them. Without an action, "
    "list every schedule: its trigger as written, the next fire time in its zone and in UTC, "
    "the last run and its result, whether it is paused, and who holds a run in progress (the "
    "owner and what is left of its lease). Changes reach every process serving the store."
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


def _describe(record: ScheduleRecord, now: dt.datetime) -> list[str]:
    state = "paused" if record.paused else "active"
    lines = [f"{record.name}  [{state}]  {_trigger(record)}  -> {record.definition.target}",
             f"  next fire  {_local(record.next_fire, record)}"]
    if record.last_fire is not None:
        lines.append(f"  last run   {_local(record.last_fire, record)}: {record.last_result}")
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
    return lines


def _list(store: ScheduleStore) -> int:
    now = store.now()
    records = store.records()
    corrupt = store.corrupt()
    if not records and not corrupt:
        print(f"no schedules in {store.display_url}")
        return 0
    for record in records:
        print("\n".join(_describe(record, now)))
    for name, reason in corrupt:
        print(f"{name}  [unreadable]  {reason}")
    print(f"{plural(len(records), 'schedule')} in {store.display_url}"
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


def run(args: argparse.Namespace) -> int:
    """Run `executors schedules`; return its exit status (2: usage, 1: store or name)."""
    parser: argparse.ArgumentParser = args.parser
    if args.action == "list" and args.name is not None:
        parser.error("list takes no NAME")
    if args.action != "list" and not args.name:
        parser.error(f"{args.action} needs the NAME of a schedule")
    try:
        if args.store.lower().startswith("sqlite:") and \
                not os.path.exists(sqlite_path(args.store)):
            # Opening would create an empty store: a typo must not look like "no schedules".
            print(f"executors schedules: no SQLite store at {sqlite_path(args.store)!r} "
                  "(sqlite:///relative.db, sqlite:////absolute.db)", file=sys.stderr)
            return 1
        store = open_store(args.store)
    except (ValueError, TypeError) as exc:
        parser.error(f"STORE: {exc}")
    except ConnectionError as exc:  # its message names the URL, password hidden
        print(f"executors schedules: {exc}", file=sys.stderr)
        return 1
    except (ImportError, StoreFormatError, OSError, sqlite3.Error) as exc:
        print(f"executors schedules: {redact(args.store)}: {exc}", file=sys.stderr)
        return 1
    try:
        if args.action == "list":
            return _list(store)
        try:
            acted = _act(store, args.action, args.name)
        except StoreFormatError as exc:  # an unreadable record: only `remove` reaches it
            print(f"executors schedules: cannot {args.action} {args.name!r} in "
                  f"{store.display_url}: {exc}; remove it, or declare it again in code",
                  file=sys.stderr)
            return 1
        if not acted:
            print(f"executors schedules: no schedule named {args.name!r} in "
                  f"{store.display_url}", file=sys.stderr)
            return 1
        print(f"{args.action}: {args.name}")
        return 0
    finally:
        store.close()
