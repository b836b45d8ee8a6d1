"""The SQLite schedule store's schema and statements, and a record as a row's parameters.

The statements are the store's whole contract with the file (`sqlite_schedules` runs them);
the time in each is SQLite's own (`NOW`), read in the statement that decides.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from executors._clock import wall_skew

from ._records import ScheduleRecord, record_fields, to_epoch

__all__ = ("CHANGED_INDEX", "CLAIMABLE_TABLE", "COLUMNS", "COMPLETE", "COMPLETE_STAMPED", "DUE",
           "EXPIRED", "LATEST", "NOW", "SCHEMA", "UPDATE_STATE", "not_in", "opt_epoch",
           "record_params", "state_json", "state_params")

SCHEMA = """
CREATE TABLE IF NOT EXISTS executors_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS executors_schedules (
    name         TEXT PRIMARY KEY,
    definition   TEXT NOT NULL,
    digest       TEXT NOT NULL,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_fire    REAL,
    version      INTEGER NOT NULL,
    owner        TEXT,
    lease_until  REAL,
    running_fire REAL,
    attempt      INTEGER NOT NULL DEFAULT 0,
    state        TEXT NOT NULL,
    changed      INTEGER NOT NULL DEFAULT 0,
    claim_token  TEXT
);
CREATE INDEX IF NOT EXISTS executors_schedules_due
    ON executors_schedules (next_fire) WHERE paused = 0;
CREATE INDEX IF NOT EXISTS executors_schedules_running
    ON executors_schedules (lease_until) WHERE running_fire IS NOT NULL;
"""
# After the `changed` column exists (a file made before it gains it first).
CHANGED_INDEX = """
CREATE INDEX IF NOT EXISTS executors_schedules_changed ON executors_schedules (changed);
"""

# The store's clock, read by SQLite's C library in the same statement that decides: the clock
# of the process running the statement (on one machine, the kernel's clock they all share), so
# the wall-skew test hook shifts it as a faked clock (libfaketime) would.
# Rounded to the microsecond, as instants are everywhere else (a float that round-trips through
# a datetime must compare equal to itself).
NOW = (f"round((julianday('now') - 2440587.5) * 86400.0 + {wall_skew()!r}, 6)" if wall_skew()
        else "round((julianday('now') - 2440587.5) * 86400.0, 6)")
COLUMNS = ("name, definition, digest, paused, next_fire, version, owner, lease_until, "
            "running_fire, attempt, state, claim_token")
# A claim or a completion leaves the definition as it is: it writes the state columns only.
# Conditional on the record as the claim read it: its version (a claim, completion or control
# operation moves it) and its lease (a renewal, which leaves the version, moves that).
UPDATE_STATE = ("UPDATE executors_schedules SET paused = ?, next_fire = ?, version = ?, "
                 "owner = ?, lease_until = ?, running_fire = ?, attempt = ?, state = ?, "
                 "claim_token = ?, changed = ? WHERE name = ? AND version = ? "
                 "AND lease_until IS ?")
# The names a claimer declares (`Claimable.names`), in a table of its own connection.
CLAIMABLE_TABLE = ("CREATE TEMP TABLE IF NOT EXISTS executors_claimable "
                    "(name TEXT PRIMARY KEY) WITHOUT ROWID")
# What a claim reads: the runs whose lease expired, then the idle due records, each an ordered
# walk of a partial index that stops at the limit; `{where}` leaves out what the claimer does
# not admit (`_only`) and the records found unreadable.
EXPIRED = (f"SELECT {COLUMNS} FROM executors_schedules WHERE running_fire IS NOT NULL "
            "AND lease_until < ?{where} ORDER BY lease_until LIMIT ?")
DUE = (f"SELECT {COLUMNS} FROM executors_schedules WHERE paused = 0 "
        "AND running_fire IS NULL AND next_fire <= ?{where} ORDER BY next_fire LIMIT ?")
# `finish_record` in SQL (the counters live in the JSON state): the run is counted, a
# failure too, the fire time and result become the last ones, the lease is let go. Fenced by
# the claim's token (`holds`): a control operation since the claim does not refuse it.
COMPLETE = ("UPDATE executors_schedules SET version = version + 1, owner = NULL, "
             "lease_until = NULL, running_fire = NULL, claim_token = NULL, "
             "changed = {changed}, state = json_set("
             "state, '$.counters.runs', COALESCE(json_extract(state, '$.counters.runs'), 0) + 1, "
             "'$.counters.failures', "
             "COALESCE(json_extract(state, '$.counters.failures'), 0) + ?, "
             # SQLite writes a REAL into JSON with 15 digits: an instant needs 16 (to the µs).
             "'$.last_fire', CASE WHEN running_fire IS NULL THEN NULL "
             "ELSE json(printf('%.6f', running_fire)) END, "
             # The owner before this statement's own SET (SQL reads the row as it was).
             "'$.last_result', ?, '$.last_owner', owner) WHERE name = ? AND claim_token = ? "
             "AND running_fire IS NOT NULL")
# The latest change stamp: the largest on a row (an index read) or the latest removal's.
LATEST = ("MAX((SELECT COALESCE(MAX(changed), 0) FROM executors_schedules), "
           "(SELECT CAST(value AS INTEGER) FROM executors_meta WHERE key = 'removed'))")
# A batch of completions shares one change stamp, taken once (as a claim's batch does).
COMPLETE_STAMPED = COMPLETE.format(changed="?")
COMPLETE = COMPLETE.format(changed=f"{LATEST} + 1")
def state_json(record: ScheduleRecord) -> str:
    # The last run's owner is kept with the last run, in the state: no column to add, and a
    # record written before it was kept reads None.
    return json.dumps({"counters": dict(record.counters), "last_result": record.last_result,
                       "last_fire": None if record.last_fire is None
                       else record.last_fire.timestamp(), "last_owner": record.last_owner},
                      sort_keys=True)


def record_params(record: ScheduleRecord) -> tuple[object, ...]:
    f = record_fields(record)
    return (f["name"], json.dumps(f["definition"], sort_keys=True), f["digest"],
            int(record.paused), f["next_fire"], f["version"], f["owner"], f["lease_until"],
            f["running_fire"], f["attempt"], state_json(record), f["claim_token"])


def state_params(record: ScheduleRecord, changed: int, row: tuple[Any, ...],
                  state: str) -> tuple[object, ...]:
    """The parameters of `UPDATE_STATE` (a record whose definition is the stored one), over
    `row` as it was read (its raw version and lease: what the update matches)."""
    return (int(record.paused), opt_epoch(record.next_fire), record.version, record.owner,
            opt_epoch(record.lease_until), opt_epoch(record.running_fire), record.attempt,
            state, record.claim_token, changed, record.name, row[5], row[7])


def not_in(names: list[str]) -> str:
    """A condition leaving out `names` (one placeholder each), or nothing when there are
    none (the usual statement, as the statement cache knows it)."""
    return f" AND name NOT IN ({', '.join('?' * len(names))})" if names else ""


def opt_epoch(instant: dt.datetime | None) -> float | None:
    return None if instant is None else to_epoch(instant)
