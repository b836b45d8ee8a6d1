"""The local wall-clock times of a `triggers.CalendarInterval`: start + k periods at one time.

A period is a number of months and a number of days. The k-th date adds k * months to
`start`'s month (a day the target month lacks becomes its last day) and then k * days; each is
counted from `start`, never from the previous date, so Jan 31 + 1 month is Feb 29 2024 and
Jan 31 + 2 months is Mar 31. Stdlib only; zones are `triggers`' business.
"""

from __future__ import annotations

import calendar
from datetime import date, datetime, time, timedelta

__all__ = ("CalendarPattern",)

# Average days in a month over the 400-year cycle: for the first guess of k.
_MONTH_DAYS = 146097 / 4800


class CalendarPattern:
    """Matches combine(date(k), at) for k = 0, 1, ...; dates after `end` never match."""

    __slots__ = ("_at", "_days", "_end", "_months", "_start", "fixed")

    def __init__(self, months: int, days: int, at: time, start: date, end: date | None) -> None:
        self._months, self._days, self._at = months, days, at
        self._start, self._end = start, end
        self.fixed = True  # a calendar interval names its time: Debian cron's fixed-time job

    def _date(self, k: int) -> date:
        day = self._start
        if self._months:
            index = day.year * 12 + day.month - 1 + k * self._months
            year, month = divmod(index, 12)
            month += 1
            day = date(year, month, min(day.day, calendar.monthrange(year, month)[1]))
        return day + timedelta(days=k * self._days)

    def next_local(self, lo: datetime, limit: int) -> datetime | None:
        """The first start + k periods at `at` that is at or after `lo` (naive), on a day
        whose ordinal is at most `limit` and not after `end`; or None."""
        try:
            # The dates increase with k; the guess from average lengths is off by less than
            # a period either way for any period (the months' lengths average out within a
            # year), and the two loops below correct it.
            period = self._months * _MONTH_DAYS + self._days
            k = max(0, int((lo.date() - self._start).days / period) - 1)
            while k > 0 and datetime.combine(self._date(k - 1), self._at) >= lo:
                k -= 1
            day = self._date(k)
            while datetime.combine(day, self._at) < lo:
                k += 1
                day = self._date(k)
        except (OverflowError, ValueError):  # past year 9999
            return None
        if day.toordinal() > limit or (self._end is not None and day > self._end):
            return None
        return datetime.combine(day, self._at)
