"""Schedule stores: a schedule as plain data, and the one contract every store keeps.

A store holds one record per schedule: its *definition* (what code declares: the trigger's
data, the target as ``"module:qualname"``, JSON arguments, policies) and its *state* (paused,
the next fire time, a version, the lease of a run in progress, counters). Nothing is pickled.

The contract, the same for memory, SQLite, MongoDB and PostgreSQL (one test suite runs it
against each, ``tests/test_schedule_stores.py``):

- **The store decides who runs a fire time.** `claim` moves a due record's next fire time
  forward in one conditional update (matching its version and next fire time, not paused, no
  live lease), increments the version and records the owner and a lease. Of any number of
  processes racing for one fire time, exactly one update matches.
- **Time is the store's.** "Due" and "lease expired" are decided with the store's clock
  (PostgreSQL's ``now()``, the MongoDB server's time), never with a caller's: process clocks
  may be skewed by minutes without a double run. SQLite's ``julianday('now')`` is the clock of
  the process running the statement: processes on one machine share the kernel's, and one
  with a faked clock runs early and may see a live lease as expired (the Schedules page).
- **Completion is fenced by the claim itself.** A claim stores a token of its own in the
  record (`ScheduleRecord.claim_token`); `complete` and `renew` match that token, not the
  record's version. A control operation made while the run is in flight (pause, resume, run
  now, a changed declaration) moves the version but leaves the run's owner, lease and token
  alone, so the run still renews and completes, and its completion writes only the run's
  fields (the pause, next fire time and definition the control operation wrote stay). A
  stale owner (its lease expired and the run was handed out again or settled as lost: either
  replaces or clears the token) is refused and told so.
- **A crashed run is settled once.** A record whose lease expired with a run in progress is
  settled by the next `claim` that sees it: ``on_crash="drop"`` counts the run as lost,
  ``"rerun"`` hands the same fire time out again with ``attempt + 1``.
- **A dead owner is not waited for.** A store that can tell that a run's owner is gone ends
  that run's lease at once (the lease's end moves to the store's now, nothing else changes),
  just before it looks for claimable records; the run is then settled as above by whichever
  claim sees it, so a schedule stands still for about a second after its owner is
  SIGKILLed, not for a lease. Each store asks what it knows of its clients, never a
  process's clock: SQLite, an exclusive ``flock`` the owner holds on a file of its own beside
  the database (``<file>-owners/``: the kernel lets it go when the process dies, however it
  dies); PostgreSQL, a session-level advisory lock held by the owner's claiming connection
  (the server lets it go when the backend ends) with a row in ``executors_owners`` naming the
  owner and when it took the lock (after the server's start: a restarted server holds no
  lock, and owners are not taken for gone until they took theirs again); MongoDB, a heartbeat
  document per owner in ``executors_owners``, written every `OWNER_BEAT` seconds with the
  server's time, gone when older than `OWNER_STALE`. Each store looks at most every
  `LIVENESS_EVERY` seconds. An owner the store knows nothing of (a process of an older
  version, an owner on another machine for SQLite) is waited for by its lease, as before. A
  false "gone" cannot run a fire time twice under ``on_crash="drop"``: the live owner's
  renewal and completion are refused by the claim's token once the run is settled (a lost
  lease, reported); under ``"rerun"`` it runs the fire time again, as a lease that expired
  on a live owner always could. "Gone" means "cannot reach the store": a SIGSTOPped process
  keeps its SQLite file lock and its PostgreSQL session (so it is waited for by its lease)
  but stops beating on MongoDB (gone after `OWNER_STALE`); a process cut off from
  PostgreSQL loses its session and is gone too.

**What a claim may take is the caller's too.** `claim` and `next_due` take a `Claimable`
(`executors._service.claimable`): the names of the schedules the caller's code declares, and
an allowlist of targets for records written elsewhere (``BackgroundService(serve=...)``). A
record it does not admit is not even read as a candidate: claiming it would move its state
(its next fire time, a lease) for a process that will not run it. The store holds state and a
readable copy of each definition; what runs is the caller's declaration
(`executors._service.stored`).

What is decided by the caller is what the next fire time is: `claim` takes a `Planner` that,
given a due record and the store's now, returns the fire time to run (or none), the next fire
time and how many fire times were missed. The service's planner applies the ``missed`` policy;
because the plan is written by the same conditional update that claims, it is applied exactly
once however many processes serve the store.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, Protocol, TypeGuard

from executors import _validate

from .store_urls import open_store as open_store
from .store_urls import sqlite_path as sqlite_path

if TYPE_CHECKING:
    from .claimable import Claimable

__all__ = (
    "FORMAT_VERSION",
    "OnCrash",
    "OWNER_BEAT",
    "OWNER_STALE",
    "LIVENESS_EVERY",
    "ScheduleDefinition",
    "ScheduleRecord",
    "Claim",
    "Plan",
    "Planner",
    "Declared",
    "ScheduleStore",
    "StoreFormatError",
    "UTC",
    "to_epoch",
    "from_epoch",
    "record_fields",
    "record_from_fields",
    "new_record",
    "earliest_due",
    "redeclared",
    "unchanged",
    "settle_claim",
    "finish_record",
    "replacing",
    "holds",
    "open_store",
    "sqlite_path",
)

#: The format of the records this code writes. A store written by a newer format is refused,
#: naming both versions; an older one is upgraded when a newer format exists.
FORMAT_VERSION = 1

UTC = dt.UTC

OnCrash = Literal["drop", "rerun"]

#: How often a MongoDB owner writes its heartbeat (seconds, on its monotonic clock).
OWNER_BEAT = 0.25
#: How old a MongoDB owner's heartbeat is (seconds, on the server's clock) when the owner is
#: taken for gone: five beats missed.
OWNER_STALE = 1.25
#: The least time between two looks of one store object for the runs of gone owners
#: (seconds): a claim more often than this (a busy loop) does not pay for the look.
LIVENESS_EVERY = 0.25


class StoreFormatError(RuntimeError):
    """A store (or one record in it) was written in a format this code cannot read."""


def to_epoch(instant: dt.datetime) -> float:
    """Seconds since the Unix epoch of an aware datetime (stores keep instants as numbers)."""
    if instant.tzinfo is None:
        raise ValueError(f"an instant must be aware, got naive {instant!r}")
    return instant.timestamp()


def from_epoch(seconds: float) -> dt.datetime:
    """The aware UTC datetime of `seconds` since the epoch, rounded to the microsecond."""
    return dt.datetime.fromtimestamp(round(seconds, 6), UTC)


def _canonical(data: object) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclasses.dataclass(frozen=True)
class ScheduleDefinition:
    """What code declares about a schedule: plain JSON data, the same in every process."""

    #: The schedule's name, unique in its store.
    name: str
    #: The trigger as data (``Trigger.to_data()``).
    trigger: Mapping[str, object]
    #: The function to run, as ``"module:qualname"``.
    target: str
    #: Positional arguments (JSON values).
    args: Sequence[object] = ()
    #: Keyword arguments (JSON values).
    kwargs: Mapping[str, object] = dataclasses.field(default_factory=dict)
    #: Policies (``missed``, ``max_missed``, ``grace``, ``on_crash``, ...) as JSON values.
    options: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        # One shape whatever was passed in (a list or a tuple of args), so equal data compares
        # equal after a round trip through a store.
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "kwargs", dict(self.kwargs))
        object.__setattr__(self, "trigger", dict(self.trigger))
        object.__setattr__(self, "options", dict(self.options))

    def as_data(self) -> dict[str, object]:
        """The definition as one JSON-able mapping (what a store writes)."""
        return {"trigger": dict(self.trigger), "target": self.target, "args": list(self.args),
                "kwargs": dict(self.kwargs), "options": dict(self.options)}

    def digest(self) -> str:
        """A stable digest of the definition: equal definitions have equal digests.

        Raises:
            ValueError: some part is not JSON (NaN included), naming the schedule.
        """
        try:
            text = _canonical(self.as_data())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"schedule {self.name!r} is not plain JSON data: {exc}") from None
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @classmethod
    def from_data(cls, name: str, data: Mapping[str, object]) -> ScheduleDefinition:
        """The inverse of `as_data`.

        Raises:
            StoreFormatError: a key is missing or of the wrong kind (named).
        """
        def take(key: str, kind: type) -> object:
            value = data.get(key)
            if not isinstance(value, kind):
                raise StoreFormatError(
                    f"schedule {name!r}: {key!r} must be a {kind.__name__}, got {value!r}")
            return value

        trigger = take("trigger", dict)
        target = take("target", str)
        args = take("args", list)
        kwargs = take("kwargs", dict)
        options = take("options", dict)
        _check_options(name, options)  # type: ignore[arg-type]
        return cls(name, trigger, target, args, kwargs, options)  # type: ignore[arg-type]


#: The policies of a stored definition that take one of a few words.
_CHOICES = {"missed": ("latest", "all", "skip"), "on_error": ("continue", "stop"),
            "on_crash": ("drop", "rerun")}


def _check_options(name: str, options: Mapping[str, object]) -> None:
    """Refuse a policy `schedule()` would refuse (a record edited by hand), naming it: read as
    it is, ``missed="bogus"`` would run as ``"latest"`` and ``on_crash="rerun "`` as
    ``"drop"``, silently. A key this code does not know is left alone.

    Raises:
        StoreFormatError: a known policy has a value it does not take.
    """
    for key, choices in _CHOICES.items():
        if key in options and options[key] not in choices:
            raise StoreFormatError(
                f"schedule {name!r}: option {key!r} must be one of "
                f"{', '.join(map(repr, choices))}, got {options[key]!r}")
    try:
        if "max_missed" in options:
            _validate.count(options["max_missed"], "max_missed")
        if options.get("grace") is not None:
            _validate.seconds(options["grace"], "grace", allow_zero=False)
    except (TypeError, ValueError) as exc:
        raise StoreFormatError(f"schedule {name!r}: option {exc}") from None


@dataclasses.dataclass(frozen=True)
class ScheduleRecord:
    """A schedule as a store holds it: its definition and its state."""

    #: What code declared.
    definition: ScheduleDefinition
    #: ``definition.digest()`` as its writer stored it: for people and tools to read, never
    #: trusted (a declaration recomputes the stored definition's digest, `unchanged`).
    digest: str
    #: Paused schedules are never claimed.
    paused: bool
    #: The next fire time (aware UTC), or None when the trigger is exhausted.
    next_fire: dt.datetime | None
    #: Bumped by every claim and every change: the fence of claims (never of a run's renewal
    #: or completion, which `claim_token` fences).
    version: int
    #: Who holds the run in progress (None when no run is in progress).
    owner: str | None
    #: When that run's lease expires, on the store's clock (None when no run is in progress).
    lease_until: dt.datetime | None
    #: The fire time of the run in progress (None when none is).
    running_fire: dt.datetime | None
    #: The attempt number of the run in progress or of the last run (2 and up: a rerun).
    attempt: int
    #: Counters: ``runs``, ``failures``, ``missed``, ``lost``, ``lease_lost``.
    counters: Mapping[str, int]
    #: The fire time of the last finished run, or None.
    last_fire: dt.datetime | None
    #: ``"ok"``, ``"error: Type: message"``, ``"lost"``, or None before the first run.
    last_result: str | None
    #: The token of the claim whose run is in progress (None when none is): what that
    #: claim's renewal and completion match.
    claim_token: str | None = None
    #: Who ran the last finished run (its owner, ``host:pid:random``; for a ``"lost"`` one,
    #: the owner that lost it), or None: no run yet, or a record written before this was kept.
    last_owner: str | None = None

    @property
    def name(self) -> str:
        """The schedule's name."""
        return self.definition.name


@dataclasses.dataclass(frozen=True)
class Claim:
    """One fire time handed to one owner by `ScheduleStore.claim`."""

    #: The schedule's name.
    name: str
    #: The fire time to run (aware UTC).
    fire_time: dt.datetime
    #: 1 for a first run, 2 and up for a rerun after a crashed owner (``on_crash="rerun"``).
    attempt: int
    #: The record's version after the claim (with the name, it tells one claim from another).
    version: int
    #: The lease's end on the store's clock.
    lease_until: dt.datetime
    #: The definition the run executes.
    definition: ScheduleDefinition
    #: The token stored in the record by this claim: renewal and completion match it.
    token: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """A planner's answer for one due record."""

    #: The fire time to run now, or None to run nothing (everything due was missed/skipped).
    run: dt.datetime | None
    #: The record's next fire time after this claim (None: the trigger is exhausted).
    next_fire: dt.datetime | None
    #: How many due fire times this claim counts as missed: run late or not run (the
    #: definition of ``wallclock.Decision.missed``, the one the log and `RunMissed` use).
    missed: int = 0


#: ``planner(record, store_now) -> Plan``: what to do with a record that is due at `store_now`;
#: None: leave it as it is (not claimed, not moved), the planner failed on it.
Planner = Callable[[ScheduleRecord, dt.datetime], "Plan | None"]


@dataclasses.dataclass(frozen=True)
class Declared:
    """What `ScheduleStore.declare` did: ``"added"``, ``"unchanged"``, ``"changed"`` or
    ``"replaced"``."""

    #: The record as stored after the declaration.
    record: ScheduleRecord
    #: ``"added"`` (new), ``"unchanged"`` (state kept), ``"changed"`` (definition replaced,
    #: state kept) or ``"replaced"`` (the stored record could not be read: a new record took
    #: its place, its state starting again).
    outcome: Literal["added", "unchanged", "changed", "replaced"]
    #: Why the record that was replaced could not be read (``"replaced"`` only).
    unreadable: str = ""


class ScheduleStore(Protocol):
    """The contract of a schedule store (see the module docstring for the guarantees)."""

    #: Where the store is, for messages: the URL with any password hidden.
    display_url: str

    def now(self) -> dt.datetime:
        """The store's clock (aware UTC)."""

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        """Add a schedule, or keep its state if unchanged, or replace a changed definition.

        `first_fire(store_now)` gives the next fire time of a new or changed schedule. A
        stored record that cannot be read is replaced by a new one (the code's declaration
        is what the schedule is; the unreadable state cannot be kept).
        """

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None = None) -> list[Claim]:
        """Claim up to `limit` due records for `owner` (see the module docstring): of the
        records `only` admits (None: every record), left out in the store's own query."""

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        """``(store now, earliest)``: the store's clock and the earliest instant a `claim`
        given `only` could find work (the least next fire time of the unpaused records with
        no run in progress, or the least lease end of the runs in progress), None if none.
        One cheap read: a claimer sleeps ``earliest - now`` on its monotonic clock. Records a
        claim found unreadable are left out (`Unreadable`)."""

    def renew(self, claim: Claim, lease: float) -> bool:
        """Extend `claim`'s lease; False if the record no longer holds `claim` (its token):
        the lease was lost. A control operation since the claim does not refuse it."""

    def complete(self, claim: Claim, result: str) -> bool:
        """Record the end of `claim`'s run (its run fields, counters and last run only);
        False (nothing written) if the record no longer holds `claim`: the lease was lost."""

    def give_back(self, claim: Claim) -> bool:
        """Give back `claim`, never started (its owner is closing): see `given_back`. False
        (nothing written) if the record no longer holds `claim`."""

    def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume `name`; False if there is no such schedule."""

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        """Move `name`'s next fire time (reschedule, run now); False if there is no such one."""

    def remove(self, name: str) -> bool:
        """Remove `name`; False if there was no such schedule."""

    def get(self, name: str) -> ScheduleRecord | None:
        """The record of `name`, or None."""

    def records(self) -> list[ScheduleRecord]:
        """Every readable record, by name (corrupt ones are left out; see `corrupt`)."""

    def corrupt(self) -> list[tuple[str, str]]:
        """``(name, reason)`` of every record that could not be read."""

    def close(self) -> None:
        """Release the store's connections."""


# -- records as flat fields (what the SQL and document stores write) ---------------------------


def record_fields(record: ScheduleRecord) -> dict[str, object]:
    """`record` as flat JSON-able fields: instants as epoch seconds, definition and counters
    as mappings. Every store but memory writes these (SQL columns, a document's keys)."""
    return {
        "name": record.name, "definition": record.definition.as_data(),
        "digest": record.digest, "paused": record.paused,
        "next_fire": _opt_epoch(record.next_fire), "version": record.version,
        "owner": record.owner, "lease_until": _opt_epoch(record.lease_until),
        "running_fire": _opt_epoch(record.running_fire), "attempt": record.attempt,
        "counters": dict(record.counters), "last_fire": _opt_epoch(record.last_fire),
        "last_result": record.last_result, "claim_token": record.claim_token,
        "last_owner": record.last_owner,
    }


def record_from_fields(fields: Mapping[str, object]) -> ScheduleRecord:
    """The inverse of `record_fields`.

    Raises:
        StoreFormatError: a field is missing or unreadable, naming the schedule and the field.
    """
    name = fields.get("name")
    if not isinstance(name, str):
        raise StoreFormatError(f"a schedule record has no name: {dict(fields)!r:.200}")
    try:
        definition = fields["definition"]
        counters = fields["counters"]
        # A store may pass a definition it decoded before (for this name) as it is.
        if not isinstance(definition, ScheduleDefinition | Mapping) or (
                isinstance(definition, ScheduleDefinition) and definition.name != name):
            raise StoreFormatError(f"schedule {name!r}: 'definition' is not an object")
        if not isinstance(counters, Mapping):
            raise StoreFormatError(f"schedule {name!r}: 'counters' is not an object")
        return ScheduleRecord(
            definition if isinstance(definition, ScheduleDefinition)
            else ScheduleDefinition.from_data(name, definition), str(fields["digest"]),
            bool(fields["paused"]), _opt_instant(fields["next_fire"]),
            _int(fields["version"]), _opt_str(fields["owner"]),
            _opt_instant(fields["lease_until"]), _opt_instant(fields["running_fire"]),
            _int(fields["attempt"]), {str(k): _int(v) for k, v in counters.items()},
            _opt_instant(fields["last_fire"]), _opt_str(fields["last_result"]),
            # Absent from records written before claims had tokens, or kept the last owner.
            _opt_str(fields.get("claim_token")), _opt_str(fields.get("last_owner")))
    except KeyError as exc:
        raise StoreFormatError(f"schedule {name!r}: field {exc} is missing") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise StoreFormatError(f"schedule {name!r}: unreadable record ({exc})") from None


def _opt_epoch(instant: dt.datetime | None) -> float | None:
    return None if instant is None else to_epoch(instant)


def _opt_instant(seconds: object) -> dt.datetime | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"an instant must be epoch seconds, got {seconds!r}")
    return from_epoch(float(seconds))


def _opt_str(value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


# -- the memory store ---------------------------------------------------------------------------


_COUNTERS = ("runs", "failures", "missed", "lost", "lease_lost")


def new_record(definition: ScheduleDefinition, next_fire: dt.datetime | None,
               version: int = 1) -> ScheduleRecord:
    """The record of a schedule just added: not paused, no run yet, counters at zero."""
    return ScheduleRecord(definition, definition.digest(), False, next_fire, version, None,
                          None, None, 0, dict.fromkeys(_COUNTERS, 0), None, None)


def replacing(definition: ScheduleDefinition, next_fire: dt.datetime | None,
              stored_version: object) -> ScheduleRecord:
    """The record a declaration writes over an unreadable one: new, at a version above the
    stored one when that is readable (a claim made on the old version cannot match)."""
    old = stored_version if isinstance(stored_version, int) and stored_version > 0 else 0
    return new_record(definition, next_fire, version=old + 1)


def redeclared(old: ScheduleRecord, definition: ScheduleDefinition,
               next_fire: dt.datetime | None) -> ScheduleRecord:
    """The record of a changed declaration: the new definition and next fire time, the old
    record's pause, counters and run in progress, and the next version. When the trigger is
    the stored one (arguments or policies changed, or a record rewritten in the store
    repaired) the stored next fire time is kept: a due or overdue fire time is not dropped
    unseen."""
    if old.definition.trigger == definition.trigger:
        next_fire = old.next_fire
    return dataclasses.replace(old, definition=definition, digest=definition.digest(),
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
    # The constructor, not dataclasses.replace: this is every claim's path, and replace
    # costs twice as much.
    updated = ScheduleRecord(
        definition=record.definition, digest=record.digest, paused=record.paused,
        next_fire=plan.next_fire, version=version, owner=owner, lease_until=lease_until,
        running_fire=plan.run, attempt=1, counters=counters, last_fire=record.last_fire,
        last_result=record.last_result, claim_token=token, last_owner=record.last_owner)
    return updated, Claim(record.name, plan.run, 1, version, lease_until, record.definition,
                          token)


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


def given_back(record: ScheduleRecord, claim: Claim, now: dt.datetime) -> ScheduleRecord:
    """The record after `claim` is given back unstarted (by an owner that is closing), as if
    it had not been made: a first attempt's fire time is due again (the next fire time moves
    back to it) with no run in progress and nothing counted, for any owner to claim at once; a
    rerun's lease ends now, so the next claim settles it as the crash it came from
    (``on_crash``), with the next attempt. Not a crash: the schedule is not held for a lease."""
    if claim.attempt > 1:
        return dataclasses.replace(record, lease_until=now - dt.timedelta(microseconds=1))
    next_fire = record.next_fire
    if next_fire is None or next_fire > claim.fire_time:
        next_fire = claim.fire_time
    return dataclasses.replace(record, version=record.version + 1, next_fire=next_fire,
                               owner=None, lease_until=None, running_fire=None,
                               claim_token=None)


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
