"""BackgroundService under load: control messages are served, the queue stays bounded, shutdown
tells executing runs from dropped ones, and an interval of 0 is refused."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from executors import BackgroundService
from executors.testing import wait_until


@pytest.fixture
def services() -> Iterator[list[BackgroundService]]:
    made: list[BackgroundService] = []
    yield made
    for svc in made:
        report = svc.shutdown(10)
        assert report.completed, report


def test_wake_and_cancel_served_while_a_job_runs_back_to_back(
        services: list[BackgroundService]) -> None:
    """A light job due again at once keeps the scheduler busy; wake() and cancel() still act.

    Before: the scheduler read its queue only when it slept, and a back-to-back job never lets
    it sleep, so the wake was never served and the cancelled job stayed in `jobs`.
    """
    # inline_below=1: the busy job stays on the scheduler thread even when a GIL switch makes
    # one of its runs look slow.
    svc = BackgroundService("busy", inline_below=1.0).start()
    services.append(svc)
    def spin() -> None:  # 0.2 ms of work: light enough to run on the scheduler thread
        end = time.perf_counter() + 0.0002
        while time.perf_counter() < end:
            pass

    # Runs longer than the interval, with catch_up: every run ends further behind the grid,
    # so the next one is due at once, for ever (what interval=0 did before it was refused).
    busy = svc.every(0.0001, spin, name="busy", overrun="catch_up")
    wait_until(lambda: busy.statistics().inline and busy.statistics().runs > 100, 10)
    ran = threading.Semaphore(0)
    idle = svc.every(60, ran.release, name="idle")
    assert ran.acquire(timeout=10)  # the first run is due at once
    t0 = time.monotonic()
    idle.wake()
    assert ran.acquire(timeout=10), "wake() not served while another job runs back to back"
    assert time.monotonic() - t0 < 5
    busy.cancel()
    wait_until(lambda: "busy" not in [j.name for j in svc.jobs], 10,
               message="a cancelled job stayed in jobs while the scheduler was busy")
    assert [j.name for j in svc.status().jobs] == ["idle"]


def test_control_queue_stays_bounded_under_overload(services: list[BackgroundService]) -> None:
    """1,000 jobs at 1 ms overload the scheduler; 10,000 wakes of one job stay a few messages.

    Repeated wakes of one job coalesce into one message (a per-job pending flag), nudges into
    one per service, and the queue is drained on every scheduler iteration. Before: 10,003
    messages queued and the wake was not served for seconds.
    """
    svc = BackgroundService("overload", workers=4).start()
    services.append(svc)
    jobs = [svc.every(0.001, lambda: None, name=f"j{i}") for i in range(1_000)]
    ran = threading.Semaphore(0)
    target = svc.every(60, ran.release, name="target")
    assert ran.acquire(timeout=10)
    wait_until(lambda: svc.statistics().job_runs > 5_000, 20)
    peak = 0
    for _ in range(10_000):
        target.wake()
        peak = max(peak, svc._scheduler.messages.qsize())
    assert peak <= 10, f"{peak} control messages queued"
    assert ran.acquire(timeout=10), "wake() not served under overload"
    for job in jobs[:10]:
        job.cancel()
    wait_until(lambda: len(svc.jobs) == 991, 10,
               message="cancelled jobs stayed in jobs under overload")
    assert svc._scheduler.messages.qsize() <= 10


def test_shutdown_reports_executing_and_never_started_runs_apart(
        services: list[BackgroundService]) -> None:
    """A run queued behind a busy pool at the deadline is dropped, not "unfinished" or running.

    One worker runs "slow" (blocked); "queued" fell due at the same moment and waits behind it.
    Before: both were in `unfinished_jobs` and "queued" said state "running".
    """
    release = threading.Event()
    entered = threading.Event()

    def slow() -> None:
        entered.set()
        release.wait(10)

    svc = BackgroundService("report", workers=1, inline_below=0)
    slow_job = svc.every(1, slow, name="slow")
    queued = svc.every(1, lambda: None, name="queued")
    svc.start()
    try:
        assert entered.wait(10)
        # Both fell due at start and were handed over in one scheduler pass: "queued" is
        # waiting for the only worker, which "slow" holds.
        assert queued.statistics().state == "scheduled"
        report = svc.shutdown(0.2)
        assert not report.completed
        assert report.unfinished_jobs == ("slow",)
        assert report.dropped_jobs == ("queued",)
        assert slow_job.statistics().state == "running"
        assert queued.statistics().state == "closed"
    finally:
        release.set()
    assert svc.join(10)
    assert queued.statistics().runs == 0


@pytest.mark.parametrize("dedicated", [False, True])
def test_interval_zero_is_refused_with_the_reason(dedicated: bool) -> None:
    """every(0, fn) and update_interval(0) raise ValueError naming `interval` and the remedy.

    Before: every(0, fn) was accepted and spun a core (585,919 runs in 2 s of a no-op).
    """
    svc = BackgroundService("zero")
    with pytest.raises(ValueError, match=r"interval must be > 0.*submit\(\)"):
        svc.every(0, print, dedicated=dedicated)
    with pytest.raises(ValueError, match=r"interval must be > 0.*submit\(\)"):
        svc.every(0.0, print, dedicated=dedicated)
    job = svc.every(1e-6, print, dedicated=dedicated)  # tiny, but asked for: honoured
    with pytest.raises(ValueError, match=r"interval must be > 0"):
        job.update_interval(0)
    assert job.interval == 1e-6
    assert [j.name for j in svc.jobs] == [job.name]  # the refused calls added nothing
