"""A brute-force oracle for wall-clock triggers: walk UTC step by step and apply the spec's rule.

Written from the rule in the triggers spec alone (Debian cron's, cron(8)), and on purpose
without cronsim, croniter or `executors.triggers`, so that it can disagree with them:

- `CronPattern` matches a naive local wall-clock time against a cron expression (5 or 6
  fields; numbers, ``*``, ranges, lists, steps, ``a/n``, month and weekday names, weekday 7 =
  Sunday, ``L`` in day-of-month, ``nL`` and ``d#n`` in day-of-week, the day-of-month /
  day-of-week OR rule when neither field starts with ``*``).
- `walk_fires` walks a grid of UTC instants (every minute, or every second for 6-field
  expressions), converts each to local time with zoneinfo and keeps the matching ones. Clock
  changes are found from the offset changing between consecutive grid points; the times a
  forward change skips and the instants a backward change repeats are enumerated from the two
  offsets. Then the rule: a fixed-time job fires once at the transition instant for the
  matching skipped times of a DST-like change (gap="shift"), fires per `fold` in a DST-like
  repeated interval, and changes of 3 hours or more get no special handling.
- `calendar_dates` / `calendar_fires` do the same for `CalendarInterval` (periods counted
  from `start`, a day missing from the target month is that month's last day; `at` is a
  fixed time).

It assumes at most one offset change between two consecutive grid points (true of every zone
since 1970) and offsets within UTC-14:00..UTC+15:00.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

__all__ = (
    "DST_LIKE_LIMIT",
    "CronPattern",
    "Transition",
    "transitions",
    "walk_fires",
    "cron_fires",
    "calendar_dates",
    "calendar_fires",
    "first_fires",
    "classify_fire",
    "describe_difference",
)

DST_LIKE_LIMIT = timedelta(hours=3)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_EPOCH = datetime(1970, 1, 1)
# Widest UTC offsets that exist (UTC-12 and UTC+14 today), with room to spare.
_MAX_WEST = timedelta(hours=14)
_MAX_EAST = timedelta(hours=15)


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0

    def value(self, token: str) -> int:
        low_token = token.lower()
        if low_token in self.names:
            return self.names.index(low_token) + self.name_base
        if not token.isdigit():
            raise ValueError(f"oracle: {self.name} field: unsupported token {token!r}")
        number = int(token)
        if not self.low <= number <= self.high:
            raise ValueError(f"oracle: {self.name} field: {number} out of range")
        return number

    def term(self, term: str) -> set[int]:
        """The numbers one comma-separated term stands for (before weekday 7 becomes 0)."""
        base, _, step_text = term.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"oracle: {self.name} field: bad step in {term!r}")
        if base == "*":
            first, last = self.low, self.high
        elif "-" in base:
            first_text, last_text = base.split("-")
            first, last = self.value(first_text), self.value(last_text)
        else:
            first = self.value(base)
            # "a/n" runs from a to the field's maximum; a lone "a" is just a.
            last = self.high if step_text else first
        if last < first:
            raise ValueError(f"oracle: {self.name} field: empty range {term!r}")
        return set(range(first, last + 1, step))


_SECOND = _Field("second", 0, 59)
_MINUTE = _Field("minute", 0, 59)
_HOUR = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTH = _Field("month", 1, 12, _MONTHS, 1)
_DOW = _Field("day-of-week", 0, 7, _DAYS, 0)


def _cron_weekday(day: date) -> int:
    """Cron's weekday number: Sunday 0 .. Saturday 6 (Python's Monday is 0)."""
    return (day.weekday() + 1) % 7


def _month_length(year: int, month: int) -> int:
    return calendar.monthrange(year, month)[1]


@dataclass(frozen=True)
class CronPattern:
    """One cron expression, parsed into plain sets; `matches` decides a naive wall time."""

    expression: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    last_day: bool
    months: frozenset[int]
    weekdays: frozenset[int]
    last_weekdays: frozenset[int]
    nth_weekdays: frozenset[tuple[int, int]]
    dom_star: bool
    dow_star: bool
    fixed_time: bool
    has_seconds: bool
    _day_cache: dict[date, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, expression: str) -> CronPattern:
        parts = expression.split()
        if len(parts) == 5:
            parts = ["0", *parts]
            has_seconds = False
        elif len(parts) == 6:
            has_seconds = True
        else:
            raise ValueError(f"oracle: expected 5 or 6 fields in {expression!r}")
        second, minute, hour, dom, month, dow = parts
        days: set[int] = set()
        last_day = False
        for term in dom.split(","):
            if term.upper() == "L":
                last_day = True
            else:
                days |= _DOM.term(term)
        weekdays: set[int] = set()
        last_weekdays: set[int] = set()
        nth: set[tuple[int, int]] = set()
        for term in dow.split(","):
            if "#" in term:
                day_text, nth_text = term.split("#")
                nth.add((_DOW.value(day_text) % 7, int(nth_text)))
            elif term.upper().endswith("L"):
                last_weekdays.add(_DOW.value(term[:-1]) % 7)
            else:
                weekdays |= {d % 7 for d in _DOW.term(term)}

        def numbers(text: str, spec: _Field) -> frozenset[int]:
            return frozenset(set().union(*(spec.term(t) for t in text.split(","))))

        return cls(
            expression=expression,
            seconds=numbers(second, _SECOND),
            minutes=numbers(minute, _MINUTE),
            hours=numbers(hour, _HOUR),
            days=frozenset(days),
            last_day=last_day,
            months=numbers(month, _MONTH),
            weekdays=frozenset(weekdays),
            last_weekdays=frozenset(last_weekdays),
            nth_weekdays=frozenset(nth),
            dom_star=dom.startswith("*"),
            dow_star=dow.startswith("*"),
            # The spec: fixed-time when neither the minute nor the hour field starts with "*".
            fixed_time=not minute.startswith("*") and not hour.startswith("*"),
            has_seconds=has_seconds,
        )

    def day_matches(self, day: date) -> bool:
        """Month, day-of-month and day-of-week; cron's OR rule when both day fields are
        restricted (neither starts with "*"), AND otherwise."""
        cached = self._day_cache.get(day)
        if cached is not None:
            return cached
        length = _month_length(day.year, day.month)
        dom_ok = day.day in self.days or (self.last_day and day.day == length)
        weekday = _cron_weekday(day)
        dow_ok = (
            weekday in self.weekdays
            or (weekday in self.last_weekdays and day.day + 7 > length)
            or (weekday, (day.day - 1) // 7 + 1) in self.nth_weekdays
        )
        day_ok = (dom_ok and dow_ok) if self.dom_star or self.dow_star else (dom_ok or dow_ok)
        result = day.month in self.months and day_ok
        self._day_cache[day] = result
        return result

    def matches(self, wall: datetime) -> bool:
        """Whether the naive local wall-clock time `wall` matches the expression."""
        return (
            wall.microsecond == 0
            and wall.second in self.seconds
            and wall.minute in self.minutes
            and wall.hour in self.hours
            and self.day_matches(wall.date())
        )

    def fires_on_some_day(self) -> bool:
        """Whether any day 2024-2051 matches (28 years hold every calendar a year can have
        between 1901 and 2099): False means the expression never fires."""
        day = date(2024, 1, 1)
        while day.year < 2052:
            if self.day_matches(day):
                return True
            day += timedelta(days=1)
        return False


@dataclass(frozen=True)
class Transition:
    """One offset change: `at` is the first instant on the new offset."""

    at: datetime
    before: timedelta
    after: timedelta

    @property
    def size(self) -> timedelta:
        return abs(self.after - self.before)

    @property
    def dst_like(self) -> bool:
        return self.size < DST_LIKE_LIMIT

    @property
    def forward(self) -> bool:
        return self.after > self.before


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _locate(earlier: datetime, later: datetime, zone: ZoneInfo) -> datetime:
    """The first whole second after `earlier`, up to `later`, on `later`'s offset."""
    before = _offset(earlier, zone)
    while later - earlier > timedelta(seconds=1):
        middle = earlier + timedelta(seconds=(later - earlier).total_seconds() // 2)
        if _offset(middle, zone) == before:
            earlier = middle
        else:
            later = middle
    return later


def transitions(zone: ZoneInfo, lo: datetime, hi: datetime,
                step: timedelta = timedelta(days=1)) -> list[Transition]:
    """Offset changes in (lo, hi], found by sampling every `step` and bisecting."""
    found = []
    point, offset = lo, _offset(lo, zone)
    while point < hi:
        following = min(point + step, hi)
        next_offset = _offset(following, zone)
        if next_offset != offset:
            at = _locate(point, following, zone)
            found.append(Transition(at, offset, _offset(at, zone)))
        point, offset = following, next_offset
    return found


def _align_up(instant: datetime, step: int, phase: int) -> datetime:
    """The first instant >= `instant` whose epoch seconds are `phase` modulo `step`."""
    naive = instant.replace(tzinfo=None)
    seconds = (naive - _EPOCH) // timedelta(seconds=1)
    if naive > _EPOCH + timedelta(seconds=seconds):
        seconds += 1
    seconds += (phase - seconds) % step
    return (_EPOCH + timedelta(seconds=seconds)).replace(tzinfo=instant.tzinfo)


def walk_fires(
    matches: Callable[[datetime], bool],
    *,
    zone: ZoneInfo,
    fixed_time: bool,
    lo: datetime,
    hi: datetime,
    step: int = 60,
    phase: int = 0,
    gap: str = "shift",
    fold: str = "first",
) -> list[datetime]:
    """The rule's fire instants in (lo, hi], ascending, aware UTC.

    Walks UTC instants whose epoch seconds are `phase` modulo `step` from lo - 3 h to
    hi + 3 h (a repeated interval shorter than 3 h reaching into the window is seen whole),
    converts each to local time and applies the rule to each local time `matches` accepts.
    """
    margin = DST_LIKE_LIMIT + timedelta(seconds=step)
    grid_step = timedelta(seconds=step)
    instant = _align_up(lo.astimezone(UTC) - margin, step, phase)
    end = hi.astimezone(UTC) + margin
    points: list[tuple[datetime, timedelta]] = []
    while instant <= end:
        points.append((instant, _offset(instant, zone)))
        instant += grid_step

    fires: set[datetime] = set()
    # UTC ranges [first, last) whose instants a fixed-time job does not fire at.
    suppressed: list[tuple[datetime, datetime]] = []
    for (earlier, before), (later, after) in pairwise(points):
        if before == after:
            continue
        at = _locate(earlier, later, zone)
        change = Transition(at, before, after)
        if not (fixed_time and change.dst_like):
            continue  # every real matching instant fires; the skipped times do not
        if change.forward:
            if gap != "shift":
                continue
            # Local times skipped: [at + before, at + after), on the local grid.
            skipped_first = (at + before).replace(tzinfo=None)
            skipped_end = (at + after).replace(tzinfo=None)
            local = _align_up(skipped_first, step, phase)
            while local < skipped_end:
                if matches(local):
                    fires.add(at)
                    break
                local += grid_step
        else:
            size = change.size
            if fold == "first":
                suppressed.append((at, at + size))  # the second pass
            elif fold == "last":
                suppressed.append((at - size, at))  # the first pass
    for instant, offset in points:
        if matches((instant + offset).replace(tzinfo=None)) and not any(
            first <= instant < last for first, last in suppressed
        ):
            fires.add(instant)
    lo_utc, hi_utc = lo.astimezone(UTC), hi.astimezone(UTC)
    return sorted(f for f in fires if lo_utc < f <= hi_utc)


def cron_fires(
    expression: str | CronPattern,
    zone: ZoneInfo,
    lo: datetime,
    hi: datetime,
    *,
    gap: str = "shift",
    fold: str = "first",
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[datetime]:
    """A Cron trigger's fire instants in (lo, hi], with `start`/`end` inclusive bounds."""
    pattern = expression if isinstance(expression, CronPattern) else CronPattern.parse(expression)
    fires = walk_fires(
        pattern.matches,
        zone=zone,
        fixed_time=pattern.fixed_time,
        lo=lo,
        hi=hi,
        step=1 if pattern.has_seconds else 60,
        gap=gap,
        fold=fold,
    )
    return [f for f in fires if (start is None or f >= start) and (end is None or f <= end)]


def calendar_dates(
    start: date,
    *,
    years: int = 0,
    months: int = 0,
    weeks: int = 0,
    days: int = 0,
    end: date | None = None,
) -> Iterator[date]:
    """start, start + 1 period, start + 2 periods, ... (each counted from `start`: years and
    months first, a day the target month lacks becoming its last day, then weeks and days)."""
    total_months = 12 * years + months
    total_days = 7 * weeks + days
    if total_months <= 0 and total_days <= 0:
        raise ValueError("oracle: the period must be positive")
    k = 0
    while True:
        year, month0 = divmod(start.month - 1 + k * total_months, 12)
        year += start.year
        day = min(start.day, _month_length(year, month0 + 1))
        result = date(year, month0 + 1, day) + timedelta(days=k * total_days)
        if end is not None and result > end:
            return
        yield result
        k += 1


def calendar_fires(
    dates: Iterable[date],
    at: time,
    zone: ZoneInfo,
    *,
    gap: str = "shift",
    fold: str = "first",
) -> list[datetime]:
    """The instants the local times `date + at` resolve to under the rule (fixed-time)."""
    if at.microsecond or at.tzinfo is not None:
        raise ValueError("oracle: `at` must be naive with whole seconds")
    fires: set[datetime] = set()
    for day in dates:
        wanted = datetime.combine(day, at)
        as_utc = wanted.replace(tzinfo=UTC)
        fires.update(
            walk_fires(
                wanted.__eq__,
                zone=zone,
                fixed_time=True,
                lo=as_utc - _MAX_EAST,
                hi=as_utc + _MAX_WEST,
                step=60,
                phase=at.second,
                gap=gap,
                fold=fold,
            )
        )
    return sorted(fires)


def first_fires(
    next_after: Callable[[datetime], datetime | None],
    after: datetime,
    until: datetime,
    limit: int = 100_000,
) -> list[datetime]:
    """Walk `next_after` from `after`; the fires up to `until` (inclusive).

    Raises AssertionError when a fire is not strictly after the instant asked about, is not
    aware UTC, or there are more than `limit` of them.
    """
    out: list[datetime] = []
    instant = after
    while True:
        fire = next_after(instant)
        if fire is None:
            return out
        assert fire.tzinfo is not None and fire.utcoffset() == timedelta(0), (
            f"next_after({instant.isoformat()}) = {fire!r} is not aware UTC"
        )
        assert fire > instant, (
            f"next_after({instant.isoformat()}) = {fire.isoformat()} is not strictly after"
        )
        if fire > until:
            return out
        out.append(fire)
        assert len(out) <= limit, f"more than {limit} fires"
        instant = fire


def classify_fire(fire: datetime, zone: ZoneInfo, matches: Callable[[datetime], bool]) -> str:
    """"real" when `fire`'s local time matches, "shift" when it is a forward change's
    transition instant (the first instant on a larger offset); "" otherwise."""
    wall = fire.astimezone(zone).replace(tzinfo=None)
    if matches(wall):
        return "real"
    if _offset(fire - timedelta(seconds=1), zone) < _offset(fire, zone):
        return "shift"
    return ""


def describe_difference(got: Sequence[datetime], want: Sequence[datetime], zone: ZoneInfo) -> str:
    """A short account of where two fire lists part, in UTC and local time."""

    def show(instant: datetime) -> str:
        local = instant.astimezone(zone)
        return f"{instant.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z ({local:%H:%M:%S%z} local)"

    extra = sorted(set(got) - set(want))
    missing = sorted(set(want) - set(got))
    lines = [f"{len(got)} fires, oracle {len(want)}"]
    lines += [f"  unexpected {show(f)}" for f in extra[:5]]
    lines += [f"  missing    {show(f)}" for f in missing[:5]]
    return "\n".join(lines)
