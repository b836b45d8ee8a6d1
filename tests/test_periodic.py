"""PeriodicExecutor: PyMongo's behaviours, and ours (no polling, lock-free close, restarts)."""

from __future__ import annotations

import contextvars
import gc
import inspect
import logging
import math
import signal
import threading
import time
import weakref
from collections.abc import Iterator

import pytest
from helpers.locking import held_by_another_thread

from executors import PeriodicExecutor, registry
from executors.testing import VirtualClock, wait_until


@pytest.fixture
def executors_to_close() -> Iterator[list[PeriodicExecutor]]:
    made: list[PeriodicExecutor] = []
    yield made
    for ex in made:
        ex.close()
    for ex in made:
        assert ex.join(5), f"{ex!r} did not stop"


class Counter:
    """A target that counts its calls and lets a test wait for the n-th one."""

    def __init__(self, result: object = True) -> None:
        self.calls = 0
        self.result = result
        self.cond = threading.Condition()

    def __call__(self) -> object:
        with self.cond:
            self.calls += 1
            self.cond.notify_all()
        return self.result

    def wait_for(self, n: int, timeout: float = 5.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.calls >= n, timeout)


def make(executors_to_close: list[PeriodicExecutor], *args: object,
         **kwargs: object) -> PeriodicExecutor:
    ex = PeriodicExecutor(*args, **kwargs)  # type: ignore[arg-type]
    executors_to_close.append(ex)
    return ex


# -- PyMongo's own tests (test/test_periodic_executor.py), as behaviours ----------------------


def test_join_without_open_is_safe() -> None:
    """join() on a never-opened executor returns at once (PyMongo PYTHON-1050)."""
    ex = PeriodicExecutor(1, 0.1, lambda: True)
    assert ex.join(timeout=0.01) is True
    assert ex.statistics().state == "idle"


def test_target_returning_false_stops_executor(executors_to_close: list[PeriodicExecutor]) -> None:
    """A falsy return value ends the thread by itself."""
    target = Counter(result=False)
    ex = make(executors_to_close, 30, 0.001, target)
    ex.open()
    assert ex.join(5)
    assert target.calls == 1
    assert ex.closed and ex.statistics().state == "closed"


def test_skip_sleep_skips_interval(executors_to_close: list[PeriodicExecutor]) -> None:
    """skip_sleep() before open() makes the second run follow the first at once."""
    target = Counter()
    ex = make(executors_to_close, 30, 0.001, target)
    ex.skip_sleep()
    ex.open()
    assert target.wait_for(2, timeout=5)


def test_wake_causes_early_run(executors_to_close: list[PeriodicExecutor]) -> None:
    """wake() after the first run causes a second long before the 30 s interval."""
    target = Counter()
    ex = make(executors_to_close, 30, 0.001, target)
    ex.open()
    assert target.wait_for(1)
    ex.wake()
    assert target.wait_for(2, timeout=3)


def test_update_interval_changes_next_wait(executors_to_close: list[PeriodicExecutor]) -> None:
    """update_interval() from the target shortens the wait that follows."""
    ex: PeriodicExecutor
    target = Counter()

    def shorten() -> bool:
        target()
        ex.update_interval(0.05)
        return True

    ex = make(executors_to_close, 30, 0.001, shorten)
    ex.open()
    assert target.wait_for(2, timeout=5)


def test_update_interval_reschedules_sleeping_thread() -> None:
    """update_interval() takes effect on a thread already sleeping (not only the next sleep)."""
    clock = VirtualClock()
    target = Counter()
    ex = PeriodicExecutor(100, 1, target, clock=clock)
    ex.open()
    clock.wait_for_sleepers(1)
    ex.update_interval(5)
    wait_until(lambda: ex.statistics().next_run_at == 5.0)
    clock.wait_for_sleepers(1)
    clock.advance(5)
    assert target.calls == 2
    ex.close(wait=True)


def test_open_after_target_returns_false(executors_to_close: list[PeriodicExecutor]) -> None:
    """An executor that stopped itself runs again after open()."""
    target = Counter(result=False)
    ex = make(executors_to_close, 30, 0.001, target)
    ex.open()
    assert ex.join(5)
    ex.open()
    assert ex.join(5)
    assert target.calls == 2


def test_target_exception_is_logged_and_executor_continues(
    executors_to_close: list[PeriodicExecutor], caplog: pytest.LogCaptureFixture
) -> None:
    """By default a raising target is logged with its traceback, counted, and run again."""
    calls = Counter()

    def boom() -> bool:
        calls()
        raise ValueError("boom")

    ex = make(executors_to_close, 30, 0.001, boom, name="boomer")
    with caplog.at_level(logging.ERROR, logger="executors.periodic"):
        ex.open()
        assert calls.wait_for(1)
        ex.wake()
        assert calls.wait_for(2)
        wait_until(lambda: ex.statistics().errors == 2)
    stats = ex.statistics()
    assert stats.last_error == "ValueError: boom"
    assert not ex.closed
    records = [r for r in caplog.records if r.name == "executors.periodic"]
    assert records and records[0].exc_info is not None
    assert "boomer" in records[0].getMessage()


def test_target_exception_with_on_error_stop(
    executors_to_close: list[PeriodicExecutor], caplog: pytest.LogCaptureFixture
) -> None:
    """on_error="stop": the first exception stops the executor (after logging it)."""
    calls = Counter()

    def boom() -> bool:
        calls()
        raise RuntimeError("stop me")

    ex = make(executors_to_close, 0.001, 0, boom, on_error="stop")
    with caplog.at_level(logging.ERROR, logger="executors.periodic"):
        ex.open()
        assert ex.join(5)
    assert calls.calls == 1
    assert ex.statistics().errors == 1 and ex.closed


def test_exception_does_not_keep_frames_alive(executors_to_close: list[PeriodicExecutor],
                                              caplog: pytest.LogCaptureFixture) -> None:
    """No traceback is kept: locals of the failing target are freed (PyMongo PYTHON-2433)."""

    class Big:
        pass

    refs: list[weakref.ref[Big]] = []

    def boom() -> bool:
        local = Big()
        refs.append(weakref.ref(local))
        raise ValueError("x")

    ex = make(executors_to_close, 30, 0, boom, on_error="stop")
    with caplog.at_level(logging.CRITICAL + 1):
        ex.open()
        assert ex.join(5)
    caplog.clear()
    gc.collect()
    assert refs and refs[0]() is None


def test_target_base_exception_stops_and_propagates(
    executors_to_close: list[PeriodicExecutor], background_exceptions: object
) -> None:
    """A BaseException ends the thread with the same bookkeeping, and a reopen works."""
    calls = Counter()

    class Fatal(BaseException):
        pass

    def fatal() -> bool:
        calls()
        if calls.calls == 1:
            raise Fatal
        return True

    ex = make(executors_to_close, 30, 0, fatal)
    ex.open()
    assert ex.join(5)
    assert ex.closed
    ex.open()
    assert calls.wait_for(2)


# -- no polling, latency ------------------------------------------------------------------


def test_idle_executor_makes_no_wakeups(executors_to_close: list[PeriodicExecutor]) -> None:
    """Between runs an idle thread stays blocked: zero wake-ups (PyMongo: 2 per second)."""
    target = Counter()
    ex = make(executors_to_close, 60, 0.01, target)
    ex.open()
    assert target.wait_for(1)
    before = ex.statistics().wakeups
    threading.Event().wait(0.3)  # real time must pass to show that nothing happens in it
    assert ex.statistics().wakeups == before
    assert target.calls == 1


def test_close_stops_sleeping_thread_at_once(executors_to_close: list[PeriodicExecutor]) -> None:
    """close() of a thread sleeping a 60 s interval (min_interval 10 s) ends it in well < 1 s."""
    target = Counter()
    ex = make(executors_to_close, 60, 10, target)
    ex.open()
    assert target.wait_for(1)
    t0 = time.perf_counter()
    assert ex.close(wait=True, timeout=5)
    assert time.perf_counter() - t0 < 1.0
    assert ex.statistics().state == "closed"


def test_close_is_lock_free(executors_to_close: list[PeriodicExecutor]) -> None:
    """close() and wake() return while another thread holds the executor's internal lock."""
    target = Counter()
    ex = make(executors_to_close, 60, 0, target)
    ex.open()
    assert target.wait_for(1)
    with ex._lock:
        done = threading.Event()

        def call() -> None:
            ex.wake()
            ex.close()
            done.set()

        threading.Thread(target=call).start()
        assert done.wait(5)
    assert ex.join(5)


def test_close_and_wake_from_signal_handler_and_destructor(
    executors_to_close: list[PeriodicExecutor],
) -> None:
    """wake() from a signal handler and close() from __del__ return while another thread holds
    the executor's lock; the wake is served and the thread exits once the lock is free."""
    target = Counter()
    ex = make(executors_to_close, 60, 0, target)
    ex.open()
    assert target.wait_for(1)
    handled = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        ex.wake()
        handled.set()

    class Dying:
        def __del__(self) -> None:
            ex.close()

    with held_by_another_thread(ex._lock):
        old = signal.signal(signal.SIGUSR1, on_signal)
        try:
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
            wait_until(handled.is_set, 5)  # handlers run on the main thread between bytecodes
        finally:
            signal.signal(signal.SIGUSR1, old)
        assert target.wait_for(2)  # the run needs no lock

        d = Dying()
        d.me = d  # type: ignore[attr-defined]
        del d
        gc.collect()  # a destructor that took the lock would hang here
        assert ex.closed
        assert ex.join(0.05) is False  # the thread decides to exit under the lock: it waits
    assert ex.join(5)
    assert target.calls == 2


def test_close_as_a_plain_weakref_callback(executors_to_close: list[PeriodicExecutor]) -> None:
    """``weakref.ref(owner, executor.close)`` stops the executor as soon as owner is freed."""

    class Client:
        pass

    target = Counter()
    ex = make(executors_to_close, 60, 0, target)
    owner = Client()
    ref = weakref.ref(owner, ex.close)
    ex.open()
    assert target.wait_for(1)
    del owner
    assert ref() is None and ex.closed
    assert ex.join(2)
    assert target.calls == 1


def test_open_twice_keeps_the_same_thread(executors_to_close: list[PeriodicExecutor]) -> None:
    """A second open() of a running executor starts no thread (PyMongo's draft
    test_multiple_open_calls_have_no_effect)."""
    name = "opened-twice"
    target = Counter()
    ex = make(executors_to_close, 60, 0, target, name=name)
    ex.open()
    thread = ex._thread
    assert target.wait_for(1)
    ex.open()
    assert ex._thread is thread
    assert [t for t in threading.enumerate() if t.name == name] == [thread]


def test_close_from_the_target_ends_after_that_run(
    executors_to_close: list[PeriodicExecutor],
) -> None:
    """A target that closes its own executor finishes its run, then the thread exits; it cannot
    wait for itself (join/close(wait=True) return False at once); a reopen runs again (PyMongo
    4.20's test_close_from_own_task_does_not_cancel)."""
    seen: list[tuple[bool, bool]] = []
    ex: PeriodicExecutor

    def target() -> bool:
        seen.append((ex.close(wait=True, timeout=5), ex.join(5)))
        return True

    ex = make(executors_to_close, 0.001, 0, target)
    ex.open()
    assert ex.join(5)
    assert seen == [(False, False)]
    assert ex.statistics().runs == 1 and ex.statistics().state == "closed"
    ex.open()
    assert ex.join(5)
    assert ex.statistics().runs == 2


def test_has_pymongo_executors_signature() -> None:
    """Drop-in: every method of pymongo.periodic_executor.PeriodicExecutor exists here with the
    same positional parameters (names, order, defaults); ours add keyword-only ones only."""
    pymongo_pe = pytest.importorskip("pymongo.periodic_executor")
    theirs_cls = pymongo_pe.PeriodicExecutor
    for method in ("__init__", "open", "close", "join", "wake", "update_interval",
                   "skip_sleep"):
        theirs = inspect.signature(getattr(theirs_cls, method)).parameters
        ours = inspect.signature(getattr(PeriodicExecutor, method)).parameters
        positional = [p for p in ours.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert [(p.name, p.default) for p in positional] == [
            (p.name, p.default) for p in theirs.values()], method
        extra = [p for p in ours.values() if p.name not in theirs]
        assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in extra), method


# -- scheduling with a virtual clock ------------------------------------------------------


def test_virtual_clock_runs_due_runs_start_to_start() -> None:
    """Runs are spaced start to start, each at its due time, with no real sleeping."""
    clock = VirtualClock()
    starts: list[float] = []
    ex = PeriodicExecutor(10, 1, lambda: starts.append(clock.monotonic()) or True, clock=clock)
    ex.open()
    clock.wait_for_sleepers(1)
    clock.advance(9.9)
    assert starts == [0.0]
    clock.advance(30.1)
    assert starts == [0.0, 10.0, 20.0, 30.0, 40.0]
    stats = ex.statistics()
    assert stats.next_run_at == 50.0 and stats.last_run_started == 40.0
    # One wake-up per due run, none in between; no wake() was asked for.
    assert (stats.runs, stats.wakeups, stats.wake_requests, stats.errors) == (5, 4, 0, 0)
    assert ex.close(wait=True, timeout=5)


def test_wake_is_throttled_by_min_interval_from_last_start() -> None:
    """An early wake() is served min_interval after the previous start, not before."""
    clock = VirtualClock()
    starts: list[float] = []
    ex = PeriodicExecutor(10, 2, lambda: starts.append(clock.monotonic()) or True, clock=clock)
    ex.open()
    clock.wait_for_sleepers(1)
    clock.advance(0.5)
    ex.wake()
    wait_until(lambda: ex.statistics().next_run_at == 2.0)
    clock.wait_for_sleepers(1)
    assert starts == [0.0]
    clock.advance(1.5)
    assert starts == [0.0, 2.0]
    # Past min_interval, a wake runs at once.
    clock.advance(5)
    ex.wake()
    wait_until(lambda: len(starts) == 3)
    assert starts[2] == 7.0
    assert ex.close(wait=True, timeout=5)


def test_wake_during_run_is_not_lost() -> None:
    """A wake() that arrives while the target runs is served after it (min_interval later)."""
    clock = VirtualClock()
    in_run = threading.Event()
    release = threading.Event()
    starts: list[float] = []

    def target() -> bool:
        starts.append(clock.monotonic())
        if len(starts) == 1:
            in_run.set()
            assert release.wait(5)
        return True

    ex = PeriodicExecutor(100, 1, target, clock=clock)
    ex.open()
    assert in_run.wait(5)
    ex.wake()
    release.set()
    clock.wait_for_sleepers(1)
    assert ex.statistics().next_run_at == 1.0
    clock.advance(1)
    assert starts == [0.0, 1.0]
    assert ex.close(wait=True, timeout=5)


def test_min_interval_never_delays_close() -> None:
    """close() while a wake is throttled stops the thread at once, in real time."""
    clock = VirtualClock()
    ex = PeriodicExecutor(100, 50, lambda: True, clock=clock)
    ex.open()
    clock.wait_for_sleepers(1)
    ex.wake()
    assert ex.close(wait=True, timeout=5)


def test_overrun_runs_next_at_once_without_burst() -> None:
    """A target that overruns its interval is followed by one run at once, not a burst."""
    clock = VirtualClock()
    starts: list[float] = []

    def slow() -> bool:
        starts.append(clock.monotonic())
        if len(starts) == 1:
            clock._now += 35  # the run "took" 35 s of the clock's time
        return True

    ex = PeriodicExecutor(10, 1, slow, clock=clock)
    ex.open()
    clock.wait_for_sleepers(1)
    assert starts == [0.0, 35.0]
    assert ex.statistics().next_run_at == 45.0
    assert ex.close(wait=True, timeout=5)


# -- restart races --------------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["close", "false", "raise"])
def test_open_right_after_ending_leaves_exactly_one_thread(
    ending: str, caplog: pytest.LogCaptureFixture
) -> None:
    """open() right after close()/False/raise always ends with exactly one running thread."""
    name = f"restart-{ending}"
    stop_next = threading.Event()
    counter = Counter()

    def target() -> bool:
        counter()
        if stop_next.is_set():
            stop_next.clear()
            if ending == "raise":
                raise ValueError("once")
            if ending == "false":
                return False
        return True

    ex = PeriodicExecutor(0.002, 0, target, name=name,
                          on_error="stop" if ending == "raise" else "continue")
    with caplog.at_level(logging.CRITICAL + 1):
        for _ in range(50):
            ex.open()
            if ending == "close":
                ex.close()
            else:
                stop_next.set()
                wait_until(lambda: not stop_next.is_set() or ex.closed, timeout=5)
            ex.open()
            n = counter.calls
            assert counter.wait_for(n + 2), "reopened executor does not run"
            alive = [t for t in threading.enumerate() if t.name == name]
            assert len(alive) == 1, alive
        assert ex.close(wait=True, timeout=5)
    assert not [t for t in threading.enumerate() if t.name == name]


def test_concurrent_open_close_storm_ends_consistent() -> None:
    """Threads hammering open/close/wake leave at most one thread, and none after close."""
    name = "storm"
    ex = PeriodicExecutor(0.001, 0, lambda: True, name=name)
    stop = threading.Event()

    def hammer(i: int) -> None:
        while not stop.is_set():
            (ex.open, ex.close, ex.wake)[i % 3]()

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    threading.Event().wait(0.3)
    stop.set()
    for t in threads:
        t.join()
    assert len([t for t in threading.enumerate() if t.name == name]) <= 1
    ex.open()
    assert ex.statistics().thread_alive or wait_until(lambda: ex.statistics().thread_alive) is None
    assert ex.close(wait=True, timeout=5)
    assert not [t for t in threading.enumerate() if t.name == name]


# -- context, owner weakrefs, GC ----------------------------------------------------------


def test_target_runs_in_fresh_context(executors_to_close: list[PeriodicExecutor]) -> None:
    """Context variables set by whoever opened the executor are not seen by the target."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    def target() -> bool:
        seen.append(var.get())
        var.set("leaked")
        return len(seen) < 2

    var.set("caller")
    ex = make(executors_to_close, 0.001, 0, target)
    ex.open()
    assert ex.join(5)
    assert seen == ["unset", "unset"]


class Owner:
    """The monitor pattern: owner -> executor strong; the thread reaches the owner weakly."""

    def __init__(self, counter: Counter, name: str) -> None:
        self.counter = counter
        self.executor = PeriodicExecutor.for_owner(self, Owner.check, 60, 0, name=name)
        self.executor.open()

    def check(self) -> bool:
        self.counter()
        return True


def test_owner_collected_stops_thread() -> None:
    """When the owner is collected, the executor's thread ends promptly (no owner kept alive)."""
    counter = Counter()
    owner = Owner(counter, "owned")
    assert counter.wait_for(1)
    ex = owner.executor
    del owner
    gc.collect()
    assert ex.join(2)
    assert not [t for t in threading.enumerate() if t.name == "owned"]
    # Owner and thread gone: nothing keeps the executor, and it leaves the registry.
    assert ex in registry.live_executors()
    ref = weakref.ref(ex)
    del ex
    gc.collect()
    assert ref() is None
    assert not [e for e in registry.live_executors() if e.name == "owned"]


def test_gc_of_owner_in_cycle_while_lock_held_does_not_deadlock() -> None:
    """GC runs close() from a weakref callback while another thread holds the executor's lock.

    PyMongo's `_test_no_gc_deadlock` idea: a destructor path that took the lock would hang here.
    """
    counter = Counter()
    owner = Owner(counter, "cyclic")
    owner.cycle = owner  # type: ignore[attr-defined]
    assert counter.wait_for(1)
    ex = owner.executor
    with held_by_another_thread(ex._lock):
        del owner
        # A collection that deadlocks never returns; one that does not may still take seconds
        # in a long-lived test worker on a loaded machine (a 2 s bound failed once so): it runs
        # on a thread of its own, and the test waits far longer than any collection takes.
        collector = threading.Thread(target=lambda: (gc.collect(), gc.collect()), daemon=True)
        collector.start()
        collector.join(60)
        assert not collector.is_alive(), "gc.collect() deadlocked on the executor's lock"
        assert ex.closed
    assert ex.join(5)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "exc", "word"),
    [
        ((-1, 0), ValueError, "interval"),
        ((math.nan, 0), ValueError, "interval"),
        ((math.inf, 0), ValueError, "interval"),
        ((1, -0.5), ValueError, "min_interval"),
        ((1, math.nan), ValueError, "min_interval"),
        ((1, 2), ValueError, "min_interval"),
        (("1", 0), TypeError, "interval"),
        ((True, 0), TypeError, "interval"),
        ((1, None), TypeError, "min_interval"),
    ],
)
def test_bad_intervals_are_rejected(args: tuple[object, object], exc: type[Exception],
                                    word: str) -> None:
    """Negative, NaN, infinite, non-numeric intervals, min_interval > interval: clear errors."""
    with pytest.raises(exc, match=word):
        PeriodicExecutor(*args, lambda: True)  # type: ignore[arg-type]


def test_bad_target_and_options_are_rejected() -> None:
    """A non-callable target, a bad name or option names the argument; no thread is started."""
    before = threading.active_count()
    with pytest.raises(TypeError, match="target"):
        PeriodicExecutor(1, 0, "not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        PeriodicExecutor(1, 0, lambda: True, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_error"):
        PeriodicExecutor(1, 0, lambda: True, on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fork_policy"):
        PeriodicExecutor(1, 0, lambda: True, fork_policy="x")  # type: ignore[arg-type]
    ex = PeriodicExecutor(1, 0.5, lambda: True)
    with pytest.raises(ValueError, match="new_interval"):
        ex.update_interval(-1)
    with pytest.raises(ValueError, match="new_interval"):
        ex.update_interval(0.1)
    with pytest.raises(ValueError, match="timeout"):
        ex.join(-1)
    # for_owner wraps the target in a callable: it checks the target itself, and the owner.
    with pytest.raises(TypeError, match="target"):
        PeriodicExecutor.for_owner(Counter(), "not callable", 1, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="owner"):
        PeriodicExecutor.for_owner(5, lambda owner: True, 1, 0)
    with pytest.raises(ValueError, match="min_interval"):
        PeriodicExecutor.for_owner(Counter(), lambda owner: True, 1, 2)
    assert threading.active_count() == before


def test_repr_and_statistics_show_state(executors_to_close: list[PeriodicExecutor]) -> None:
    """repr and statistics() show the state, counters and schedule."""
    ex = make(executors_to_close, 60, 1, Counter(), name="shown")
    assert repr(ex).startswith("<PeriodicExecutor 'shown' idle")
    ex.open()
    wait_until(lambda: ex.statistics().runs == 1 and ex.statistics().next_run_at is not None)
    text = repr(ex)
    assert "'shown' open" in text and "runs=1" in text and "next_run_in=" in text
    stats = ex.statistics()
    assert stats.state == "open" and stats.thread_alive and stats.runs == 1
    with pytest.raises(AttributeError):
        stats.runs = 5  # type: ignore[misc]
    ex.close(wait=True)
    assert "closed" in repr(ex)


# -- freezegun ------------------------------------------------------------------------------


def test_freezegun_does_not_stall_or_spin(executors_to_close: list[PeriodicExecutor]) -> None:
    """Under freezegun's frozen time, executors keep real time: they run, wake, stop; no spin.

    The default clock reads `time.monotonic` through a reference freezegun does not rewrite, so
    background work does not hang while a test freezes time (RUBY-1687), and a frozen clock can
    never make the wait loop spin.
    """
    import freezegun.config

    target = Counter()
    ex = make(executors_to_close, 0.05, 0, target)
    # Freeze everywhere: freezegun otherwise returns real time to callers near `threading`.
    saved = freezegun.config.settings.default_ignore_list
    freezegun.config.settings.default_ignore_list = []
    try:
        frozen_ctx = freezegun.freeze_time("2020-01-01")
    finally:
        freezegun.config.settings.default_ignore_list = saved
    with frozen_ctx:
        frozen = time.monotonic()
        ex.open()
        assert target.wait_for(4, timeout=5)
        assert time.monotonic() == frozen  # time really is frozen for the test
        stats = ex.statistics()
        assert stats.wakeups <= stats.runs + 2  # one wake-up per run: no spinning
        ex.update_interval(60)
        ex.wake()
        n = target.calls
        assert target.wait_for(n + 1)
        assert ex.close(wait=True, timeout=2)


def test_freezegun_moving_frozen_time_neither_bursts_nor_stalls(
    executors_to_close: list[PeriodicExecutor],
) -> None:
    """With freezegun's default settings, moving frozen time (hours ahead, then a day back)
    changes nothing for an executor: no burst of "missed" runs, no stall, no crash. Its runs
    never pause under frozen time, so there is nothing to resume: the schedule stays on the
    real clock, and wake() and close() act at once."""
    import datetime

    import freezegun

    from executors._clock import SYSTEM_CLOCK

    target = Counter()
    ex = make(executors_to_close, 60, 0, target)
    with freezegun.freeze_time("2020-01-01") as frozen:
        frozen_at = time.monotonic()
        ex.open()
        assert target.wait_for(1)
        frozen.tick(datetime.timedelta(hours=3))
        assert time.monotonic() == frozen_at + 3 * 3600  # the test's time did move
        ex.update_interval(60)  # a nudge: the thread re-reads its deadline now
        frozen.move_to("2019-12-31")
        ex.update_interval(60)  # another nudge, after time went backwards
        threading.Event().wait(0.2)  # real time passes, and no run may come of the moves
        stats = ex.statistics()
        assert target.calls == 1 and stats.runs == 1 and stats.errors == 0
        assert stats.next_run_at is not None
        assert 50 < stats.next_run_at - SYSTEM_CLOCK.monotonic() <= 60  # still real time
        ex.wake()
        assert target.wait_for(2)
        assert ex.close(wait=True, timeout=2)
    assert target.calls == 2


# -- the state machine ----------------------------------------------------------------------

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402


class ExecutorMachine(RuleBasedStateMachine):
    """open/close/wake/skip_sleep/target results/time, in any order; checked after every step.

    Invariants: at most one thread per executor; a closed executor's thread exits; an open one
    has exactly one thread, asleep on the clock between steps; runs never go backwards; an open
    executor with a healthy target runs again within `interval` of clock time.
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = VirtualClock()
        self.mode = "ok"
        self.runs_seen = 0
        self.name = f"machine-{id(self)}"
        self.ex = PeriodicExecutor(10, 1, self.target, name=self.name, clock=self.clock)

    def target(self) -> bool:
        if self.mode == "raise":
            raise ValueError("machine")
        return self.mode == "ok"

    def threads(self) -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == self.name]

    def settle(self) -> None:
        def settled() -> bool:
            alive = self.threads()
            if self.ex.closed:
                return not alive
            return len(alive) == 1 and self.clock.sleepers == 1 and not self.ex._running
        wait_until(settled, timeout=10, message=f"never settled: {self.ex!r}")

    @rule()
    def open(self) -> None:
        self.ex.open()
        self.settle()

    @rule()
    def close(self) -> None:
        self.ex.close()
        self.settle()

    @rule()
    def wake(self) -> None:
        self.ex.wake()
        self.settle()

    @rule()
    def skip_sleep(self) -> None:
        self.ex.skip_sleep()
        self.settle()

    @rule(mode=st.sampled_from(["ok", "ok", "false", "raise"]))
    def set_mode(self, mode: str) -> None:
        self.mode = mode

    @rule(seconds=st.sampled_from([0.5, 1, 3, 10, 25]))
    def advance(self, seconds: float) -> None:
        runs = self.ex.statistics().runs
        was_open = not self.ex.closed
        self.clock.advance(seconds)
        self.settle()
        if was_open and seconds >= 10 and self.mode == "ok":
            assert self.ex.statistics().runs > runs

    @invariant()
    def one_thread_at_most(self) -> None:
        assert len(self.threads()) <= 1

    @invariant()
    def runs_only_grow(self) -> None:
        runs = self.ex.statistics().runs
        assert runs >= self.runs_seen
        self.runs_seen = runs

    def teardown(self) -> None:
        self.ex.close()
        assert self.ex.join(5)


ExecutorMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25,
                                             deadline=None)
test_executor_state_machine = ExecutorMachine.TestCase
