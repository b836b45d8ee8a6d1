"""The pure record transitions a store applies: what a claim, a run's end, a give-back and a
declaration make of a record. No I/O: each store reads, applies one, and writes conditionally.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Iterable
from typing import TypeGuard

from ._records import (
    Claim,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
    make_claim,
    make_record,
)

__all__ = (
    "new_record",
    "replacing",
    "redeclared",
    "unchanged",
    "settle_claim",
    "finish_record",
    "finish_claim",
    "given_back",
    "holds",
    "earliest_due",
)


_COUNTERS = ("runs", "failures", "missed", "lost", "lease_lost")


def new_record(definition: ScheduleDefinition, next_fire: dt.datetime | None,
               version: int = 1, *, digest: str | None = None) -> ScheduleRecord:
    """The record of a schedule just added: not paused, no run yet, counters at zero.
    `digest`: `definition`'s, when the caller computed it already."""
    return ScheduleRecord(definition, digest or definition.digest(), False, next_fire, version,
                          None, None, None, 0, dict.fromkeys(_COUNTERS, 0), None, None)


def replacing(definition: ScheduleDefinition, next_fire: dt.datetime | None,
              stored_version: object, *, digest: str | None = None) -> ScheduleRecord:
    """The record a declaration writes over an unreadable one: new, at a version above the
    stored one when that is readable (a claim made on the old version cannot match).
    `digest`: as `new_record`'s."""
    old = stored_version if isinstance(stored_version, int) and stored_version > 0 else 0
    return new_record(definition, next_fire, version=old + 1, digest=digest)


def redeclared(old: ScheduleRecord, definition: ScheduleDefinition,
               next_fire: dt.datetime | None, *, digest: str | None = None) -> ScheduleRecord:
    """The record of a changed declaration: the new definition and next fire time, the old
    record's pause, counters and run in progress, and the next version. When the trigger is
    the stored one (arguments or policies changed, or a record rewritten in the store
    repaired) the stored next fire time is kept: a due or overdue fire time is not dropped
    unseen. `digest`: as `new_record`'s."""
    if old.definition.trigger == definition.trigger:
        next_fire = old.next_fire
    return dataclasses.replace(old, definition=definition, digest=digest or definition.digest(),
                               next_fire=next_fire, version=old.version + 1)


def unchanged(old: ScheduleRecord, definition: ScheduleDefinition, digest: str) -> bool:
    """Whether the stored `old` holds `definition` (whose digest is `digest`), judged by the
    stored definition itself, recomputed: never by the record's digest field, which any
    writer of the store may leave as it was while rewriting the definition."""
    try:
        return old.definition.digest() == digest
    except ValueError:  # not JSON any more (NaN written by hand): it differs
        return False


def settle_claim(record: ScheduleRecord, owner: str, now: dt.datetime, lease: float,
                 planner: Planner, on_crash: Callable[[ScheduleRecord], OnCrash],
                 token: str | None = None) -> tuple[ScheduleRecord, Claim | None] | None:
    """The pure heart of a claim, shared by the stores that claim client-side.

    Returns None when `record` is not claimable at `now` (paused, not due, or a live lease);
    else the record to write (conditionally, on the old version) and the claim it makes (None
    when the plan runs nothing: the record still moves forward and counts its misses).
    `token` is the claim's token (unique with the record's name: a batch may share one);
    None makes a new one.
    """
    token = token or uuid.uuid4().hex
    counters = dict(record.counters)
    lease_until = now + dt.timedelta(seconds=lease)
    settled = False
    if record.running_fire is not None:
        if record.lease_until is not None and record.lease_until >= now:
            return None  # a live lease: the run is in progress somewhere
        # The owner crashed (its lease expired, or was ended because the store saw it die) or
        # stalled past its lease: settle that run once, here.
        if on_crash(record) == "rerun" and not record.paused:
            attempt = record.attempt + 1
            version = record.version + 1
            updated = dataclasses.replace(record, version=version, owner=owner,
                                          lease_until=lease_until, attempt=attempt,
                                          claim_token=token)
            return updated, Claim(record.name, record.running_fire, attempt, version,
                                  lease_until, record.definition, token)
        counters["lost"] += 1
        record = dataclasses.replace(record, running_fire=None, owner=None, lease_until=None,
                                     counters=counters, last_fire=record.running_fire,
                                     last_result="lost", claim_token=None,
                                     last_owner=record.owner)
        counters = dict(counters)
        settled = True
    if record.paused or record.next_fire is None or record.next_fire > now:
        # Nothing to run; a settled crash is still written (once: the version moves).
        return (dataclasses.replace(record, version=record.version + 1), None) if settled \
            else None
    plan = planner(record, now)
    if plan is None:  # the planner's failure: the record stays as it is (a crash settled)
        return (dataclasses.replace(record, version=record.version + 1), None) if settled \
            else None
    counters["missed"] += plan.missed
    version = record.version + 1
    if plan.run is None:
        return dataclasses.replace(record, next_fire=plan.next_fire, version=version,
                                   counters=counters), None
    # `make_record`, not dataclasses.replace (twice the constructor's cost) nor the
    # constructor: this is every claim's path.
    updated = make_record(
        record.definition, record.digest, record.paused, plan.next_fire, version, owner,
        lease_until, plan.run, 1, counters, record.last_fire, record.last_result, token,
        record.last_owner)
    return updated, make_claim(record.name, plan.run, 1, version, lease_until,
                               record.definition, token, plan.run_late)


def finish_record(record: ScheduleRecord, result: str) -> ScheduleRecord:
    """The record after its run ended with `result` (``"ok"`` or ``"error: ..."``): only the
    run's fields, the counters and the last run change (and the version moves)."""
    counters = dict(record.counters)
    counters["runs"] += 1
    if result != "ok":
        counters["failures"] += 1
    return dataclasses.replace(record, version=record.version + 1, owner=None,
                               lease_until=None, running_fire=None, counters=counters,
                               last_fire=record.running_fire, last_result=result,
                               claim_token=None, last_owner=record.owner)


def finish_claim(record: ScheduleRecord | None, claim: Claim, result: str
                 ) -> ScheduleRecord | None:
    """The record after `claim`'s run ended with `result` (`finish_record`), or None if
    `record` no longer `holds` the claim (its lease was lost: nothing to write)."""
    return finish_record(record, result) if holds(record, claim) else None


def given_back(record: ScheduleRecord, claim: Claim, now: dt.datetime) -> ScheduleRecord:
    """The record after `claim` is given back unstarted (by an owner that is closing), as if
    it had not been made: a first attempt's fire time is due again (the next fire time moves
    back to it) with no run in progress, for any owner to claim at once, and uncounted (a
    claim that counted it missed, to run late, takes that count back: the next claim judges
    it again; the fire times the claim dropped stay counted, they are not due again); a
    rerun's lease ends now, so the next claim settles it as the crash it came from
    (``on_crash``), with the next attempt. Not a crash: the schedule is not held for a lease."""
    if claim.attempt > 1:
        return dataclasses.replace(record, lease_until=now - dt.timedelta(microseconds=1))
    next_fire = record.next_fire
    if next_fire is None or next_fire > claim.fire_time:
        next_fire = claim.fire_time
    counters = record.counters
    if claim.run_late:
        counters = {**counters, "missed": max(0, counters["missed"] - 1)}
    return dataclasses.replace(record, version=record.version + 1, next_fire=next_fire,
                               owner=None, lease_until=None, running_fire=None,
                               claim_token=None, counters=counters)


def holds(record: ScheduleRecord | None, claim: Claim) -> TypeGuard[ScheduleRecord]:
    """Whether `record` still holds `claim`'s run (the fence of its renewal and completion)."""
    return record is not None and record.claim_token == claim.token \
        and record.running_fire is not None


def earliest_due(records: Iterable[ScheduleRecord]) -> dt.datetime | None:
    """The earliest instant a claim could find work among `records` (see `next_due`)."""
    best: dt.datetime | None = None
    for record in records:
        if record.running_fire is not None:
            at = record.lease_until
        elif record.paused:
            continue
        else:
            at = record.next_fire
        if at is not None and (best is None or at < best):
            best = at
    return best
