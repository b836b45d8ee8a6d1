"""`executors.triggers` checked against an independent brute-force oracle (helpers/cron_oracle).

The oracle walks UTC minute by minute (second by second for 6-field expressions), converts to
local time with zoneinfo and applies the spec's rule for skipped and repeated local times; these
tests compare `Cron` and `CalendarInterval` with it on random expressions, zones and windows
around real clock changes, and on every zone's 2024 changes.
"""

from __future__ import annotations

import calendar
import functools
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import islice, pairwise
from zoneinfo import ZoneInfo

import pytest
from helpers import cron_oracle as oracle
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from executors.triggers import CalendarInterval, Cron

ALL_ZONES = tuple(sorted(zoneinfo.available_timezones()))
# Zones whose changes are unusual: 30-minute (Lord Howe), 2-hour (Troll), at midnight
# (Santiago, Havana, Cairo), at :45 (Chatham), at :30 UTC (St Johns, Adelaide), negative DST
# (Dublin), Ramadan suspensions (Casablanca), one-off (Almaty 2024, Asuncion 2024), and zones
# that dropped DST (Apia, Tehran).
FAVOURITE_ZONES = (
    "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Tehran",
    "America/Santiago", "Africa/Casablanca", "Pacific/Chatham", "Antarctica/Troll",
    "America/St_Johns", "Australia/Adelaide", "Europe/Dublin", "America/Havana", "Africa/Cairo",
    "Asia/Almaty", "America/Asuncion", "Asia/Gaza", "America/Nuuk",
)
ZONES = st.one_of(st.sampled_from(FAVOURITE_ZONES), st.sampled_from(ALL_ZONES))
YEARS_START = datetime(2024, 1, 1, tzinfo=UTC)
YEARS_END = datetime(2026, 1, 1, tzinfo=UTC)
POLICIES = [("shift", "first"), ("skip", "first"), ("shift", "last"), ("shift", "both")]
GAPS = st.sampled_from(["shift", "skip"])
FOLDS = st.sampled_from(["first", "last", "both"])
PROPERTY = settings(
    deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@functools.cache
def changes(zone_name: str) -> tuple[oracle.Transition, ...]:
    """The zone's offset changes in 2024-2025 (found by the oracle's own sampling)."""
    return tuple(oracle.transitions(ZoneInfo(zone_name), YEARS_START, YEARS_END))


# -- strategies ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A zone and a UTC window (lo, hi], usually around one of the zone's clock changes."""

    zone_name: str
    lo: datetime
    hi: datetime
    change: oracle.Transition | None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.zone_name)

    def local_hours(self) -> list[int]:
        """Local hours next to the change (or none): where skipped and repeated times are."""
        if self.change is None:
            return []
        at = self.change.at
        walls = [at + self.change.before, at + self.change.after]
        walls += [w - timedelta(hours=1) for w in walls]
        return sorted({w.hour for w in walls})

    def local_minutes(self) -> list[int]:
        if self.change is None:
            return [0, 30]
        at = self.change.at
        return sorted({(at + self.change.before).minute, (at + self.change.after).minute})

    def local_days(self) -> list[date]:
        zone = self.zone
        first, last = self.lo.astimezone(zone).date(), self.hi.astimezone(zone).date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]


@st.composite
def windows(draw: st.DrawFn, *, max_side: timedelta) -> Window:
    """A zone and a window reaching up to `max_side` either side of one of its 2024-2025
    changes (four times in five when it has one) or of a random 2024-2025 instant."""
    zone_name = draw(ZONES)
    found = changes(zone_name)
    change = draw(st.sampled_from(found)) if found and draw(st.integers(0, 4)) else None
    if change is not None:
        center = change.at
    else:
        center = YEARS_START + timedelta(seconds=draw(st.integers(0, 2 * 365 * 86_400)))
    side = int(max_side.total_seconds())
    before = timedelta(seconds=draw(st.integers(0, side)))
    # A window start off the minute grid checks `next_after` from an arbitrary instant.
    if draw(st.booleans()):
        before += timedelta(microseconds=draw(st.integers(1, 999_999)))
    after = timedelta(seconds=draw(st.integers(60, side)))
    return Window(zone_name, center - before, center + after, change)


def _pick(draw: st.DrawFn, favourites: list[int], low: int, high: int) -> int:
    if favourites and draw(st.booleans()):
        return draw(st.sampled_from(favourites))
    return draw(st.integers(low, high))


def _fixed_field(draw: st.DrawFn, favourites: list[int], low: int, high: int) -> str:
    """A minute or hour field that does not start with "*": number, list, range, steps."""
    a, b = sorted((_pick(draw, favourites, low, high), _pick(draw, favourites, low, high)))
    kind = draw(st.sampled_from(["number", "number", "list", "range", "range-step", "start-step"]))
    if kind == "number":
        return str(a)
    if kind == "list":
        return ",".join(str(v) for v in sorted({a, b, _pick(draw, favourites, low, high)}))
    if kind == "range":
        return f"{a}-{b}"
    if kind == "range-step":
        return f"{a}-{b}/{draw(st.integers(1, 20))}"
    return f"{a}/{draw(st.integers(5, 30))}"


def _star_field(draw: st.DrawFn, high: int) -> str:
    return draw(st.sampled_from(["*", "*/{}"])).format(draw(st.integers(1, high)))


def _day_of_month(draw: st.DrawFn, window: Window) -> str:
    days = [d.day for d in window.local_days()]
    return draw(st.sampled_from([
        "*", "*", "*", "*", "*/2", "L", str(draw(st.sampled_from(days))),
        f"{min(days)}-{max(days)}", f"1,{draw(st.sampled_from(days))},L",
        str(draw(st.integers(1, 31))),
    ]))


def _month(draw: st.DrawFn, window: Window) -> str:
    months = sorted({d.month for d in window.local_days()})
    name = oracle._MONTHS[draw(st.sampled_from(months)) - 1]
    case = draw(st.sampled_from([str.lower, str.lower, str.upper, str.capitalize]))
    return draw(st.sampled_from([
        "*", "*", "*", "*", str(months[0]), case(name), f"{case(name)}-dec", "1-12/2",
        f"jan,{months[-1]}",
    ]))


def _day_of_week(draw: st.DrawFn, window: Window) -> str:
    days = [oracle._cron_weekday(d) for d in window.local_days()]
    day = draw(st.sampled_from(days))
    name = oracle._DAYS[day]
    # Sunday as 7 half of the time.
    number = 7 if day == 0 and draw(st.booleans()) else day
    return draw(st.sampled_from([
        "*", "*", "*", "*", str(number), name, "mon-fri", "sat,sun", "*/2", f"{day}L",
        f"{name}#{draw(st.integers(1, 5))}", f"0-{number}", "1-7/3", f"{name}-sat",
    ]))


@st.composite
def expressions(draw: st.DrawFn, window: Window, *, seconds: bool) -> str:
    """A cron expression likely to fire in `window`: fixed-time or not, hours near its change."""
    minutes, hours = [*window.local_minutes(), 0, 15, 30, 45], window.local_hours()
    shape = draw(st.sampled_from(["fixed", "fixed", "star-minute", "star-hour"]))
    if shape == "fixed":
        minute, hour = _fixed_field(draw, minutes, 0, 59), _fixed_field(draw, hours, 0, 23)
    elif shape == "star-minute":
        minute = _star_field(draw, 30)
        hour = _star_field(draw, 6) if draw(st.booleans()) else _fixed_field(draw, hours, 0, 23)
    else:
        minute, hour = _fixed_field(draw, minutes, 0, 59), _star_field(draw, 6)
    fields = [minute, hour, _day_of_month(draw, window), _month(draw, window),
              _day_of_week(draw, window)]
    if seconds:
        fields.insert(0, draw(st.sampled_from(
            ["0", "*/15", "*/20", "0,30", "10-50/20", "59", "*", str(draw(st.integers(0, 59)))]
        )))
    return " ".join(fields)


@dataclass(frozen=True)
class CronCase:
    window: Window
    expression: str
    gap: str
    fold: str
    zone_as_text: bool


@st.composite
def cron_cases(draw: st.DrawFn, *, seconds: bool, policies: tuple[str, str] | None = None,
               ) -> CronCase:
    side = timedelta(minutes=40) if seconds else timedelta(hours=26)
    window = draw(windows(max_side=side))
    expression = draw(expressions(window, seconds=seconds))
    gap, fold = policies if policies else (draw(GAPS), draw(FOLDS))
    return CronCase(window, expression, gap, fold, draw(st.booleans()))


# -- comparison ---------------------------------------------------------------------------------


def _show(instant: datetime, zone: ZoneInfo) -> str:
    return f"{instant.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}Z / {instant.astimezone(zone)}"


def check_fires(
    got: list[datetime], want: list[datetime], zone: ZoneInfo,
    matches: Callable[[datetime], bool], *, shift_allowed: bool, context: str,
) -> None:
    """The fires are strictly increasing real matching instants (or, where allowed, a forward
    change's transition instant) and equal the oracle's list."""
    assert all(a < b for a, b in pairwise(got)), f"{context}: fires not strictly increasing"
    for fire in got:
        kind = oracle.classify_fire(fire, zone, matches)
        assert kind == "real" or (kind == "shift" and shift_allowed), (
            f"{context}: {_show(fire, zone)} is neither a matching local time"
            f"{' nor a forward change' if shift_allowed else ''}")
    assert got == want, f"{context}: {oracle.describe_difference(got, want, zone)}"


def check_queries(
    next_after: Callable[[datetime], datetime | None], want: list[datetime], window: Window,
    queries: list[datetime], context: str,
) -> None:
    """`next_after(q)` is the oracle's first fire after q for each q in the window (q given
    in UTC or in the zone)."""
    for query in queries:
        expected = next((f for f in want if f > query), None)
        got = next_after(query)
        if expected is None:
            assert got is None or got > window.hi, f"{context}: next_after({query}) = {got}"
        else:
            assert got == expected, (
                f"{context}: next_after({_show(query, window.zone)}) = "
                f"{got and _show(got, window.zone)}, oracle {_show(expected, window.zone)}")


def _queries(draw: st.DrawFn, window: Window) -> list[datetime]:
    """Instants inside the window, some inside a repeated interval, in UTC or local time."""
    span = int((window.hi - window.lo).total_seconds())
    points = [window.lo + timedelta(seconds=draw(st.integers(0, span)),
                                    microseconds=draw(st.sampled_from([0, 1, 500_000])))
              for _ in range(3)]
    change = window.change
    if change is not None and not change.forward:
        # Inside both passes of the repeated interval: a restarted process asks from there.
        size = int(change.size.total_seconds())
        points += [change.at - timedelta(seconds=draw(st.integers(1, size))),
                   change.at + timedelta(seconds=draw(st.integers(0, size - 1)))]
    zone = window.zone
    return [p.astimezone(zone) if draw(st.booleans()) else p for p in points]


def _run_cron_case(case: CronCase, draw: st.DrawFn) -> None:
    window, zone = case.window, case.window.zone
    pattern = oracle.CronPattern.parse(case.expression)
    tz: ZoneInfo | str = case.window.zone_name if case.zone_as_text else zone
    context = (f"Cron({case.expression!r}, tz={case.window.zone_name!r}, gap={case.gap!r}, "
               f"fold={case.fold!r}) over ({window.lo.isoformat()}, {window.hi.isoformat()}]")
    try:
        trigger = Cron(case.expression, tz=tz, gap=case.gap, fold=case.fold)
    except ValueError:
        assert not pattern.fires_on_some_day(), f"{context}: refused, but it fires"
        return
    assert pattern.fires_on_some_day(), f"{context}: accepted, but it never fires"
    want = oracle.cron_fires(pattern, zone, window.lo, window.hi, gap=case.gap, fold=case.fold)
    got = oracle.first_fires(trigger.next_after, window.lo, window.hi)
    check_fires(got, want, zone, pattern.matches,
                shift_allowed=pattern.fixed_time and case.gap == "shift", context=context)
    check_queries(trigger.next_after, want, window, _queries(draw, window), context)
    _check_bounds(case, pattern, want, draw, context)


def _check_bounds(case: CronCase, pattern: oracle.CronPattern, want: list[datetime],
                  draw: st.DrawFn, context: str) -> None:
    """start/end are inclusive bounds on the fire instants; end < start is refused."""
    if not want or not draw(st.booleans()):
        return
    window, zone = case.window, case.window.zone

    def bound() -> datetime:
        if draw(st.booleans()):
            return draw(st.sampled_from(want)).astimezone(zone)  # exactly on a fire
        span = int((window.hi - window.lo).total_seconds())
        return window.lo + timedelta(seconds=draw(st.integers(0, span)))

    start, end = bound(), bound()
    if end < start:
        with pytest.raises(ValueError, match="end"):
            Cron(case.expression, tz=zone, gap=case.gap, fold=case.fold,
                 start=start, end=end)
        return
    trigger = Cron(case.expression, tz=zone, gap=case.gap, fold=case.fold,
                   start=start, end=end)
    got = oracle.first_fires(trigger.next_after, window.lo, window.hi)
    bounded = [f for f in want if start <= f <= end]
    assert got == bounded, (f"{context} start={start} end={end}: "
                            f"{oracle.describe_difference(got, bounded, zone)}")
    assert trigger.next_after(end) is None, f"{context}: fires after end={end}"


# -- the oracle itself --------------------------------------------------------------------------


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# (zone, expression, gap, fold, window lo, window hi, expected fires in UTC), computed by hand.
HAND_COMPUTED = [
    # New York 2024-03-10 02:00 EST -> 03:00 EDT (07:00Z): 02:30 is skipped.
    ("America/New_York", "30 2 * * *", "shift", "first", _utc(2024, 3, 9), _utc(2024, 3, 12),
     [_utc(2024, 3, 9, 7, 30), _utc(2024, 3, 10, 7), _utc(2024, 3, 11, 6, 30)]),
    ("America/New_York", "30 2 * * *", "skip", "first", _utc(2024, 3, 9), _utc(2024, 3, 12),
     [_utc(2024, 3, 9, 7, 30), _utc(2024, 3, 11, 6, 30)]),
    ("America/New_York", "*/30 * * * *", "shift", "first", _utc(2024, 3, 10, 6),
     _utc(2024, 3, 10, 7, 30), [_utc(2024, 3, 10, 6, 30), _utc(2024, 3, 10, 7),
                                _utc(2024, 3, 10, 7, 30)]),
    # New York 2024-11-03 02:00 EDT -> 01:00 EST (06:00Z): 01:30 happens at 05:30Z and 06:30Z.
    ("America/New_York", "30 1 * * *", "shift", "first", _utc(2024, 11, 3), _utc(2024, 11, 4),
     [_utc(2024, 11, 3, 5, 30)]),
    ("America/New_York", "30 1 * * *", "shift", "last", _utc(2024, 11, 3), _utc(2024, 11, 4),
     [_utc(2024, 11, 3, 6, 30)]),
    ("America/New_York", "30 1 * * *", "skip", "both", _utc(2024, 11, 3), _utc(2024, 11, 4),
     [_utc(2024, 11, 3, 5, 30), _utc(2024, 11, 3, 6, 30)]),
    ("America/New_York", "30 * * * *", "shift", "first", _utc(2024, 11, 3, 5),
     _utc(2024, 11, 3, 7), [_utc(2024, 11, 3, 5, 30), _utc(2024, 11, 3, 6, 30)]),
    # 6 fields: the seconds field does not make the job non-fixed; the gap fires once.
    ("America/New_York", "*/20 30 2 * * *", "shift", "first", _utc(2024, 3, 10, 6),
     _utc(2024, 3, 10, 8), [_utc(2024, 3, 10, 7)]),
    # Berlin 2024-03-31 02:00 CET -> 03:00 CEST (01:00Z); 2024-10-27 03:00 -> 02:00 (01:00Z).
    ("Europe/Berlin", "30 2 * * *", "shift", "first", _utc(2024, 3, 30, 12),
     _utc(2024, 3, 31, 12), [_utc(2024, 3, 31, 1)]),
    ("Europe/Berlin", "30 2 * * *", "shift", "both", _utc(2024, 10, 26, 12),
     _utc(2024, 10, 27, 12), [_utc(2024, 10, 27, 0, 30), _utc(2024, 10, 27, 1, 30)]),
    # Lord Howe 2024-10-06 02:00 +10:30 -> 02:30 +11 (15:30Z): 30 minutes.
    ("Australia/Lord_Howe", "15,45 2 * * *", "shift", "first", _utc(2024, 10, 5, 12),
     _utc(2024, 10, 6), [_utc(2024, 10, 5, 15, 30), _utc(2024, 10, 5, 15, 45)]),
    # Lord Howe 2024-04-07 02:00 +11 -> 01:30 +10:30 (15:00Z): 01:45 at 14:45Z and 15:15Z.
    ("Australia/Lord_Howe", "45 1 * * *", "shift", "last", _utc(2024, 4, 6, 12),
     _utc(2024, 4, 7), [_utc(2024, 4, 6, 15, 15)]),
    # Santiago 2024-09-08 00:00 -04 -> 01:00 -03 (04:00Z): the change is at midnight.
    ("America/Santiago", "30 0 * * *", "shift", "first", _utc(2024, 9, 7), _utc(2024, 9, 9),
     [_utc(2024, 9, 7, 4, 30), _utc(2024, 9, 8, 4)]),
    # Apia skipped 2011-12-30 (UTC-10 -> UTC+14 at 10:00Z): 24 hours, no shift.
    ("Pacific/Apia", "0 12 * * *", "shift", "first", _utc(2011, 12, 29), _utc(2011, 12, 31),
     [_utc(2011, 12, 29, 22), _utc(2011, 12, 30, 22)]),
    # Casey +11 -> +08 at 2010-03-04 15:00Z: exactly 3 hours is not DST-like, 00:30 twice.
    ("Antarctica/Casey", "30 0 * * *", "shift", "first", _utc(2010, 3, 4), _utc(2010, 3, 5),
     [_utc(2010, 3, 4, 13, 30), _utc(2010, 3, 4, 16, 30)]),
    # Casey +08 -> +11 at 2009-10-17 18:00Z: 02:00-05:00 skipped; 03:30 does not fire.
    ("Antarctica/Casey", "30 3 * * *", "shift", "first", _utc(2009, 10, 17), _utc(2009, 10, 19),
     [_utc(2009, 10, 18, 16, 30)]),
]


@pytest.mark.parametrize(("zone", "expression", "gap", "fold", "lo", "hi", "expected"),
                         HAND_COMPUTED)
def test_oracle_agrees_with_hand_computed_cases(
    zone: str, expression: str, gap: str, fold: str, lo: datetime, hi: datetime,
    expected: list[datetime],
) -> None:
    """The oracle itself gives the fire instants worked out by hand from the rule."""
    assert oracle.cron_fires(expression, ZoneInfo(zone), lo, hi, gap=gap, fold=fold) == expected


def test_oracle_day_fields() -> None:
    """The oracle's day matching: L, nL, d#n, weekday 7 = Sunday, names, the OR rule when
    neither day field starts with "*", AND when one does."""

    def days(expression: str, month: int) -> list[int]:
        pattern = oracle.CronPattern.parse(expression)
        first = date(2024, month, 1)
        return [d.day for d in (first + timedelta(days=n) for n in range(31))
                if d.month == month and pattern.day_matches(d)]

    # February 2024: Thursday 1st ... Thursday 29th.
    assert days("0 0 L * *", 2) == [29]
    assert days("0 0 * * 4L", 2) == [29]
    assert days("0 0 * * fri#2", 2) == [9]
    assert days("0 0 * * 7", 2) == days("0 0 * * sun", 2) == [4, 11, 18, 25]
    assert days("0 0 12 * fri", 9) == [6, 12, 13, 20, 27]  # OR: the 12th, and every Friday
    assert days("0 0 */10 * fri", 3) == [1]  # AND ("*/10" starts with "*"): Friday March 1st
    assert days("0 0 * FEB *", 3) == []
    assert oracle.CronPattern.parse("0 0 * * 5/1").weekdays == {5, 6, 0}
    assert not oracle.CronPattern.parse("0 0 30 2 *").fires_on_some_day()
    assert oracle.CronPattern.parse("0 0 29 2 *").fires_on_some_day()


def test_oracle_calendar_dates_and_fires() -> None:
    """The oracle's CalendarInterval: periods counted from start with the short-month rule,
    and `at` resolved as a fixed time (shifted out of the New York gap, once in the fold)."""
    monthly = list(islice(oracle.calendar_dates(date(2024, 1, 31), months=1), 4))
    assert monthly == [date(2024, 1, 31), date(2024, 2, 29), date(2024, 3, 31), date(2024, 4, 30)]
    yearly = list(oracle.calendar_dates(date(2024, 2, 29), years=1, end=date(2026, 2, 27)))
    assert yearly == [date(2024, 2, 29), date(2025, 2, 28)]
    ny = ZoneInfo("America/New_York")
    dates = [date(2024, 3, 10), date(2024, 11, 3)]
    assert oracle.calendar_fires(dates, time(2, 30), ny) == [
        _utc(2024, 3, 10, 7), _utc(2024, 11, 3, 7, 30)]
    assert oracle.calendar_fires(dates, time(1, 30), ny, gap="skip", fold="last") == [
        _utc(2024, 3, 10, 6, 30), _utc(2024, 11, 3, 6, 30)]


# -- Cron against the oracle ---------------------------------------------------------------------


@pytest.mark.parametrize(("gap", "fold"), POLICIES)
@settings(PROPERTY, max_examples=50)
@given(data=st.data())
def test_cron_agrees_with_the_oracle(gap: str, fold: str, data: st.DataObject) -> None:
    """5-field Cron in random zones around their changes fires exactly the oracle's instants,
    strictly increasing, each a real matching instant or a gap shift; `next_after` from any
    instant (also inside a repeated interval) is the oracle's next fire; start/end bound it."""
    case = data.draw(cron_cases(seconds=False, policies=(gap, fold)))
    _run_cron_case(case, data.draw)


@settings(PROPERTY, max_examples=40)
@given(data=st.data())
def test_cron_with_seconds_agrees_with_the_oracle(data: st.DataObject) -> None:
    """6-field Cron (walked second by second by the oracle) fires exactly the oracle's
    instants under every gap and fold policy."""
    case = data.draw(cron_cases(seconds=True))
    _run_cron_case(case, data.draw)


# -- CalendarInterval against the oracle --------------------------------------------------------


@dataclass(frozen=True)
class CalendarCase:
    zone_name: str
    period: dict[str, int]
    at: time
    start: date
    end: date | None
    gap: str
    fold: str


PERIODS = st.sampled_from([
    {"days": 1}, {"days": 2}, {"weeks": 1}, {"weeks": 2}, {"months": 1}, {"months": 2},
    {"months": 3}, {"years": 1}, {"months": 1, "days": 1}, {"weeks": 1, "days": 3},
])


@st.composite
def calendar_cases(draw: st.DrawFn) -> CalendarCase:
    """A CalendarInterval whose early fire dates often fall on a change of its zone."""
    zone_name = draw(ZONES)
    found = changes(zone_name)
    period = draw(PERIODS)
    if found and draw(st.integers(0, 4)):
        change = draw(st.sampled_from(found))
        zone = ZoneInfo(zone_name)
        wall = (change.at - timedelta(minutes=1)).astimezone(zone)
        hours = [wall.hour, (change.at + change.after).hour, (change.at + change.before).hour]
        minutes = [0, 30, 45, (change.at + change.before).minute]
        # Start a few periods before the change's local date (days and weeks land on it).
        back = draw(st.integers(0, 3))
        start = wall.date() - timedelta(days=back * (period.get("days", 0)
                                                     + 7 * period.get("weeks", 0)))
    else:
        hours, minutes = [], [0, 30]
        start = date(2024, 1, 1) + timedelta(days=draw(st.integers(0, 700)))
        if draw(st.booleans()):  # the short-month rule
            last = calendar.monthrange(start.year, start.month)[1]
            start = start.replace(day=draw(st.integers(28, last)))
    at = time(_pick(draw, hours, 0, 23), _pick(draw, minutes, 0, 59),
              draw(st.sampled_from([0, 0, 0, 30])))
    end = start + timedelta(days=draw(st.integers(0, 120))) if draw(st.booleans()) else None
    return CalendarCase(zone_name, period, at, start, end, draw(GAPS), draw(FOLDS))


@settings(PROPERTY, max_examples=60)
@given(case=calendar_cases(), data=st.data())
def test_calendar_interval_agrees_with_the_oracle(case: CalendarCase, data: st.DataObject,
                                                 ) -> None:
    """CalendarInterval's first fires (and `next_after` between them) are the oracle's: dates
    counted from start with the short-month rule, `at` resolved as a fixed time."""
    zone = ZoneInfo(case.zone_name)
    trigger = CalendarInterval(**case.period, at=case.at, tz=case.zone_name, start=case.start,
                               end=case.end, gap=case.gap, fold=case.fold)
    count = 5
    dates = list(islice(oracle.calendar_dates(case.start, end=case.end, **case.period),
                        count + 3))
    complete = len(dates) < count + 3
    want = oracle.calendar_fires(dates, case.at, zone, gap=case.gap, fold=case.fold)
    if not complete:
        want = want[:count]
    lo = datetime.combine(case.start, time(), tzinfo=UTC) - timedelta(days=1)
    hi = want[-1] if want and not complete else YEARS_END + timedelta(days=3000)
    got = oracle.first_fires(trigger.next_after, lo, hi)
    context = f"{trigger!r}"
    wanted = {datetime.combine(d, case.at) for d in dates}
    check_fires(got, want, zone, lambda wall: wall in wanted,
                shift_allowed=case.gap == "shift", context=context)
    if want:
        window = Window(case.zone_name, lo, want[-1], None)
        check_queries(trigger.next_after, want, window, _queries(data.draw, window), context)


# -- every zone, and the large changes ----------------------------------------------------------

FIXED_EVERY_15 = "0,15,30,45 0-23 * * *"  # fixed-time: neither field starts with "*"
NON_FIXED_EVERY_15 = "*/15 * * * *"


def _compare_cron(expression: str, zone_name: str, lo: datetime, hi: datetime, gap: str,
                  fold: str) -> None:
    zone = ZoneInfo(zone_name)
    pattern = oracle.CronPattern.parse(expression)
    trigger = Cron(expression, tz=zone, gap=gap, fold=fold)
    got = oracle.first_fires(trigger.next_after, lo, hi)
    want = oracle.cron_fires(pattern, zone, lo, hi, gap=gap, fold=fold)
    check_fires(got, want, zone, pattern.matches,
                shift_allowed=pattern.fixed_time and gap == "shift",
                context=f"{expression!r} {zone_name} gap={gap} fold={fold} ({lo}, {hi}]")


@pytest.mark.parametrize("zone_name", ALL_ZONES)
def test_every_zone_around_its_2024_changes(zone_name: str) -> None:
    """In every zone of the database, a fixed-time and a non-fixed quarter-hourly job fire
    the oracle's instants within 12 hours of each 2024 change (or on one day of a zone with
    none), under the default policies and under gap="skip", fold="last"."""
    spans = [(c.at - timedelta(hours=12), c.at + timedelta(hours=12))
             for c in oracle.transitions(ZoneInfo(zone_name), YEARS_START, _utc(2025, 1, 1))]
    if not spans:
        spans = [(_utc(2024, 6, 30, 12), _utc(2024, 7, 1, 12))]
    for lo, hi in spans:
        _compare_cron(FIXED_EVERY_15, zone_name, lo, hi, "shift", "first")
        _compare_cron(FIXED_EVERY_15, zone_name, lo, hi, "skip", "last")
        _compare_cron(NON_FIXED_EVERY_15, zone_name, lo, hi, "shift", "first")


# Changes of 3 hours or more (no special handling), and exactly 3 hours (not DST-like).
LARGE_CHANGES = [
    ("Pacific/Apia", _utc(2011, 12, 30, 10)),  # UTC-10 -> UTC+14: 2011-12-30 skipped
    ("Pacific/Kwajalein", _utc(1993, 8, 21, 12)),  # UTC-12 -> UTC+12
    ("Antarctica/Casey", _utc(2009, 10, 17, 18)),  # +08 -> +11, exactly 3 hours forward
    ("Antarctica/Casey", _utc(2010, 3, 4, 15)),  # +11 -> +08, exactly 3 hours back
    ("Antarctica/Vostok", _utc(1994, 1, 31, 17)),  # +07 -> +00, 7 hours back
    ("America/Danmarkshavn", _utc(1996, 1, 1, 3)),  # -03 -> +00
]


@pytest.mark.parametrize(("zone_name", "at"), LARGE_CHANGES)
@pytest.mark.parametrize(("gap", "fold"), POLICIES)
def test_large_changes_get_no_special_handling(zone_name: str, at: datetime, gap: str,
                                               fold: str) -> None:
    """Around changes of 3 hours or more, fixed-time and non-fixed jobs fire every real
    matching instant and nothing for skipped times, whatever gap and fold say."""
    lo, hi = at - timedelta(hours=30), at + timedelta(hours=30)
    for expression in (FIXED_EVERY_15, NON_FIXED_EVERY_15, "30 1 * * *", "30 23 * * *"):
        _compare_cron(expression, zone_name, lo, hi, gap, fold)


# -- the comparison can fail --------------------------------------------------------------------


@dataclass(frozen=True)
class NaiveLocalCron:
    """A deliberately wrong trigger: steps local wall time and reads each match with fold=0
    (so a skipped 02:30 becomes 03:30 EDT, an hour late, as APScheduler 3.11 does)."""

    pattern: oracle.CronPattern
    zone: ZoneInfo
    horizon: timedelta = timedelta(days=3)

    def next_after(self, instant: datetime) -> datetime | None:
        wall = instant.astimezone(self.zone).replace(tzinfo=None, second=0, microsecond=0)
        for _ in range(int(self.horizon.total_seconds()) // 60):
            wall += timedelta(minutes=1)
            if self.pattern.matches(wall):
                fire = wall.replace(tzinfo=self.zone).astimezone(UTC)
                if fire > instant:
                    return fire
        return None


def _toy_mismatch(case: CronCase) -> bool:
    window = case.window
    pattern = oracle.CronPattern.parse(case.expression)
    toy = NaiveLocalCron(pattern, window.zone)
    want = oracle.cron_fires(pattern, window.zone, window.lo, window.hi, gap=case.gap,
                             fold=case.fold)
    return oracle.first_fires(toy.next_after, window.lo, window.hi) != want


def test_a_wrong_trigger_is_caught() -> None:
    """The comparison fails for a trigger that reads skipped local times with fold=0: by
    hand on New York's 2024 spring change, and by the property search on its own."""
    ny = ZoneInfo("America/New_York")
    toy = NaiveLocalCron(oracle.CronPattern.parse("30 2 * * *"), ny)
    lo, hi = _utc(2024, 3, 9), _utc(2024, 3, 12)
    with pytest.raises(AssertionError, match="2024-03-10 07:30"):
        check_fires(oracle.first_fires(toy.next_after, lo, hi),
                    oracle.cron_fires("30 2 * * *", ny, lo, hi), ny, toy.pattern.matches,
                    shift_allowed=True, context="toy")
    found = find(cron_cases(seconds=False, policies=("shift", "first")), _toy_mismatch,
                 settings=settings(PROPERTY, max_examples=500, phases=[Phase.generate]))
    assert found.window.change is not None, "the toy only errs around a clock change"
