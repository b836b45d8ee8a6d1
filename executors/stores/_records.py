"""The schedule stores' data model: a schedule as plain data, its record, a claim, a plan.

What every store reads and writes, in every backend the same: `ScheduleDefinition` (what code
declares), `ScheduleRecord` (definition and state), `Claim`, `Plan`, `Declared`, the format
version, and the flat fields a SQL row or a document holds (`record_fields`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Literal, TypeVar, cast

from executors import _validate

__all__ = (
    "FORMAT_VERSION",
    "UTC",
    "OnCrash",
    "StoreFormatError",
    "to_epoch",
    "from_epoch",
    "ScheduleDefinition",
    "ScheduleRecord",
    "Claim",
    "Plan",
    "Planner",
    "Declared",
    "record_fields",
    "record_from_fields",
)

#: The format of the records this code writes. A store written by a newer format is refused,
#: naming both versions; an older one is upgraded when a newer format exists.
FORMAT_VERSION = 1

UTC = dt.UTC
_T = TypeVar("_T")

OnCrash = Literal["drop", "rerun"]


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


#: Plain mappings of definitions, shared by every definition holding equal data (`_lean`).
_SHARED: dict[tuple[object, ...], dict[object, object]] = {}
#: Distinct mappings kept for sharing; more are made each their own (a store's triggers repeat
#: a few dozen shapes, its policies fewer: a table this size holds them all).
_SHARED_MAX = 4096


def _lean(data: Mapping[str, object]) -> dict[str, object]:
    """A copy of `data` shared with every definition holding equal data, its keys and string
    values shared with every other record (`sys.intern`): 10,000 schedules of sixty cron
    expressions hold sixty trigger mappings and one mapping of policies, not 10,000 of each
    twice over (declared, and decoded from the store). A definition's mappings are never
    changed in place (the dataclass is frozen; a changed definition is a new one).

    Two mappings are shared when their items are equal in order and kind (``1``, ``1.0`` and
    ``True`` are not: they are different JSON, with different digests; nor are ``0.0`` and
    ``-0.0``); one holding a list or a mapping is its own.
    """
    intern = sys.intern
    lean = {intern(k) if type(k) is str else k: intern(v) if type(v) is str else v
            for k, v in data.items()}
    key = tuple((k, type(v), repr(v) if type(v) is float else v) for k, v in lean.items())
    try:
        shared = _SHARED.get(key)
    except TypeError:  # a list or a mapping among the values: not hashable, not shared
        return lean
    if shared is not None:
        return shared  # type: ignore[return-value]
    if len(_SHARED) < _SHARED_MAX:
        _SHARED[key] = lean  # type: ignore[assignment]
    return lean


@dataclasses.dataclass(frozen=True, slots=True)
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
    # `digest()` once computed: a schedule's digest is asked when it is made, when it is
    # declared and when its stored record is compared (a SHA-256 of its canonical JSON).
    _digest: str | None = dataclasses.field(default=None, init=False, repr=False,
                                            compare=False)

    def __post_init__(self) -> None:
        # One shape whatever was passed in (a list or a tuple of args), so equal data compares
        # equal after a round trip through a store.
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "kwargs", _lean(self.kwargs))
        object.__setattr__(self, "trigger", _lean(self.trigger))
        object.__setattr__(self, "options", _lean(self.options))
        if type(self.target) is str:  # a caller's wrong kind is left for the checks that name it
            object.__setattr__(self, "target", sys.intern(self.target))

    def as_data(self) -> dict[str, object]:
        """The definition as one JSON-able mapping (what a store writes)."""
        return {"trigger": dict(self.trigger), "target": self.target, "args": list(self.args),
                "kwargs": dict(self.kwargs), "options": dict(self.options)}

    def digest(self) -> str:
        """A stable digest of the definition: equal definitions have equal digests.

        Raises:
            ValueError: some part is not JSON (NaN included), naming the schedule.
        """
        known = self._digest
        if known is not None:
            return known
        try:
            text = _canonical(self.as_data())
        except (TypeError, ValueError) as exc:
            raise ValueError(f"schedule {self.name!r} is not plain JSON data: {exc}") from None
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        object.__setattr__(self, "_digest", digest)
        return digest

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


@dataclasses.dataclass(frozen=True, slots=True)
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


@dataclasses.dataclass(frozen=True, slots=True)
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
    #: The claim counted its own fire time in the record's ``missed`` (due to run late): given
    #: back unstarted, that count is taken back, and the next claim judges the fire time again.
    run_late: bool = False


def _maker(cls: type[_T]) -> Callable[..., _T]:
    """A constructor of `cls` (a frozen dataclass with slots and no ``__post_init__``) taking
    every field positionally, in order: what the dataclass's ``__init__`` does, with each
    slot's descriptor called directly. A frozen dataclass sets each field with
    ``object.__setattr__(self, "name", value)``, which looks the name up every time: a
    record of 14 fields took 3.5-4 µs to make, this about 1.5, and every claimed fire time
    makes two records and a claim."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__ or hasattr(
            cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: a frozen dataclass with slots and no __post_init__")
    names = [field.name for field in dataclasses.fields(cls)]
    slots = {f"_set_{name}": cls.__dict__[name].__set__ for name in names}
    source = (f"def make({', '.join(names)}):\n    self = _new(_cls)\n"
              + "".join(f"    _set_{name}(self, {name})\n" for name in names)
              + "    return self\n")
    scope: dict[str, object] = {"_new": object.__new__, "_cls": cls, **slots}
    exec(source, scope)  # as dataclasses makes its own __init__
    return cast("Callable[..., _T]", scope["make"])


#: `ScheduleRecord(...)` and `Claim(...)` with every field given positionally, for the paths
#: every claim takes (`_maker`).
make_record: Callable[..., ScheduleRecord] = _maker(ScheduleRecord)
make_claim: Callable[..., Claim] = _maker(Claim)


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
    #: `missed` counts `run` itself (it runs late): a claim given back unstarted takes that one
    #: count back (`Claim.run_late`), so a fire time is never counted twice.
    run_late: bool = False


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
        # A store may pass a definition it decoded before (for this name) as it is. (Every
        # claim decodes the records it takes: the class is tested before the ABC, whose
        # isinstance costs more than the rest of a check.)
        if isinstance(definition, ScheduleDefinition):
            if definition.name != name:
                raise StoreFormatError(f"schedule {name!r}: 'definition' is not an object")
        elif isinstance(definition, Mapping):
            definition = ScheduleDefinition.from_data(name, definition)
        else:
            raise StoreFormatError(f"schedule {name!r}: 'definition' is not an object")
        if type(counters) is not dict and not isinstance(counters, Mapping):
            raise StoreFormatError(f"schedule {name!r}: 'counters' is not an object")
        return make_record(
            definition, str(fields["digest"]),
            bool(fields["paused"]), _opt_instant(fields["next_fire"]),
            _int(fields["version"]), _opt_str(fields["owner"]),
            _opt_instant(fields["lease_until"]), _opt_instant(fields["running_fire"]),
            _int(fields["attempt"]), _counters(counters),
            _opt_instant(fields["last_fire"]), _opt_str(fields["last_result"]),
            # Absent from records written before claims had tokens, or kept the last owner.
            _opt_str(fields.get("claim_token")), _opt_str(fields.get("last_owner")))
    except KeyError as exc:
        raise StoreFormatError(f"schedule {name!r}: field {exc} is missing") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise StoreFormatError(f"schedule {name!r}: unreadable record ({exc})") from None


def _opt_epoch(instant: dt.datetime | None) -> float | None:
    return None if instant is None else to_epoch(instant)


def _counters(counters: Mapping[object, object]) -> dict[str, int]:
    """A record's counters, checked: each an integer (not a bool), its name shared."""
    out: dict[str, int] = {}
    intern = sys.intern
    for key, value in counters.items():
        out[intern(key if type(key) is str else str(key))] = \
            value if type(value) is int else _int(value)
    return out


def _opt_instant(seconds: object) -> dt.datetime | None:
    if seconds is None:
        return None
    if type(seconds) is float:  # what every store reads back (the checks below, skipped)
        return from_epoch(seconds)
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
