"""A store written by a third party from `executors.stores`' public names alone passes the
store contract (the tests of `test_schedule_stores` that take a store object), the service's
included: the contract is the package, not the library's own stores.

`JsonDocStore` is what an author would write for a key-value backend that offers a read and a
compare-and-set: documents of JSON text (`record_fields`), the decisions of `declaration`,
`settle_claim` and the steps of `rewrite`, and nothing else of this library.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import json
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
import test_schedule_stores as contract

from executors.stores import (
    UTC,
    Claim,
    Claimable,
    Declared,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
    ScheduleStore,
    changing,
    declaration,
    earliest_due,
    finishing,
    giving_back,
    holds,
    record_fields,
    record_from_fields,
    rewrite,
    settle_claim,
)


class JsonDocStore:
    """Schedules as JSON documents in a dict behind a compare-and-set on their version."""

    display_url = "jsondoc:"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._docs: dict[str, str] = {}

    # -- the backend's two primitives ---------------------------------------------------------

    def _read(self, name: str) -> ScheduleRecord | None:
        with self._lock:
            text = self._docs.get(name)
        return None if text is None else record_from_fields(json.loads(text))

    def _swap(self, old: ScheduleRecord | None, new: ScheduleRecord) -> bool:
        """Write `new` if the stored document is still `old` (by version; None: absent)."""
        with self._lock:
            text = self._docs.get(new.name)
            stored = None if text is None else json.loads(text)["version"]
            if stored != (None if old is None else old.version):
                return False
            self._docs[new.name] = json.dumps(record_fields(new))
            return True

    # -- the contract -------------------------------------------------------------------------

    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        while True:
            old = self._read(definition.name)
            declared = declaration(definition, old, lambda: first_fire(self.now()))
            if declared.outcome == "unchanged" or self._swap(old, declared.record):
                return declared

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None = None) -> list[Claim]:
        now, token = self.now(), uuid.uuid4().hex
        claims: list[Claim] = []
        for record in sorted(self._admitted(only), key=_due_key):
            if len(claims) >= limit:
                break
            settled = settle_claim(record, owner, now, lease, planner, on_crash, token)
            if settled is not None and self._swap(record, settled[0]) and settled[1]:
                claims.append(settled[1])
        return claims

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        return self.now(), earliest_due(self._admitted(only))

    def renew(self, claim: Claim, lease: float) -> bool:
        until = self.now() + dt.timedelta(seconds=lease)
        return rewrite(lambda: self._read(claim.name), lambda r: dataclasses.replace(
            r, lease_until=until) if holds(r, claim) else None, self._swap)

    def complete(self, claim: Claim, result: str) -> bool:
        return rewrite(lambda: self._read(claim.name), finishing(claim, result), self._swap)

    def give_back(self, claim: Claim) -> bool:
        return rewrite(lambda: self._read(claim.name), giving_back(claim, self.now()),
                       self._swap)

    def set_paused(self, name: str, paused: bool) -> bool:
        return rewrite(lambda: self._read(name), changing(paused=paused), self._swap)

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        return rewrite(lambda: self._read(name), changing(next_fire=next_fire), self._swap)

    def remove(self, name: str) -> bool:
        with self._lock:
            return self._docs.pop(name, None) is not None

    def get(self, name: str) -> ScheduleRecord | None:
        return self._read(name)

    def records(self) -> list[ScheduleRecord]:
        with self._lock:
            names = sorted(self._docs)
        return [r for r in map(self._read, names) if r is not None]

    def corrupt(self) -> list[tuple[str, str]]:
        return []

    def close(self) -> None:
        pass

    def _admitted(self, only: Claimable | None) -> list[ScheduleRecord]:
        return [r for r in self.records()
                if only is None or only.admits(r.name, r.definition.target)]


def _due_key(record: ScheduleRecord) -> tuple[float, str]:
    fire = record.running_fire or record.next_fire
    return (fire.timestamp() if fire is not None else float("inf"), record.name)


@pytest.fixture
def store() -> Iterator[ScheduleStore]:
    made = JsonDocStore()
    try:
        yield made
    finally:
        made.close()


# The contract's tests that take a store object (those that rewrite a store behind its back
# through its URL, or start processes on one, need a backend of the library's own).
_NEEDS = {"store", "control", "tmp_path", "caplog", "monkeypatch"}
CONTRACT = sorted(
    name for name, test in vars(contract).items()
    if name.startswith("test_") and inspect.isfunction(test)
    and "store" in (params := set(inspect.signature(test).parameters)) and params <= _NEEDS)
globals().update({name: getattr(contract, name) for name in CONTRACT})


def test_the_third_party_store_runs_most_of_the_contract() -> None:
    """The contract run here is most of it, not an empty selection that passes vacuously."""
    assert len(CONTRACT) >= 20, CONTRACT
