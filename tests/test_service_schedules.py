"""BackgroundService's wall-clock schedules (issue 21), all on a VirtualClock with no sleeping.

Fire times across a DST day, restarts with `since` under each missed policy, a suspend, NTP
steps back and forward, grace, pause/resume, reschedule, an ending trigger, `current_run()`,
events (in order, a raising and a slow subscriber), bad input, and freezegun on the real clock.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import math
import os
import threading
from collections.abc import Callable, Iterator

import pytest
from helpers.forking import in_forked_child
from hypothesis import given, settings
from hypothesis import strategies as st

from executors import (
    BackgroundService,
    ClockChanged,
    Cron,
    Date,
    Interval,
    Job,
    RunFailed,
    RunFinished,
    RunInfo,
    RunMissed,
    RunStarted,
    ScheduleAdded,
    ScheduleChanged,
    SchedulePaused,
    ScheduleRemoved,
    ScheduleResumed,
    ServiceEvent,
    current_run,
)
from executors._service import events as events_module
from executors._service import wallclock
from executors.testing import VirtualClock, wait_until

UTC = datetime.UTC
#: The virtual wall clock's start in most tests: half past noon, UTC.
NOON = datetime.datetime(2024, 1, 1, 12, 30, tzinfo=UTC)
HOURLY = "0 * * * *"


def at(hour: int, minute: int = 0, day: int = 1) -> datetime.datetime:
    """An instant of January 2024, UTC."""
    return datetime.datetime(2024, 1, day, hour, minute, tzinfo=UTC)


class Runs:
    """A job that records each run's `current_run()` and the wall time it ran at."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.infos: list[RunInfo] = []
        self.walls: list[float] = []

    def __call__(self) -> None:
        info = current_run()
        assert info is not None
        self.infos.append(info)
        self.walls.append(self.clock.time())

    @property
    def fires(self) -> list[datetime.datetime]:
        return [i.fire_time for i in self.infos]


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(wall=NOON)


@pytest.fixture
def services() -> Iterator[list[BackgroundService]]:
    made: list[BackgroundService] = []
    yield made
    for svc in made:
        report = svc.shutdown(5)
        assert report.completed, report


@pytest.fixture
def svc(clock: VirtualClock, services: list[BackgroundService]) -> BackgroundService:
    service = BackgroundService("sched", clock=clock, workers=2)
    services.append(service)
    return service


def start(svc: BackgroundService, clock: VirtualClock) -> None:
    """Start the service and wait until its scheduler sleeps on the clock."""
    svc.start()
    clock.wait_for_sleepers(1)


def record(svc: BackgroundService, kinds: object = None) -> tuple[list[ServiceEvent],
                                                                  Callable[[int], None]]:
    """Subscribe a list; returns it and a function that waits until it holds n events."""
    seen: list[ServiceEvent] = []
    svc.subscribe(seen.append, kinds)  # type: ignore[arg-type]

    def wait(n: int) -> None:
        wait_until(lambda: len(seen) >= n, 5, message=f"{len(seen)} events, expected {n}")

    return seen, wait


def of(kind: type[ServiceEvent], seen: list[ServiceEvent]) -> list[ServiceEvent]:
    return [e for e in seen if type(e) is kind]


def scheduler_deadline(svc: BackgroundService, clock: VirtualClock) -> float:
    """The monotonic deadline the scheduler sleeps until (it is asleep on the clock)."""
    def asleep() -> bool:
        return svc._scheduler.thread in clock._sleepers
    wait_until(asleep, 5)
    return clock._sleepers[svc._scheduler.thread][0]  # type: ignore[index]


# -- fire times ------------------------------------------------------------------------------


def test_cron_fires_at_its_instants_across_the_spring_forward_day(
        svc: BackgroundService) -> None:
    """A daily 02:30 Berlin job fires at the transition instant (03:00 CEST, 01:00 UTC) on the
    day 02:30 does not exist, then at 02:30 again; each run starts exactly at its fire time."""
    clock = VirtualClock(wall=datetime.datetime(2024, 3, 30, 12, 0, tzinfo=UTC))
    svc = BackgroundService("dst", clock=clock)
    runs = Runs(clock)
    try:
        job = svc.cron("30 2 * * *", runs, tz="Europe/Berlin", name="nightly")
        start(svc, clock)
        assert job.next_fire is not None
        assert job.next_fire.isoformat() == "2024-03-31T03:00:00+02:00"
        clock.advance(3 * 86400)
    finally:
        assert svc.shutdown(5)
    assert runs.fires == [datetime.datetime(2024, 3, 31, 1, 0, tzinfo=UTC),
                          datetime.datetime(2024, 4, 1, 0, 30, tzinfo=UTC),
                          datetime.datetime(2024, 4, 2, 0, 30, tzinfo=UTC)]
    assert runs.walls == [f.timestamp() for f in runs.fires]
    assert {i.name for i in runs.infos} == {"nightly"} and {i.attempt for i in runs.infos} == {1}


def test_cron_fires_once_in_the_repeated_hour_of_the_fall_back_day() -> None:
    """A daily 02:30 Berlin job fires once on 2024-10-27 (02:30 happens twice: the first,
    00:30 UTC, by fold="first"), and a "*/30 2 * * *" job, not fixed-time, fires at every
    real instant of the repeated hour (four times)."""
    clock = VirtualClock(wall=datetime.datetime(2024, 10, 26, 12, 0, tzinfo=UTC))
    svc = BackgroundService("fold", clock=clock)
    fixed, often = Runs(clock), Runs(clock)
    try:
        svc.cron("30 2 * * *", fixed, tz="Europe/Berlin")
        svc.cron("*/30 2 * * *", often, tz="Europe/Berlin")
        start(svc, clock)
        clock.advance(86400)
    finally:
        assert svc.shutdown(5)
    assert fixed.fires == [datetime.datetime(2024, 10, 27, 0, 30, tzinfo=UTC)]
    assert often.fires == [datetime.datetime(2024, 10, 27, h, m, tzinfo=UTC)
                           for h, m in ((0, 0), (0, 30), (1, 0), (1, 30))]


# -- missed runs: a restart ------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "ran"), [
    ("latest", [at(12)]),
    ("all", [at(10), at(11), at(12)]),
    ("skip", []),
])
def test_since_three_hours_back_applies_the_missed_policy_once(
        svc: BackgroundService, clock: VirtualClock, policy: str,
        ran: list[datetime.datetime]) -> None:
    """A schedule last handled 3 hours ago (a stop, then a restart handing over `since`): the
    3 hourly fire times that passed are missed (reason "stopped"), counted, announced in one
    RunMissed event, and handled at once by the policy; the next hour runs normally."""
    seen, wait = record(svc)
    runs = Runs(clock)
    job = svc.schedule(Cron(HOURLY, tz="UTC"), runs, name="hourly", missed=policy,  # type: ignore[arg-type]
                       since=at(9, 30))
    start(svc, clock)
    assert runs.fires == ran
    stats = job.statistics()
    assert (stats.missed, stats.missed_run, stats.last_missed_reason) == (3, len(ran), "stopped")
    assert stats.missed_policy == policy
    clock.advance(1800)
    assert runs.fires == [*ran, at(13)]
    assert job.statistics().missed == 3
    wait(2 + 2 * (len(ran) + 1))
    missed = of(RunMissed, seen)
    assert missed == [RunMissed("hourly", 3, len(ran), at(10), at(12), "stopped", policy,
                                False)]


def test_since_with_all_runs_the_latest_max_missed(svc: BackgroundService,
                                                   clock: VirtualClock) -> None:
    """missed="all" runs at most `max_missed` missed fire times (the latest ones, oldest
    first); the rest are counted as missed and not run."""
    runs = Runs(clock)
    job = svc.schedule(Cron(HOURLY, tz="UTC"), runs, missed="all", max_missed=2,
                       since=at(7, 30))
    start(svc, clock)
    assert runs.fires == [at(11), at(12)]
    assert (job.statistics().missed, job.statistics().missed_run) == (5, 2)


def test_grace_keeps_late_fire_times_from_running(svc: BackgroundService,
                                                  clock: VirtualClock) -> None:
    """With `grace`, no policy runs a fire time later than it: of 10:00, 11:00 and 12:00
    missed at 12:30, grace=3600 lets only 12:00 run under "all"; grace=600 lets none run under
    "latest". Every one is still counted."""
    all_runs, latest_runs = Runs(clock), Runs(clock)
    a = svc.schedule(Cron(HOURLY, tz="UTC"), all_runs, missed="all", grace=3600,
                     since=at(9, 30))
    b = svc.schedule(Cron(HOURLY, tz="UTC"), latest_runs, grace=600, since=at(9, 30))
    start(svc, clock)
    assert all_runs.fires == [at(12)]
    assert latest_runs.fires == []
    assert (a.statistics().missed, a.statistics().missed_run) == (3, 1)
    assert (b.statistics().missed, b.statistics().missed_run) == (3, 0)
    clock.advance(1800)
    assert all_runs.fires == [at(12), at(13)] and latest_runs.fires == [at(13)]


@pytest.mark.parametrize(("grace", "reason", "missed", "ran"), [
    (None, "behind", 1, [at(15)]),
    (1800, "grace", 2, []),
])
def test_a_run_that_overruns_a_whole_period_misses_the_fire_times_behind_it(
        svc: BackgroundService, clock: VirtualClock, grace: float | None, reason: str,
        missed: int, ran: list[datetime.datetime]) -> None:
    """The 13:00 run lasts until 15:40: 14:00 is missed ("behind": 15:00 is due too) and only
    the latest, 15:00, runs (missed="latest"); the overrun is counted. With grace=1800, 15:00
    is itself 40 minutes late: missed too ("grace"), and nothing runs."""
    release, started = threading.Event(), threading.Event()
    runs = Runs(clock)

    def slow() -> None:
        runs()
        if len(runs.fires) == 1:
            started.set()
            release.wait(10)

    job = svc.schedule(Cron(HOURLY, tz="UTC"), slow, grace=grace)
    start(svc, clock)
    clock.advance(1800, settle=False)
    assert started.wait(5)
    clock.advance(9600, settle=False)  # no sleeper: time moves while the run blocks
    release.set()
    wait_until(lambda: job.statistics().missed == missed and clock.sleepers == 1, 5)
    assert runs.fires == [at(13), *ran]
    stats = job.statistics()
    assert (stats.missed_run, stats.last_missed_reason, stats.overruns) == (0, reason, 1)
    assert job.next_fire == at(16)


# -- clock jumps and suspend -----------------------------------------------------------------


def test_suspend_across_a_fire_time_is_seen_within_the_bound(svc: BackgroundService,
                                                             clock: VirtualClock) -> None:
    """The machine sleeps an hour across 13:00: the monotonic clock stops, so the scheduler's
    deadline has not come; within MAX_SLEEP (60 s) of monotonic time after the resume it sees
    the suspend (boot time moved with the wall clock), runs 13:00 once (missed="latest"),
    counts it missed ("suspended") and announces the clock change."""
    seen, wait = record(svc, [RunMissed, ClockChanged])
    runs = Runs(clock)
    job = svc.schedule(Cron(HOURLY, tz="UTC"), runs, name="hourly")
    start(svc, clock)
    assert scheduler_deadline(svc, clock) == wallclock.MAX_SLEEP  # 13:00 is 30 min away
    clock.suspend(3600)
    assert runs.fires == []
    clock.advance(wallclock.MAX_SLEEP)
    assert runs.fires == [at(13)]
    assert runs.walls == [at(13, 31).timestamp()]
    stats = job.statistics()
    assert (stats.missed, stats.missed_run, stats.last_missed_reason) == (1, 1, "suspended")
    wait(2)
    assert seen == [ClockChanged("suspend", 3600.0),
                    RunMissed("hourly", 1, 1, at(13), at(13), "suspended", "latest", False)]
    clock.advance(1740)
    assert runs.fires == [at(13), at(14)]


def test_ntp_step_back_of_an_hour_runs_no_fire_time_twice(svc: BackgroundService,
                                                          clock: VirtualClock) -> None:
    """After 13:00 ran, the wall clock steps back an hour: 13:00 comes round again on the wall
    clock and must not run again; the next run is 14:00, two hours of monotonic time later.
    The step is seen and announced; nothing is missed."""
    seen, wait = record(svc, ClockChanged)
    runs = Runs(clock)
    job = svc.schedule(Cron(HOURLY, tz="UTC"), runs)
    start(svc, clock)
    clock.advance(1800)
    assert runs.fires == [at(13)]
    clock.jump(-3600)
    clock.advance(3600 + 1800)  # the wall clock passes 13:00 again, then reaches 13:30
    assert runs.fires == [at(13)]
    clock.advance(1800)
    assert runs.fires == [at(13), at(14)]
    assert runs.walls[-1] == at(14).timestamp()
    assert job.statistics().missed == 0
    wait(1)
    assert seen == [ClockChanged("step", -3600.0)]


def test_ntp_step_back_before_the_deadline_is_detected(svc: BackgroundService,
                                                       clock: VirtualClock) -> None:
    """A step back while the scheduler sleeps: its monotonic deadline would come an hour too
    early on the wall clock; the jump is seen at the next wake-up and the deadline is moved,
    so 13:00 runs at 13:00 wall time."""
    runs = Runs(clock)
    svc.schedule(Cron(HOURLY, tz="UTC"), runs)
    start(svc, clock)
    clock.jump(-3600)
    clock.advance(1800)
    assert runs.fires == []
    clock.advance(3600)
    assert runs.fires == [at(13)] and runs.walls == [at(13).timestamp()]


def test_step_forward_of_a_day_applies_the_policy_once(svc: BackgroundService,
                                                       clock: VirtualClock) -> None:
    """The wall clock steps a day ahead: the 24 hourly fire times skipped over are missed
    ("clock_jump"), counted in one RunMissed event, and missed="latest" runs only the latest
    (12:00 the next day), once; then the schedule goes on hourly."""
    seen, wait = record(svc, RunMissed)
    runs = Runs(clock)
    job = svc.schedule(Cron(HOURLY, tz="UTC"), runs, name="hourly")
    start(svc, clock)
    clock.jump(86400)
    clock.advance(wallclock.MAX_SLEEP)
    assert runs.fires == [at(12, day=2)]
    stats = job.statistics()
    assert (stats.missed, stats.missed_run, stats.last_missed_reason) == (24, 1, "clock_jump")
    clock.advance(1800)
    assert runs.fires == [at(12, day=2), at(13, day=2)]
    wait(1)
    assert seen == [RunMissed("hourly", 24, 1, at(13), at(12, day=2), "clock_jump", "latest",
                              False)]


def test_a_huge_gap_is_counted_up_to_the_walk_bound(svc: BackgroundService,
                                                    clock: VirtualClock) -> None:
    """A step of 4 days under a 6-field every-second schedule (345,600 fire times) is walked up
    to WALK_BOUND: the count is a lower bound, marked truncated, and the latest due fire time
    still runs (missed="latest")."""
    seen, wait = record(svc, RunMissed)
    runs = Runs(clock)
    job = svc.schedule(Cron("* * * * * *", tz="UTC"), runs, name="each-second")
    start(svc, clock)
    clock.advance(1)
    assert runs.fires == [at(12, 30) + datetime.timedelta(seconds=1)]
    clock.jump(4 * 86400)
    clock.advance(1)
    wait(1)
    event = seen[0]
    assert isinstance(event, RunMissed) and event.truncated
    assert event.count >= wallclock.WALK_BOUND == job.statistics().missed
    assert runs.fires[-1] == at(12, 30, day=5) + datetime.timedelta(seconds=2)


# -- control ---------------------------------------------------------------------------------


def test_pause_skips_fire_times_by_intent(svc: BackgroundService, clock: VirtualClock) -> None:
    """Fire times that pass while a job is paused are skipped by intent: not run, not missed,
    counted as skipped while paused; after resume the job runs at its next fire time."""
    seen, wait = record(svc, [SchedulePaused, ScheduleResumed, RunMissed])
    runs = Runs(clock)
    job = svc.schedule(Cron(HOURLY, tz="UTC"), runs, name="hourly")
    start(svc, clock)
    job.pause()
    assert job.next_fire is None and job.statistics().state == "paused"
    clock.advance(3 * 3600)
    job.resume()
    clock.advance(1800)
    assert runs.fires == [at(16)]
    stats = job.statistics()
    assert (stats.skipped_paused, stats.missed) == (3, 0)
    wait(2)
    assert seen == [SchedulePaused("hourly"), ScheduleResumed("hourly", 3)]


def test_reschedule_moves_the_next_fire_time_and_runs_nothing_past(
        svc: BackgroundService, clock: VirtualClock) -> None:
    """reschedule() replaces the trigger: the next fire time is the new trigger's first after
    now (12:45, not the 12:15 already past), announced as ScheduleChanged; every() jobs and
    update_interval() on a wall-clock job refuse, naming what to call instead."""
    seen, wait = record(svc, ScheduleChanged)
    runs = Runs(clock)
    job = svc.cron(HOURLY, runs, tz="UTC", name="job")
    start(svc, clock)
    job.reschedule(Cron("15,45 * * * *", tz="UTC"))
    assert job.trigger == Cron("15,45 * * * *", tz="UTC")
    assert job.next_fire == at(12, 45)
    clock.advance(3600)
    assert runs.fires == [at(12, 45), at(13, 15)]
    wait(1)
    assert seen == [ScheduleChanged("job", "15,45 * * * * UTC")]
    with pytest.raises(TypeError, match="reschedule"):
        job.update_interval(10)
    every = svc.every(10, lambda: None)
    with pytest.raises(TypeError, match="update_interval"):
        every.reschedule(Cron(HOURLY, tz="UTC"))
    assert every.trigger is None and every.next_fire is None
    with pytest.raises(TypeError, match="trigger"):
        job.reschedule("0 * * * *")  # type: ignore[arg-type]


def test_a_trigger_that_ends_finishes_the_job(svc: BackgroundService,
                                              clock: VirtualClock) -> None:
    """A Date trigger runs once; then the trigger returns None and the job is "finished": no
    next fire time, announced as ScheduleRemoved(reason="finished"), still listed. A Date
    already past finishes at once without running."""
    seen, wait = record(svc, ScheduleRemoved)
    runs, never = Runs(clock), Runs(clock)
    job = svc.schedule(Date(at(13)), runs, name="once")
    past = svc.schedule(Date(at(12)), never, name="past")
    start(svc, clock)
    assert past.statistics().state == "finished" and past.next_fire is None
    clock.advance(3600)
    assert runs.fires == [at(13)] and never.fires == []
    assert job.statistics().state == "finished" and job.next_fire is None
    assert job in svc.jobs
    wait(2)
    assert seen == [ScheduleRemoved("past", "finished"), ScheduleRemoved("once", "finished")]
    assert svc.status().healthy


class Flaky:
    """A trigger of our own (the protocol only): hourly, then it fails as told."""

    tz = None

    def __init__(self, failure: str) -> None:
        self.failure = failure
        self.calls = 0

    def next_after(self, instant: datetime.datetime) -> datetime.datetime | None:
        self.calls += 1
        if self.calls > 2 and self.failure == "raise":
            raise RuntimeError("trigger bug")
        if self.calls > 2 and self.failure == "backwards":
            return instant
        return instant.replace(minute=0, second=0, microsecond=0) + datetime.timedelta(hours=1)

    def describe(self) -> str:
        return f"flaky ({self.failure})"

    def to_data(self) -> dict[str, object]:
        return {"type": "flaky"}


@pytest.mark.parametrize("failure", ["raise", "backwards"])
def test_a_failing_trigger_stops_its_job(svc: BackgroundService, clock: VirtualClock,
                                         failure: str, caplog: pytest.LogCaptureFixture) -> None:
    """A trigger that raises, or returns an instant not after its argument (a loop in the
    making), stops its job: state "failed", the error counted and logged; the service and its
    other jobs go on."""
    runs, others = Runs(clock), Runs(clock)
    job = svc.schedule(Flaky(failure), runs, name="flaky")  # type: ignore[arg-type]
    svc.cron(HOURLY, others, tz="UTC")
    start(svc, clock)
    clock.advance(5400)
    stats = job.statistics()
    assert (stats.state, stats.errors, runs.fires) == ("failed", 1, [at(13)])
    assert stats.last_error is not None and stats.next_fire is None
    assert "its trigger failed" in caplog.text
    assert others.fires == [at(13), at(14)]
    assert not svc.status().healthy


def test_wake_runs_a_cron_job_now_and_keeps_its_fire_time(svc: BackgroundService,
                                                          clock: VirtualClock) -> None:
    """wake() runs a wall-clock job at once, out of schedule (its fire time is now), and the
    pending fire time still runs when due."""
    runs = Runs(clock)
    job = svc.cron(HOURLY, runs, tz="UTC")
    start(svc, clock)
    job.wake()
    wait_until(lambda: len(runs.fires) == 1, 5)
    assert runs.fires == [NOON]
    # The run has started; the scheduler sleeps on the clock again once it has ended (a
    # test clock's lockstep). Advancing before that would move time with no sleeper to wake,
    # and the 13:00 run would come after the check below.
    clock.wait_for_sleepers(1)
    clock.advance(1800)
    assert runs.fires == [NOON, at(13)]


def test_status_shows_the_trigger_the_next_fire_and_the_misses(svc: BackgroundService,
                                                               clock: VirtualClock) -> None:
    """status() shows each wall-clock job's trigger as people read it, its next fire time in
    the trigger's zone and in UTC, and its misses; the snapshot is JSON-ready, and every()
    jobs show "every Ns" and no fire time."""
    svc.cron("30 2 * * *", lambda: None, tz="Europe/Berlin", name="nightly",
             since=at(0, day=1) - datetime.timedelta(days=1))
    svc.every(60, lambda: None, name="tick")
    start(svc, clock)
    nightly, tick = svc.status().jobs
    assert nightly.trigger == "30 2 * * * Europe/Berlin"
    assert nightly.next_fire == "2024-01-02T02:30:00+01:00"
    assert nightly.next_fire_utc == "2024-01-02T01:30:00+00:00"
    assert (nightly.missed, nightly.missed_run, nightly.last_fire) == (
        2, 1, "2024-01-01T01:30:00+00:00")
    assert nightly.interval is None
    assert (tick.trigger, tick.next_fire, tick.interval) == ("every 60s", None, 60.0)
    json.dumps(svc.status().as_dict())
    assert "30 2 * * * Europe/Berlin" in repr(svc.jobs[0])


def test_idle_cost_stays_zero_without_wall_clock_jobs(svc: BackgroundService,
                                                      clock: VirtualClock) -> None:
    """The 60 s sleep bound applies only while wall-clock jobs exist: an every(3600) job alone
    sleeps until its due time, and once the last wall-clock job is cancelled the bound goes."""
    svc.every(3600, lambda: None, delay=3600)
    start(svc, clock)
    assert scheduler_deadline(svc, clock) == 3600
    job = svc.cron("0 0 * * *", lambda: None, tz="UTC")
    wait_until(lambda: clock._sleepers.get(svc._scheduler.thread, (0,))[0] == 60, 5)
    job.cancel()
    wait_until(lambda: clock._sleepers.get(svc._scheduler.thread, (0,))[0] == 3600, 5)


# -- current_run -----------------------------------------------------------------------------


def test_current_run_inside_and_outside(svc: BackgroundService, clock: VirtualClock) -> None:
    """current_run() is None outside a run; inside, it names the job and the fire time (for an
    every() job, the wall-clock time of its due time on the grid), also in a thread that
    copies the run's context; attempt is 1."""
    assert current_run() is None
    every: list[RunInfo | None] = []
    copied: list[RunInfo | None] = []

    def tick() -> None:
        every.append(current_run())
        ctx = contextvars.copy_context()
        t = threading.Thread(target=ctx.run, args=(lambda: copied.append(current_run()),))
        t.start()
        t.join()

    svc.every(10, tick, name="tick")
    start(svc, clock)
    clock.advance(25)
    assert every == [RunInfo("tick", NOON + datetime.timedelta(seconds=s), 1) for s in (0, 10, 20)]
    assert copied == every
    assert current_run() is None


# -- events ----------------------------------------------------------------------------------


def test_events_arrive_in_order_off_the_scheduler_thread(svc: BackgroundService,
                                                        clock: VirtualClock) -> None:
    """Events arrive in the order things happened, on the dispatcher thread (not the
    scheduler's, not a worker's); `kinds` filters by class."""
    seen: list[ServiceEvent] = []
    threads: set[str] = set()

    def listen(event: ServiceEvent) -> None:
        threads.add(threading.current_thread().name)
        seen.append(event)

    svc.subscribe(listen)
    only_runs, wait_runs = record(svc, [RunStarted, RunFinished])

    def fails() -> None:
        raise RuntimeError("boom")

    svc.cron(HOURLY, lambda: None, tz="UTC", name="ok")
    svc.schedule(Date(at(14, 30)), fails, name="bad")
    start(svc, clock)
    clock.advance(7200)
    expected = [
        ScheduleAdded("ok", "0 * * * * UTC"),
        ScheduleAdded("bad", Date(at(14, 30)).describe()),
        RunStarted("ok", at(13), 0.0),
        RunFinished("ok", at(13), 0.0),
        RunStarted("ok", at(14), 0.0),
        RunFinished("ok", at(14), 0.0),
        RunStarted("bad", at(14, 30), 0.0),
        RunFailed("bad", at(14, 30), "RuntimeError: boom"),
        ScheduleRemoved("bad", "finished"),
    ]
    wait_until(lambda: len(seen) >= len(expected), 5)
    assert seen == expected
    wait_runs(5)
    assert only_runs == [e for e in expected if type(e) in (RunStarted, RunFinished)]
    assert threads == {"sched-events"}


def test_a_raising_or_slow_subscriber_never_delays_a_run(svc: BackgroundService,
                                                         clock: VirtualClock) -> None:
    """A subscriber that raises is logged and counted and stays subscribed; one that blocks
    holds up only deliveries: while it blocks, five hourly runs happen on time. Once it is
    released, every event is delivered, in order."""
    release = threading.Event()
    got: list[ServiceEvent] = []

    def slow(event: ServiceEvent) -> None:
        release.wait(10)
        got.append(event)

    def raises(event: ServiceEvent) -> None:
        raise ValueError("subscriber bug")

    bad = svc.subscribe(raises, RunFinished)
    blocked = svc.subscribe(slow, RunStarted)
    runs = Runs(clock)
    svc.cron(HOURLY, runs, tz="UTC")
    start(svc, clock)
    clock.advance(5 * 3600)
    assert runs.fires == [at(h) for h in range(13, 18)]
    assert runs.walls == [at(h).timestamp() for h in range(13, 18)]
    release.set()
    wait_until(lambda: blocked.statistics().delivered == 5, 5)
    assert [e.fire_time for e in got] == runs.fires  # type: ignore[attr-defined]
    wait_until(lambda: bad.statistics().failed == 5, 5)
    stats = bad.statistics()
    assert (stats.delivered, stats.last_error, stats.active) == (0, "ValueError: subscriber bug",
                                                                 True)
    bad.cancel()
    assert not bad.statistics().active


def test_a_full_backlog_drops_and_counts(svc: BackgroundService, clock: VirtualClock,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the backlog bound, new events are dropped and counted for each subscriber that
    wanted them, never queued without bound; runs go on."""
    monkeypatch.setattr(events_module, "BACKLOG", 3)
    release = threading.Event()
    sub = svc.subscribe(lambda e: release.wait(10), RunStarted)
    runs = Runs(clock)
    svc.every(1, runs)
    start(svc, clock)
    clock.advance(9)
    assert len(runs.fires) == 10
    release.set()
    wait_until(lambda: sum(dataclass_counts(sub)) == 10, 5)
    assert sub.statistics().dropped >= 6


def dataclass_counts(sub: object) -> tuple[int, int, int]:
    s = sub.statistics()  # type: ignore[attr-defined]
    return s.delivered, s.failed, s.dropped


def test_shutdown_delivers_the_events_of_the_last_runs(clock: VirtualClock) -> None:
    """Closing the service stops the dispatcher only after the scheduler and the pool ended
    and every queued event is delivered; the dispatcher thread is joined by shutdown."""
    svc = BackgroundService("closing", clock=clock)
    seen, _ = record(svc)
    svc.cron(HOURLY, lambda: None, tz="UTC")
    start(svc, clock)
    clock.advance(1800)
    report = svc.shutdown(5)
    assert report.completed
    assert [type(e) for e in seen] == [ScheduleAdded, RunStarted, RunFinished]
    assert svc._scheduler.events.thread is not None
    assert not svc._scheduler.events.thread.is_alive()


def test_the_first_event_emitted_after_close_by_a_run_still_executing_is_delivered(
        services: list[BackgroundService]) -> None:
    """The dispatcher starts with the first event. A run still executing when the service
    closes emits its RunFinished after close(); when that is the first event anyone wanted,
    it starts the dispatcher too and is delivered (it was dropped, as if the service had
    closed before any event)."""
    svc = BackgroundService("late-first-event")
    services.append(svc)
    seen: list[ServiceEvent] = []
    sub = svc.subscribe(seen.append, RunFinished)
    running, release = threading.Event(), threading.Event()

    def job() -> None:
        running.set()
        release.wait(10)

    svc.every(3600, job)
    svc.start()
    assert running.wait(10)
    assert svc._scheduler.events.thread is None  # nothing emitted yet: no dispatcher
    closer = threading.Thread(target=svc.shutdown, args=(10,))
    closer.start()
    wait_until(lambda: svc._scheduler.closing, 5)
    release.set()
    closer.join(15)
    assert not closer.is_alive()
    assert [type(e) for e in seen] == [RunFinished]
    assert sub.statistics().dropped == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("policy", ["eager", "stop"])
def test_fork_keeps_the_pending_fire_time_and_the_subscribers(
        services: list[BackgroundService], policy: str) -> None:
    """In a forked child a running service's wall-clock job keeps its pending fire time and
    its subscribers ("eager": events flow again on a new dispatcher); a child that stays
    closed ("stop") starts no dispatcher thread for the events it emits."""
    svc = BackgroundService("fork", fork_policy=policy)  # type: ignore[arg-type]
    services.append(svc)
    seen: list[ServiceEvent] = []
    svc.subscribe(seen.append)
    job = svc.cron("0 0 1 1 *", lambda: None, tz="UTC", name="yearly")
    svc.start()
    wait_until(lambda: len(seen) == 1, 5)
    fire = job.next_fire

    def in_child() -> str:
        job.pause()
        job.resume()
        if policy == "eager":
            wait_until(lambda: len(seen) == 3, 5)
        dispatcher = svc._scheduler.events.thread
        alive = dispatcher is not None and dispatcher.is_alive()
        return f"{job.next_fire == fire} {[type(e).__name__ for e in seen[1:]]} {alive}"

    expected = ("True ['SchedulePaused', 'ScheduleResumed'] True" if policy == "eager"
                else "False [] False")
    assert in_forked_child(in_child) == expected
    assert job.next_fire == fire and len(seen) == 1  # the parent is unaffected


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"missed": "first"}, ValueError, "missed"),
    ({"max_missed": 0}, ValueError, "max_missed"),
    ({"max_missed": True}, TypeError, "max_missed"),
    ({"grace": -1}, ValueError, "grace"),
    ({"grace": 0}, ValueError, "grace"),
    ({"grace": math.nan}, ValueError, "grace"),
    ({"since": datetime.datetime(2024, 1, 1)}, ValueError, "since"),
    ({"since": "2024-01-01T00:00:00Z"}, TypeError, "since"),
    ({"on_error": "backoff"}, ValueError, "on_error"),
    ({"name": 3}, TypeError, "name"),
])
def test_bad_schedule_arguments_name_the_argument(svc: BackgroundService, kwargs: dict[str, object],
                                                  error: type[Exception], name: str) -> None:
    """Each bad argument of schedule() is a TypeError or ValueError naming it; nothing is
    added."""
    with pytest.raises(error, match=name):
        svc.schedule(Cron(HOURLY, tz="UTC"), lambda: None, **kwargs)  # type: ignore[call-overload]
    assert svc.jobs == ()


def test_bad_triggers_expressions_and_subscribers_are_named(svc: BackgroundService) -> None:
    """Not a trigger (a string, a class, None), a bad cron expression (its field and token),
    an unknown cron() option, a non-callable subscriber and kinds that are not event
    classes: each a clear error naming the argument."""
    for bad in ("0 * * * *", Cron, None, 30):
        with pytest.raises(TypeError, match="trigger"):
            svc.schedule(bad, lambda: None)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="mun"):
        svc.cron("0 0 * * mun", lambda: None, tz="UTC")
    with pytest.raises(TypeError, match="missd"):
        svc.cron("0 0 * * *", lambda: None, tz="UTC", missd="all")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="callback"):
        svc.subscribe(3)  # type: ignore[arg-type]
    for kinds in ("RunStarted", [RunStarted, int], Job):
        with pytest.raises(TypeError, match="kinds"):
            svc.subscribe(print, kinds)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="kinds"):
        svc.subscribe(print, [])
    assert svc.jobs == ()


def test_decorator_forms(svc: BackgroundService, clock: VirtualClock) -> None:
    """schedule() and cron() without a function are decorators returning the Job, like
    every(); the decorated function stays reachable as job.fn."""
    calls: list[str] = []

    @svc.cron("0 13 * * *", tz="UTC")
    def report() -> None:
        calls.append("report")

    @svc.schedule(Interval(600, start=NOON))
    def poll() -> None:
        calls.append("poll")

    assert isinstance(report, Job) and isinstance(poll, Job)
    assert report.name.endswith("report") and poll.trigger == Interval(600, start=NOON)
    start(svc, clock)
    clock.advance(1800)
    assert sorted(calls) == ["poll", "poll", "poll", "report"]


# -- freezegun -------------------------------------------------------------------------------


def test_freezegun_freezes_user_code_not_the_schedule(services: list[BackgroundService]
                                                      ) -> None:
    """Under freezegun's frozen time a wall-clock schedule on the real clock keeps firing (the
    service reads real wall and monotonic time, which freezegun does not replace), while the
    job's own code sees the frozen time it asked for."""
    import freezegun
    import freezegun.config

    seen: list[tuple[datetime.datetime, datetime.datetime]] = []

    def job() -> None:
        info = current_run()
        assert info is not None
        seen.append((datetime.datetime.now(UTC), info.fire_time))

    # Freeze everywhere (freezegun otherwise gives real time to code called from threading).
    saved = freezegun.config.settings.default_ignore_list
    freezegun.config.settings.default_ignore_list = []
    try:
        frozen_ctx = freezegun.freeze_time("2020-01-01")
    finally:
        freezegun.config.settings.default_ignore_list = saved
    with frozen_ctx:
        svc = BackgroundService("frozen")
        services.append(svc)
        svc.schedule(Interval(0.02), job)
        svc.start()
        wait_until(lambda: len(seen) >= 3, 10)
        # Taken while still frozen: a run that lands after the block exits sees real time.
        taken = list(seen)
    frozen = datetime.datetime(2020, 1, 1, tzinfo=UTC)
    assert all(now == frozen for now, _ in taken)
    fires = [fire for _, fire in taken]
    assert fires == sorted(set(fires)) and fires[0].year >= 2024


@settings(max_examples=400, deadline=None)
@given(
    offset=st.floats(min_value=-0.5, max_value=200_000.0, allow_nan=False),
    start=st.integers(min_value=0, max_value=400 * 86_400),
    expression=st.sampled_from(["*/5 * * * * *", "30 2 * * *", "17 3-59/10 * * * *"]),
    policy=st.sampled_from(["latest", "all", "skip"]),
    grace=st.sampled_from([None, 0.0, 0.5, 2.0, 60.0]),
    unwatched=st.sampled_from([None, "at wall", "before first", "at first"]),
)
def test_the_one_fire_time_fast_path_decides_what_the_walk_decides(
        offset: float, start: int, expression: str, policy: wallclock.Missed,
        grace: float | None, unwatched: str | None) -> None:
    """`decide` skips the walk when one fire time is due and nothing was missed (every run
    of every job takes that path): its decision is the walk's, field for field, for any
    policy, grace, unwatched span and lateness (Berlin's DST days included)."""
    trigger = Cron(expression, tz="Europe/Berlin")
    base = datetime.datetime(2024, 1, 1, tzinfo=UTC) + datetime.timedelta(seconds=start)
    first = trigger.next_after(base)
    assert first is not None
    nxt = trigger.next_after(first)
    wall = first.timestamp() + offset
    span = {None: None, "at wall": ("stopped", wall),
            "before first": ("suspended", first.timestamp() - 1),
            "at first": ("clock_jump", first.timestamp())}[unwatched]
    fast = wallclock.decide(trigger, first, nxt, wall, policy, 5, grace, span)
    walked = wallclock._decide_walked(trigger, first, nxt, wall, policy, 5, grace, span)
    assert fast == walked
