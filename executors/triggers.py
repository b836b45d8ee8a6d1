"""Wall-clock triggers: when a schedule fires, as aware UTC instants. Pure: data in, data out.

A trigger answers one question, ``next_after(instant)``: the first fire instant strictly after
`instant` (aware, any zone), as an aware datetime in UTC, or None when it never fires again.
Every trigger is immutable, compares and hashes by value, and turns into JSON-able data and
back (`to_data`, `trigger_from_data`).

**Time that does not exist or happens twice** (Debian cron's rule, cron(8)). A *fixed-time*
`Cron` job is one whose minute and hour fields do not start with ``*`` (a 6-field expression's
seconds field does not count); `CalendarInterval` is always fixed-time. A clock change is
*DST-like* when the offset changes by less than three hours. For each local time L that matches:

- L exists once: it fires at that instant.
- L falls in a gap (skipped by a forward change): a fixed-time job fires once at the change
  (the first real instant after the gap) if the change is DST-like and ``gap="shift"``; else
  (``gap="skip"``, a job that is not fixed-time, a change of three hours or more) it does not
  fire for L. Samoa's 24-hour jump over 2011-12-30 is such a change: that day's fixed-time jobs
  do not fire.
- L happens twice (a backward change): a fixed-time job on a DST-like change fires at the
  earlier instant (``fold="first"``), the later one (``"last"``) or both (``"both"``); other
  jobs, and changes of three hours or more, fire at both (every real instant that matches).
- The fire times are a set of instants: several gap-shifted times that land on one change
  fire once. ``next_after(i)`` is the smallest member greater than i, also when i lies inside
  a repeated hour: a restarted process never runs such a job twice.

How: cronsim matches the fields in local wall-clock time; the zone's offset changes are found
once per year, and the search walks the constant-offset segments between them, resolving
local times to instants by subtraction inside a segment and applying the rule above at each
segment's ends. A search looks at most 401 years past
its start (a whole 400-year Gregorian cycle and one more year): a trigger none of whose
matching local times in that span fires (every match falls in a skipped gap, say) returns
None.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from datetime import UTC, date, datetime, time, timedelta
from typing import ClassVar, Literal, Protocol, runtime_checkable
from zoneinfo import ZoneInfo

from . import _search_budget, _validate, _zones
from ._calendar import CalendarPattern
from ._cron import CronFields, fields_of
from ._trigger_data import aware as _aware
from ._trigger_data import checked, iso, number, text, whole
from ._trigger_data import choice as _choice
from ._trigger_data import zone as _zone
from ._zones import ZoneTable, zone_table

__all__ = ("Trigger", "Cron", "Date", "CalendarInterval", "Interval", "AnyOf", "AllOf",
           "trigger_from_data", "GapPolicy", "FoldPolicy")

GapPolicy = Literal["shift", "skip"]
FoldPolicy = Literal["first", "last", "both"]

logger = logging.getLogger(__name__)

_UTC = UTC
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)
# One zero offset for every un-jittered trigger (thousands of schedules, one object).
_NO_JITTER = timedelta(0)
_LAST_DAY = date.max.toordinal()
_GAPS = ("shift", "skip")
_FOLDS = ("first", "last", "both")


@runtime_checkable
class Trigger(Protocol):
    """What the service schedules: fire instants, data, and words for people."""

    @property
    def tz(self) -> ZoneInfo | None:
        """The zone local times are shown in (None for `Interval`)."""

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire instant strictly after `instant` (aware; naive -> TypeError naming
        `instant`), aware in UTC; or None when the trigger never fires again."""

    def to_data(self) -> dict[str, object]:
        """JSON-able data with a ``"type"``; `trigger_from_data` turns it back."""

    def describe(self) -> str:
        """For people, e.g. ``"30 2 * * * Europe/Berlin"``."""


# -- the search --------------------------------------------------------------------------------


def _first_fire(pattern: _zones.LocalPattern, table: ZoneTable, start: datetime,
                gap: Literal["shift", "skip"], fold: Literal["first", "last", "both"],
                end: datetime | None) -> datetime | None:
    """The first fire instant of `pattern` at or after `start` (naive UTC) and at most `end`,
    or None. A zone with one offset for all time (UTC, ``Etc/GMT+5``) has no gap, no fold and
    no segment to walk: its pattern is looked up once, in local time, here; any other zone is
    walked segment by segment (`_zones.first_fire`)."""
    offset = table.fixed_offset
    if offset is None:
        return _zones.first_fire(pattern, table, start, gap, fold, end)
    try:
        local = pattern.next_local(
            start + offset, min(start.toordinal() + _zones.HORIZON_DAYS, _LAST_DAY))
    except OverflowError:  # the search ran off the end of datetime's range
        return None
    if local is None:
        return None
    found = local - offset
    return found if end is None or found <= end else None


# -- argument checks -------------------------------------------------------------------------


def _naive_utc(value: datetime) -> datetime:
    """`value` (aware) as a naive datetime in UTC, the form the searches work in."""
    # Epoch arithmetic, not astimezone/replace: replace costs ~2.5 us on 3.11, this ~0.2 us,
    # and next_after converts an instant in and out on every call.
    return _NAIVE_EPOCH + (value - _EPOCH)


def _instant(value: datetime) -> datetime:
    """The `instant` argument of next_after as naive UTC (naive -> TypeError)."""
    try:
        return _NAIVE_EPOCH + (value - _EPOCH)
    except TypeError:  # naive, or not a datetime: say which, naming the argument
        _aware(value, "instant", TypeError)
        raise


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _out(value: datetime | None) -> datetime | None:
    """A naive UTC datetime as an aware one in UTC."""
    return None if value is None else _EPOCH + (value - _NAIVE_EPOCH)


# -- the triggers ----------------------------------------------------------------------------


class _Value:
    """Immutable, compared and hashed by `_key()`; repr from `_args()`."""

    __slots__ = ()

    def _key(self) -> tuple[object, ...]:
        raise NotImplementedError

    def _args(self) -> str:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Value):
            return NotImplemented
        return type(other) is type(self) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._args()})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)


class Cron(_Value):
    """Fires at the local wall-clock times that match a cron expression in zone `tz`.

    `expression`: 5 fields (minute hour day-of-month month day-of-week) or 6 (second first).
    Names (jan..dec, sun..sat), ranges, lists, steps, ``L`` (last day of the month), ``LW``,
    ``nL`` (last weekday n of the month), ``n#k`` (k-th weekday n), as cronsim reads them.
    Weekday 0 and 7 are Sunday; a restricted day-of-month and a restricted day-of-week match
    when either does (cron's rule). `gap` and `fold` are the policies of the module docstring.
    Fire instants before `start` or after `end` (aware) are left out; with `jitter`, that is
    the jittered instant (a fire its offset takes past `end` is left out).

    `jitter` (seconds) delays each fire by an offset in [0, jitter) taken from a hash of the
    expression and the fire instant: the same schedule gets the same offsets in every process.
    It must be smaller than the smallest local time between two consecutive matches, which is
    computed from the second, minute and hour fields exactly within a day and, across days,
    as if the next match were on the next day (conservative for weekly or monthly schedules).
    A clock change can bring two fire instants closer than that (a gap-shifted fire right
    after a match, both passes of a repeated hour): there the offset is also kept below the
    time to the next fire, so jittered fires never reorder or merge.

    Raises:
        TypeError: `tz` missing or of the wrong kind; `start`/`end` not datetimes.
        ValueError: a syntax error (naming the field and the token), a wrong number of
            fields, an expression that never fires (naming `expression`), an unknown zone
            (naming `tz`), a naive `start`/`end`, `end` before `start`, a bad `gap`/`fold`,
            or a `jitter` that is negative, NaN or not below the smallest gap.
    """

    __slots__ = ("_end", "_fields", "_jitter", "_start", "_table", "end", "expression",
                 "fold", "gap", "jitter", "start", "tz")

    expression: str
    tz: ZoneInfo
    gap: GapPolicy
    fold: FoldPolicy
    start: datetime | None
    end: datetime | None
    jitter: float
    _fields: CronFields
    _start: datetime | None
    _end: datetime | None
    _jitter: timedelta
    _table: ZoneTable

    def __init__(self, expression: str, *, tz: ZoneInfo | str, gap: GapPolicy = "shift",
                 fold: FoldPolicy = "first", start: datetime | None = None,
                 end: datetime | None = None, jitter: float = 0) -> None:
        if not isinstance(expression, str):
            raise TypeError(f"expression must be a str, got {type(expression).__name__}")
        fields = fields_of(expression)
        zone = _zone(tz)
        _choice(gap, "gap", _GAPS)
        _choice(fold, "fold", _FOLDS)
        start_u = None if start is None else _naive_utc(_aware(start, "start"))
        end_u = None if end is None else _naive_utc(_aware(end, "end"))
        if start_u is not None and end_u is not None and end_u < start_u:
            raise ValueError(f"end ({end}) is before start ({start})")
        jitter = _validate.seconds(jitter, "jitter")
        if jitter and jitter >= (smallest := fields.min_gap()):  # computed only for a jitter
            raise ValueError(
                f"jitter must be smaller than the smallest gap between fires of "
                f"{expression!r} ({smallest} s), got {jitter!r}")
        self._set(expression=expression, tz=zone, gap=gap, fold=fold,
                  start=_out(start_u), end=_out(end_u), jitter=jitter, _fields=fields,
                  _start=start_u, _end=end_u,
                  _jitter=timedelta(seconds=jitter) if jitter else _NO_JITTER,
                  _table=zone_table(zone))

    def _key(self) -> tuple[object, ...]:
        return (self.expression, self.tz.key, self.gap, self.fold, self.start, self.end,
                self.jitter)

    def _args(self) -> str:
        args = [repr(self.expression), f"tz={self.tz.key!r}"]
        defaults = {"gap": "shift", "fold": "first", "start": None, "end": None, "jitter": 0}
        args += [f"{name}={getattr(self, name)!r}" for name, default in defaults.items()
                 if getattr(self, name) != default]
        return ", ".join(args)

    def _base(self, start: datetime) -> datetime | None:
        """The first un-jittered fire instant at or after `start` (naive UTC)."""
        if self._start is not None and start < self._start:
            start = self._start
        return _first_fire(self._fields, self._table, start, self.gap, self.fold, self._end)

    def _offset(self, base: datetime, limit: timedelta) -> timedelta:
        digest = hashlib.blake2b(f"{self.expression}\0{base.isoformat()}".encode(),
                                 digest_size=8).digest()
        fraction = int.from_bytes(digest, "big") / 2.0**64
        return timedelta(microseconds=int(fraction * (limit // _US)))

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire instant strictly after `instant`, aware UTC, or None."""
        after = _instant(instant)
        jitter = self._jitter
        if not jitter:
            return _out(self._base(after + _US))
        # Jittered fires keep the order of their bases (each offset stays below the gap to
        # the next base), so the answer's base is the first one whose fire passes `after`;
        # only bases within `jitter` before `after` can fail to, and there are few.
        base = self._base(after - jitter + _US)
        while base is not None:
            following = self._base(base + _US)
            limit = jitter if following is None else min(jitter, following - base)
            fire = base + self._offset(base, limit)
            if self._end is not None and fire > self._end:
                return None  # `end` bounds the fire, not its base; later ones are later still
            if fire > after:
                return _out(fire)
            base = following
        return None

    def to_data(self) -> dict[str, object]:
        return {"type": "cron", "expression": self.expression, "tz": self.tz.key,
                "gap": self.gap, "fold": self.fold, "start": _iso(self.start),
                "end": _iso(self.end), "jitter": self.jitter}

    def describe(self) -> str:
        words = [f"{self.expression} {self.tz.key}"]
        if self.gap != "shift" or self.fold != "first":
            words.append(f"gap={self.gap} fold={self.fold}")
        if self.start is not None:
            words.append(f"from {self.start.astimezone(self.tz):%Y-%m-%d %H:%M:%S}")
        if self.end is not None:
            words.append(f"until {self.end.astimezone(self.tz):%Y-%m-%d %H:%M:%S}")
        if self.jitter:
            words.append(f"jitter {self.jitter:g} s")
        return ", ".join(words)


class Date(_Value):
    """Fires once, at `when` (aware; naive -> ValueError naming `when`).

    `tz` is `when`'s zone when that is a ZoneInfo (kept in the data), else None.
    """

    __slots__ = ("_when", "tz", "when")

    when: datetime
    tz: ZoneInfo | None
    _when: datetime

    def __init__(self, when: datetime) -> None:
        _aware(when, "when")
        zone = when.tzinfo if isinstance(when.tzinfo, ZoneInfo) else None
        if zone is not None:
            zone = _zone(zone)
        self._set(when=when, tz=zone, _when=_naive_utc(when))

    def _key(self) -> tuple[object, ...]:
        return (self._when, None if self.tz is None else self.tz.key)

    def _args(self) -> str:
        return repr(self.when)

    def next_after(self, instant: datetime) -> datetime | None:
        """`when` in UTC if it is after `instant`, else None."""
        return _out(self._when) if self._when > _instant(instant) else None

    def to_data(self) -> dict[str, object]:
        data: dict[str, object] = {"type": "date", "when": self.when.isoformat()}
        if self.tz is not None:
            data["tz"] = self.tz.key
        return data

    def describe(self) -> str:
        if self.tz is not None:
            return f"once at {self.when.astimezone(self.tz):%Y-%m-%d %H:%M:%S} {self.tz.key}"
        return f"once at {self.when.astimezone(_UTC):%Y-%m-%d %H:%M:%S} UTC"


class CalendarInterval(_Value):
    """Fires at local time `at` in `tz` on `start`, start + 1 period, start + 2 periods, ...

    The period is `years`, `months`, `weeks` and `days` together (at least one positive, none
    negative). Periods are counted from `start`, not chained from the previous fire, so the
    31st comes back after February. A day that does not exist in the target month becomes the
    month's last day: from Jan 31 by one month, Feb 29 2024 (Feb 28 2025), then Mar 31. Dates
    after `end` (inclusive bound) are left out. Always a fixed-time job for the zone rule:
    `gap` and `fold` as for `Cron`.
    """

    __slots__ = ("_pattern", "_table", "at", "days", "end", "fold", "gap", "months", "start", "tz",
                 "weeks", "years")

    years: int
    months: int
    weeks: int
    days: int
    at: time
    tz: ZoneInfo
    start: date
    end: date | None
    gap: GapPolicy
    fold: FoldPolicy
    _pattern: CalendarPattern
    _table: ZoneTable

    def __init__(self, *, years: int = 0, months: int = 0, weeks: int = 0, days: int = 0,
                 at: time = time(0, 0), tz: ZoneInfo | str, start: date,
                 end: date | None = None, gap: GapPolicy = "shift",
                 fold: FoldPolicy = "first") -> None:
        counts = {"years": years, "months": months, "weeks": weeks, "days": days}
        for name, value in counts.items():
            _validate.count(value, name, minimum=0)
        if not any(counts.values()):
            raise ValueError("years, months, weeks, days: at least one must be positive")
        if not isinstance(at, time):
            raise TypeError(f"at must be a datetime.time, got {type(at).__name__}")
        if at.tzinfo is not None:
            raise ValueError("at must be a naive local time: the zone is `tz`")
        zone = _zone(tz)
        for name, day in (("start", start), ("end", end)):
            if day is not None and (not isinstance(day, date) or isinstance(day, datetime)):
                raise TypeError(f"{name} must be a datetime.date, got {type(day).__name__}")
        if end is not None and end < start:
            raise ValueError(f"end ({end}) is before start ({start})")
        _choice(gap, "gap", _GAPS)
        _choice(fold, "fold", _FOLDS)
        pattern = CalendarPattern(12 * years + months, 7 * weeks + days, at, start, end)
        self._set(years=years, months=months, weeks=weeks, days=days, at=at, tz=zone,
                  start=start, end=end, gap=gap, fold=fold, _pattern=pattern,
                  _table=zone_table(zone))

    def _key(self) -> tuple[object, ...]:
        return (self.years, self.months, self.weeks, self.days, self.at, self.tz.key,
                self.start, self.end, self.gap, self.fold)

    def _args(self) -> str:
        args = [f"{name}={getattr(self, name)!r}" for name in ("years", "months", "weeks",
                                                                "days") if getattr(self, name)]
        args += [f"at={self.at!r}", f"tz={self.tz.key!r}", f"start={self.start!r}"]
        defaults = {"end": None, "gap": "shift", "fold": "first"}
        args += [f"{name}={getattr(self, name)!r}" for name, default in defaults.items()
                 if getattr(self, name) != default]
        return ", ".join(args)

    def next_after(self, instant: datetime) -> datetime | None:
        """The first fire instant strictly after `instant`, aware UTC, or None."""
        return _out(_first_fire(self._pattern, self._table, _instant(instant) + _US, self.gap,
                            self.fold, None))

    def to_data(self) -> dict[str, object]:
        return {"type": "calendar", "years": self.years, "months": self.months,
                "weeks": self.weeks, "days": self.days, "at": self.at.isoformat(),
                "tz": self.tz.key, "start": self.start.isoformat(),
                "end": None if self.end is None else self.end.isoformat(),
                "gap": self.gap, "fold": self.fold}

    def describe(self) -> str:
        parts = [f"{value} {name[:-1] if value == 1 else name}"
                 for name, value in (("years", self.years), ("months", self.months),
                                     ("weeks", self.weeks), ("days", self.days)) if value]
        text = (f"every {' '.join(parts)} at {self.at.isoformat()} {self.tz.key} "
                f"from {self.start.isoformat()}")
        if self.end is not None:
            text += f" until {self.end.isoformat()}"
        if self.gap != "shift" or self.fold != "first":
            text += f", gap={self.gap} fold={self.fold}"
        return text


class Interval(_Value):
    """Fires at start + k * `seconds` (k = 0, 1, ...): ``next_after(i)`` is the first > i.

    `start` defaults to the Unix epoch in UTC. Exact to the microsecond (the period is
    rounded to whole microseconds, at least one). The service runs ``every()`` on the
    monotonic clock; this is its data form. `tz` is None.
    """

    __slots__ = ("_period", "_start", "seconds", "start")

    seconds: float
    start: datetime
    tz: ZoneInfo | None = None
    _period: int
    _start: datetime

    def __init__(self, seconds: float, *, start: datetime | None = None) -> None:
        seconds = _validate.seconds(seconds, "seconds", allow_zero=False)
        period = round(seconds * 1_000_000)
        if period < 1:
            raise ValueError(f"seconds must be at least one microsecond, got {seconds!r}")
        start_u = _naive_utc(_EPOCH if start is None else _aware(start, "start"))
        self._set(seconds=seconds, start=_out(start_u), _period=period, _start=start_u)

    def _key(self) -> tuple[object, ...]:
        return (self._period, self._start)

    def _args(self) -> str:
        return f"{self.seconds!r}, start={self.start!r}"

    def next_after(self, instant: datetime) -> datetime | None:
        """The first start + k * seconds strictly after `instant`, aware UTC."""
        elapsed = (_instant(instant) - self._start) // _US
        if elapsed < 0:
            return _out(self._start)
        k = elapsed // self._period + 1
        try:
            return _out(self._start + timedelta(microseconds=k * self._period))
        except OverflowError:
            return None

    def to_data(self) -> dict[str, object]:
        return {"type": "interval", "seconds": self.seconds, "start": self.start.isoformat()}

    def describe(self) -> str:
        text = f"every {self.seconds:g} s"
        if self._start != _naive_utc(_EPOCH):
            text += f" from {self.start:%Y-%m-%d %H:%M:%S} UTC"
        return text


def _members(triggers: tuple[object, ...], name: str) -> tuple[Trigger, ...]:
    if not triggers:
        raise ValueError(f"{name}: give at least one trigger")
    for member in triggers:
        if not isinstance(member, Trigger):
            raise TypeError(f"{name}: {member!r} is not a trigger")
    return triggers  # type: ignore[return-value]  # checked just above


def _first_zone(members: tuple[Trigger, ...]) -> ZoneInfo | None:
    return next((m.tz for m in members if m.tz is not None), None)


class AnyOf(_Value):
    """Fires whenever any member fires (an instant two members share fires once)."""

    __slots__ = ("triggers", "tz")

    triggers: tuple[Trigger, ...]
    tz: ZoneInfo | None

    def __init__(self, *triggers: Trigger) -> None:
        members = _members(triggers, "triggers")
        self._set(triggers=members, tz=_first_zone(members))

    def _key(self) -> tuple[object, ...]:
        return self.triggers

    def _args(self) -> str:
        return ", ".join(map(repr, self.triggers))

    def next_after(self, instant: datetime) -> datetime | None:
        """The earliest of the members' next fire instants, or None."""
        _instant(instant)
        found = [t for t in (m.next_after(instant) for m in self.triggers) if t is not None]
        return min(found) if found else None

    def to_data(self) -> dict[str, object]:
        return {"type": "any", "triggers": [m.to_data() for m in self.triggers]}

    def describe(self) -> str:
        return "any of (" + "; ".join(m.describe() for m in self.triggers) + ")"


class AllOf(_Value):
    """Fires at the instants where every member fires.

    Each round asks every member for its first fire at or after the latest candidate so far;
    when all agree, that instant fires. After `max_rounds` rounds without agreement it gives
    up: `next_after` returns None and logs a WARNING on the logger ``executors.triggers``.
    `max_rounds` above `MAX_ROUNDS` is a ValueError, here and in data (rounds multiply).
    """

    __slots__ = ("max_rounds", "triggers", "tz")
    MAX_ROUNDS: ClassVar[int] = 10_000  # two cron members: 20-60 ms a thousand rounds here

    triggers: tuple[Trigger, ...]
    max_rounds: int
    tz: ZoneInfo | None

    def __init__(self, *triggers: Trigger, max_rounds: int = 1000) -> None:
        members = _members(triggers, "triggers")
        _validate.count(max_rounds, "max_rounds", minimum=1)
        if max_rounds > self.MAX_ROUNDS:
            raise ValueError(f"max_rounds must be at most {self.MAX_ROUNDS:,}, got {max_rounds:,}")
        self._set(triggers=members, max_rounds=max_rounds, tz=_first_zone(members))

    def _key(self) -> tuple[object, ...]:
        return (self.triggers, self.max_rounds)

    def _args(self) -> str:
        args = [repr(m) for m in self.triggers]
        if self.max_rounds != 1000:
            args.append(f"max_rounds={self.max_rounds}")
        return ", ".join(args)

    def next_after(self, instant: datetime) -> datetime | None:
        """The first instant after `instant` where every member fires, or None."""
        _instant(instant)
        after = instant
        for _ in range(self.max_rounds):
            _search_budget.check()  # a store loop's plan has a time budget
            fires = [m.next_after(after) for m in self.triggers]
            if any(f is None for f in fires):
                return None
            latest = max(f for f in fires if f is not None)
            if all(f == latest for f in fires):
                return latest
            after = latest - _US  # next round: every member's first fire at or after it
        logger.warning("AllOf gave up after %d rounds without agreement after %s: %s",
                       self.max_rounds, instant.isoformat(), self.describe())
        return None

    def to_data(self) -> dict[str, object]:
        return {"type": "all", "triggers": [m.to_data() for m in self.triggers],
                "max_rounds": self.max_rounds}

    def describe(self) -> str:
        return "all of (" + "; ".join(m.describe() for m in self.triggers) + ")"


# -- data ------------------------------------------------------------------------------------


def trigger_from_data(data: Mapping[str, object]) -> Trigger:
    """The trigger `data` describes (the inverse of ``to_data``).

    Raises:
        TypeError: `data` is not a mapping.
        ValueError: a missing or ill-typed key (named), an unknown ``"type"`` (named), or a
            value the trigger's constructor refuses (naming its argument, which is the key).
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"data must be a mapping, got {type(data).__name__}")
    kind = text(data, "type")
    if kind == "cron":
        return Cron(text(data, "expression"), tz=text(data, "tz"),
                    gap=text(data, "gap", "shift"),  # type: ignore[arg-type]  # Cron checks
                    fold=text(data, "fold", "first"),  # type: ignore[arg-type]
                    start=iso(data, "start", datetime, None),
                    end=iso(data, "end", datetime, None),
                    jitter=number(data, "jitter", 0))
    if kind == "date":
        when = iso(data, "when", datetime)
        assert when is not None
        zone = checked(data, "tz", (str,), None)
        if zone is not None and when.utcoffset() is not None:
            when = when.astimezone(_zone(zone))
        return Date(when)
    if kind == "calendar":
        start = iso(data, "start", date)
        assert start is not None
        return CalendarInterval(
            years=whole(data, "years", 0), months=whole(data, "months", 0),
            weeks=whole(data, "weeks", 0), days=whole(data, "days", 0),
            at=iso(data, "at", time, "00:00:00") or time(0, 0), tz=text(data, "tz"),
            start=start, end=iso(data, "end", date, None),
            gap=text(data, "gap", "shift"),  # type: ignore[arg-type]  # CalendarInterval checks
            fold=text(data, "fold", "first"))  # type: ignore[arg-type]
    if kind == "interval":
        return Interval(number(data, "seconds"), start=iso(data, "start", datetime, None))
    if kind in ("any", "all"):
        items = checked(data, "triggers", (list, tuple))
        assert isinstance(items, (list, tuple))
        members = []
        for item in items:
            if not isinstance(item, Mapping):
                raise ValueError("trigger data: 'triggers' must hold trigger data mappings")
            members.append(trigger_from_data(item))
        if kind == "any":
            return AnyOf(*members)
        return AllOf(*members, max_rounds=whole(data, "max_rounds", 1000))
    raise ValueError(f"trigger data: unknown 'type' {kind!r} (expected cron, date, calendar, "
                     f"interval, any or all)")
