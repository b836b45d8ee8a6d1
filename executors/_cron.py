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

__all__ = ("FIELD_NAMES", "CronFields")

#: The six fields, seconds first (a 5-field expression has no seconds field).
FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")

# Any naive time: cronsim needs a start to be built; nothing is iterated from it.
_ANCHOR = datetime(2000, 1, 1)
# 2000-2027 holds all fourteen kinds of Gregorian year (each weekday of Jan 1, leap or not):
# a day pattern that matches no day there matches no day ever.
_SAMPLE_YEARS = range(2000, 2028)
# Years of matched days kept per expression before the cache starts afresh.
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


class CronFields:
    """One parsed expression: which local wall-clock times match it.

    Raises ValueError (from the constructor) naming the field and the token for a syntax
    error, the number of fields for a wrong count, and `expression` for one that never fires.
    """

    __slots__ = ("_days", "_hours", "_minutes", "_months", "_seconds", "_sim", "expression",
                 "fixed", "six")

    def __init__(self, expression: str) -> None:
        parts = expression.split()
        if len(parts) not in (5, 6):
            raise ValueError(
                f"expression: expected 5 fields (minute hour day-of-month month day-of-week) "
                f"or 6 (second first), got {len(parts)} in {expression!r}")
        six = parts if len(parts) == 6 else ["0", *parts]
        for index, text in enumerate(six):
            # Checked as written (a bad step in 30-30/x is still named), parsed normalized.
            if not _parses(index, text):
                # cronsim says only "Bad <field>": find the token it refused.
                bad = next((tok for tok in text.split(",") if not _parses(index, tok)), text)
                raise ValueError(
                    f"{FIELD_NAMES[index]} field: bad token {bad!r} in {expression!r}")
        try:
            sim = CronSim(" ".join(_normalized(text) for text in six), _ANCHOR)
        except CronSimError:
            sim = None  # every field parsed alone: cronsim found no month with such a day
        self.expression = expression
        self.six = tuple(six)
        # Debian cron's "specific time": neither minute nor hour starts with "*" (the seconds
        # field of a 6-field expression does not count).
        self.fixed = not six[1].startswith("*") and not six[2].startswith("*")
        if sim is None or not self._fires(sim):
            raise ValueError(
                f"expression: {expression!r} never fires: no date matches its day-of-month, "
                f"month and day-of-week fields")
        self._sim = sim
        self._seconds = sorted(sim.seconds)
        self._minutes = sorted(sim.minutes)
        self._hours = sorted(sim.hours)
        self._months = frozenset(sim.months)
        self._days: dict[int, tuple[list[int], frozenset[int]]] = {}

    @staticmethod
    def _fires(sim: CronSim) -> bool:
        """Whether any day of the sample years matches (then every 400-year span has one)."""
        for year in _SAMPLE_YEARS:
            for month in sorted(sim.months):
                for day in range(1, calendar.monthrange(year, month)[1] + 1):
                    if sim.match_day(date(year, month, day)):
                        return True
        return False

    def _year(self, year: int) -> tuple[list[int], frozenset[int]]:
        """The ordinals of the matching days of `year` (sorted, and as a set)."""
        found = self._days.get(year)
        if found is not None:
            return found
        match = self._sim.match_day
        ordinals: list[int] = []
        for month in sorted(self._months):
            first = date(year, month, 1).toordinal()
            days = range(first, first + calendar.monthrange(year, month)[1])
            ordinals.extend(day for day in days if match(date.fromordinal(day)))
        if len(self._days) >= _KEPT_YEARS:
            self._days.clear()  # one atomic call: safe while another thread reads
        found = (ordinals, frozenset(ordinals))
        self._days[year] = found
        return found

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
