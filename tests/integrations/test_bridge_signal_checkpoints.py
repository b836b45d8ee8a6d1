"""Ctrl-C at every checkpoint of a shared primitive's operation, one at a time.

A signal handler's exception can land only at an eval-breaker checkpoint: the first instruction
of a Python function, or the check after a call into C returns (design.md, "Ctrl-C"). A
profile function sees both (its "call" and "c_return" events), and raising there is what a
handler does at that checkpoint. Each test runs one operation of the main thread again and
again, raising KeyboardInterrupt at its first checkpoint, then its second, and so on until a run
passes them all, with and without an exception already held from inside a section (a signal
that came while the mutex was held). After each run:

- an operation that raised says whether it took effect: a send or release that completed
  carries the completed note, and one without it changed nothing (so a caller may retry it);
- a get or acquire that raised took nothing;
- no exception is left held for a later operation to raise (one Ctrl-C comes out, not two).

The storm of test_bridge_signals.py found a run where a second signal, at the first instruction
of the clause that added the note, left a completed release without it: the caller released
again and the semaphore ended with a permit too many.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType, SimpleNamespace
from typing import Any

import pytest

from executors.aio import Get, GetResult, Send
from executors.errors import WouldBlock
from integrations.bridge import (
    Queue,
    SharedBoundedSemaphore,
    SharedChannel,
    SharedLock,
    SharedSemaphore,
    SyncQueueFull,
    _shared_waiter,
    select_blocking,
)
from integrations.bridge._shared_waiter import COMPLETED_NOTE

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers' exceptions are held in the main thread only")

_OURS = os.path.dirname(_shared_waiter.__file__)  # integrations/bridge


class _Storm:
    """Raises KeyboardInterrupt at chosen checkpoints of the library's own frames.

    Two hooks, because a hook that raises is removed by CPython: the profile function sees
    both kinds of checkpoint ("call": a new frame's first instruction; "c_return": the check
    after a C call, in the frame that made it), the trace function sees the first kind. The
    first exception comes from `first`'s hook at its `at[0]`-th checkpoint, the second (if
    `at` has two) from the other hook at its `at[1]`-th checkpoint after the first fired.
    """

    def __init__(self, first: str, at: tuple[int, ...]) -> None:
        self.first = first
        self.at = at
        self.fired = 0
        self.seen = [0, 0]  # checkpoints met by the first hook, then by the second after it

    def _meet(self, hook: str, frame: FrameType, event: str) -> None:
        if not frame.f_code.co_filename.startswith(_OURS):
            return
        if event not in (("call", "c_return") if hook == "profile" else ("call",)):
            return
        turn = 0 if hook == self.first else 1
        if turn != self.fired or turn >= len(self.at):
            return
        self.seen[turn] += 1
        if self.seen[turn] == self.at[turn]:
            self.fired += 1
            raise KeyboardInterrupt(f"{hook} checkpoint {self.at[turn]}")

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        self._meet("profile", frame, event)

    def _trace(self, frame: FrameType, event: str, arg: object) -> None:
        self._meet("trace", frame, event)  # returns None: no line events in the frame

    @contextmanager
    def running(self) -> Iterator[_Storm]:
        sys.setprofile(self._profile)  # type: ignore[arg-type]
        sys.settrace(self._trace)  # type: ignore[arg-type]
        try:
            yield self
        finally:
            sys.settrace(None)
            sys.setprofile(None)

    @property
    def passed_all(self) -> bool:
        """Whether the run ended before the last chosen checkpoint was reached."""
        return self.fired < len(self.at)


def _completed(exc: BaseException) -> bool:
    return COMPLETED_NOTE in getattr(exc, "__notes__", ())


class Scenario:
    """One operation of the main thread: `setup` makes the primitive, `operation` acts on it
    (its own errors, such as TimeoutError, are part of the scenario and caught there),
    `check(state, exc)` asserts what must hold after it. A `partner`, if given, runs in a
    thread during the operation (the other side of a hand-off) until `done` is set."""

    def __init__(self, setup: Callable[[], Any], operation: Callable[[Any], object],
                 check: Callable[[Any, BaseException | None], None],
                 partner: Callable[[Any, threading.Event], object] | None = None) -> None:
        self.setup = setup
        self.operation = operation
        self.check = check
        self.partner = partner


def _run_once(scenario: Scenario, storm: _Storm) -> None:
    state = scenario.setup()
    done = threading.Event()
    partner = None
    if scenario.partner is not None:
        partner = threading.Thread(target=scenario.partner, args=(state, done), daemon=True)
        partner.start()
    exc: BaseException | None = None
    with storm.running():
        try:
            scenario.operation(state)
        except KeyboardInterrupt as caught:
            exc = caught
    done.set()
    if partner is not None:
        partner.join(10)
        assert not partner.is_alive(), "the partner thread is stuck"
    try:
        # Every exception a signal handler raised comes out, once: one or two of them, one
        # KeyboardInterrupt leaves the operation (not a timeout, not nothing).
        assert (exc is not None) == (storm.fired > 0), "the Ctrl-C was lost"
        assert not _shared_waiter.held(), "an exception is left held for a later call"
        scenario.check(state, exc)
    except AssertionError as failure:
        notes = getattr(exc, "__notes__", None)
        raise AssertionError(f"{storm.first} first, at {storm.at} (met {storm.seen}): "
                             f"{exc!r} notes={notes}") from failure
    finally:
        _shared_waiter.drop_held()


def _each_checkpoint(scenario: Scenario) -> int:
    """Run the scenario with KeyboardInterrupt at each checkpoint in turn, then with two, at
    each pair (one of them a function's first instruction). Returns the number of runs."""
    # Garbage an earlier test left in cycles (a loop's pending tasks) is finalized now, not by
    # a collection inside a storm, which would raise in its frames (a parallel run's order).
    gc.collect()
    runs = 0
    a = 1
    while True:  # one exception, at every checkpoint
        storm = _Storm("profile", (a,))
        _run_once(scenario, storm)
        runs += 1
        if storm.passed_all:
            break
        a += 1
    for first in ("profile", "trace"):  # two: every pair
        a = 1
        while True:
            b = 1
            while True:
                storm = _Storm(first, (a, b))
                _run_once(scenario, storm)
                runs += 1
                if storm.passed_all:
                    break
                b += 1
            if storm.fired == 0:
                break
            a += 1
    return runs


def _mutex_free(prim: Any) -> None:
    assert prim._mutex.acquire(blocking=False), "the mutex is held"
    prim._mutex.release()


def _expect(kind: type[Exception], fn: Callable[[], object]) -> None:
    """Call `fn`, which is to raise `kind` (the scenario's own outcome) unless interrupted."""
    try:
        fn()
    except kind:
        return
    raise AssertionError(f"{kind.__name__} was not raised")


def _poll_until(done: threading.Event, ready: Callable[[], bool]) -> bool:
    """The partner's wait for the main thread to park (False: the operation ended first)."""
    while not done.is_set():
        if ready():
            return True
        time.sleep(0.0002)  # polling another thread's state: nothing to wait on
    return False


# -- permits -------------------------------------------------------------------------------------


def _sem(value: int, bounded: bool = False) -> Callable[[], SimpleNamespace]:
    kind = SharedBoundedSemaphore if bounded else SharedSemaphore
    return lambda: SimpleNamespace(prim=kind(value), initial=value, given=0)


def _held_lock() -> SimpleNamespace:
    lock = SharedLock()
    assert lock.blocking.acquire(blocking=False)
    return SimpleNamespace(prim=lock, initial=0, given=0)


def _waiting(prim: Any) -> list[object]:
    """The live waiters in the line (an interrupted one may leave a dead entry behind)."""
    return [w for w in prim._line if w.waiting]


def _released(st: SimpleNamespace, exc: BaseException | None) -> None:
    """Released from 0: with the note, or returning, the permit is back; without, unchanged."""
    done = exc is None or _completed(exc)
    assert st.prim._value == (1 if done else 0), st.prim
    _mutex_free(st.prim)


def _permits_are(value: int) -> Callable[[SimpleNamespace, BaseException | None], None]:
    """Nothing changed (an acquire that raised, or that timed out, or an over-release)."""
    def check(st: SimpleNamespace, exc: BaseException | None) -> None:
        assert st.prim._value == value and not _waiting(st.prim), st.prim
        _mutex_free(st.prim)
    return check


def _acquired(st: SimpleNamespace, exc: BaseException | None) -> None:
    """An acquire that raised took nothing; one that returned holds a permit. The permits
    there were: the initial one, or the one the partner gave the waiting thread."""
    there = st.initial + st.given
    assert st.prim._value == (there if exc is not None else there - 1), st.prim
    assert not _waiting(st.prim), st.prim
    _mutex_free(st.prim)


def _give_to_a_waiter(st: SimpleNamespace, done: threading.Event) -> None:
    if _poll_until(done, lambda: st.prim.statistics().waiting > 0):
        st.prim.blocking.release()
        st.given = 1


def _acquire_now(st: SimpleNamespace) -> None:
    assert st.prim.blocking.acquire(timeout=5)


PERMITS = {
    "semaphore release": Scenario(_sem(0), lambda st: st.prim.blocking.release(), _released),
    "lock release": Scenario(_held_lock, lambda st: st.prim.blocking.release(), _released),
    "over-release": Scenario(
        _sem(1, bounded=True),
        lambda st: _expect(ValueError, st.prim.blocking.release), _permits_are(1)),
    "acquire at once": Scenario(_sem(1), _acquire_now, _acquired),
    "acquire, timing out": Scenario(
        _sem(0), lambda st: _expect(AssertionError, lambda: _acquire_now_or_fail(st)),
        _permits_are(0)),
    "acquire, waiting": Scenario(_sem(0), _acquire_now, _acquired, _give_to_a_waiter),
}


def _acquire_now_or_fail(st: SimpleNamespace) -> None:
    assert st.prim.blocking.acquire(timeout=0.002), "timed out"


@pytest.mark.parametrize("name", list(PERMITS))
def test_permits(name: str) -> None:
    assert _each_checkpoint(PERMITS[name]) > 1


# -- channels ------------------------------------------------------------------------------------


def _channel(size: int, filled: bool = False) -> Callable[[], SimpleNamespace]:
    def setup() -> SimpleNamespace:
        ch: SharedChannel[str] = SharedChannel(size)
        if filled:
            ch.send_nowait("v")
        return SimpleNamespace(ch=ch, got=[], given=[])
    return setup


def _drain(ch: SharedChannel[str]) -> list[str]:
    out = []
    while True:
        try:
            out.append(ch.get_nowait())
        except WouldBlock:
            return out


def _sent(st: SimpleNamespace, exc: BaseException | None) -> None:
    """A send with the note, or returning, sent "v" once (taken by the partner, or in the
    channel); one raised without it sent nothing."""
    done = exc is None or _completed(exc)
    assert st.got + _drain(st.ch) == (["v"] if done else []), st.ch
    assert st.ch._in_flight == 0 and not st.ch._senders.items, st.ch
    _mutex_free(st.ch)


def _not_sent(st: SimpleNamespace, exc: BaseException | None) -> None:
    """The full channel keeps its one value; nothing else was sent."""
    assert _drain(st.ch) == ["x"] and not st.ch._senders.items, st.ch
    _mutex_free(st.ch)


def _received(st: SimpleNamespace, exc: BaseException | None) -> None:
    """A get that raised took nothing: "v" (there, or given by the partner) is still in the
    channel. One that returned has it, and the channel is empty."""
    there = ["v"] if st.filled or st.given else []
    left = _drain(st.ch)
    if exc is not None:
        assert left == there and st.got == [], st.ch
    else:
        assert st.got == ["v"] and left == [], st.ch
    assert not [r for r in st.ch._getters.items if r.waiter.waiting], st.ch
    _mutex_free(st.ch)


def _nothing_received(st: SimpleNamespace, exc: BaseException | None) -> None:
    """A get that timed out, or raised, left nothing behind: no value, no live getter."""
    assert st.got == [] and _drain(st.ch) == [], st.ch
    assert not [r for r in st.ch._getters.items if r.waiter.waiting], st.ch
    _mutex_free(st.ch)


def _take_from_a_sender(st: SimpleNamespace, done: threading.Event) -> None:
    if _poll_until(done, lambda: st.ch.statistics().waiting_senders > 0):
        try:
            st.got.append(st.ch.get_nowait())
        except WouldBlock:  # the main thread gave up first
            pass


def _give_to_a_getter(st: SimpleNamespace, done: threading.Event) -> None:
    if _poll_until(done, lambda: st.ch.statistics().waiting_getters > 0):
        try:
            st.ch.send_nowait("v")
            st.given.append("v")
        except WouldBlock:  # the main thread gave up first
            pass


def _full() -> SimpleNamespace:
    st = _channel(1)()
    st.ch.send_nowait("x")
    return st


def _get(how: str, timeout: float = 5) -> Callable[[SimpleNamespace], None]:
    def get(st: SimpleNamespace) -> None:
        if how == "get_nowait":
            st.got.append(st.ch.get_nowait())
        elif how == "blocking.get":
            st.got.append(st.ch.blocking.get(timeout=timeout))
        else:
            result = select_blocking(Get(st.ch), timeout=timeout)
            assert isinstance(result, GetResult)
            st.got.append(result.value)
    return get


def _send(how: str, timeout: float = 5) -> Callable[[SimpleNamespace], None]:
    def send(st: SimpleNamespace) -> None:
        if how == "send_nowait":
            st.ch.send_nowait("v")
        elif how == "blocking.send":
            st.ch.blocking.send("v", timeout=timeout)
        else:
            select_blocking(Send(st.ch, "v"), timeout=timeout)
    return send


def _with(filled: bool, check: Callable[[SimpleNamespace, BaseException | None], None]
          ) -> Callable[[SimpleNamespace, BaseException | None], None]:
    def checked(st: SimpleNamespace, exc: BaseException | None) -> None:
        st.filled = filled
        check(st, exc)
    return checked


CHANNELS = {}
for _how in ("send_nowait", "blocking.send", "select_blocking"):
    CHANNELS[f"{_how}, buffered"] = Scenario(_channel(1), _send(_how), _sent)
    _error = WouldBlock if _how == "send_nowait" else TimeoutError
    CHANNELS[f"{_how}, full"] = Scenario(
        _full, lambda st, how=_how, error=_error: _expect(error, lambda: _send(how, 0.002)(st)),
        _not_sent)
    if _how != "send_nowait":
        CHANNELS[f"{_how}, waiting"] = Scenario(_channel(0), _send(_how), _sent,
                                                _take_from_a_sender)
for _how in ("get_nowait", "blocking.get", "select_blocking"):
    CHANNELS[f"{_how}, buffered"] = Scenario(_channel(1, filled=True), _get(_how),
                                             _with(True, _received))
    if _how != "get_nowait":
        CHANNELS[f"{_how}, waiting"] = Scenario(_channel(0), _get(_how),
                                                _with(False, _received), _give_to_a_getter)
        CHANNELS[f"{_how}, timing out"] = Scenario(
            _channel(1), lambda st, how=_how: _expect(TimeoutError, lambda: _get(how, 0.002)(st)),
            _nothing_received)


@pytest.mark.parametrize("name", list(CHANNELS))
def test_channels(name: str) -> None:
    assert _each_checkpoint(CHANNELS[name]) > 1


# -- the janus-compatible Queue: its task count follows what was put -----------------------------


def _queue(filled: bool = False) -> Callable[[], SimpleNamespace]:
    def setup() -> SimpleNamespace:
        q: Queue[str] = Queue(1)
        if filled:
            q.sync_q.put("x")
        return SimpleNamespace(q=q, got=[])
    return setup


def _put(st: SimpleNamespace, exc: BaseException | None) -> None:
    """A put with the note, or returning, queued the item and counted it; one raised without
    it did neither (join() would wait for ever for an item never queued)."""
    done = exc is None or _completed(exc)
    assert st.q.sync_q.qsize() == (1 if done else 0), st.q
    assert st.q._unfinished_tasks == (1 if done else 0), st.q


def _put_full(st: SimpleNamespace, exc: BaseException | None) -> None:
    assert st.q.sync_q.qsize() == 1 and st.q._unfinished_tasks == 1, st.q


def _got(st: SimpleNamespace, exc: BaseException | None) -> None:
    """A get that raised left the item queued; one that returned has it (still unfinished
    until task_done)."""
    assert st.q.sync_q.qsize() == (1 if exc is not None else 0), st.q
    assert st.got == ([] if exc is not None else ["x"]), st.q
    assert st.q._unfinished_tasks == 1, st.q


QUEUES = {
    "put": Scenario(_queue(), lambda st: st.q.sync_q.put("v", timeout=5), _put),
    "put, full": Scenario(
        _queue(filled=True),
        lambda st: _expect(SyncQueueFull, lambda: st.q.sync_q.put("v", timeout=0.002)),
        _put_full),
    "put_nowait, full": Scenario(
        _queue(filled=True), lambda st: _expect(SyncQueueFull, lambda: st.q.sync_q.put_nowait("v")),
        _put_full),
    "get": Scenario(_queue(filled=True), lambda st: st.got.append(st.q.sync_q.get(timeout=5)),
                    _got),
}


@pytest.mark.parametrize("name", list(QUEUES))
def test_queue(name: str) -> None:
    assert _each_checkpoint(QUEUES[name]) > 1
