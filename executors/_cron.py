"""A cron expression's fields, parsed and matched by cronsim, walked in local wall-clock time.

`triggers.Cron` turns the local times found here into instants (the zone rule lives there);
this module knows nothing of zones. cronsim parses the fields (names, ranges, lists, steps,
``L``, ``nL``, ``LW``, ``#n``, weekday 0 and 7 as Sunday) and decides which days match (its
``match_day`` holds cron's rule that a restricted day-of-month and a restricted day-of-week
match when either does). The walk over a day's times is three bisections in cronsim's parsed
second, minute and hour sets, and the days that match are found once a year and kept, so a
query costs microseconds and never re-parses the expression. `tests/test_triggers.py` checks
the walk against cronsim's own (naive) iteration.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from datetime import date, datetime
from itertools import pairwise

from cronsim import CronSim, CronSimError

__all__ = ("FIELD_NAMES", "CronFields", "fields_of")

#: The six fields, seconds first (a 5-field expression has no seconds field).
FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")

# Any naive time: cronsim needs a start to be built; nothing is iterated from it.
_ANCHOR = datetime(2000, 1, 1)
# 2000-2027 holds all fourteen kinds of Gregorian year (each weekday of Jan 1, leap or not):
# a day pattern that matches no day there matches no day ever.
_SAMPLE_YEARS = range(2000, 2028)
# Years of matched days kept per day pattern before its cache starts afresh.
_KEPT_YEARS = 64


def _same_value(a: str, b: str) -> bool:
    """Whether two range ends name the same value (``30`` and ``30``, ``mon`` and ``MON``)."""
    if a.isdigit() and b.isdigit():
        return int(a) == int(b)
    return a.upper() == b.upper()


def _normalized(text: str) -> str:
    """`text` with each stepped one-value range (``30-30/5``) written as its value.

    cronsim reads ``a-a/n`` as ``a/n`` (from a to the field's end); Debian cron, and we, read
    it as the one value a.
    """
    tokens = text.split(",")
    for i, token in enumerate(tokens):
        span, slash, _ = token.partition("/")
        low, dash, high = span.partition("-")
        if slash and dash and _same_value(low, high):
            tokens[i] = low
    return ",".join(tokens)


def _parses(index: int, text: str) -> bool:
    """Whether cronsim accepts `text` as field `index` with every other field ``*``."""
    if not text:
        return False  # joined into the probe, an empty token would vanish between spaces
    probe = ["0", "*", "*", "*", "*", "*"]
    probe[index] = text
    try:
        CronSim(" ".join(probe), _ANCHOR)
    except CronSimError:
        return False
    return True


class _DayPattern:
    """The days a (day-of-month, month, day-of-week) triple matches, found a year at a time.

    Shared by every expression with the same three day fields (`day_pattern`): ten thousand
    jobs at different times of the same days keep one table of days, not ten thousand.
    """

    __slots__ = ("_sim", "_years", "fires", "months")

    def __init__(self, sim: CronSim) -> None:
        self._sim = sim
        self.months = sorted(sim.months)
        self._years: dict[int, tuple[list[int], frozenset[int]]] = {}
        self.fires = self._any_day()

    def _any_day(self) -> bool:
        """Whether any day of the sample years matches (then every 400-year span has one)."""
        match = self._sim.match_day
        for year in _SAMPLE_YEARS:
            for month in self.months:
                for day in range(1, calendar.monthrange(year, month)[1] + 1):
                    if match(date(year, month, day)):
                        return True
        return False

    def year(self, year: int) -> tuple[list[int], frozenset[int]]:
        """The ordinals of the matching days of `year` (sorted, and as a set)."""
        found = self._years.get(year)
        if found is not None:
            return found
        match = self._sim.match_day
        ordinals: list[int] = []
        for month in self.months:
            first = date(year, month, 1).toordinal()
            days = range(first, first + calendar.monthrange(year, month)[1])
            ordinals.extend(day for day in days if match(date.fromordinal(day)))
        if len(self._years) >= _KEPT_YEARS:
            self._years.clear()  # one atomic call: safe while another thread reads
        found = (ordinals, frozenset(ordinals))
        self._years[year] = found
        return found


# (day-of-month, month, day-of-week) as normalized -> its pattern; started afresh when full.
# Reads and writes are single dict operations (atomic under the GIL); two threads building
# the same pattern at once build two equal ones, and one is kept.
_PATTERNS: dict[tuple[str, str, str], _DayPattern | None] = {}
_KEPT_PATTERNS = 1024


def day_pattern(dom: str, month: str, dow: str) -> _DayPattern | None:
    """The shared pattern of these (normalized) day fields; None if cronsim refuses them
    together (it found no month with such a day)."""
    key = (dom, month, dow)
    try:
        return _PATTERNS[key]
    except KeyError:
        pass
    try:
        made: _DayPattern | None = _DayPattern(CronSim(f"0 0 0 {dom} {month} {dow}", _ANCHOR))
    except CronSimError:
        made = None
    if len(_PATTERNS) >= _KEPT_PATTERNS:
        _PATTERNS.clear()
    _PATTERNS[key] = made
    return made


# A field's sorted values -> one tuple of them, shared by every expression with that field:
# the sixty minutes of ``*`` are kept once, not once per expression. Bounded as `_PATTERNS`.
_VALUES: dict[tuple[int, ...], tuple[int, ...]] = {}
_KEPT_VALUES = 4096


def _shared(values: set[int]) -> tuple[int, ...]:
    """`values` sorted, as the tuple every other field with these values holds."""
    key = tuple(sorted(values))
    found = _VALUES.get(key)
    if found is not None:
        return found
    if len(_VALUES) >= _KEPT_VALUES:
        _VALUES.clear()
    _VALUES[key] = key
    return key


class CronFields:
    """One parsed expression: which local wall-clock times match it.

    Raises ValueError (from the constructor) naming the field and the token for a syntax
    error, the number of fields for a wrong count, and `expression` for one that never fires.
    """

    __slots__ = ("_days", "_hours", "_minutes", "_seconds", "expression", "fixed", "six")

    def __init__(self, expression: str) -> None:
        parts = expression.split()
        if len(parts) not in (5, 6):
            raise ValueError(
                f"expression: expected 5 fields (minute hour day-of-month month day-of-week) "
                f"or 6 (second first), got {len(parts)} in {expression!r}")
        six = parts if len(parts) == 6 else ["0", *parts]
        # Checked as written (a bad step in 30-30/x is still named), parsed normalized. One
        # parse of the whole expression when it is good; the field-by-field probes only
        # name what a bad one got wrong (cronsim says only "Bad <field>").
        written: CronSim | None
        try:
            written = CronSim(" ".join(six), _ANCHOR)
        except CronSimError:
            written = None  # a bad token, or day fields that never meet (found below)
            for index, text in enumerate(six):
                if not _parses(index, text):
                    bad = next((tok for tok in text.split(",") if not _parses(index, tok)),
                               text)
                    raise ValueError(
                        f"{FIELD_NAMES[index]} field: bad token {bad!r} in {expression!r}"
                        ) from None
        normalized = [_normalized(text) for text in six]
        pattern = day_pattern(*normalized[3:])
        self.expression = expression
        self.six = tuple(six)
        # Debian cron's "specific time": neither minute nor hour starts with "*" (the seconds
        # field of a 6-field expression does not count).
        self.fixed = not six[1].startswith("*") and not six[2].startswith("*")
        if pattern is None or not pattern.fires:
            raise ValueError(
                f"expression: {expression!r} never fires: no date matches its day-of-month, "
                f"month and day-of-week fields")
        sim = written if written is not None and normalized == six else CronSim(
            " ".join(normalized), _ANCHOR)
        self._days = pattern
        self._seconds = _shared(sim.seconds)
        self._minutes = _shared(sim.minutes)
        self._hours = _shared(sim.hours)

    def _year(self, year: int) -> tuple[list[int], frozenset[int]]:
        """The ordinals of the matching days of `year` (sorted, and as a set)."""
        return self._days.year(year)

    def next_local(self, lo: datetime, limit: int) -> datetime | None:
        """The first matching local time at or after `lo` (naive) on a day whose ordinal is
        at most `limit`, or None."""
        day = lo.toordinal()
        if day > limit:
            return None
        if day in self._year(lo.year)[1]:
            hms = self._time_from(lo.hour, lo.minute, lo.second + (lo.microsecond > 0))
            if hms is not None:
                return datetime(lo.year, lo.month, lo.day, *hms)
        following = self._next_day(day + 1, limit)
        if following is None:
            return None
        d = date.fromordinal(following)
        return datetime(d.year, d.month, d.day, self._hours[0], self._minutes[0],
                        self._seconds[0])

    def _time_from(self, hour: int, minute: int, second: int) -> tuple[int, int, int] | None:
        """The first matching (hour, minute, second) at or after the given one in a day."""
        hours, minutes, seconds = self._hours, self._minutes, self._seconds
        i = bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes) and minutes[j] == minute:
                k = bisect_left(seconds, second)
                if k < len(seconds):
                    return hour, minute, seconds[k]
                j += 1
            if j < len(minutes):
                return hour, minutes[j], seconds[0]
            i += 1
        if i < len(hours):
            return hours[i], minutes[0], seconds[0]
        return None

    def _next_day(self, day: int, limit: int) -> int | None:
        """The first matching day ordinal at or after `day` and at most `limit`, or None."""
        year = date.fromordinal(day).year
        while True:
            ordinals = self._year(year)[0]
            i = bisect_left(ordinals, day)
            if i < len(ordinals):
                return ordinals[i] if ordinals[i] <= limit else None
            year += 1
            if year > 9999 or date(year, 1, 1).toordinal() > limit:
                return None

    def min_gap(self) -> int:
        """A lower bound, in seconds, of the local time between two consecutive matches.

        Exact within a day (from the second, minute and hour sets); across days it assumes
        the next match is on the next day, so it is conservative for weekly or monthly
        expressions. Wall-clock changes can bring two instants closer: see `Cron`'s jitter.
        """
        seconds, minutes, hours = self._seconds, self._minutes, self._hours
        gaps = []
        if len(seconds) > 1:
            gaps.append(min(b - a for a, b in pairwise(seconds)))
        span = seconds[-1] - seconds[0]
        if len(minutes) > 1:
            gaps.append(60 * min(b - a for a, b in pairwise(minutes)) - span)
        span += 60 * (minutes[-1] - minutes[0])
        if len(hours) > 1:
            gaps.append(3600 * min(b - a for a, b in pairwise(hours)) - span)
        span += 3600 * (hours[-1] - hours[0])
        gaps.append(86400 - span)
        return min(gaps)


# expression -> its parsed fields, shared by every `Cron` of that expression (whatever its
# zone): ten thousand schedules of sixty expressions keep sixty parses, not ten thousand.
# Started afresh when full (schedules made before keep theirs). Single dict operations, as
# `_PATTERNS`: two threads parsing one expression at once make two equal objects, one kept.
_FIELDS: dict[str, CronFields] = {}
_KEPT_FIELDS = 4096


def fields_of(expression: str) -> CronFields:
    """The parsed fields of `expression`, shared with every other caller that asks for it.

    A `CronFields` is never changed once made, so sharing it is safe. An expression that
    fails is not kept: each call raises `CronFields`' ValueError again.
    """
    try:
        return _FIELDS[expression]
    except KeyError:
        pass
    made = CronFields(expression)
    if len(_FIELDS) >= _KEPT_FIELDS:
        _FIELDS.clear()
    _FIELDS[expression] = made
    return made
