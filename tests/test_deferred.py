"""DeferredQueue and Reaper: lock-free enqueue, batching, retries, track, flush, exit, fork."""

from __future__ import annotations

import gc
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers.forking import in_forked_child
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from executors import ClosedError, DeferredQueue, Reaper
from executors.testing import VirtualClock, wait_until

ROOT = Path(__file__).resolve().parent.parent


class Owner:
    def __init__(self) -> None:
        self.me: Owner | None = None


class Recorder:
    """A handler that records its batches and can be told to fail or block."""

    def __init__(self) -> None:
        self.batches: list[tuple[object, list[object]]] = []
        self.fail = 0  # fail this many calls
        self.threads: set[str] = set()
        self.called = threading.Event()
        self.gate: threading.Event | None = None

    def __call__(self, key: object, items: list[object]) -> None:
        self.threads.add(threading.current_thread().name)
        self.called.set()
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail:
            self.fail -= 1
            raise OSError("server down")
        self.batches.append((key, list(items)))

    def items(self) -> list[object]:
        return [i for _, batch in self.batches for i in batch]


# -- DeferredQueue --------------------------------------------------------------------------


def test_queue_fifo_bound_and_counted_drops() -> None:
    """put is FIFO; past max_pending it returns False and counts the drop; drain empties."""
    q: DeferredQueue[int] = DeferredQueue(max_pending=3)
    assert [q.put(i) for i in range(5)] == [True, True, True, False, False]
    assert len(q) == 3
    assert q.drain(max_items=2) == [0, 1]
    assert q.drain() == [2]
    assert q.drain() == []
    s = q.statistics()
    assert (s.pending, s.accepted, s.drained, s.dropped, s.max_pending) == (0, 3, 3, 2, 3)
    assert repr(q) == "<DeferredQueue pending=0/3 dropped=2>"


def test_queue_closed_refuses_and_counts() -> None:
    """After close() put returns False and counts a drop; pending items can still be drained."""
    q: DeferredQueue[str] = DeferredQueue()
    q.put("a")
    q.close()
    assert q.closed and q.put("b") is False
    assert q.drain() == ["a"]
    assert q.statistics().dropped == 1
    assert "closed" in repr(q)


def test_queue_bad_input() -> None:
    """max_pending and max_items must be ints >= 1 (or None)."""
    with pytest.raises(TypeError, match="max_pending"):
        DeferredQueue(max_pending=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_pending"):
        DeferredQueue(max_pending=True)
    with pytest.raises(ValueError, match="max_pending"):
        DeferredQueue(max_pending=0)
    with pytest.raises(ValueError, match="max_items"):
        DeferredQueue[int]().drain(max_items=0)


def test_queue_counters_exact_under_eight_threads_and_concurrent_drains() -> None:
    """8 threads put 20,000 items each into a bounded queue while 2 threads drain: every
    accepted item is drained exactly once, and accepted + dropped equals what was put (the
    counters lose no increment)."""
    q: DeferredQueue[tuple[int, int]] = DeferredQueue(max_pending=5000)
    per_thread, putters = 20_000, 8
    done = threading.Event()
    drained: list[list[tuple[int, int]]] = [[], []]
    accepted = [0] * putters

    def put(n: int) -> None:
        ok = 0
        for i in range(per_thread):
            ok += q.put((n, i))
        accepted[n] = ok

    def drain(slot: int) -> None:
        while not done.is_set():
            drained[slot].extend(q.drain(max_items=100))
        drained[slot].extend(q.drain())

    drainers = [threading.Thread(target=drain, args=(i,)) for i in range(2)]
    threads = [threading.Thread(target=put, args=(n,)) for n in range(putters)]
    for t in drainers + threads:
        t.start()
    for t in threads:
        t.join(30)
    done.set()
    for t in drainers:
        t.join(30)
    got = drained[0] + drained[1]
    assert len(got) == len(set(got)) == sum(accepted)
    s = q.statistics()
    assert s.accepted == sum(accepted) == s.drained
    assert s.accepted + s.dropped == per_thread * putters
    # Per putter, FIFO order survives: each drainer sees a thread's items in order.
    for part in drained:
        for n in range(putters):
            seq = [i for m, i in part if m == n]
            assert seq == sorted(seq)


def test_queue_put_from_a_signal_handler_and_a_destructor() -> None:
    """put works from a signal handler and from __del__, while another thread holds the
    queue's drain lock (put never touches it)."""
    q: DeferredQueue[str] = DeferredQueue()
    q._drain_lock.acquire()
    try:
        class Dying:
            def __del__(self) -> None:
                q.put("del")

        old = signal.signal(signal.SIGUSR1, lambda *a: q.put("signal"))
        try:
            os.kill(os.getpid(), signal.SIGUSR1)
            wait_until(lambda: "signal" in list(q._items), 5)
        finally:
            signal.signal(signal.SIGUSR1, old)
        d = Dying()
        d.me = d  # type: ignore[attr-defined]
        del d
        gc.collect()
        assert list(q._items) == ["signal", "del"]
    finally:
        q._drain_lock.release()


class QueueModel(RuleBasedStateMachine):
    """DeferredQueue against a list model: put, bounded drop, drain, close."""

    def __init__(self) -> None:
        super().__init__()
        self.q: DeferredQueue[int] = DeferredQueue(max_pending=4)
        self.model: list[int] = []
        self.dropped = 0
        self.accepted = 0
        self.closed = False

    @rule(item=st.integers())
    def put(self, item: int) -> None:
        ok = self.q.put(item)
        expected = not self.closed and len(self.model) < 4
        assert ok == expected
        if ok:
            self.model.append(item)
            self.accepted += 1
        else:
            self.dropped += 1

    @rule(n=st.one_of(st.none(), st.integers(1, 5)))
    def drain(self, n: int | None) -> None:
        got = self.q.drain(n)
        take = len(self.model) if n is None else min(n, len(self.model))
        assert got == self.model[:take]
        del self.model[:take]

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        self.q.close()
        self.closed = True

    @invariant()
    def counts(self) -> None:
        s = self.q.statistics()
        assert (s.pending, s.dropped, s.accepted) == (len(self.model), self.dropped,
                                                     self.accepted)


TestQueueModel = QueueModel.TestCase
TestQueueModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


# -- Reaper: batching and timing ------------------------------------------------------------


def test_reaper_groups_by_key_splits_by_max_batch_on_its_own_thread() -> None:
    """Items are grouped by batch_key, split by max_batch, and handled on the reaper's thread,
    one call per batch, never concurrently."""
    rec = Recorder()
    clock = VirtualClock()
    reaper = Reaper(rec, batch_key=lambda s: s[0], max_batch=2, wake_threshold=None,
                    interval=10, clock=clock, name="grouper")
    try:
        clock.wait_for_sleepers(1)
        for item in ["a1", "b1", "a2", "a3"]:
            reaper.put(item)
        clock.advance(10)
        assert rec.batches == [("a", ["a1", "a2"]), ("a", ["a3"]), ("b", ["b1"])]
        assert rec.threads == {"grouper"}
        s = reaper.statistics()
        assert (s.processed, s.batches, s.pending, s.runs) == (4, 3, 0, 2)
    finally:
        reaper.close()


def test_reaper_waits_for_the_interval_below_the_threshold_and_wakes_at_it() -> None:
    """Below wake_threshold items wait for the scheduled run; reaching it wakes the drainer
    at once, with no time passing on the clock."""
    rec = Recorder()
    clock = VirtualClock()
    reaper = Reaper(rec, wake_threshold=3, interval=60, clock=clock)
    try:
        clock.wait_for_sleepers(1)
        reaper.put(1)
        reaper.put(2)
        clock.advance(59)
        assert rec.items() == []
        reaper.put(3)
        wait_until(lambda: rec.items() == [1, 2, 3], 5)
        assert clock.monotonic() == 59
        clock.wait_for_sleepers(1)
        reaper.put(4)
        clock.advance(1)  # 60: no run is due, the woken run at 59 rescheduled the next to 119
        assert rec.items() == [1, 2, 3]
        clock.advance(59)
        assert rec.items() == [1, 2, 3, 4]
    finally:
        reaper.close()


def test_reaper_default_threshold_handles_a_lone_item_at_once() -> None:
    """With the defaults a put wakes the idle drainer at once (no interval to wait for)."""
    rec = Recorder()
    reaper = Reaper(rec, interval=3600)
    try:
        assert rec.called.wait(0) is False
        t0 = time.monotonic()
        reaper.put("x")
        wait_until(lambda: rec.items() == ["x"], 10)
        assert time.monotonic() - t0 < 10  # not the 3600 s schedule
    finally:
        reaper.close()


# -- Reaper: failures -----------------------------------------------------------------------


def test_failed_batch_is_retried_with_doubling_backoff_then_succeeds() -> None:
    """A batch that fails twice is retried after 1 s, then 2 s (on the virtual clock), then
    handled; statistics count the retries and errors."""
    rec = Recorder()
    rec.fail = 2
    clock = VirtualClock()
    reaper = Reaper(rec, retry_backoff=1, max_backoff=10, clock=clock, interval=60)
    try:
        clock.wait_for_sleepers(1)
        reaper.put("k")
        wait_until(lambda: reaper.statistics().errors == 1, 5)
        clock.wait_for_sleepers(1)
        clock.advance(0.999)
        assert reaper.statistics().errors == 1
        clock.advance(0.001)
        assert reaper.statistics().errors == 2
        clock.advance(1.999)
        assert rec.items() == []
        clock.advance(0.001)
        assert rec.items() == ["k"]
        s = reaper.statistics()
        assert (s.retried, s.errors, s.failed, s.processed, s.pending) == (2, 2, 0, 1, 0)
        assert s.last_error == "OSError: server down"
    finally:
        reaper.close()


def test_batch_given_up_after_the_limit_is_logged_counted_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Past max_retries a batch is given up: counted as failed, logged at ERROR with the
    error, and passed to on_give_up. Never silently dropped."""
    rec = Recorder()
    rec.fail = 100
    given_up: list[tuple[object, list[object], str]] = []
    reaper = Reaper(rec, max_retries=2, retry_backoff=0.001, wake_threshold=None,
                    on_give_up=lambda k, items, e: given_up.append((k, items, str(e))))
    try:
        with caplog.at_level(logging.ERROR, logger="executors.deferred"):
            reaper.put("a")
            reaper.put("b")
            assert reaper.flush(5)  # True: nothing pending (given up counts as done)
        assert given_up == [(None, ["a", "b"], "server down")]
        s = reaper.statistics()
        assert (s.retried, s.errors, s.failed, s.pending) == (2, 3, 2, 0)
        assert any("gave up" in r.message and "OSError" in r.message for r in caplog.records)
        assert "failed=2" in repr(reaper)
    finally:
        reaper.close()


def test_not_retryable_errors_are_given_up_at_once() -> None:
    """retryable(exc) false: no retry, the items are failed at once."""
    rec = Recorder()
    rec.fail = 1
    reaper = Reaper(rec, retryable=lambda e: not isinstance(e, OSError), wake_threshold=None)
    try:
        reaper.put(1)
        assert reaper.flush(5)
        s = reaper.statistics()
        assert (s.failed, s.retried) == (1, 0)
    finally:
        reaper.close()


def test_flush_retries_until_its_deadline_and_reports_what_is_left() -> None:
    """flush(timeout) on a persistently failing handler returns False by its deadline, with
    the items still pending for retry (not lost)."""
    rec = Recorder()
    rec.fail = 10_000
    reaper = Reaper(rec, wake_threshold=None, max_retries=10_000, retry_backoff=0.01,
                    max_backoff=0.02)
    try:
        reaper.put("x")
        t0 = time.monotonic()
        assert reaper.flush(0.2) is False
        assert 0.15 < time.monotonic() - t0 < 10  # generous: shared, noisy machines
        s = reaper.statistics()
        assert s.pending == s.retrying == 1 and s.retried >= 3
        rec.fail = 0
        assert reaper.flush(5)
        assert rec.items() == ["x"]
    finally:
        reaper.close()


# -- Reaper: track, flush, close ------------------------------------------------------------


def test_track_enqueues_when_the_owner_is_collected_even_in_a_cycle() -> None:
    """track() fires on collection (refcount or cyclic GC); cancel() disarms exactly once."""
    rec = Recorder()
    reaper = Reaper(rec, wake_threshold=None)
    try:
        a, b, c = Owner(), Owner(), Owner()
        b.me = b
        reaper.track(a, "a")
        reaper.track(b, "b")
        cancel = reaper.track(c, "c")
        assert cancel() is True and cancel() is False
        del a, b, c
        gc.collect()
        assert reaper.flush(5)
        assert sorted(rec.items()) == ["a", "b"]  # type: ignore[type-var]
        with pytest.raises(TypeError, match="owner"):
            reaper.track(1, "x")
    finally:
        reaper.close()


def test_gc_callbacks_do_not_block_while_the_reaper_lock_is_held() -> None:
    """Owners collected while another thread holds the reaper's lock and its handler is
    blocked: gc.collect() returns at once; the items are handled once the handler is free."""
    rec = Recorder()
    rec.gate = threading.Event()
    reaper = Reaper(rec, min_interval=0)
    try:
        reaper.put("first")
        assert rec.called.wait(5)  # the drainer now holds the lock, blocked in the handler
        for i in range(50):
            o = Owner()
            o.me = o
            reaper.track(o, i)
            del o
        # Collect on a helper thread: a deadlock shows as a thread that never finishes, and
        # the test fails instead of hanging.
        collector = threading.Thread(target=gc.collect)
        collector.start()
        collector.join(20)
        assert not collector.is_alive()
        assert reaper.statistics().pending == 50
        rec.gate.set()
        wait_until(lambda: len(rec.items()) == 51, 5)
    finally:
        rec.gate.set()
        reaper.close()


def test_flush_from_the_handler_raises_and_close_is_idempotent() -> None:
    """flush() inside the handler is refused (RuntimeError, recorded as a failure); close()
    flushes, stops the thread, refuses track (ClosedError) and counts later puts as dropped."""
    seen: list[str] = []

    def handler(key: None, items: list[str]) -> None:
        try:
            reaper.flush(1)
        except RuntimeError as exc:
            seen.append(str(exc))

    reaper = Reaper(handler, wake_threshold=None)
    reaper.put("x")
    assert reaper.close(timeout=5)
    assert seen and "inside its own handler" in seen[0]
    assert reaper.close() and reaper.closed
    assert reaper.statistics().state == "closed"
    assert not reaper._executor.statistics().thread_alive
    with pytest.raises(ClosedError):
        reaper.track(Owner(), "y")
    assert reaper.put("z") is False
    assert reaper.statistics().dropped == 1
    assert repr(reaper).startswith("<Reaper 'executors-reaper' closed")


def test_owner_collected_after_close_is_counted_as_dropped() -> None:
    """A tracked owner that dies after close() does not vanish: its item counts as dropped."""
    reaper = Reaper(Recorder())
    o = Owner()
    reaper.track(o, "late")
    reaper.close()
    del o
    gc.collect()
    assert reaper.statistics().dropped == 1


def test_reaper_bad_input() -> None:
    """Bad arguments raise TypeError/ValueError naming them."""
    rec = Recorder()
    cases: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"batch_key": 3}, TypeError, "batch_key"),
        ({"interval": 0}, ValueError, "interval"),
        ({"interval": float("nan")}, ValueError, "interval"),
        ({"min_interval": -1}, ValueError, "min_interval"),
        ({"wake_threshold": 0}, ValueError, "wake_threshold"),
        ({"max_batch": "2"}, TypeError, "max_batch"),
        ({"max_retries": -1}, ValueError, "max_retries"),
        ({"retry_backoff": float("inf")}, ValueError, "retry_backoff"),
        ({"retryable": 1}, TypeError, "retryable"),
        ({"on_give_up": "x"}, TypeError, "on_give_up"),
        ({"max_pending": 0}, ValueError, "max_pending"),
    ]
    for kwargs, exc, word in cases:
        with pytest.raises(exc, match=word):
            Reaper(rec, **kwargs)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="handler"):
        Reaper(None)  # type: ignore[call-overload]
    reaper = Reaper(rec)
    try:
        with pytest.raises(ValueError, match="timeout"):
            reaper.flush(-1)
    finally:
        reaper.close()


# -- exit and fork --------------------------------------------------------------------------

EXIT_SCRIPT = """
import atexit, sys, time
# Registered before executors is imported: atexit runs it last, after every exit step of ours.
T = [0.0]
atexit.register(lambda: print(f"exit-wait {time.monotonic() - T[0]:.3f}", flush=True))
from executors import Reaper, registry

registry.set_exit_timeout(float(sys.argv[1]))
stuck = sys.argv[2] == "stuck"

def handler(key, items):
    if stuck:
        time.sleep(60)
    print("handled", key, sorted(items), flush=True)

reaper = Reaper(handler, batch_key=lambda i: i % 2, wake_threshold=None, interval=3600)
while reaper.statistics().runs < 1:  # the run at open: after it, only the exit can drain
    time.sleep(0.001)
for i in range(6):
    reaper.put(i)
T[0] = time.monotonic()
print("exiting", T[0], flush=True)
"""


def _exit_run(timeout: float, mode: str) -> tuple[list[str], float]:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(EXIT_SCRIPT), str(timeout),
                           mode], cwd=ROOT, capture_output=True, text=True, timeout=30,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    ended = time.monotonic()
    assert proc.returncode == 0, proc.stderr[-3000:]
    if mode == "ok":
        assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    exiting = float(next(line for line in lines if line.startswith("exiting")).split()[1])
    return lines, ended - exiting


def test_pending_items_are_flushed_at_interpreter_exit() -> None:
    """Items still queued when the script ends are handled before the process exits, with no
    close() or flush() (only the exit flush could: no wake-ups, a one-hour schedule)."""
    lines, _ = _exit_run(1.0, "ok")
    assert "handled 0 [0, 2, 4]" in lines and "handled 1 [1, 3, 5]" in lines


def test_exit_flush_keeps_to_the_global_deadline() -> None:
    """A handler stuck at exit holds the process up for about the registry's exit timeout,
    not longer: the early atexit flush and the registry's shutdown that follows (its hook,
    then close()) share that one deadline, rather than waiting one timeout each."""
    lines, took = _exit_run(1.0, "stuck")
    assert not any(line.startswith("handled") for line in lines)
    waited = float(next(line for line in lines if line.startswith("exit-wait")).split()[1])
    assert 0.9 <= waited < 1.6, waited  # one deadline; it was 2.0 when each step had its own
    assert took < 5  # far from the handler's 60 s, interpreter teardown included


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_starts_empty_with_a_working_reaper() -> None:
    """In a forked child the reaper has nothing pending (the parent's items stay the
    parent's), a running thread of its own, and handles what the child puts."""
    rec = Recorder()
    reaper = Reaper(rec, wake_threshold=None, interval=3600)
    try:
        wait_until(lambda: reaper.statistics().runs == 1, 5)  # the run at open is done
        for i in range(3):
            reaper.put(i)

        def in_child() -> list[object]:
            pending = reaper.statistics().pending
            alive = reaper._executor.statistics().thread_alive
            reaper.put("child")
            flushed = reaper.flush(5)
            return [pending, alive, flushed, rec.items()]

        assert in_forked_child(in_child) == [0, True, True, ["child"]]
        assert reaper.statistics().pending == 3
        assert reaper.flush(5) and rec.items() == [0, 1, 2]
    finally:
        reaper.close()


def test_close_flushes_pending_items_then_stops() -> None:
    """close() alone hands every pending item to the handler (on a one-hour schedule with no
    wake-ups, nothing else would), then stops the thread; statistics and repr show it."""
    rec = Recorder()
    reaper = Reaper(rec, batch_key=lambda i: int(i) % 2,  # type: ignore[call-overload]
                    wake_threshold=None, interval=3600, name="closer")
    wait_until(lambda: reaper.statistics().runs == 1, 5)  # the run at open is done
    for i in range(5):
        reaper.put(i)
    assert reaper.statistics().pending == 5
    assert "'closer' open pending=5" in repr(reaper)
    assert reaper.close(timeout=5)
    assert sorted(rec.batches, key=repr) == [(0, [0, 2, 4]), (1, [1, 3])]
    s = reaper.statistics()
    assert (s.state, s.pending, s.processed, s.batches, s.failed) == ("closed", 0, 5, 2, 0)
    assert not [t for t in threading.enumerate() if t.name == "closer"]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_the_handler_holds_the_reaper_lock() -> None:
    """Fork while the drainer is inside the handler (holding the reaper's lock) with more items
    queued: the child's reaper has a fresh lock, nothing pending, and flushes its own items;
    the parent's batch and queue are untouched and handled once its handler returns."""
    parent = os.getpid()
    gate = threading.Event()
    in_handler = threading.Event()
    handled: list[object] = []

    def handler(key: None, items: list[object]) -> None:
        if os.getpid() == parent and not in_handler.is_set():
            in_handler.set()
            gate.wait(10)
        handled.extend(items)

    reaper = Reaper(handler, interval=3600)
    try:
        reaper.put("held")
        assert in_handler.wait(5)
        reaper.put("queued")

        def in_child() -> list[object]:
            pending = reaper.statistics().pending
            fresh = reaper._lock.acquire(blocking=False)  # not the parent's held lock
            if fresh:
                reaper._lock.release()
            reaper.put("child")
            flushed = reaper.flush(5)
            return [pending, fresh, flushed, handled]

        assert in_forked_child(in_child) == [0, True, True, ["child"]]
        assert handled == [] and reaper.pending == 1  # "held" is in the handler, "queued" waits
        gate.set()
        assert reaper.flush(5)
        assert sorted(handled) == ["held", "queued"]  # type: ignore[type-var]
    finally:
        gate.set()
        reaper.close()
