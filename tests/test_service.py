"""BackgroundService: schedules on a virtual clock, the pool bound, errors, shutdown, exit, fork."""

from __future__ import annotations

import concurrent.futures
import contextvars
import gc
import itertools
import json
import logging
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Iterator

import pytest
from helpers.forking import in_forked_child

from executors import BackgroundService, Job, ShutdownError
from executors.testing import VirtualClock, wait_until


@pytest.fixture
def services() -> Iterator[list[BackgroundService]]:
    made: list[BackgroundService] = []
    yield made
    for svc in made:
        report = svc.shutdown(5)
        assert report.completed, report


def virtual(services: list[BackgroundService], **kwargs: object) -> tuple[
        BackgroundService, VirtualClock]:
    clock = VirtualClock()
    svc = BackgroundService("test", clock=clock, **kwargs)  # type: ignore[arg-type]
    services.append(svc)
    return svc, clock


def sleeps_until(svc: BackgroundService, clock: VirtualClock, deadline: float) -> None:
    """Wait until the scheduler sleeps on the clock with `deadline` (it has seen a change)."""
    def check() -> bool:
        entry = clock._sleepers.get(svc._scheduler.thread)  # type: ignore[arg-type]
        return entry is not None and abs(entry[0] - deadline) < 1e-9
    wait_until(check, 5, message=f"scheduler not sleeping until {deadline}: {clock!r}")


def sleeps_without_deadline(svc: BackgroundService, clock: VirtualClock) -> None:
    """Wait until the scheduler sleeps on the clock with no deadline at all (nothing due)."""
    def check() -> bool:
        entry = clock._sleepers.get(svc._scheduler.thread)  # type: ignore[arg-type]
        return entry is not None and entry[0] == math.inf
    wait_until(check, 5, message=f"scheduler not sleeping without a deadline: {clock!r}")


class Recorder:
    """A job body that records the clock time of each run."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.times: list[float] = []

    def __call__(self) -> None:
        self.times.append(self.clock.monotonic())


# -- schedules on a virtual clock (no real sleeping) -------------------------------------


def test_runs_in_order_on_a_grid(services: list[BackgroundService]) -> None:
    """Each job runs at delay + k*interval; advance() returns with every due run done."""
    svc, clock = virtual(services)
    order: list[tuple[str, float]] = []
    svc.every(10, lambda: order.append(("a", clock.monotonic())), name="a")
    svc.every(3, lambda: order.append(("b", clock.monotonic())), name="b", delay=1)
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(25)
    assert order == [("a", 0.0), ("b", 1.0), ("b", 4.0), ("b", 7.0), ("a", 10.0), ("b", 10.0),
                     ("b", 13.0), ("b", 16.0), ("b", 19.0), ("a", 20.0), ("b", 22.0),
                     ("b", 25.0)]
    a = svc.jobs[0].statistics()
    assert (a.runs, a.last_run_at, a.next_run_at, a.next_run_in) == (3, 20.0, 30.0, 5.0)
    assert a.max_lateness == 0.0 and a.state == "scheduled"


def test_job_added_to_running_service_starts_at_once(services: list[BackgroundService]) -> None:
    """every() on a running service schedules the job relative to now."""
    svc, clock = virtual(services)
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(7)
    rec = Recorder(clock)
    svc.every(5, rec, delay=2)
    sleeps_until(svc, clock, 9.0)
    clock.advance(10)
    assert rec.times == [9.0, 14.0]


def test_wake_is_throttled_by_min_interval(services: list[BackgroundService]) -> None:
    """wake() runs the job at once, or min_interval after the last start; the grid restarts."""
    svc, clock = virtual(services)
    rec = Recorder(clock)
    job = svc.every(10, rec, min_interval=2)
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(0.5)
    job.wake()
    sleeps_until(svc, clock, 2.0)
    clock.advance(4.5)  # now 5
    job.wake()
    sleeps_until(svc, clock, 15.0)
    clock.advance(10)
    assert rec.times == [0.0, 2.0, 5.0, 15.0]
    assert job.statistics().wake_requests == 2


def test_wake_during_run_is_served_after_it(services: list[BackgroundService]) -> None:
    """A wake that arrives while the job runs is not lost: one more run follows."""
    svc, clock = virtual(services)
    rec = Recorder(clock)
    box: list[Job] = []

    def body() -> None:
        rec()
        if len(rec.times) == 1:
            box[0].wake()

    box.append(svc.every(10, body, min_interval=1))
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(5)
    assert rec.times == [0.0, 1.0]


@pytest.mark.parametrize("jitter", [0.5, 3.0])
def test_jitter_stays_within_bounds(services: list[BackgroundService], jitter: float) -> None:
    """Each run is due at its grid time plus a random [0, jitter]; the grid does not drift."""
    svc, clock = virtual(services)
    recs = [Recorder(clock) for _ in range(20)]
    for rec in recs:
        svc.every(10, rec, jitter=jitter)
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(100)
    spread = set()
    for rec in recs:
        assert len(rec.times) == 10
        for k, t in enumerate(rec.times):
            assert 10 * k <= t <= 10 * k + jitter
            spread.add(t)
    assert len(spread) > 20  # the runs really are spread


def test_pause_and_resume(services: list[BackgroundService]) -> None:
    """A paused job does not run; on resume it runs at once if a run fell due meanwhile."""
    svc, clock = virtual(services)
    rec = Recorder(clock)
    job = svc.every(10, rec)
    svc.start()
    clock.wait_for_sleepers(1)
    job.pause()
    assert job.statistics().state == "paused"
    assert job.statistics().next_run_at is None
    clock.advance(35)
    assert rec.times == [0.0]
    job.resume()
    sleeps_until(svc, clock, 45.0)
    clock.advance(10)
    assert rec.times == [0.0, 35.0, 45.0]


def test_update_interval_reschedules(services: list[BackgroundService]) -> None:
    """update_interval() moves the next run to last due time + new interval, at once."""
    svc, clock = virtual(services)
    rec = Recorder(clock)
    job = svc.every(10, rec)
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(1)
    job.update_interval(4)
    sleeps_until(svc, clock, 4.0)
    clock.advance(7)
    assert rec.times == [0.0, 4.0, 8.0]


@pytest.mark.parametrize(("overrun", "expected", "skipped"), [
    ("skip", [0.0, 30.0, 40.0], 2),
    ("catch_up", [0.0, 25.0, 25.0, 30.0, 40.0], 0),
])
def test_overrun_policy(services: list[BackgroundService], overrun: str,
                        expected: list[float], skipped: int) -> None:
    """A run that takes 25 s of a 10 s interval: skip to the grid, or run the missed ones."""
    svc, clock = virtual(services)
    rec = Recorder(clock)

    def body() -> None:
        rec()
        if len(rec.times) == 1:
            clock.advance(25, settle=False)  # this run "takes" 25 s

    job = svc.every(10, body, overrun=overrun)  # type: ignore[call-overload]
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(15)
    assert rec.times == expected
    stats = job.statistics()
    assert stats.overruns == 1 and stats.skipped == skipped
    assert stats.max_lateness == (15.0 if overrun == "catch_up" else 0.0)


def test_error_policy_continue_logs_and_counts(services: list[BackgroundService],
                                               caplog: pytest.LogCaptureFixture) -> None:
    """on_error='continue': every error is logged with its traceback and counted."""
    svc, clock = virtual(services)

    def broken() -> None:
        raise ValueError("boom")

    job = svc.every(10, broken)
    with caplog.at_level(logging.ERROR, logger="executors.service"):
        svc.start()
        clock.wait_for_sleepers(1)
        clock.advance(20)
    s = job.statistics()
    assert (s.runs, s.errors, s.consecutive_errors, s.state) == (3, 3, 3, "scheduled")
    assert s.last_error == "ValueError: boom"
    assert len([r for r in caplog.records if r.exc_info]) == 3
    assert svc.statistics().job_errors == 3
    assert svc.status().healthy


def test_error_policy_stop(services: list[BackgroundService],
                           caplog: pytest.LogCaptureFixture) -> None:
    """on_error='stop': the job stops at its first error and the service reports unhealthy."""
    svc, clock = virtual(services)
    calls: list[float] = []

    def broken() -> None:
        calls.append(clock.monotonic())
        raise RuntimeError("down")

    job = svc.every(10, broken, on_error="stop")
    with caplog.at_level(logging.ERROR, logger="executors.service"):
        svc.start()
        clock.wait_for_sleepers(1)
        clock.advance(50)
    assert calls == [0.0]
    assert job.statistics().state == "failed"
    status = svc.status()
    assert not status.healthy
    assert "stopping" in caplog.text


def test_error_policy_backoff(services: list[BackgroundService],
                              caplog: pytest.LogCaptureFixture) -> None:
    """on_error='backoff': delays double after each error in a row, capped; success resets."""
    svc, clock = virtual(services)
    calls: list[float] = []

    def flaky() -> None:
        calls.append(clock.monotonic())
        if len(calls) <= 4:
            raise ConnectionError("retry")

    job = svc.every(1, flaky, on_error="backoff", backoff_max=5)
    with caplog.at_level(logging.ERROR, logger="executors.service"):
        svc.start()
        clock.wait_for_sleepers(1)
        clock.advance(20)
    # errors at 0, 2 (+2), 6 (+4), 11 (+5 capped), success at 16, then every 1 s
    assert calls[:7] == [0.0, 2.0, 6.0, 11.0, 16.0, 17.0, 18.0]
    assert job.statistics().consecutive_errors == 0


def test_cancel_removes_job(services: list[BackgroundService]) -> None:
    """cancel() ends the job for good and it leaves jobs and status()."""
    svc, clock = virtual(services)
    rec = Recorder(clock)
    job = svc.every(10, rec)
    svc.start()
    clock.wait_for_sleepers(1)
    job.cancel()
    wait_until(lambda: not svc.jobs)
    clock.advance(30)
    assert rec.times == [0.0]
    assert job.statistics().state == "cancelled"
    assert svc.status().jobs == ()


def test_decorator_form(services: list[BackgroundService]) -> None:
    """@svc.every(...) schedules the function and returns its Job."""
    svc, clock = virtual(services)
    times: list[float] = []

    @svc.every(5, name="tick")
    def tick() -> None:
        times.append(clock.monotonic())

    assert isinstance(tick, Job) and tick.name == "tick"
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(10)
    assert times == [0.0, 5.0, 10.0]


def test_decorator_keeps_the_function_and_rejects_misuse() -> None:
    """The decorator's Job keeps the function as job.fn; bad uses are clear errors."""
    svc = BackgroundService("deco")

    @svc.every(5)
    def refresh() -> None:
        pass

    assert isinstance(refresh, Job) and refresh.fn.__name__ == "refresh"
    assert refresh.name.endswith("<locals>.refresh")  # the qualified name by default
    with pytest.raises(TypeError, match="no positional args"):
        svc.every(5, None, 1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="fn must be callable"):
        svc.every(5)(42)  # type: ignore[arg-type]
    assert svc.shutdown(1).completed
    with pytest.raises(ShutdownError):
        svc.every(5)(print)


def test_idle_scheduler_sleeps_without_a_deadline(services: list[BackgroundService]) -> None:
    """The scheduler never polls: with nothing due it sleeps with no deadline at all, and a
    paused or cancelled job leaves no deadline behind."""
    svc, clock = virtual(services)
    svc.start()
    sleeps_without_deadline(svc, clock)
    rec = Recorder(clock)
    job = svc.every(10, rec)
    sleeps_until(svc, clock, 10.0)
    assert rec.times == [0.0]
    job.pause()
    clock.advance(10)  # the stale deadline is dropped, not run
    sleeps_without_deadline(svc, clock)
    job.resume()  # a run fell due at 10 while paused: at once
    sleeps_until(svc, clock, 20.0)
    job.cancel()
    sleeps_without_deadline(svc, clock)
    clock.advance(100)
    assert rec.times == [0.0, 10.0]


@pytest.mark.parametrize("inline_below", [0.001, 0.0])
def test_light_jobs_run_on_the_scheduler_thread(services: list[BackgroundService],
                                                inline_below: float) -> None:
    """A job faster than inline_below moves to the scheduler thread; a slow run sends it back."""
    svc, clock = virtual(services, inline_below=inline_below)
    names: list[str] = []

    def body() -> None:
        names.append(threading.current_thread().name)
        if len(names) == 3:
            clock.advance(1, settle=False)  # this run takes 1 s of clock time

    job = svc.every(10, body)
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(40)
    where = ["scheduler" if n == "test-scheduler" else "pool" for n in names]
    if inline_below:
        assert where == ["pool", "scheduler", "scheduler", "pool", "pool"]
    else:
        assert where == ["pool"] * 5
    assert not job.statistics().inline


def test_slack_serves_runs_due_close_together_in_one_wake_up(
        services: list[BackgroundService]) -> None:
    """With slack, runs due within `slack` of the earliest start together at earliest + slack.

    A lone due time, or several equal ones, is slept until exactly: slack only delays a run
    when that saves the scheduler a wake-up.
    """
    svc, clock = virtual(services, slack=0.001)
    recs = {name: Recorder(clock) for name in "abcde"}
    svc.every(10, recs["a"], name="a", delay=1)
    svc.every(10, recs["b"], name="b", delay=1.0004)
    svc.every(10, recs["c"], name="c", delay=1.0008)
    svc.every(10, recs["d"], name="d", delay=1.5)
    svc.every(10, recs["e"], name="e", delay=1.5)
    svc.start()
    sleeps_until(svc, clock, 1.001)  # a, b and c in one wake-up
    clock.advance(1.001)
    assert [recs[n].times for n in "abc"] == [[pytest.approx(1.001)]] * 3
    lateness = [j.statistics().lateness for j in svc.jobs[:3]]
    assert lateness == [pytest.approx(0.001), pytest.approx(0.0006), pytest.approx(0.0002)]
    sleeps_until(svc, clock, 1.5)  # d and e are due together: no slack added
    clock.advance(0.499)
    assert recs["d"].times == recs["e"].times == [pytest.approx(1.5)]
    # The grid stays where it was: the next runs are due at delay + interval, not later.
    sleeps_until(svc, clock, 11.001)
    clock.advance(10)
    assert [recs[n].times[-1] for n in "abcde"] == [pytest.approx(11.001)] * 3 + [
        pytest.approx(11.5)] * 2


def test_no_slack_by_default_on_a_test_clock(services: list[BackgroundService]) -> None:
    """Without `slack`, an injected clock keeps exact due times even 0.1 ms apart."""
    svc, clock = virtual(services)
    recs = [Recorder(clock) for _ in range(3)]
    for i, rec in enumerate(recs):
        svc.every(1, rec, delay=i * 0.0001)
    svc.start()
    clock.wait_for_sleepers(1)
    clock.advance(1.5)
    assert [rec.times for rec in recs] == [[0.0, 1.0], [0.0001, 1.0001], [0.0002, 1.0002]]


def test_default_slack_on_the_real_clock_shares_a_wake_up(
        services: list[BackgroundService]) -> None:
    """On the real clock a run due 0.3 ms before another waits for it: 1 ms of slack."""
    svc = BackgroundService("slack")
    services.append(svc)
    # 0.3 s ahead, so that the scheduler is asleep on this deadline well before it.
    first = svc.every(60, lambda: None, name="first", delay=0.3)
    second = svc.every(60, lambda: None, name="second", delay=0.3003)
    svc.start()
    wait_until(lambda: first.statistics().runs and second.statistics().runs, 10)
    # The scheduler slept until first's due time + 1 ms (a timed wait never ends early).
    lateness = first.statistics().lateness
    assert lateness is not None and lateness >= 0.001 - 1e-4


@pytest.mark.slow
def test_stress_ten_thousand_jobs_virtual_clock() -> None:
    """10,000 jobs for 10 virtual seconds: every run happens on time, on few threads."""
    clock = VirtualClock()
    counts = [0] * 10_000

    def bump(i: int) -> None:
        counts[i] += 1

    svc = BackgroundService("stress", workers=4, clock=clock)
    for i in range(10_000):
        svc.every(1, bump, i, delay=(i % 10) / 10)
    svc.start()
    clock.wait_for_sleepers(1)
    started = time.monotonic()
    clock.advance(10)
    elapsed = time.monotonic() - started
    try:
        assert set(counts) == {10, 11} and counts[0] == 11 and counts[9] == 10
        assert svc.statistics().threads <= 5
        assert all(j.max_lateness == 0 for j in svc.status().jobs)
        assert elapsed < 40
    finally:
        assert svc.shutdown(5).completed


# -- real threads ------------------------------------------------------------------------


def test_pool_is_bounded_and_threads_are_few(services: list[BackgroundService]) -> None:
    """At most `workers` things run at once; the service uses scheduler + workers threads."""
    svc = BackgroundService("pool", workers=2).start()
    services.append(svc)
    lock = threading.Lock()
    active = [0]
    peak = [0]
    release = threading.Event()

    def work() -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        release.wait(5)
        with lock:
            active[0] -= 1

    futures = [svc.submit(work) for _ in range(8)]
    for i in range(5):
        svc.every(0.01, lambda: None, name=f"light{i}")
    wait_until(lambda: active[0] == 2)
    assert svc.statistics().threads == 3
    release.set()
    concurrent.futures.wait(futures, 5)
    assert peak[0] == 2
    assert svc.statistics().threads == 3


def test_job_never_runs_concurrently_with_itself(services: list[BackgroundService]) -> None:
    """With many workers and runs back to back, runs of one job are strictly one after another."""
    svc = BackgroundService("serial", workers=4).start()
    services.append(svc)
    inside = [0]
    overlaps = [0]

    def body() -> None:
        inside[0] += 1
        if inside[0] > 1:
            overlaps[0] += 1
        time.sleep(0.0005)
        inside[0] -= 1

    job = svc.every(0.0001, body, overrun="catch_up")  # each run ends behind the grid
    for _ in range(3):
        job.wake()
    wait_until(lambda: job.statistics().runs >= 50)
    job.cancel()
    assert overlaps[0] == 0


def test_wake_with_real_clock_is_prompt(services: list[BackgroundService]) -> None:
    """A job with a 60 s interval runs within moments of wake()."""
    svc = BackgroundService("wake").start()
    services.append(svc)
    ran = threading.Semaphore(0)
    job = svc.every(60, ran.release)
    assert ran.acquire(timeout=5)
    t0 = time.monotonic()
    job.wake()
    assert ran.acquire(timeout=5)
    assert time.monotonic() - t0 < 1.0
    assert job.statistics().runs == 2


def test_runs_in_fresh_context(services: list[BackgroundService]) -> None:
    """Jobs and submissions run in a fresh contextvars.Context (PyMongo PYTHON-5406)."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="fresh")
    var.set("caller")
    svc = BackgroundService("ctx").start()
    services.append(svc)
    seen: list[str] = []
    svc.every(60, lambda: seen.append(var.get()))
    assert svc.submit(var.get).result(5) == "fresh"
    wait_until(lambda: seen)
    assert seen == ["fresh"]


def test_submission_errors_are_set_logged_and_counted(
        services: list[BackgroundService], caplog: pytest.LogCaptureFixture) -> None:
    """An exception from submitted work reaches its future, the log and statistics()."""
    svc = BackgroundService("errs").start()
    services.append(svc)

    def bad() -> None:
        raise KeyError("nope")

    with caplog.at_level(logging.ERROR, logger="executors.service"):
        fut = svc.submit(bad)
        with pytest.raises(KeyError):
            fut.result(5)
        wait_until(lambda: "submitted work raised" in caplog.text)
    assert svc.statistics().submissions_failed == 1
    assert svc.statistics().last_submission_error == "KeyError: 'nope'"


def test_shutdown_waits_for_pending_submissions() -> None:
    """shutdown() runs work already submitted before it returns, and then refuses more."""
    svc = BackgroundService("drain", workers=1).start()
    done: list[int] = []
    gate = threading.Event()
    svc.submit(gate.wait, 5)
    futures = [svc.submit(done.append, i) for i in range(5)]
    threading.Timer(0.05, gate.set).start()
    report = svc.shutdown(5)
    assert report.completed and report.unfinished_submissions == 0
    assert done == [0, 1, 2, 3, 4] and all(f.done() for f in futures)
    assert svc.statistics().state == "closed" and svc.statistics().threads == 0
    with pytest.raises(ShutdownError):
        svc.submit(print)
    with pytest.raises(ShutdownError):
        svc.every(1, print)
    with pytest.raises(ShutdownError):
        svc.start()
    assert svc.shutdown(1).completed  # idempotent


def test_shutdown_deadline_reports_what_did_not_finish() -> None:
    """At the deadline: running jobs and submissions are reported, unstarted ones cancelled."""
    svc = BackgroundService("stuck", workers=2).start()
    release = threading.Event()
    started = threading.Event()

    def stuck_job() -> None:
        started.set()
        release.wait(10)

    svc.every(60, stuck_job, name="stuck-job")
    assert started.wait(5)
    running = svc.submit(release.wait, 10)
    queued = [svc.submit(print, i) for i in range(3)]
    t0 = time.monotonic()
    report = svc.shutdown(0.2)
    elapsed = time.monotonic() - t0
    try:
        assert not report.completed and not report
        assert report.unfinished_jobs == ("stuck-job",)
        assert report.unfinished_submissions == 1 and report.cancelled_submissions == 3
        assert all(f.cancelled() for f in queued) and not running.done()
        assert 0.15 <= elapsed < 2.0
    finally:
        release.set()
    assert svc.join(5)
    assert running.done()


def test_shutdown_cancel_pending(services: list[BackgroundService]) -> None:
    """cancel_pending=True cancels submissions that have not started instead of running them."""
    svc = BackgroundService("cancel", workers=1).start()
    gate = threading.Event()
    first = svc.submit(gate.wait, 5)
    queued = [svc.submit(print, i) for i in range(4)]
    threading.Timer(0.05, gate.set).start()
    report = svc.shutdown(5, cancel_pending=True)
    assert report.completed and report.cancelled_submissions == 4
    assert first.result() is True and all(f.cancelled() for f in queued)


def test_context_manager_and_repr_and_status() -> None:
    """`with` starts and shuts down; repr and status() show the jobs; as_dict() is JSON."""
    ran = threading.Event()
    with BackgroundService("ctxmgr", workers=2) as svc:
        job = svc.every(30, ran.set, name="refresh")
        assert ran.wait(5)
        wait_until(lambda: job.statistics().state == "scheduled")
        text = repr(svc)
        assert "'ctxmgr' running jobs=1 (scheduled=1)" in text
        assert "<Job 'refresh' scheduled every 30s" in repr(job)
        payload = json.loads(json.dumps(svc.status().as_dict()))
        assert payload["healthy"] is True
        assert payload["jobs"][0]["name"] == "refresh" and payload["jobs"][0]["runs"] == 1
    assert svc.statistics().state == "closed"
    assert job.statistics().state == "closed"


def test_cancel_as_weakref_callback(services: list[BackgroundService]) -> None:
    """weakref.ref(owner, job.cancel) ends the job when its owner is collected (no lock)."""
    svc = BackgroundService("owner").start()
    services.append(svc)

    class Owner:
        pass

    owner = Owner()
    job = svc.every(60, lambda: None)
    ref = weakref.ref(owner, job.cancel)
    del owner
    gc.collect()
    assert ref() is None
    wait_until(lambda: not svc.jobs)
    assert job.statistics().state == "cancelled"


def test_dedicated_job_has_its_own_thread(services: list[BackgroundService],
                                          caplog: pytest.LogCaptureFixture) -> None:
    """dedicated=True runs on a PeriodicExecutor thread; control methods and errors apply."""
    svc = BackgroundService("ded", workers=1).start()
    services.append(svc)
    names: list[str] = []
    ran = threading.Semaphore(0)

    def monitor() -> None:
        names.append(threading.current_thread().name)
        ran.release()

    job = svc.every(60, monitor, name="monitor", dedicated=True)
    assert ran.acquire(timeout=5)
    assert names == ["ded:monitor"] and job.dedicated
    job.wake()
    assert ran.acquire(timeout=5)
    job.pause()
    wait_until(lambda: job.statistics().state == "paused")
    job.resume()
    assert ran.acquire(timeout=5)
    assert job.statistics().runs >= 3

    def failing() -> None:
        raise OSError("socket closed")

    with caplog.at_level(logging.ERROR, logger="executors.service"):
        bad = svc.every(0.01, failing, dedicated=True, on_error="stop")
        wait_until(lambda: bad.statistics().state == "failed")
    assert bad.statistics().errors == 1
    job.cancel()
    wait_until(lambda: job.statistics().state == "cancelled" and len(svc.jobs) == 1)


def test_executor_thread_pool_and_process_pool() -> None:
    """executor= sends one-shot work to the executor given; shutdown waits for it."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool, \
            BackgroundService("tp", executor=pool) as svc:
        assert svc.submit(pow, 2, 10).result(5) == 1024
    with concurrent.futures.ProcessPoolExecutor(1) as procs:
        svc = BackgroundService("pp", executor=procs).start()
        fut = svc.submit(os.getpid)
        report = svc.shutdown(30)
        assert report.completed and fut.result() != os.getpid()


@pytest.mark.parametrize("processes", [False, True], ids=["thread-worker", "process-worker"])
def test_executor_dask_local_cluster(processes: bool) -> None:
    """A real local Dask cluster's executor takes one-shot work (outgrows one machine); with
    a worker process, the work really runs outside this process."""
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    # The scheduler's HTTP server starts even without a dashboard, on :8787 by default; a
    # second cluster (a concurrent test run) then warns that the port is taken, and warnings
    # are errors here. ":0" takes a free port.
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=processes,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client, \
            BackgroundService("dask", executor=client.get_executor()) as svc:
        futures = [svc.submit(pow, 3, i) for i in range(5)]
        assert [f.result(30) for f in futures] == [1, 3, 9, 27, 81]
        assert svc.statistics().submitted == 5
        pid = svc.submit(os.getpid).result(30)
        assert (pid != os.getpid()) == processes
    assert svc.statistics().submissions_pending == 0


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    ({"interval": -1}, ValueError, "interval"),
    ({"interval": float("nan")}, ValueError, "interval"),
    ({"interval": "1"}, TypeError, "interval"),
    ({"interval": 1, "min_interval": 2}, ValueError, "min_interval"),
    ({"interval": 1, "jitter": 2}, ValueError, "jitter"),
    ({"interval": 1, "delay": -1}, ValueError, "delay"),
    ({"interval": 1, "on_error": "ignore"}, ValueError, "on_error"),
    ({"interval": 0}, ValueError, "interval must be > 0"),
    ({"interval": 1, "overrun": "burst"}, ValueError, "overrun"),
    ({"interval": 1, "dedicated": True, "jitter": 0.5}, ValueError, "dedicated"),
    ({"interval": 1, "name": 3}, TypeError, "name"),
])
def test_bad_job_arguments(kwargs: dict[str, object], exc: type[Exception], match: str) -> None:
    """Bad intervals and options raise TypeError/ValueError naming the argument."""
    svc = BackgroundService("bad")
    interval = kwargs.pop("interval")
    with pytest.raises(exc, match=match):
        svc.every(interval, print, **kwargs)  # type: ignore[call-overload]


def test_bad_service_arguments_and_misuse() -> None:
    """Non-callables, bad workers, duplicate names and submit-before-start are clear errors."""
    with pytest.raises(TypeError, match="fn"):
        BackgroundService().every(1, 42)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="workers"):
        BackgroundService(workers=0)
    with pytest.raises(TypeError, match="executor"):
        BackgroundService(executor=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fork_policy"):
        BackgroundService(fork_policy="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slack"):
        BackgroundService(slack=-0.001)
    with pytest.raises(TypeError, match="slack"):
        BackgroundService(slack="1ms")  # type: ignore[arg-type]
    svc = BackgroundService("misuse")
    svc.every(1, print, name="x")
    with pytest.raises(ValueError, match="already exists"):
        svc.every(1, print, name="x")
    assert svc.every(1, print).name == "print" and svc.every(1, print).name == "print#2"
    with pytest.raises(RuntimeError, match="not started"):
        svc.submit(print)
    with pytest.raises(TypeError, match="fn"):
        svc.submit(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"BackgroundService\.every"):
        Job(None, svc, print, (), "x", 1, 0, 0, 0, "continue", "skip", 1, False)
    with pytest.raises(ValueError, match="min_interval"):
        BackgroundService().every(5, print, min_interval=2).update_interval(1)
    assert svc.statistics().state == "idle" and svc.jobs[0].statistics().state == "pending"


@pytest.mark.parametrize("overrun", ["skip", "catch_up"])
def test_overrunning_job_never_overlaps_itself(services: list[BackgroundService],
                                               overrun: str) -> None:
    """On a pool of 4 with every run overrunning and wakes from two threads, runs of one job
    still never overlap (the guard lock is never found taken)."""
    svc = BackgroundService("overlap", workers=4, inline_below=0).start()
    services.append(svc)
    guard = threading.Lock()
    overlaps = [0]

    def body() -> None:
        if not guard.acquire(blocking=False):
            overlaps[0] += 1
            return
        try:
            time.sleep(0.003)  # the run's work: three intervals long
        finally:
            guard.release()

    job = svc.every(0.001, body, overrun=overrun)  # type: ignore[call-overload]
    stop = threading.Event()

    def waker() -> None:
        while not stop.wait(0.0005):
            job.wake()

    wakers = [threading.Thread(target=waker) for _ in range(2)]
    for t in wakers:
        t.start()
    try:
        wait_until(lambda: job.statistics().runs >= 30, 20)
    finally:
        stop.set()
        for t in wakers:
            t.join(5)
    assert svc.shutdown(5).completed
    s = job.statistics()
    assert overlaps[0] == 0
    assert s.overruns == s.runs >= 30
    assert (s.skipped > 0) if overrun == "skip" else (s.skipped == 0)


def assert_backoff_gaps(starts: list[float]) -> None:
    """interval 0.01, backoff_max 0.04, three errors: the next run starts at least 0.02, 0.04,
    then 0.04 (capped) after the failed run's start (the job's own `last_run_at`, read inside
    the run). Only lower bounds: a timed wait never ends early, but a loaded machine may start
    any run late (and after a late start the grid may bring the next run closer)."""
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    for gap, least in zip(gaps[:3], [0.02, 0.04, 0.04], strict=True):
        assert gap >= least - 1e-9, gaps


def test_error_policies_on_real_threads(services: list[BackgroundService],
                                        caplog: pytest.LogCaptureFixture) -> None:
    """On the pool and the real clock: continue keeps the schedule, stop stops at the first
    error, backoff waits at least the doubled (capped) delays; every error is logged."""
    svc = BackgroundService("errors-real", workers=2, inline_below=0)
    services.append(svc)
    continued: list[float] = []
    stopped: list[float] = []
    backed_off: list[float] = []

    def always_fails(calls: list[float]) -> None:
        calls.append(time.monotonic())
        raise ValueError("boom")

    box: list[Job] = []

    def flaky() -> None:
        backed_off.append(box[0].statistics().last_run_at)  # type: ignore[arg-type]
        if len(backed_off) <= 3:
            raise ConnectionError("retry")

    cont = svc.every(0.01, always_fails, continued, name="continue")
    stop = svc.every(0.01, always_fails, stopped, name="stop", on_error="stop")
    back = svc.every(0.01, flaky, name="backoff", on_error="backoff", backoff_max=0.04)
    box.append(back)
    with caplog.at_level(logging.ERROR, logger="executors.service"):
        svc.start()
        wait_until(lambda: len(backed_off) >= 6 and len(continued) >= 5, 20)
        wait_until(lambda: stop.statistics().state == "failed", 5)
        assert not svc.status().healthy
        assert svc.shutdown(5).completed
    c, s, b = cont.statistics(), stop.statistics(), back.statistics()
    assert c.runs == c.errors == c.consecutive_errors == len(continued) >= 5
    assert (s.runs, s.errors, len(stopped)) == (1, 1, 1)
    assert (b.errors, b.consecutive_errors, b.last_error) == (3, 0, "ConnectionError: retry")
    assert_backoff_gaps(backed_off)
    logged = len([r for r in caplog.records if r.exc_info])
    assert logged == c.errors + 1 + 3 == svc.statistics().job_errors


@pytest.mark.parametrize("on_run", [1, 2])
def test_base_exception_stops_the_job_not_a_thread(services: list[BackgroundService],
                                                   caplog: pytest.LogCaptureFixture,
                                                   on_run: int) -> None:
    """SystemExit from a job (on the pool, or inline on the scheduler from its second run)
    stops that job, logged; the service's threads keep serving other work."""
    svc = BackgroundService("base-exc", workers=1).start()
    services.append(svc)
    calls = [0]

    def exits() -> None:
        calls[0] += 1
        if calls[0] == on_run:
            raise SystemExit(3)

    with caplog.at_level(logging.ERROR, logger="executors.service"):
        job = svc.every(0.01, exits)
        # The job is marked failed just before the record is logged: wait for both.
        wait_until(lambda: job.statistics().state == "failed" and "stopping it" in caplog.text,
                   10)
    assert job.statistics().last_error == "SystemExit: 3"
    assert svc.submit(int, "5").result(5) == 5
    ran = threading.Event()
    svc.every(60, ran.set)
    assert ran.wait(5)
    assert calls[0] == on_run


def test_status_while_a_job_runs(services: list[BackgroundService]) -> None:
    """A run in progress shows as "running" (no next run yet); afterwards the next run is due
    one interval after the previous due time."""
    svc = BackgroundService("busy", workers=1).start()
    services.append(svc)
    inside = threading.Event()
    gate = threading.Event()

    def body() -> None:
        inside.set()
        gate.wait(5)

    job = svc.every(30, body, name="busy-job")
    assert inside.wait(5)
    try:
        s = job.statistics()
        assert (s.state, s.runs, s.next_run_at, s.next_run_in) == ("running", 0, None, None)
        assert s.last_run_at is not None and s.lateness is not None and s.lateness >= 0
        assert "(running=1)" in repr(svc) and "<Job 'busy-job' running" in repr(job)
        status = svc.status()
        assert status.healthy and [j.state for j in status.jobs] == ["running"]
    finally:
        gate.set()
    wait_until(lambda: job.statistics().state == "scheduled", 5)
    s = job.statistics()
    assert s.runs == 1 and s.last_run_at is not None and s.lateness is not None
    assert s.next_run_at == pytest.approx(s.last_run_at - s.lateness + 30, abs=1e-6)
    assert s.next_run_in is not None and 0 < s.next_run_in <= 30


def test_shutdown_waits_for_a_running_job() -> None:
    """A job run in progress at shutdown finishes before shutdown returns; none follows it."""
    svc = BackgroundService("drain-job", workers=1).start()
    inside = threading.Event()
    gate = threading.Event()
    finished: list[bool] = []

    def body() -> None:
        inside.set()
        gate.wait(5)
        finished.append(True)

    job = svc.every(0.01, body, name="slow")
    assert inside.wait(5)
    threading.Timer(0.05, gate.set).start()
    report = svc.shutdown(5)
    assert report.completed and report.unfinished_jobs == ()
    assert finished == [True] and job.statistics().runs == 1
    assert job.statistics().state == "closed" and svc.statistics().threads == 0


def test_shutdown_deadline_reports_a_stuck_dedicated_job() -> None:
    """A dedicated job still running at the deadline is reported; join() waits for it later."""
    svc = BackgroundService("stuck-ded").start()
    release = threading.Event()
    started = threading.Event()

    def monitor() -> None:
        started.set()
        release.wait(10)

    svc.every(60, monitor, name="monitor", dedicated=True)
    assert started.wait(5)
    report = svc.shutdown(0.2)
    try:
        assert not report.completed and report.unfinished_jobs == ("monitor",)
        assert 0.15 <= report.elapsed < 2.0
    finally:
        release.set()
    assert svc.join(5) and svc.statistics().threads == 0


def test_dedicated_job_backoff_lateness_and_counters(services: list[BackgroundService],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A dedicated job backs off like a shared one, reports lateness and overruns, and its
    runs and errors count in the service's statistics."""
    svc = BackgroundService("ded-stats", workers=1)
    services.append(svc)
    calls: list[float] = []
    box: list[Job] = []

    def flaky() -> None:
        calls.append(box[0].statistics().last_run_at)  # type: ignore[arg-type]
        if len(calls) <= 3:
            raise ConnectionError("retry")

    job = svc.every(0.01, flaky, name="flaky", dedicated=True, on_error="backoff",
                    backoff_max=0.04)
    box.append(job)
    with caplog.at_level(logging.ERROR, logger="executors.service"):
        svc.start()
        wait_until(lambda: len(calls) >= 6, 20)
    assert_backoff_gaps(calls)
    s = job.statistics()
    assert (s.errors, s.consecutive_errors) == (3, 0)
    assert s.lateness is not None and s.lateness >= 0 and s.max_lateness >= s.lateness
    slow = svc.every(0.001, time.sleep, 0.003, name="slow", dedicated=True)  # always overruns
    wait_until(lambda: slow.statistics().runs >= 3, 10)
    assert svc.shutdown(5).completed
    assert slow.statistics().overruns == slow.statistics().runs
    stats = svc.statistics()
    assert stats.job_errors == 3
    assert stats.job_runs == job.statistics().runs + slow.statistics().runs


def test_submit_returns_futures_and_leaves_the_executor_to_its_owner(
        caplog: pytest.LogCaptureFixture) -> None:
    """submit() gives a concurrent.futures.Future on either path; an executor's errors are
    counted; shutdown does not shut down the executor passed in; submit after it refuses."""
    with BackgroundService("own") as svc:
        assert isinstance(svc.submit(int, "1"), concurrent.futures.Future)
    with concurrent.futures.ProcessPoolExecutor(1) as procs:
        svc = BackgroundService("pp-errors", executor=procs).start()
        fut = svc.submit(int, "not a number")
        assert isinstance(fut, concurrent.futures.Future)
        with caplog.at_level(logging.ERROR, logger="executors.service"):
            with pytest.raises(ValueError):
                fut.result(30)
            wait_until(lambda: svc.statistics().submissions_failed == 1, 5)
        assert svc.statistics().last_submission_error is not None
        assert svc.shutdown(30).completed
        with pytest.raises(ShutdownError):
            svc.submit(int, "2")
        assert procs.submit(int, "3").result(30) == 3  # still the caller's, still open


@pytest.mark.slow
def test_stress_ten_thousand_jobs_real_clock() -> None:
    """10,000 jobs on the real clock: each runs again and again, on scheduler + workers."""
    counts = [0] * 10_000

    def bump(i: int) -> None:
        counts[i] += 1

    svc = BackgroundService("stress-real", workers=4)
    for i in range(10_000):
        svc.every(0.5, bump, i, jitter=0.1)
    before = threading.active_count()
    svc.start()
    peak = [0]

    def every_job_ran_three_times() -> bool:
        peak[0] = max(peak[0], svc.statistics().threads, threading.active_count() - before)
        return min(counts) >= 3

    try:
        wait_until(every_job_ran_three_times, 40)
        assert peak[0] <= 5  # the scheduler and at most 4 workers
        stats = svc.statistics()
        assert stats.job_errors == 0 and stats.job_runs >= 30_000
    finally:
        assert svc.shutdown(5).completed


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: BackgroundService(name=3), TypeError, "name"),  # type: ignore[arg-type]
    (lambda: BackgroundService(workers=True), TypeError, "workers"),
    (lambda: BackgroundService(shutdown_timeout=-1), ValueError, "shutdown_timeout"),
    (lambda: BackgroundService().shutdown(-1), ValueError, "timeout"),
    (lambda: BackgroundService().every(5, print).update_interval("5"), TypeError, "interval"),
    (lambda: BackgroundService().every(5, print, jitter=2).update_interval(1), ValueError,
     "jitter"),
    (lambda: BackgroundService().every(5, print).update_interval(0), ValueError, "interval"),
])
def test_more_bad_inputs(call: object, exc: type[Exception], match: str) -> None:
    """Bad service options, deadlines and new intervals raise errors naming the argument."""
    with pytest.raises(exc, match=match):
        call()  # type: ignore[operator]


# -- exit and fork -----------------------------------------------------------------------


def test_interpreter_exit_shuts_service_down_within_deadline() -> None:
    """At exit the registry closes the service: queued work runs, a stuck job cannot hang it."""
    script = textwrap.dedent("""
        import threading, time
        from executors import BackgroundService, registry
        registry.set_exit_timeout(0.5)
        svc = BackgroundService("exit", workers=2).start()
        svc.every(60, threading.Event().wait, name="stuck")
        svc.submit(lambda: print("submitted work ran", flush=True))
        time.sleep(0.05)
        print("main done", flush=True)
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30, check=False)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "submitted work ran" in proc.stdout and "main done" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert elapsed < 10


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("policy", ["lazy", "eager", "stop"])
def test_fork_rebuilds_service(services: list[BackgroundService], policy: str) -> None:
    """In a forked child the service is rebuilt: restarted on first use ("lazy") or at once
    ("eager"), its jobs running again there; or closed ("stop"), not repeating them."""
    svc = BackgroundService("fork", workers=2, fork_policy=policy)  # type: ignore[arg-type]
    services.append(svc)
    svc.start()
    ran = threading.Event()
    job = svc.every(60, ran.set)
    assert ran.wait(5)
    wait_until(lambda: job.statistics().runs == 1)
    assert svc.submit(int, "7").result(5) == 7

    def in_child() -> str:
        if policy == "eager":  # restarted already: the job runs again without any use
            wait_until(lambda: job.statistics().runs == 2, 5)
        try:
            result = str(svc.submit(int, "42").result(5))
        except ShutdownError:
            result = "shutdown"
        if policy != "stop":
            wait_until(lambda: job.statistics().runs == 2
                       and job.statistics().state == "scheduled", 5)
        return (f"{result} {svc.statistics().generation} {job.statistics().state}"
                f" runs={job.statistics().runs}")

    assert in_forked_child(in_child) == (
        "shutdown 1 closed runs=1" if policy == "stop" else "42 1 scheduled runs=2")
    assert svc.submit(int, "9").result(5) == 9  # the parent is unaffected
    assert job.statistics().runs == 1
