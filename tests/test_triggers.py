"""`executors.triggers`: fire instants across clock changes, cron syntax, the other triggers,
data round trips and every refused input.

The clock-change cases are the ones the peers get wrong (research notes: schedulers.md); each
test names the peer behaviour it pins against. tests/test_triggers_oracle.py checks the same
code against an independent brute-force walk of UTC.
"""

from __future__ import annotations

import json
import logging
import math
import tracemalloc
from datetime import UTC, date, datetime, time, timedelta
from itertools import islice
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from executors import _zones, triggers
from executors._cron import CronFields
from executors.triggers import (
    AllOf,
    AnyOf,
    CalendarInterval,
    Cron,
    Date,
    Interval,
    Trigger,
    trigger_from_data,
)

NY = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")
APIA = ZoneInfo("Pacific/Apia")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0,
        second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires(trigger: Trigger, after: datetime, count: int = 50) -> list[datetime]:
    """The first `count` fire instants after `after` (fewer if the trigger ends)."""
    out = []
    for _ in range(count):
        found = trigger.next_after(after)
        if found is None:
            break
        assert found > after and found.tzinfo is UTC
        out.append(found)
        after = found
    return out


def fires_between(trigger: Trigger, lo: datetime, hi: datetime) -> list[datetime]:
    """Every fire instant in (lo, hi]."""
    out = []
    while (found := trigger.next_after(lo)) is not None and found <= hi:
        out.append(found)
        lo = found
    return out


def on_day(trigger: Trigger, tz: ZoneInfo, day: date) -> list[datetime]:
    """The fires whose local date (in `tz`) is `day`, as local aware datetimes."""
    lo = datetime.combine(day, time(0), tzinfo=tz) - timedelta(hours=30)
    hi = lo + timedelta(hours=60)
    return [f.astimezone(tz) for f in fires_between(trigger, lo, hi)
            if f.astimezone(tz).date() == day]


# -- New York 2024: the probes of the research notes -----------------------------------------


def test_spring_forward_0230_fires_once_at_0300_edt() -> None:
    """Daily 02:30 on New York's spring-forward day (2024-03-10, 02:00 -> 03:00) fires once,
    at the transition 03:00 EDT = 07:00 UTC (Debian cron's rule). APScheduler 3.11.3 fires
    at 02:30-05:00, a local time that does not exist (its docs say the job "will not execute
    at all"); APScheduler 4.0 skips the day."""
    trigger = Cron("30 2 * * *", tz="America/New_York")
    assert fires_between(trigger, utc(2024, 3, 9, 12), utc(2024, 3, 11, 12)) == [
        utc(2024, 3, 10, 7, 0), utc(2024, 3, 11, 6, 30)]
    assert on_day(trigger, NY, date(2024, 3, 10))[0].isoformat() == "2024-03-10T03:00:00-04:00"


def test_fall_back_0130_fires_once() -> None:
    """Daily 01:30 on New York's fall-back day (2024-11-03, 02:00 EDT -> 01:00 EST) fires once,
    at the first pass (05:30 UTC). APScheduler 3 and 4 and croniter fire it twice."""
    trigger = Cron("30 1 * * *", tz=NY)
    assert fires_between(trigger, utc(2024, 11, 2, 12), utc(2024, 11, 4, 12)) == [
        utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)]


@pytest.mark.parametrize(("zone", "day"), [(NY, date(2024, 3, 11)), (BERLIN, date(2024, 4, 1)),
                                           (NY, date(2024, 11, 4)), (BERLIN, date(2024, 10, 28))])
def test_midnight_fires_the_day_after_a_change(zone: ZoneInfo, day: date) -> None:
    """Daily 00:00 fires on the day after a change (2024-03-11 New York, 2024-04-01 Berlin,
    and after the autumn changes): APScheduler 3.11.3 and 4.0 skip 2024-03-11 and 2024-04-01
    (APScheduler #606 still reproduces)."""
    trigger = Cron("0 0 * * *", tz=zone)
    for offset in (-1, 0, 1):
        d = day + timedelta(days=offset)
        assert on_day(trigger, zone, d) == [datetime.combine(d, time(0), tzinfo=zone)]


def test_berlin_2024_last_sundays_of_march_and_october() -> None:
    """Berlin changes on the last Sunday of March (2024-03-31 02:00 CET -> 03:00 CEST) and of
    October (2024-10-27 03:00 CEST -> 02:00 CET): 02:30 shifts to 03:00 CEST (01:00 UTC) in
    March and fires once, at the first pass (00:30 UTC), in October."""
    trigger = Cron("30 2 * * *", tz="Europe/Berlin")
    assert fires_between(trigger, utc(2024, 3, 30, 12), utc(2024, 4, 1, 12)) == [
        utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 30)]
    assert fires_between(trigger, utc(2024, 10, 26, 12), utc(2024, 10, 28, 12)) == [
        utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)]
    assert [c.at for c in _zones.zone_table(BERLIN)._year(2024)[1]] == [
        datetime(2024, 3, 31, 1), datetime(2024, 10, 27, 1)]


class _Counted:
    """A real cron expression's local times (`CronFields`), counting a search's lookups."""

    def __init__(self, expression: str) -> None:
        self.fields = CronFields(expression)
        self.fixed = self.fields.fixed
        self.lookups = 0

    def next_local(self, lo: datetime, limit: int) -> datetime | None:
        self.lookups += 1
        return self.fields.next_local(lo, limit)


@pytest.mark.parametrize("name", ["UTC", "Etc/GMT+5"])
def test_a_zone_with_one_offset_is_searched_in_one_lookup(name: str) -> None:
    """A zone with one offset for all time (UTC, Etc/GMT+5) has no change to end a search's
    segment: a yearly cron asked in November looks its pattern up once (not once per UTC
    year the search crosses) and fires at its local time less the offset; `end` before
    that fire leaves it out. A zone with changes keeps its segments."""
    zone = ZoneInfo(name)
    offset = zone.utcoffset(None)
    assert offset is not None
    table = _zones.zone_table(zone)
    assert table.fixed_offset == offset
    assert _zones.zone_table(BERLIN).fixed_offset is None
    pattern = _Counted("0 0 9 1 6 *")  # 09:00:00 on June 1
    want = datetime(2027, 6, 1, 9) - offset
    search = triggers._first_fire  # the triggers' search: the zone walk only where it changes
    assert search(pattern, table, datetime(2026, 11, 29), "shift", "first", None) == want
    assert pattern.lookups == 1
    assert search(pattern, table, datetime(2026, 11, 29), "shift", "first",
                  want - timedelta(seconds=1)) is None
    # The walk itself still answers the same, one segment per UTC year.
    walked = _Counted("0 0 9 1 6 *")
    assert _zones.first_fire(walked, table, datetime(2026, 11, 29), "shift", "first",
                             None) == want
    assert walked.lookups == 2
    assert Cron("0 0 9 1 6 *", tz=zone).next_after(utc(2026, 11, 29)) == want.replace(
        tzinfo=UTC)


# -- the policies ------------------------------------------------------------------------------


def test_gap_skip_leaves_the_skipped_time_out() -> None:
    """gap="skip": a fixed-time job whose local time falls in the spring gap does not fire
    that day (APScheduler 4.0's behaviour, as a choice rather than the default)."""
    trigger = Cron("30 2 * * *", tz=NY, gap="skip")
    assert on_day(trigger, NY, date(2024, 3, 10)) == []
    assert len(on_day(trigger, NY, date(2024, 3, 11))) == 1


def test_gap_shifted_times_fire_once_at_the_transition() -> None:
    """Several local times in one gap map to one transition instant, which fires once (the
    fire times are a set of instants); 03:00 itself is that same instant."""
    trigger = Cron("0,15,30,45 2,3 * * *", tz=NY)
    day = on_day(trigger, NY, date(2024, 3, 10))
    assert [d.strftime("%H:%M") for d in day] == ["03:00", "03:15", "03:30", "03:45"]


def test_fold_last_fires_the_second_pass_only() -> None:
    """fold="last": the repeated 01:30 fires at its later instant (01:30 EST = 06:30 UTC)."""
    trigger = Cron("30 1 * * *", tz=NY, fold="last")
    assert fires_between(trigger, utc(2024, 11, 2, 12), utc(2024, 11, 4, 12)) == [
        utc(2024, 11, 3, 6, 30), utc(2024, 11, 4, 6, 30)]


def test_fold_both_fires_both_passes() -> None:
    """fold="both": the repeated 01:30 fires at 05:30 and 06:30 UTC."""
    trigger = Cron("30 1 * * *", tz=NY, fold="both")
    assert fires_between(trigger, utc(2024, 11, 2, 12), utc(2024, 11, 4, 12)) == [
        utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 6, 30), utc(2024, 11, 4, 6, 30)]


def test_frequent_jobs_fire_at_every_real_instant() -> None:
    """A job whose hour field starts with '*' is not fixed-time: it fires at both passes of
    the repeated hour and not at all in the gap (Debian cron: "scheduled normally")."""
    trigger = Cron("*/20 * * * *", tz=NY)
    back = fires_between(trigger, utc(2024, 11, 3, 4, 50), utc(2024, 11, 3, 7, 0))
    assert [f.astimezone(NY).strftime("%H:%M%z") for f in back] == [
        "01:00-0400", "01:20-0400", "01:40-0400", "01:00-0500", "01:20-0500", "01:40-0500",
        "02:00-0500"]
    forward = fires_between(trigger, utc(2024, 3, 10, 6, 10), utc(2024, 3, 10, 7, 30))
    assert [f.astimezone(NY).strftime("%H:%M%z") for f in forward] == [
        "01:20-0500", "01:40-0500", "03:00-0400", "03:20-0400"]


def test_next_after_from_inside_the_repeated_hour() -> None:
    """Asked from inside the repeated hour, next_after never returns an earlier instant nor
    repeats a fire: cronsim's aware mode returns the first pass of the hour, an instant
    before the query, so a restarted scheduler would run the job twice."""
    fixed = Cron("30 1 * * *", tz=NY)
    second_pass = datetime(2024, 11, 3, 1, 45, tzinfo=NY, fold=1)
    assert fixed.next_after(second_pass) == utc(2024, 11, 4, 6, 30)
    assert fixed.next_after(datetime(2024, 11, 3, 1, 15, tzinfo=NY, fold=1)) == utc(
        2024, 11, 4, 6, 30)
    assert fixed.next_after(datetime(2024, 11, 3, 1, 15, tzinfo=NY)) == utc(2024, 11, 3, 5, 30)
    # A frequent job asked at 01:50 EDT: the next instant is 01:00 EST, whose local time is
    # earlier than the query's (the walk must start early enough to see it).
    frequent = Cron("0 * * * *", tz=NY)
    first_pass = datetime(2024, 11, 3, 1, 50, tzinfo=NY)
    assert frequent.next_after(first_pass) == utc(2024, 11, 3, 6, 0)
    assert frequent.next_after(first_pass).astimezone(NY).fold == 1  # type: ignore[union-attr]


def test_samoa_skipped_day_gets_no_special_handling() -> None:
    """Pacific/Apia jumped from 2011-12-29 24:00 (-10) to 2011-12-31 00:00 (+14): a 24-hour
    change, a correction rather than DST, so a fixed-time job does not fire for the missing
    day (cronsim's aware mode has no 3-hour threshold and fires it at the jump)."""
    trigger = Cron("0 9 * * *", tz=APIA)
    local = [f.astimezone(APIA) for f in fires(trigger, utc(2011, 12, 28), 4)]
    assert [d.date().isoformat() for d in local] == [
        "2011-12-28", "2011-12-29", "2011-12-31", "2012-01-01"]
    assert all(d.hour == 9 for d in local)
    hourly = fires_between(Cron("0 * * * *", tz=APIA), utc(2011, 12, 30, 8),
                           utc(2011, 12, 30, 12))
    assert [f.hour for f in hourly] == [9, 10, 11, 12]  # one per real hour, none extra


def test_lord_howe_30_minute_changes() -> None:
    """Australia/Lord_Howe moves 30 minutes (+10:30 <-> +11): 02:15 on 2024-10-06 shifts to
    the transition (02:30 +11 = 15:30 UTC the day before); 01:45 on 2024-04-07 repeats
    (02:00 +11 -> 01:30 +10:30) and fires once, or twice 30 minutes apart with fold="both";
    a frequent job fires at both passes (cronsim misses real instants around 30-minute changes
    and loops forever on one of them)."""
    assert Cron("15 2 * * *", tz=LORD_HOWE).next_after(utc(2024, 10, 5, 12)) == utc(
        2024, 10, 5, 15, 30)
    assert on_day(Cron("45 1 * * *", tz=LORD_HOWE), LORD_HOWE, date(2024, 4, 7)) == [
        datetime(2024, 4, 7, 1, 45, tzinfo=LORD_HOWE)]
    both = fires_between(Cron("45 1 * * *", tz=LORD_HOWE, fold="both"), utc(2024, 4, 6, 12),
                         utc(2024, 4, 6, 16))
    assert both == [utc(2024, 4, 6, 14, 45), utc(2024, 4, 6, 15, 15)]
    frequent = fires_between(Cron("*/15 * * * *", tz=LORD_HOWE), utc(2024, 4, 6, 14, 20),
                             utc(2024, 4, 6, 15, 40))
    assert [f.astimezone(LORD_HOWE).strftime("%H:%M") for f in frequent] == [
        "01:30", "01:45", "01:30", "01:45", "02:00"]


# -- cron syntax (cronsim's, checked) -----------------------------------------------------------


def test_weekday_0_and_7_are_sunday() -> None:
    """Weekday 0 and 7 and 'sun' all mean Sunday: APScheduler 3's from_crontab reads 0 as
    Monday (APScheduler #14, #286, #411, #455, #495; #1102: cannot be fixed in 3.x)."""
    for dow in ("0", "7", "sun", "SUN"):
        days = fires(Cron(f"0 12 * * {dow}", tz="UTC"), utc(2024, 1, 1), 3)
        assert [d.date() for d in days] == [date(2024, 1, 7), date(2024, 1, 14),
                                           date(2024, 1, 21)]
        assert {d.weekday() for d in days} == {6}


def test_mon_hash_2_is_the_second_monday_only() -> None:
    """'mon#2' is the second Monday of each month only: Celery accepts day_of_week="mon#2"
    and reads it as every Monday."""
    days = [d.date() for d in fires(Cron("0 9 * * mon#2", tz=BERLIN), utc(2024, 1, 1), 4)]
    assert days == [date(2024, 1, 8), date(2024, 2, 12), date(2024, 3, 11), date(2024, 4, 8)]


def test_day_of_month_and_day_of_week_either_matches() -> None:
    """Both restricted: a day matches when either does (cron's OR rule); one of them '*':
    both must (the AND that makes '* * 13 * fri' every 13th... and every Friday only if the
    day-of-week is restricted alone)."""
    either = {d.date() for d in fires(Cron("0 0 13 * fri", tz="UTC"), utc(2024, 9, 1), 10)}
    assert date(2024, 9, 6) in either and date(2024, 9, 13) in either  # a Friday; the 13th
    assert date(2024, 10, 13) in either  # a Sunday, but the 13th
    fridays = {d.weekday() for d in fires(Cron("0 0 * * fri", tz="UTC"), utc(2024, 9, 1), 10)}
    assert fridays == {4}
    stepped = [d.date() for d in fires(Cron("0 0 */10 * fri", tz="UTC"), utc(2024, 9, 1), 2)]
    assert stepped == [date(2024, 10, 11), date(2024, 11, 1)]  # '*/10' starts with '*': AND


def test_six_fields_put_seconds_first() -> None:
    """A 6-field expression is second minute hour day month weekday (cronsim's, Quartz's
    order); its minute and hour decide whether it is fixed-time (cronsim's aware mode gives
    6-field expressions no clock-change handling)."""
    every = fires(Cron("*/15 * * * * *", tz="UTC"), utc(2024, 1, 1), 5)
    assert [f.second for f in every] == [15, 30, 45, 0, 15]
    shifted = Cron("30 30 2 * * *", tz=NY).next_after(utc(2024, 3, 10))
    assert shifted == utc(2024, 3, 10, 7, 0, 0)  # the transition, not 03:00:30


@pytest.mark.parametrize("expression", [
    "0 0 L * *", "0 0 LW * *", "0 0 * * 5L", "0 0 * * fri#5", "30 4 1,15 * 1-5",
    "*/7 */5 * * *", "0 22 * jan-mar,dec sat,sun", "10-50/20 0 9 * * *", "0 0 29 2 *",
    "0 12 */3 * 2/2", "0 0 * 2 mon#5",
])
def test_the_field_walk_agrees_with_cronsim_naive_iteration(expression: str) -> None:
    """Our walk over cronsim's parsed fields gives the same local times as cronsim's own naive
    iteration (this pins the parts of cronsim we use: its field sets and match_day)."""
    fields = CronFields(expression)
    start = datetime(2023, 12, 25)
    ours = []
    lo = start + timedelta(microseconds=1)  # cronsim's iteration starts strictly after
    for _ in range(30):
        found = fields.next_local(lo, date.max.toordinal())
        assert found is not None
        ours.append(found)
        lo = found + timedelta(microseconds=1)
    expected = list(islice(CronSim(expression, start), 30))
    assert ours == expected


def test_a_stepped_one_value_range_is_that_value() -> None:
    """'30-30/1' is minute 30 only, as in Debian cron (cronsim reads it as 30-59; the oracle
    of tests/test_triggers_oracle.py found it)."""
    assert sorted(CronSim("30-30/1 * * * *", datetime(2024, 1, 1)).minutes) == list(
        range(30, 60))
    found = fires(Cron("30-30/1 * * * *", tz="UTC"), utc(2024, 1, 1), 3)
    assert [f.minute for f in found] == [30, 30, 30]
    found = fires(Cron("0 0 * * MON-mon/2", tz="UTC"), utc(2024, 1, 1), 2)
    assert [f.weekday() for f in found] == [0, 0]


def test_never_firing_expressions_are_refused() -> None:
    """An expression no date can match is refused at construction, never a search loop:
    cronsim's own check ('0 0 30 2 *'), and ours for ones it accepts (every 1st or 21st that
    is also a fifth Monday, which is always the 29th or later)."""
    CronSim("0 0 */20 * 1#5", datetime(2024, 1, 1))  # cronsim accepts it
    for expression in ("0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 */20 * 1#5"):
        with pytest.raises(ValueError, match=r"^expression: .* never fires"):
            Cron(expression, tz="UTC")


@pytest.mark.parametrize(("expression", "message"), [
    ("0 0 * * mun", "day-of-week field: bad token 'mun' in '0 0 * * mun'"),
    ("0 0 * * mon,tue,xx", "day-of-week field: bad token 'xx'"),
    ("61 * * * *", "minute field: bad token '61'"),
    ("0 24 * * *", "hour field: bad token '24'"),
    ("0 0 0 * *", "day-of-month field: bad token '0'"),
    ("0 0 1 13 *", "month field: bad token '13'"),
    ("0 0 1 jan-foo *", "month field: bad token 'jan-foo'"),
    ("60 0 0 1 * *", "second field: bad token '60'"),
    ("*/0 * * * *", "minute field: bad token '*/0'"),
    ("1,,2 * * * *", "minute field: bad token ''"),
    ("0 0 * * mon#6", "day-of-week field: bad token 'mon#6'"),
])
def test_syntax_errors_name_the_field_and_the_token(expression: str, message: str) -> None:
    """A syntax error names the field and the token (cronsim only says 'Bad day-of-week')."""
    with pytest.raises(ValueError, match=r"^" + message.replace("*", r"\*")):
        Cron(expression, tz="UTC")


@pytest.mark.parametrize("expression", ["", "* * * *", "* * * * * * *"])
def test_a_wrong_number_of_fields_says_5_or_6(expression: str) -> None:
    """Anything but 5 or 6 fields is refused with the count expected."""
    with pytest.raises(ValueError, match=r"^expression: expected 5 fields .* or 6"):
        Cron(expression, tz="UTC")


def test_crons_of_one_expression_share_one_parse_of_its_fields() -> None:
    """Every Cron of one expression, whatever its zone, holds the same parsed fields (one
    parse for ten thousand schedules of one expression); another expression has its own, and
    a field's values are shared between expressions (the sixty minutes of ``*``)."""
    a = Cron("7 * * * * *", tz="UTC")
    b = Cron("7 * * * * *", tz="Europe/Paris", jitter=0.5)
    other = Cron("8 * * * * *", tz="UTC")
    assert a._fields is b._fields
    assert other._fields is not a._fields
    assert other._fields._minutes is a._fields._minutes
    assert [(f.minute, f.second) for f in fires(b, utc(2024, 1, 1), 2)] == [(0, 7), (1, 7)]


def test_a_refused_expression_is_refused_again() -> None:
    """A bad expression is not kept: each try raises the same error naming the token."""
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^minute field: bad token '61'"):
            Cron("61 * * * *", tz="UTC")


def test_cron_triggers_of_a_few_expressions_are_small() -> None:
    """2,000 cron triggers of sixty expressions (issue 35's W2 pattern) hold under 400 bytes
    each (measured 271; 1,335 when each parsed its own fields)."""
    Cron("0 * * * * *", tz="UTC")  # the zone's table and the day pattern: made once
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [Cron(f"{k % 60} * * * * *", tz="UTC") for k in range(2000)]
        per_trigger = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_trigger < 400, per_trigger


# -- start, end, jitter ------------------------------------------------------------------------


def test_start_and_end_bound_the_fires() -> None:
    """Fires before `start` or after `end` are left out (both bounds inclusive)."""
    trigger = Cron("0 * * * *", tz="UTC", start=utc(2024, 1, 1, 5), end=utc(2024, 1, 1, 8))
    assert fires(trigger, utc(2024, 1, 1)) == [utc(2024, 1, 1, h) for h in (5, 6, 7, 8)]
    assert trigger.next_after(utc(2024, 1, 1, 8)) is None


def test_jitter_is_deterministic_and_bounded() -> None:
    """Jitter delays each fire by an offset in [0, jitter) that depends only on the schedule
    and the fire time: two equal triggers agree, fires stay in order and within bounds."""
    a = Cron("*/5 * * * *", tz=BERLIN, jitter=120)
    b = Cron("*/5 * * * *", tz="Europe/Berlin", jitter=120)
    # From 00:32:30 the 00:30 fire (at most 00:31:59.999999) is past: both lists pair up.
    start = utc(2024, 3, 31, 0, 32, 30)
    plain = fires(Cron("*/5 * * * *", tz=BERLIN), start, 40)
    jittered = fires(a, start, 40)
    assert jittered == fires(b, start, 40)
    assert all(timedelta(0) <= j - p < timedelta(seconds=120) for p, j in zip(
        plain, jittered, strict=True))
    assert len({j - p for p, j in zip(plain, jittered, strict=True)}) > 30  # really spread
    # Asked from between a base and its jittered fire, the same fire comes back.
    assert a.next_after(plain[3]) == jittered[3]


def test_jitter_never_reorders_fires_around_a_change() -> None:
    """Both passes of a repeated hour are an hour apart though the schedule is daily: the
    offset stays below the time to the next fire, so fires keep their order."""
    trigger = Cron("30 1 * * *", tz=NY, fold="both", jitter=6 * 3600)
    found = fires(trigger, utc(2024, 11, 1), 6)
    assert found == sorted(set(found))
    assert utc(2024, 11, 3, 5, 30) <= found[2] < utc(2024, 11, 3, 6, 30) <= found[3]


def test_jitter_never_takes_a_fire_past_end() -> None:
    """APScheduler 3's test_jitter_with_end_date, run against ours: a fire whose jittered
    instant is after `end` is left out (its base at or before `end` is not enough), and the
    fires before it are those of the same trigger without `end`."""
    start = utc(2017, 11, 12, 6, 50)
    free = Cron("* * * * *", tz="UTC", jitter=5)
    cut = 0
    for minute in range(51, 60):
        end = utc(2017, 11, 12, 6, minute)
        trigger = Cron("* * * * *", tz="UTC", end=end, jitter=5)
        found = fires(trigger, start, 20)
        assert found and all(fire <= end for fire in found)
        expected = [fire for fire in fires(free, start, 12) if fire <= end]
        assert found == expected
        cut += expected[-1] < end  # this end's own minute was jittered past it
        assert trigger.next_after(utc(2017, 11, 12, 6, minute - 1, 58)) in (None, end)
    assert cut >= 5  # jitter in [0, 5) s: almost every end minute's fire is jittered past it
@pytest.mark.parametrize(("expression", "jitter"), [
    ("*/5 * * * *", 300), ("0 9,10 * * *", 3600), ("30 2 * * *", 86400),
    ("*/15 * * * * *", 15), ("0 23 * * *", 86400.5)])
def test_jitter_not_below_the_smallest_gap_is_refused(expression: str, jitter: float) -> None:
    """jitter must be smaller than the smallest gap between consecutive fires."""
    with pytest.raises(ValueError, match=r"^jitter must be smaller than the smallest gap"):
        Cron(expression, tz="UTC", jitter=jitter)
    Cron(expression, tz="UTC", jitter=jitter * 0.99 if jitter < 86400 else 86399)


@pytest.mark.parametrize(("jitter", "error"), [
    (-1, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("5", TypeError),
    (True, TypeError)])
def test_bad_jitter_is_refused(jitter: object, error: type[Exception]) -> None:
    """Negative, NaN or infinite jitter, or one that is not a number, names `jitter`."""
    with pytest.raises(error, match=r"^jitter "):
        Cron("0 * * * *", tz="UTC", jitter=jitter)  # type: ignore[arg-type]


# -- bad arguments ------------------------------------------------------------------------------


def test_bad_arguments_name_themselves() -> None:
    """Each refused argument is named in its error."""
    with pytest.raises(TypeError, match="tz"):
        Cron("0 0 * * *")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"^tz: no time zone with the key 'Mars/Olympus'"):
        Cron("0 0 * * *", tz="Mars/Olympus")
    with pytest.raises(TypeError, match=r"^tz "):
        Cron("0 0 * * *", tz=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^end .* is before start"):
        Cron("0 0 * * *", tz="UTC", start=utc(2024, 2, 1), end=utc(2024, 1, 1))
    with pytest.raises(ValueError, match=r"^start is naive"):
        Cron("0 0 * * *", tz="UTC", start=datetime(2024, 1, 1))
    with pytest.raises(ValueError, match=r"^gap must be one of"):
        Cron("0 0 * * *", tz="UTC", gap="later")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^fold must be one of"):
        Cron("0 0 * * *", tz="UTC", fold="twice")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^expression must be a str"):
        Cron(None, tz="UTC")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^when is naive: name a zone"):
        Date(datetime(2025, 3, 1, 11))
    with pytest.raises(TypeError, match=r"^instant is naive"):
        Cron("0 0 * * *", tz="UTC").next_after(datetime(2024, 1, 1))
    with pytest.raises(TypeError, match=r"^instant must be an aware datetime"):
        Interval(5).next_after(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^seconds must be > 0"):
        Interval(0)
    with pytest.raises(ValueError, match=r"^years, months, weeks, days: at least one"):
        CalendarInterval(tz="UTC", start=date(2024, 1, 1))
    with pytest.raises(ValueError, match=r"^months must be >= 0"):
        CalendarInterval(months=-1, days=1, tz="UTC", start=date(2024, 1, 1))
    with pytest.raises(ValueError, match=r"^end .* is before start"):
        CalendarInterval(days=1, tz="UTC", start=date(2024, 1, 2), end=date(2024, 1, 1))
    with pytest.raises(ValueError, match=r"^triggers: give at least one"):
        AnyOf()
    with pytest.raises(TypeError, match=r"^triggers: 5 is not a trigger"):
        AllOf(Interval(5), 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^max_rounds must be >= 1"):
        AllOf(Interval(5), max_rounds=0)


# -- the other triggers ------------------------------------------------------------------------


def test_calendar_interval_clamps_short_months_counted_from_start() -> None:
    """Monthly from Jan 31: Feb 29 2024, Mar 31, Apr 30, ... Jan 31 2025, Feb 28 2025: each
    date counted from start, so the 31st comes back after a short month."""
    trigger = CalendarInterval(months=1, at=time(9), tz=BERLIN, start=date(2024, 1, 31))
    days = [f.astimezone(BERLIN) for f in fires(trigger, utc(2024, 1, 1), 14)]
    assert [d.date().isoformat() for d in days] == [
        "2024-01-31", "2024-02-29", "2024-03-31", "2024-04-30", "2024-05-31", "2024-06-30",
        "2024-07-31", "2024-08-31", "2024-09-30", "2024-10-31", "2024-11-30", "2024-12-31",
        "2025-01-31", "2025-02-28"]
    assert {d.hour for d in days} == {9}


def test_calendar_interval_follows_the_gap_and_fold_rule() -> None:
    """A calendar interval is a fixed-time job: 02:30 shifts to 03:00 on the spring day,
    01:30 fires once on the autumn day (twice with fold="both"); the end date is inclusive."""
    daily = CalendarInterval(days=1, at=time(2, 30), tz=NY, start=date(2024, 3, 9),
                             end=date(2024, 3, 11))
    assert fires(daily, utc(2024, 3, 1)) == [
        utc(2024, 3, 9, 7, 30), utc(2024, 3, 10, 7, 0), utc(2024, 3, 11, 6, 30)]
    both = CalendarInterval(weeks=1, at=time(1, 30), tz=NY, start=date(2024, 11, 3),
                            fold="both")
    assert fires(both, utc(2024, 11, 1), 3) == [
        utc(2024, 11, 3, 5, 30), utc(2024, 11, 3, 6, 30), utc(2024, 11, 10, 6, 30)]


def test_calendar_interval_years_and_leap_days() -> None:
    """Yearly from Feb 29: Feb 28 in common years, Feb 29 again in the next leap year."""
    trigger = CalendarInterval(years=1, tz="UTC", start=date(2024, 2, 29))
    assert [f.date() for f in fires(trigger, utc(2024, 1, 1), 5)] == [
        date(2024, 2, 29), date(2025, 2, 28), date(2026, 2, 28), date(2027, 2, 28),
        date(2028, 2, 29)]


def test_interval_counts_from_start() -> None:
    """Interval fires at start + k * seconds, strictly after the query; start defaults to the
    Unix epoch, and sub-second periods are exact to the microsecond."""
    assert Interval(30).next_after(utc(2024, 1, 1, 0, 0, 10)) == utc(2024, 1, 1, 0, 0, 30)
    assert Interval(30).next_after(utc(2024, 1, 1, 0, 0, 30)) == utc(2024, 1, 1, 0, 1, 0)
    start = utc(2024, 1, 1, 0, 0, 7)
    assert Interval(10, start=start).next_after(utc(2023, 1, 1)) == start
    assert Interval(10, start=start).next_after(start) == utc(2024, 1, 1, 0, 0, 17)
    tenth = fires(Interval(0.1), utc(2024, 1, 1), 10)[-1]
    assert tenth == utc(2024, 1, 1, 0, 0, 1)
    assert Interval(5).tz is None


def test_date_fires_once() -> None:
    """Date fires at `when`, strictly after the query, and never again."""
    trigger = Date(datetime(2025, 3, 1, 12, tzinfo=BERLIN))
    assert trigger.next_after(utc(2025, 1, 1)) == utc(2025, 3, 1, 11)
    assert trigger.next_after(utc(2025, 3, 1, 11)) is None
    assert trigger.tz == BERLIN


def test_any_of_is_the_union_and_all_of_the_intersection() -> None:
    """AnyOf fires at every member's instants (a shared one once); AllOf where all agree."""
    hourly = Cron("0 * * * *", tz="UTC")
    half = Cron("*/30 * * * *", tz="UTC")
    union = fires(AnyOf(hourly, half, Date(utc(2024, 1, 1, 0, 10))), utc(2024, 1, 1), 4)
    assert union == [utc(2024, 1, 1, 0, 10), utc(2024, 1, 1, 0, 30), utc(2024, 1, 1, 1),
                     utc(2024, 1, 1, 1, 30)]
    both = fires(AllOf(Cron("0 9 * * *", tz="UTC"), Cron("0 * * * mon", tz="UTC")),
                 utc(2024, 1, 1, 10), 2)
    assert both == [utc(2024, 1, 8, 9), utc(2024, 1, 15, 9)]


def test_all_of_gives_up_after_max_rounds_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """Members that never agree: AllOf returns None after max_rounds rounds and says so on
    the logger executors.triggers (a stated bound, never a hang)."""
    never = AllOf(Interval(2), Interval(2, start=utc(2024, 1, 1, 0, 0, 1)), max_rounds=50)
    with caplog.at_level(logging.WARNING, logger="executors.triggers"):
        assert never.next_after(utc(2024, 1, 1)) is None
    assert "gave up after 50 rounds" in caplog.text


# -- values, data, words ---------------------------------------------------------------------

ALL_KINDS: list[Trigger] = [
    Cron("30 2 * * *", tz="Europe/Berlin"),
    Cron("*/15 * * * * *", tz=NY, gap="skip", fold="both", start=utc(2024, 1, 1),
         end=utc(2025, 1, 1), jitter=2.5),
    Date(datetime(2025, 3, 1, 12, tzinfo=BERLIN)),
    Date(utc(2025, 3, 1, 11)),
    CalendarInterval(months=1, at=time(9), tz="Europe/Berlin", start=date(2024, 1, 31)),
    CalendarInterval(years=1, weeks=2, days=3, tz=NY, start=date(2024, 1, 1),
                     end=date(2030, 1, 1), gap="skip", fold="last"),
    Interval(30),
    Interval(0.25, start=utc(2024, 1, 1)),
    AnyOf(Interval(30), Cron("0 0 * * *", tz="UTC")),
    AllOf(Cron("0 9 * * *", tz="UTC"), Cron("0 * * * mon", tz="UTC"), max_rounds=10),
]


@pytest.mark.parametrize("trigger", ALL_KINDS, ids=repr)
def test_data_round_trips(trigger: Trigger) -> None:
    """to_data is JSON-able, has a "type", and trigger_from_data turns it back into an equal
    trigger (with the same fire instants)."""
    data = json.loads(json.dumps(trigger.to_data()))
    assert isinstance(data["type"], str)
    again = trigger_from_data(data)
    assert again == trigger and hash(again) == hash(trigger)
    assert again.next_after(utc(2024, 6, 1)) == trigger.next_after(utc(2024, 6, 1))
    assert isinstance(trigger, Trigger)


def test_the_data_shapes_of_the_spec() -> None:
    """The data shapes other code (stores, the service) relies on."""
    assert Cron("30 2 * * *", tz="Europe/Berlin").to_data() == {
        "type": "cron", "expression": "30 2 * * *", "tz": "Europe/Berlin", "gap": "shift",
        "fold": "first", "start": None, "end": None, "jitter": 0}
    assert Date(utc(2025, 3, 1, 11)).to_data() == {
        "type": "date", "when": "2025-03-01T11:00:00+00:00"}
    assert CalendarInterval(months=1, at=time(9), tz="Europe/Berlin",
                            start=date(2024, 1, 31)).to_data() == {
        "type": "calendar", "years": 0, "months": 1, "weeks": 0, "days": 0, "at": "09:00:00",
        "tz": "Europe/Berlin", "start": "2024-01-31", "end": None, "gap": "shift",
        "fold": "first"}
    assert Interval(30).to_data() == {
        "type": "interval", "seconds": 30.0, "start": "1970-01-01T00:00:00+00:00"}
    assert AllOf(Interval(30)).to_data() == {
        "type": "all", "triggers": [Interval(30).to_data()], "max_rounds": 1000}


@pytest.mark.parametrize(("data", "message"), [
    ({"expression": "0 0 * * *"}, "missing key 'type'"),
    ({"type": "weekly"}, "unknown 'type' 'weekly'"),
    ({"type": "cron", "tz": "UTC"}, "missing key 'expression'"),
    ({"type": "cron", "expression": 5, "tz": "UTC"}, "'expression' has the wrong type"),
    ({"type": "cron", "expression": "0 0 * * *", "tz": "UTC", "start": "soon"},
     "'start' is not an ISO datetime"),
    ({"type": "cron", "expression": "0 0 * * *", "tz": "UTC", "jitter": True},
     "'jitter' has the wrong type"),
    ({"type": "calendar", "months": "1", "tz": "UTC", "start": "2024-01-01"},
     "'months' has the wrong type"),
    ({"type": "calendar", "months": 1, "tz": "UTC"}, "missing key 'start'"),
    ({"type": "interval"}, "missing key 'seconds'"),
    ({"type": "any", "triggers": [5]}, "'triggers' must hold trigger data"),
    ({"type": "all", "triggers": "none"}, "'triggers' has the wrong type"),
])
def test_bad_data_names_the_key(data: dict[str, object], message: str) -> None:
    """Bad data is a ValueError naming the key (or the unknown type)."""
    with pytest.raises(ValueError, match=f"^trigger data: {message}"):
        trigger_from_data(data)


def test_values_are_immutable_and_compare_by_value() -> None:
    """Triggers cannot be changed after construction; equal arguments make equal triggers
    (a zone key and its ZoneInfo are the same zone), and repr shows the arguments."""
    trigger = Cron("30 2 * * *", tz="Europe/Berlin")
    with pytest.raises(AttributeError):
        trigger.expression = "0 0 * * *"
    assert trigger == Cron("30 2 * * *", tz=BERLIN)
    assert trigger != Cron("30 2 * * *", tz=BERLIN, fold="both")
    assert trigger != Cron("30 2 * * *", tz="Europe/Paris")
    assert len({trigger, Cron("30 2 * * *", tz=BERLIN)}) == 1
    assert repr(trigger) == "Cron('30 2 * * *', tz='Europe/Berlin')"
    assert repr(Cron("0 0 * * *", tz="UTC", jitter=5)) == (
        "Cron('0 0 * * *', tz='UTC', jitter=5.0)")


def test_describe_reads_like_the_schedule() -> None:
    """describe() is for people: the expression and zone for Cron, words for the others."""
    assert Cron("30 2 * * *", tz="Europe/Berlin").describe() == "30 2 * * * Europe/Berlin"
    assert Cron("0 * * * *", tz="UTC", fold="both", jitter=30).describe() == (
        "0 * * * * UTC, gap=shift fold=both, jitter 30 s")
    assert Date(datetime(2025, 3, 1, 12, tzinfo=BERLIN)).describe() == (
        "once at 2025-03-01 12:00:00 Europe/Berlin")
    assert CalendarInterval(months=1, at=time(9), tz="Europe/Berlin",
                            start=date(2024, 1, 31)).describe() == (
        "every 1 month at 09:00:00 Europe/Berlin from 2024-01-31")
    assert Interval(30).describe() == "every 30 s"
    assert AnyOf(Interval(30), Date(utc(2025, 3, 1, 11))).describe() == (
        "any of (every 30 s; once at 2025-03-01 11:00:00 UTC)")
