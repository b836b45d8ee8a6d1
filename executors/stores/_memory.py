"""The schedule store kept in this process's memory (``memory:``, a test's store object).

The contract every store keeps is `executors.stores.ScheduleStore`; this one holds the
records in a dict under a lock, with this process's wall clock (or a test clock) as the
store's clock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import final

from ._claimable import Claimable
from ._records import (
    UTC,
    Claim,
    Declared,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
)
from ._shared import Step, changing, declaration, declare_each, giving_back, rewrite
from ._transitions import earliest_due, finish_claim, holds, settle_claim

__all__ = ("MemoryStore",)


@final
class MemoryStore:
    """A store in this process's memory (what ``BackgroundService()`` uses without a store).

    Its clock is this process's wall clock, or the `now` callable given (a test clock).
    """

    display_url = "memory:"

    def __init__(self, now: Callable[[], dt.datetime] | None = None) -> None:
        self._now = now or (lambda: dt.datetime.now(UTC))
        self._lock = threading.Lock()
        self._records: dict[str, ScheduleRecord] = {}

    def __repr__(self) -> str:
        return f"<MemoryStore schedules={len(self._records)}>"

    def now(self) -> dt.datetime:
        return self._now()

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        with self._lock:
            old = self._records.get(definition.name)
            declared = declaration(definition, old, lambda: first_fire(self.now()))
            self._records[definition.name] = declared.record
            return declared

    def declare_many(self, declarations: Sequence[tuple[
            ScheduleDefinition, Callable[[dt.datetime], dt.datetime | None]]]
                     ) -> list[Declared | Exception]:
        """`SupportsDeclareMany`: each as `declare` (a dict write: nothing to batch)."""
        return declare_each(self.declare, declarations)

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None = None) -> list[Claim]:
        token = uuid.uuid4().hex  # the batch's: unique with each record's name
        with self._lock:
            now = self.now()
            due = sorted((r for r in self._records.values()
                          if _maybe_due(r, now) and _admitted(r, only)), key=_due_key)
        # Planned outside the lock (a slow trigger search never holds the store), then each
        # written if its record is still the one planned (records are replaced, never
        # changed in place: any write since makes another object). Written once all are
        # settled: a planner or on_crash that raises leaves the store as it was (as the other
        # stores' transactions do).
        settled: list[tuple[ScheduleRecord, ScheduleRecord, Claim | None]] = []
        planned = 0
        for record in due:
            if planned >= limit:
                break
            result = settle_claim(record, owner, now, lease, planner, on_crash, token)
            if result is not None:
                settled.append((record, *result))
                planned += result[1] is not None
        claims: list[Claim] = []
        with self._lock:
            for was, record, claim in settled:
                if self._records.get(record.name) is was:
                    self._records[record.name] = record
                    if claim is not None:
                        claims.append(claim)
        return claims

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        with self._lock:
            now = self.now()
            return now, earliest_due(r for r in self._records.values() if _admitted(r, only))

    def renew(self, claim: Claim, lease: float) -> bool:
        with self._lock:
            record = self._records.get(claim.name)
            if not holds(record, claim):
                return False
            until = self.now() + dt.timedelta(seconds=lease)
            self._records[claim.name] = dataclasses.replace(record, lease_until=until)
            return True

    def complete(self, claim: Claim, result: str) -> bool:
        # `finishing`'s step, written out: every run ends here, and the generic rewrite's
        # read and step callbacks cost more than the record's transition.
        with self._lock:
            finished = finish_claim(self._records.get(claim.name), claim, result)
            if finished is None:
                return False
            self._records[claim.name] = finished
            return True

    def give_back(self, claim: Claim) -> bool:
        return self._rewrite(claim.name, giving_back(claim, self.now()))

    def set_paused(self, name: str, paused: bool) -> bool:
        return self._rewrite(name, changing(paused=paused))

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        return self._rewrite(name, changing(next_fire=next_fire))

    def _rewrite(self, name: str, step: Step) -> bool:
        with self._lock:  # nothing writes between the read and the write: it cannot lose
            return rewrite(lambda: self._records.get(name), step, self._replace)

    def _replace(self, old: ScheduleRecord, new: ScheduleRecord) -> bool:
        self._records[new.name] = new
        return True

    def remove(self, name: str) -> bool:
        with self._lock:
            return self._records.pop(name, None) is not None

    def get(self, name: str) -> ScheduleRecord | None:
        with self._lock:
            return self._records.get(name)

    def records(self) -> list[ScheduleRecord]:
        with self._lock:
            return sorted(self._records.values(), key=lambda r: r.name)

    def corrupt(self) -> list[tuple[str, str]]:
        return []

    def close(self) -> None:
        pass


def _maybe_due(record: ScheduleRecord, now: dt.datetime) -> bool:
    """A cheap pre-filter: due, or holding a lease that has expired (to settle)."""
    if record.running_fire is not None:
        return record.lease_until is None or record.lease_until < now
    if record.paused:
        return False
    return record.next_fire is not None and record.next_fire <= now


def _admitted(record: ScheduleRecord, only: Claimable | None) -> bool:
    # `Claimable.admits` with its first test here: a declared name (nearly every record a
    # claim looks at) is admitted without a call.
    return only is None or record.name in only.names \
        or only.admits_target(record.definition.target)


def _due_key(record: ScheduleRecord) -> tuple[float, str]:
    fire = record.running_fire or record.next_fire
    return (fire.timestamp() if fire is not None else float("inf"), record.name)
