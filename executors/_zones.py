"""A zone's UTC-offset changes, found once per year and cached: what `triggers` resolves
local wall-clock times with.

`zoneinfo` answers "what is the offset at this instant" but has no public list of the instants
where the offset changes. This module finds them by asking the offset at every UTC midnight of a
year and bisecting (to the second) each day whose two ends disagree. A day whose ends agree is
taken to hold no change: two changes less than a day apart that cancel out would be missed. No
zone of tzdata 2026 has two offset changes closer than seven days (checked over every zone's
whole table), so the probe sees every change; the bisection finds several in one day if the
offsets at the change it found and at the day's end still differ.

Instants here are naive datetimes in UTC; offsets are timedeltas (local = instant + offset).
Stdlib only.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

__all__ = ("Transition", "ZoneTable", "zone_table")

_DAY = timedelta(days=1)
_SECOND = timedelta(seconds=1)
_UTC = UTC


class Transition(NamedTuple):
    """The instant `at` (naive UTC) from which the offset is `after`; before it, `before`.

    A pseudo transition at a year's start with ``before == after`` ends a search segment where
    the zone has no change for a while.
    """

    at: datetime
    before: timedelta
    after: timedelta


def _offset(tz: ZoneInfo, instant: datetime) -> timedelta:
    """The UTC offset of `tz` at `instant` (naive UTC)."""
    offset = tz.fromutc(instant.replace(tzinfo=tz)).utcoffset()
    assert offset is not None  # a ZoneInfo always has an offset
    return offset


class ZoneTable:
    """The offset changes of one zone, computed a year at a time on demand and kept.

    Thread-safe: a year is computed outside any lock (it is a pure function of the zone) and
    stored with one dict assignment; two threads computing the same year store equal lists.
    """

    __slots__ = ("_years", "tz")

    def __init__(self, tz: ZoneInfo) -> None:
        self.tz = tz
        # year -> (instants, transitions) for changes at instants in [Jan 1, next Jan 1) UTC.
        self._years: dict[int, tuple[list[datetime], list[Transition]]] = {}

    def offset(self, instant: datetime) -> timedelta:
        """The offset at `instant` (naive UTC)."""
        return _offset(self.tz, instant)

    def _year(self, year: int) -> tuple[list[datetime], list[Transition]]:
        found = self._years.get(year)
        if found is not None:
            return found
        tz = self.tz
        changes: list[Transition] = []
        # Probe just before each UTC midnight so that day i covers [midnight i, midnight i+1).
        day = datetime(year, 1, 1)
        end = datetime(year + 1, 1, 1) if year < 9999 else datetime(9999, 12, 31)
        probe = day - _SECOND if year > 1 else day
        off = _offset(tz, probe)
        while day < end:
            nxt = min(day + _DAY, end)
            last = nxt - _SECOND
            off_last = _offset(tz, last)
            lo, lo_off = probe, off
            while lo_off != off_last:
                # The first second after `lo` whose offset differs from lo's: bisection on
                # whole seconds (tzdata's changes fall on whole seconds).
                a, b = lo, last
                while b - a > _SECOND:
                    mid = a + timedelta(seconds=(b - a) // _SECOND // 2)
                    if _offset(tz, mid) == lo_off:
                        a = mid
                    else:
                        b = mid
                new = _offset(tz, b)
                changes.append(Transition(b, lo_off, new))
                lo, lo_off = b, new
            probe, off, day = last, off_last, nxt
        result = ([t.at for t in changes], changes)
        self._years[year] = result
        return result

    def next_change(self, instant: datetime) -> Transition:
        """The first transition strictly after `instant`, or a pseudo one (no change) at the
        next UTC new year, whichever comes first: a segment never spans more than a year."""
        year = instant.year
        ats, changes = self._year(year)
        i = bisect_right(ats, instant)
        if i < len(changes):
            return changes[i]
        if year >= 9999:
            raise OverflowError("past the last year datetime can hold")
        new_year = datetime(year + 1, 1, 1)
        ats_next, changes_next = self._year(year + 1)
        if ats_next and ats_next[0] == new_year:
            return changes_next[0]
        off = self.offset(new_year)
        return Transition(new_year, off, off)

    def last_change(self, instant: datetime) -> Transition | None:
        """The last real transition at or before `instant`, looking back to the previous
        year at most (enough for the three-hour rule), or None."""
        year = instant.year
        ats, changes = self._year(year)
        i = bisect_right(ats, instant)
        if i:
            return changes[i - 1]
        if year <= 1:
            return None
        _, previous = self._year(year - 1)
        return previous[-1] if previous else None


_TABLES: dict[str, ZoneTable] = {}


def zone_table(tz: ZoneInfo) -> ZoneTable:
    """The shared table of `tz` (one per zone key: equal keys hold equal data)."""
    key = tz.key
    table = _TABLES.get(key)
    if table is None:
        # setdefault is one atomic dict operation: two first users end up with one table.
        table = _TABLES.setdefault(key, ZoneTable(tz))
    return table
