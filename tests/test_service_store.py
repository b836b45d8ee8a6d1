"""BackgroundService with a store: schedules as data, declared by every process, each due fire
time claimed once, the missed policy applied once, refusals with reasons."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import stored_jobs

from executors import (
    BackgroundService,
    Interval,
    LeaseLost,
    RunFinished,
    RunInfo,
    RunMissed,
    RunStarted,
    ScheduleAdded,
    ScheduleChanged,
    ScheduleRemoved,
    ServiceEvent,
)
from executors.stores import Claim, MemoryStore, ScheduleStore, SQLiteScheduleStore
from executors.testing import wait_until

MINUTE = dt.timedelta(minutes=1)


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    stored_jobs.SEEN.clear()
    yield
    stored_jobs.SEEN.clear()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def _events(svc: BackgroundService) -> list[ServiceEvent]:
    got: list[ServiceEvent] = []
    svc.subscribe(got.append)
    return got


def local_function() -> None:
    """A module-level function of this test module (importable)."""


class Holder:
    """Holds methods of each kind."""

    def method(self) -> None:
        """A method (bound to an object when scheduled)."""

    @classmethod
    def klass(cls) -> None:
        """A classmethod (imports back as the same bound method)."""


def test_a_lambda_a_closure_and_a_bound_method_are_refused_with_the_reason(db: str) -> None:
    """Nothing that cannot be named as module:qualname and imported back is kept."""
    def closure() -> None:
        pass

    with BackgroundService(store=db) as svc:
        with pytest.raises(TypeError, match="is a lambda"):
            svc.schedule(Interval(60), lambda: None, name="l")
        with pytest.raises(TypeError, match="closure or a nested function"):
            svc.schedule(Interval(60), closure, name="c")
        with pytest.raises(TypeError, match="bound method of an object"):
            svc.schedule(Interval(60), Holder().method, name="m")
        with pytest.raises(TypeError, match="no __module__ and __qualname__"):
            svc.schedule(Interval(60), functools.partial(local_function), name="p")
        svc.schedule(Interval(60), Holder.klass, name="k")  # a classmethod imports back
        assert [j.name for j in svc.jobs] == ["k"]


def test_an_argument_that_is_not_json_is_refused_and_nothing_is_pickled(db: str) -> None:
    """A non-JSON argument (an object, NaN) is refused naming the schedule; since= too."""
    with BackgroundService(store=db) as svc:
        with pytest.raises(TypeError, match="args of stored schedule 'x' must be JSON"):
            svc.schedule(Interval(60), stored_jobs.seen, object(), name="x")
        with pytest.raises(TypeError, match="'nan' must be JSON"):
            svc.schedule(Interval(60), stored_jobs.seen, float("nan"), name="nan")
        with pytest.raises(ValueError, match="since does not apply"):
            svc.schedule(Interval(60), stored_jobs.seen, "a", name="s",
                         since=dt.datetime.now(dt.UTC))
        assert svc.jobs == ()


def test_the_name_defaults_to_the_target_and_a_second_unnamed_one_is_refused(db: str) -> None:
    """Unnamed, a stored schedule is called "module:qualname" (the same in every process)."""
    with BackgroundService(store=db) as svc:
        job = svc.schedule(Interval(60), stored_jobs.seen, "a")
        assert job.name == "helpers.stored_jobs:seen"
        with pytest.raises(ValueError, match="give each stored schedule"):
            svc.schedule(Interval(60), stored_jobs.seen, "b")


def test_declare_keeps_unchanged_state_updates_a_changed_one_and_keeps_the_undeclared(
        db: str, caplog: pytest.LogCaptureFixture) -> None:
    """A restart with the same declaration keeps the stored state (pause, next fire); a
    changed one is updated, logged and announced; one no process declares stays listed until
    `unschedule` removes it."""
    with BackgroundService("a", store=db) as svc:
        events = _events(svc)
        svc.schedule(Interval(3600), stored_jobs.seen, "a", name="hourly")
        svc.schedule(Interval(60), stored_jobs.seen, "b", name="other")
        wait_until(lambda: len(events) >= 2, 5)
        assert [(type(e), e.name) for e in events] == [  # type: ignore[attr-defined]
            (ScheduleAdded, "hourly"), (ScheduleAdded, "other")]
        svc.jobs[0].pause()
    store = SQLiteScheduleStore(db[10:])
    wait_until(lambda: store.get("hourly").paused, 5)  # type: ignore[union-attr]
    before = store.get("hourly")
    assert before is not None and before.paused
    with caplog.at_level(logging.WARNING, "executors.service"), \
            BackgroundService("b", store=db) as svc:
        events = _events(svc)
        svc.schedule(Interval(3600), stored_jobs.seen, "a", name="hourly")  # unchanged
        svc.schedule(Interval(120), stored_jobs.seen, "b", name="other")  # changed
        wait_until(lambda: len(events) >= 1, 5)
        assert [(type(e), e.name) for e in events] == [  # type: ignore[attr-defined]
            (ScheduleChanged, "other")]
        assert "schedule 'other' changed" in caplog.text
        after = store.get("hourly")
        assert after is not None and after.paused and after.next_fire == before.next_fire
        assert after.version == before.version
        assert store.get("other").definition.trigger["seconds"] == 120  # type: ignore[union-attr]
    with BackgroundService("c", store=db) as svc:  # declares nothing
        events = _events(svc)
        wait_until(lambda: len(svc.status().store.schedules) == 2, 10)  # type: ignore[union-attr]
        listed = svc.status().store.schedules  # type: ignore[union-attr]
        assert [(s.name, s.declared) for s in listed] == [("hourly", False), ("other", False)]
        assert svc.unschedule("other") and not svc.unschedule("other")
        assert [r.name for r in store.records()] == ["hourly"]
        wait_until(lambda: len(events) >= 1, 5)
        assert isinstance(events[0], ScheduleRemoved) and events[0].reason == "removed"
    store.close()


def _minutely() -> Interval:
    """Every minute, on a grid whose latest point passed 30 s ago: no fire time falls due
    while a test runs (a restart within a second of a grid point let the first claim's run
    be given back by a closing service and judged again with the next fire time)."""
    return Interval(60, start=dt.datetime.now(dt.UTC) - dt.timedelta(days=1, seconds=30))


def _overdue(db: str, policy: str, minutes: int, trigger: Interval) -> SQLiteScheduleStore:
    """Declare an every-minute schedule "minutely" (`trigger`), stop, and move its next fire
    time `minutes` back (what the store holds after that long with nobody serving); the
    store."""
    with BackgroundService("first", store=db) as svc:
        svc.schedule(trigger, stored_jobs.seen, "r", name="minutely", missed=policy)  # type: ignore[arg-type]
    store = SQLiteScheduleStore(db[10:])
    record = store.get("minutely")
    assert record is not None and record.next_fire is not None
    assert store.set_next_fire("minutely", record.next_fire - minutes * MINUTE)
    return store


def _restart_with(db: str, *, services: int, policy: str) -> list[ServiceEvent]:
    """Declare an every-minute schedule, stop, move its next fire 180 minutes back, then
    start `services` services on the store at once; wait for the first run."""
    trigger = _minutely()
    store = _overdue(db, policy, 180, trigger)
    events: list[ServiceEvent] = []
    svcs = [BackgroundService(f"s{i}", store=db) for i in range(services)]
    for svc in svcs:
        svc.subscribe(events.append, RunMissed)
        svc.schedule(trigger, stored_jobs.seen, "r", name="minutely", missed=policy)  # type: ignore[arg-type]
    for svc in svcs:
        svc.start()
    try:
        # The counters are written by the claim, and its RunMissed is emitted just after it:
        # wait for both (a shutdown between the two drops the event: a dispatcher not yet
        # started does not start once the service is closing), and for the claimed run to
        # be over (a shutdown before it starts gives it back, unrun).
        wait_until(lambda: (r := store.get("minutely")) is not None and
                   r.counters["missed"] + r.counters["runs"] >= 180 and bool(events)
                   and r.running_fire is None, 10)
    finally:
        for svc in svcs:
            svc.shutdown()
    store.close()
    return events


def test_a_restart_applies_the_missed_policy_once_not_once_per_process(db: str) -> None:
    """After 3 hours stopped, three processes start on the store: "latest" runs the latest
    fire time once and counts 180 missed (179 not run, 1 run late), once: one RunMissed among
    all of them (180 missed, reason "stopped", 1 of them run, as memory counts a restart with
    `since`), and the store's counter says the same 180 (one definition of "missed")."""
    events = _restart_with(db, services=3, policy="latest")
    assert len(stored_jobs.SEEN) == 1 and stored_jobs.SEEN[0][0] == "r"
    store = SQLiteScheduleStore(db[10:])
    record = store.get("minutely")
    assert record is not None
    assert record.counters["missed"] == 180 and record.counters["runs"] == 1
    assert [(e.count, e.ran, e.policy, e.reason) for e in events] == [  # type: ignore[attr-defined]
        (180, 1, "latest", "stopped")]
    store.close()


def test_a_restart_under_missed_skip_runs_none_and_waits_for_the_next_fire_time(
        db: str) -> None:
    """"skip" with no grace, after 3 hours stopped: none of the 180 fire times runs (they
    passed with no process serving, as in memory after a restart with `since`); all are
    counted missed, once across two services, and the next fire time is after now."""
    events = _restart_with(db, services=2, policy="skip")
    assert stored_jobs.SEEN == []
    store = SQLiteScheduleStore(db[10:])
    record = store.get("minutely")
    assert record is not None and record.next_fire is not None
    assert (record.counters["missed"], record.counters["runs"]) == (180, 0)
    assert record.next_fire > store.now()
    assert [(e.count, e.ran, e.reason) for e in events] == [(180, 0, "stopped")]  # type: ignore[attr-defined]
    store.close()


def test_resuming_a_stored_schedule_skips_the_paused_fire_times_by_intent(db: str) -> None:
    """Fire times that passed while a stored schedule was paused (3 hours, by the store's
    data) are skipped by intent on resume, as in memory: not run, not missed, counted in
    skipped_paused; it runs at its next fire time. The CLI's resume does the same."""
    from executors._service.stored import resume_record

    other = SQLiteScheduleStore(db[10:])
    with BackgroundService("p", store=db) as svc:
        events = _events(svc)
        job = svc.schedule(Interval(60), stored_jobs.seen, "p", name="minutely")
        tick = svc.schedule(Interval(0.2), stored_jobs.seen, "t", name="tick")
        job.pause()
        wait_until(lambda: other.get("minutely").paused, 5)  # type: ignore[union-attr]
        record = other.get("minutely")
        assert record is not None and record.next_fire is not None
        assert other.set_next_fire("minutely", record.next_fire - 180 * MINUTE)
        job.resume()
        wait_until(lambda: not other.get("minutely").paused, 5)  # type: ignore[union-attr]
        # The loop has claimed again since the resume: the 0.2 s schedule ran twice more.
        ticks = tick.statistics().runs
        wait_until(lambda: tick.statistics().runs >= ticks + 2, 10)
        stats = job.statistics()
    record = other.get("minutely")
    assert record is not None and record.next_fire is not None
    assert [tag for tag, _, _ in stored_jobs.SEEN if tag == "p"] == []
    assert record.counters["missed"] == 0 and record.next_fire > other.now()
    assert (stats.skipped_paused, stats.missed) == (180, 0)
    assert not any(isinstance(e, RunMissed) for e in events)
    # The command's resume (any store object) skips the same way.
    assert other.set_paused("minutely", True)
    assert other.set_next_fire("minutely", record.next_fire - 10 * MINUTE)
    assert resume_record(other, "minutely") == (True, 10)
    resumed = other.get("minutely")
    assert resumed is not None and resumed.next_fire == record.next_fire
    assert not resumed.paused and resumed.counters["missed"] == 0
    other.close()


def test_resume_reaches_the_store_whatever_the_jobs_copy_says(db: str) -> None:
    """A stored job's paused flag is a copy of the store's, refreshed by the status reads, and
    a read from before a pause still on its way sets it back to "not paused" (a CI run saw
    it). resume() goes to the store whatever the copy says (it was a no-op then, and the
    schedule stayed paused)."""
    other = SQLiteScheduleStore(db[10:])
    with BackgroundService("p", store=db) as svc:
        job = svc.schedule(Interval(60), stored_jobs.seen, "p", name="minutely")
        job.pause()
        wait_until(lambda: other.get("minutely").paused, 5)  # type: ignore[union-attr]
        job._paused = False  # what a status read from before the pause writes back
        job.resume()
        wait_until(lambda: not other.get("minutely").paused, 5)  # type: ignore[union-attr]
    other.close()


def test_missed_all_runs_every_fire_time_once_across_services(tmp_path: Path) -> None:
    """"all": 5 fire times overdue, two services: each runs once, in order, none twice."""
    db = f"sqlite:///{tmp_path / 'all.db'}"
    trigger = _minutely()
    store = _overdue(db, "all", 5, trigger)
    svcs = [BackgroundService(f"s{i}", store=db) for i in range(2)]
    for svc in svcs:
        svc.schedule(trigger, stored_jobs.seen, "r", name="minutely", missed="all")
        svc.start()
    try:
        wait_until(lambda: len(stored_jobs.SEEN) >= 5, 10)
    finally:
        for svc in svcs:
            svc.shutdown()
    fires = [fire for _, fire, _ in stored_jobs.SEEN]
    assert len(fires) == 5 and fires == sorted(set(fires))
    store.close()


def test_missed_all_announces_a_group_once_while_its_claims_walk_it(db: str) -> None:
    """"all" walks 5 overdue fire times one claim each: the group is logged, counted in the
    job's statistics and announced once (5 missed, 5 run), not once per claim of the walk."""
    trigger = _minutely()
    _overdue(db, "all", 5, trigger).close()
    with BackgroundService("s", store=db) as svc:
        events: list[ServiceEvent] = []
        svc.subscribe(events.append, RunMissed)
        job = svc.schedule(trigger, stored_jobs.seen, "r", name="minutely", missed="all")
        wait_until(lambda: len(stored_jobs.SEEN) >= 5, 10)
        wait_until(lambda: job.statistics().runs >= 5, 10)
        stats = job.statistics()
    assert (stats.missed, stats.missed_run) == (5, 5)
    assert [(e.count, e.ran) for e in events] == [(5, 5)]  # type: ignore[attr-defined]


def test_runs_know_their_fire_time_and_status_reports_the_store() -> None:
    """A claimed run's current_run() is (name, fire_time on the trigger's grid, attempt 1);
    status() has the store's health and counters, and the job's runs."""
    store = MemoryStore()
    with BackgroundService(store=store, store_lease=5) as svc:
        job = svc.schedule(Interval(0.2), stored_jobs.seen, "t", name="fast")
        wait_until(lambda: len(stored_jobs.SEEN) >= 2, 10)
        status = svc.status()
    assert status.healthy and status.store is not None and status.store.claims >= 2
    assert status.store.url == "memory:" and status.store.lease_lost == 0
    for tag, fire, attempt in stored_jobs.SEEN:
        instant = dt.datetime.fromisoformat(fire)
        assert tag == "t" and attempt == 1
        assert (instant.timestamp() * 5) % 1 == pytest.approx(0, abs=1e-6)
    assert job.statistics().runs >= 2
    record = store.get("fast")
    assert record is not None and record.counters["runs"] >= 2


def test_a_claimed_run_is_marked_by_its_claim_for_current_run_and_the_run_events() -> None:
    """Inside a claimed run, `current_run()` is a `RunInfo` of the claim's name, fire time and
    attempt (equal at each call), and the run's `RunStarted` and `RunFinished` carry that
    fire time: the claim marks the run, read into a `RunInfo` when asked."""
    stored_jobs.INFOS.clear()
    events: list[ServiceEvent] = []
    with BackgroundService(store=MemoryStore()) as svc:
        svc.subscribe(events.append, (RunStarted, RunFinished))
        svc.schedule(Interval(0.2), stored_jobs.run_info_twice, name="marked")
        wait_until(lambda: sum(isinstance(e, RunFinished) for e in events) >= 2, 10)
    first, again = stored_jobs.INFOS[0]
    assert type(first) is RunInfo and first == again
    assert (first.name, first.attempt) == ("marked", 1)
    fires = [info.fire_time for info, _ in stored_jobs.INFOS if info is not None]
    assert [e.fire_time for e in events if isinstance(e, RunStarted)][:2] == fires[:2]
    assert [e.fire_time for e in events if isinstance(e, RunFinished)][:2] == fires[:2]


class _ClaimsAsItCloses:
    """A store whose first claim that finds work returns only once the test closed the
    service: the claim is made in the store, and the pool it would run on is stopping."""

    complete_many = None  # one claim path for both stores: `claim`
    complete_and_claim = None

    def __init__(self, inner: ScheduleStore) -> None:
        self.inner = inner
        self.claimed = threading.Event()
        self.closed = threading.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)  # the rest of the store, as it is

    def claim(self, owner: str, **kwargs: Any) -> list[Claim]:
        got = self.inner.claim(owner, **kwargs)
        if got and not self.claimed.is_set():
            self.claimed.set()
            self.closed.wait(10)
        return got


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_claim_made_as_the_service_closes_is_given_back_not_held_for_a_lease(
        kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A claim returning after close() (the pool is stopping: no thread will take its run) is
    given back at the end of the store thread: another owner runs that fire time at once,
    instead of waiting out the 30 s lease and finding a crash (counted lost under "drop")."""
    path = tmp_path / "jobs.db"
    inner: ScheduleStore = MemoryStore() if kind == "memory" else SQLiteScheduleStore(str(path))
    store = _ClaimsAsItCloses(inner)
    svc = BackgroundService("closing", store=store)
    job = svc.schedule(Interval(3600), stored_jobs.seen, "c", name="hourly")
    svc.start()
    job.wake()  # run now: due at once
    assert store.claimed.wait(10)
    with caplog.at_level(logging.INFO, logger="executors.service"):
        svc.close()
        store.closed.set()
        assert svc.join(10)
    assert stored_jobs.SEEN == []  # never run here
    record = inner.get("hourly")
    assert record is not None and record.running_fire is None and record.owner is None
    assert record.counters["lost"] == 0 and record.lease_until is None
    assert "claimed as the service closed, was given back" in caplog.text
    other_store = inner if kind == "memory" else f"sqlite:///{path}"
    with BackgroundService("next", store=other_store) as other:
        other.schedule(Interval(3600), stored_jobs.seen, "c", name="hourly")
        wait_until(lambda: len(stored_jobs.SEEN) == 1, 5)  # not after the lease: at once
    assert stored_jobs.SEEN[0][1] == record.next_fire.isoformat()  # type: ignore[union-attr]
    inner.close()


def test_pause_and_run_now_travel_through_the_store() -> None:
    """Job.pause() pauses the stored schedule (no claims), wake() is run-now, cancel()
    removes it from the store."""
    store = MemoryStore()
    with BackgroundService(store=store) as svc:
        job = svc.schedule(Interval(3600), stored_jobs.seen, "p", name="hourly")
        job.pause()
        wait_until(lambda: store.get("hourly").paused, 5)  # type: ignore[union-attr]
        job.resume()
        wait_until(lambda: not store.get("hourly").paused, 5)  # type: ignore[union-attr]
        job.wake()
        wait_until(lambda: len(stored_jobs.SEEN) == 1, 5)
        job.cancel()
        wait_until(lambda: store.get("hourly") is None, 5)
        wait_until(lambda: svc.jobs == (), 5)


def test_an_unknown_scheme_and_a_non_store_are_refused() -> None:
    """A typo in the URL or a wrong object: a clear error at construction."""
    with pytest.raises(ValueError, match="'redis' is not one of"):
        BackgroundService(store="redis://x")
    with pytest.raises(TypeError, match="store must be a URL"):
        BackgroundService(store=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="store_lease"):
        BackgroundService(store="memory:", store_lease=0)


def test_every_and_submit_stay_in_memory_with_a_store(db: str) -> None:
    """every() jobs are not written to the store."""
    with BackgroundService(store=db) as svc:
        svc.every(3600, local_function, name="mem", per_process=True)
        assert svc.submit(sum, [1, 2]).result(5) == 3
    store = SQLiteScheduleStore(db[10:])
    assert store.records() == []
    store.close()


def test_an_unreachable_store_at_start_is_one_clear_error_with_the_password_hidden() -> None:
    """Nothing listens at the URL: BackgroundService(store=url) raises one ConnectionError
    naming the URL, never the password."""
    pytest.importorskip("psycopg")
    from executors.testing import free_port

    url = f"postgresql://alice:s3cret@127.0.0.1:{free_port()}/db"
    with pytest.raises(ConnectionError) as info:
        BackgroundService(store=url)
    message = str(info.value)
    assert "cannot reach the schedule store" in message and "alice:***@127.0.0.1" in message
    assert "s3cret" not in message


def test_a_forked_child_serves_the_store_as_another_owner(db: str) -> None:
    """After fork, the child's store loop has its own owner id and no claims of the parent."""
    import os

    from helpers.forking import in_forked_child

    with BackgroundService(store=db) as svc:
        svc.schedule(Interval(3600), stored_jobs.seen, "f", name="hourly")
        loop = svc._store
        assert loop is not None
        parent_owner = loop.owner

        def child() -> object:
            return (loop.owner != parent_owner and str(os.getpid()) in loop.owner
                    and loop.in_flight == {} and loop.thread is None)

        assert in_forked_child(child) is True


def test_a_record_serve_admits_runs_here_and_changes_travel_within_the_poll(db: str) -> None:
    """A schedule declared by another (gone) process, its target admitted by ``serve=``,
    runs here; a run-now written by another process (another store object: the CLI's way)
    is seen within the poll bound (1 s) plus a run. Without ``serve=`` the same run-now runs
    nothing here."""
    import time

    with BackgroundService("gone", store=db) as svc:
        svc.schedule(Interval(3600), stored_jobs.seen, "u", name="hourly")
    other = SQLiteScheduleStore(db[10:])
    with BackgroundService("here", store=db, serve=("helpers.stored_jobs:seen",)) as svc:
        wait_until(lambda: len(svc.status().store.schedules) == 1, 10)  # type: ignore[union-attr]
        began = time.monotonic()
        assert other.set_next_fire("hourly", other.now())
        wait_until(lambda: len(stored_jobs.SEEN) == 1, 10)
        assert time.monotonic() - began < 1.0 + 1.0  # the poll bound, and a margin for the run
    record = other.get("hourly")
    assert record is not None and record.counters["runs"] == 1 and record.last_result == "ok"
    with BackgroundService("default", store=db) as svc:
        tick = svc.schedule(Interval(0.05), stored_jobs.seen, "t", name="tick")
        assert other.set_next_fire("hourly", other.now())
        wait_until(lambda: tick.statistics().runs >= 5, 10)  # passes of its loop
    record = other.get("hourly")
    assert record is not None and record.counters["runs"] == 1 and record.owner is None
    assert [tag for tag, _, _ in stored_jobs.SEEN].count("u") == 1
    other.close()


def test_serve_is_checked_where_it_is_given_naming_the_argument(db: str) -> None:
    """``serve=`` takes a tuple of "module:function" or "module:*" targets, with a store; a
    lone string, a non-string entry, a bare "*" or a package wildcard is refused, naming
    it."""
    with pytest.raises(TypeError, match=r"serve must be a tuple.*one target as"):
        BackgroundService(store=db, serve="pkg.jobs:refresh")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="serve entries must be strings"):
        BackgroundService(store=db, serve=(len,))  # type: ignore[arg-type]
    for bad in ("*", "pkg.*", "os", ":f", "pkg.jobs:", "pkg jobs:f", "pkg.jobs:f*"):
        with pytest.raises(ValueError, match=re.escape(f"serve entry {bad!r} is not")):
            BackgroundService(store=db, serve=(bad,))
    with pytest.raises(ValueError, match="serve= admits records of a store: give store="):
        BackgroundService(serve=("pkg.jobs:refresh",))
    for good in (("pkg.jobs:refresh", "pkg.tasks:*", "m:Cls.method"), ()):
        BackgroundService(store=db, serve=good).shutdown()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_pausing_a_stored_schedule_while_its_run_is_in_flight_loses_no_lease(
        kind: str, db: str) -> None:
    """A pause made while the schedule's run is in flight does not fence the run out: its
    lease is still renewed, its end is recorded (runs counted, lease released), no LeaseLost
    event is emitted, status() counts no lost lease, and the schedule stays paused."""
    stored_jobs.GATE_ENTERED.clear()
    stored_jobs.GATE_OPEN.clear()
    store = MemoryStore() if kind == "memory" else SQLiteScheduleStore(
        db.removeprefix("sqlite:///"))
    try:
        with BackgroundService(store=store, store_lease=0.6) as svc:
            lost: list[ServiceEvent] = []
            svc.subscribe(lost.append, LeaseLost)
            job = svc.schedule(Interval(3600), stored_jobs.gated, "g", name="gated",
                               on_crash="rerun")
            job.wake()
            assert stored_jobs.GATE_ENTERED.wait(10)
            job.pause()
            wait_until(lambda: store.get("gated").paused, 5)  # type: ignore[union-attr]
            paused_lease = store.get("gated").lease_until  # type: ignore[union-attr]
            assert paused_lease is not None
            # Renewed after the pause (every lease / 3 = 0.2 s): still the run's lease.
            wait_until(lambda: (store.get("gated").lease_until  # type: ignore[union-attr]
                                or paused_lease) > paused_lease, 5)
            stored_jobs.GATE_OPEN.set()
            wait_until(lambda: store.get("gated").counters["runs"] == 1,  # type: ignore[union-attr]
                       5)
            status = svc.status()
        record = store.get("gated")
        assert record is not None and record.paused and record.last_result == "ok"
        assert record.running_fire is None and record.owner is None
        assert record.counters["lost"] == 0
        assert lost == []
        assert status.store is not None and status.store.lease_lost == 0
        assert len(stored_jobs.SEEN) == 1
    finally:
        stored_jobs.GATE_OPEN.set()
        store.close()


def test_two_deploys_on_one_store_each_run_their_own_arguments_and_write_back_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A deploy in progress: two services declare one schedule with different arguments.
    Each runs its own code's arguments (never the other's, whatever the record holds), and
    each writes its definition back once (REPAIR_AGAIN), not at every claim."""
    from executors._service import stored_trust

    old, new = tmp_path / "old.log", tmp_path / "new.log"
    store = MemoryStore()
    with caplog.at_level(logging.WARNING, "executors.service"), \
            BackgroundService("old", store=store) as a, BackgroundService("new", store=store) as b:
        jobs = {path: svc.schedule(Interval(0.02), stored_jobs.append, str(path), name="job")
                for svc, path in ((a, old), (b, new))}
        # One record: each fire time runs in one of them, whichever claims it first.
        wait_until(lambda: all(p.exists() and len(p.read_text().splitlines()) >= 3
                               for p in (old, new)), 30)
    assert stored_trust.REPAIR_AGAIN >= 60
    assert 1 <= caplog.text.count("differs from this process's declaration") <= 2
    for path, job in jobs.items():  # every run of each service wrote to its own file
        assert len(path.read_text().splitlines()) == job.statistics().runs
