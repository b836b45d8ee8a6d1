"""How a schedule record is a row of the PostgreSQL store's table, and back: the columns,
the encoders of a whole record and of what a claim changes, and the decoder that keeps the
definitions it decoded (`Definitions`)."""

from __future__ import annotations

import json
from typing import Any

from executors.stores import (
    DefinitionCache,
    ScheduleRecord,
    StoreFormatError,
    record_fields,
    record_from_fields,
    to_epoch,
)

__all__ = ("Definitions", "encode", "encode_claimed")

#: The table's columns, in the order `encode` writes them.
COLUMNS = ("name, definition, digest, paused, next_fire, version, owner, lease_until, "
            "running_fire, attempt, state, claim_token")
#: What a read selects: `COLUMNS`, the definition as its text (`Definitions` decodes a text
# it has not seen) and the state as its text (parsed here: the driver's JSON loader, given
# bytes, costs a claim half as much again per row).
READ = COLUMNS.replace("definition,", "definition::text AS definition,", 1).replace(
    "state,", "state::text AS state,", 1)
_loads = json.JSONDecoder().decode


class Definitions:
    """Decodes rows (`READ`'s columns), each definition through a `DefinitionCache`: a
    record read again with the same definition text reuses its decoded definition."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        self.cache = DefinitionCache()

    def decode(self, row: tuple[Any, ...]) -> ScheduleRecord:
        """The record of `row` (`READ`'s columns, the definition as text)."""
        name = row[0]
        try:
            state = _loads(row[10])
        except (TypeError, ValueError):
            raise StoreFormatError(f"schedule {name!r}: its state is not JSON") from None
        if type(state) is not dict:
            state = {}  # its fields are missing: record_from_fields names the first
        return record_from_fields({
            "name": name, "definition": self.cache.decode(name, row[1]), "digest": row[2],
            "paused": row[3], "next_fire": row[4], "version": row[5], "owner": row[6],
            "lease_until": row[7], "running_fire": row[8], "attempt": row[9],
            "claim_token": row[11], **state})


def _state_json(record: ScheduleRecord) -> str:
    # The last run's owner is kept with the last run, in the state: no column to add, and a
    # record written before it was kept reads None.
    last_fire = record.last_fire
    return json.dumps({"counters": dict(record.counters), "last_result": record.last_result,
                       "last_fire": None if last_fire is None else to_epoch(last_fire),
                       "last_owner": record.last_owner})


def encode(record: ScheduleRecord) -> tuple[object, ...]:
    f = record_fields(record)
    return (f["name"], json.dumps(f["definition"]), f["digest"], record.paused, f["next_fire"],
            f["version"], f["owner"], f["lease_until"], f["running_fire"], f["attempt"],
            _state_json(record), f["claim_token"])


def encode_claimed(record: ScheduleRecord, old: ScheduleRecord) -> tuple[object, ...]:
    """What a claim changes in `old` to make `record`, in ``_CLAIM_WRITE``'s order (the
    definition, which it does not change, is not encoded). The state is None when the claim
    left it as it was (it missed nothing and settled no crash: most claims), and the row's
    is kept as it is: no JSON made here, none parsed by the server."""
    lease_until, running_fire = record.lease_until, record.running_fire
    same = (record.counters == old.counters and record.last_fire == old.last_fire
            and record.last_result == old.last_result and record.last_owner == old.last_owner)
    return (record.name, None if record.next_fire is None else to_epoch(record.next_fire),
            record.version, record.owner, None if lease_until is None else to_epoch(lease_until),
            None if running_fire is None else to_epoch(running_fire), record.attempt,
            None if same else _state_json(record), record.claim_token)
