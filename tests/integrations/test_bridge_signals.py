"""Ctrl-C in the main thread while it sends, gets, selects and acquires on shared primitives.

A timer signal (SIGALRM, every 0.2 to 3 ms) runs a handler that raises KeyboardInterrupt in the
main thread, wherever it is: inside a section, in a wake-up, right after a mutex was taken.
Tasks of a loop and other threads are busy on the same primitives. Afterwards: no counter is
negative, every value whose send returned is received exactly once (a send that raised
KeyboardInterrupt may or may not have sent, never twice), every permit is back, no mutex is
held, and the loop still stops. Then the windows the storm found, one at a time, with the
exception raised exactly there.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from executors.aio import Get, GetResult, Send, SendResult
from executors.errors import ChannelClosed, WouldBlock
from executors.testing import wait_until
from integrations.bridge import SharedChannel, SharedLock, SharedSemaphore, select_blocking
from integrations.bridge._shared_waiter import COMPLETED_NOTE

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread(),
    reason="needs signal.setitimer and the main thread")

LoopFactory = Callable[[], asyncio.AbstractEventLoop]
Value = tuple[str, int]


def _uvloop_factory() -> asyncio.AbstractEventLoop:
    uvloop = pytest.importorskip("uvloop")
    return uvloop.new_event_loop()  # type: ignore[no-any-return]


@pytest.fixture(params=[pytest.param(asyncio.new_event_loop, id="asyncio"),
                        pytest.param(_uvloop_factory, id="uvloop")])
def loop_factory(request: pytest.FixtureRequest) -> LoopFactory:
    """asyncio's loop and uvloop's."""
    factory: LoopFactory = request.param
    factory().close()
    return factory


def _completed(exc: BaseException) -> bool:
    return COMPLETED_NOTE in getattr(exc, "__notes__", ())


class Campaign:
    """The shared state of one run: primitives, ledgers, the parties' stop flag."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.channels: list[SharedChannel[Value]] = [SharedChannel(n) for n in (0, 1, 64)]
        self.sem = SharedSemaphore(2)
        self.lock = SharedLock()
        self.sent: list[Value] = []
        self.uncertain: list[Value] = []  # the main thread's sends that raised KeyboardInterrupt
        self.received: list[Value] = []
        self.stop = threading.Event()
        self.interrupts = 0
        self.nested: list[str] = []  # where interrupts hit while another one was handled

    # -- the main thread's operations (each returns normally or raises KeyboardInterrupt) --

    # A value the main thread sends is in `uncertain` before the call (a second Ctrl-C in an
    # `except` clause must not leave it recorded nowhere); it moves to `sent` once the call
    # says it was sent, and leaves `uncertain` only when the call timed out (then not sent).

    def _send(self, send: Callable[[Value], object], value: Value,
              unsent: type[Exception]) -> None:
        self.uncertain.append(value)
        try:
            send(value)
        except unsent:
            self.uncertain.pop()
            return
        except KeyboardInterrupt as exc:
            if _completed(exc):
                self.sent.append(value)
            raise
        self.sent.append(value)

    def send(self, ch: SharedChannel[Value], value: Value) -> None:
        self._send(lambda v: ch.blocking.send(v, timeout=0.02), value, TimeoutError)

    def get(self, ch: SharedChannel[Value]) -> None:
        try:
            self.received.append(ch.blocking.get(timeout=0.02))
        except TimeoutError:
            pass

    def select(self, a: SharedChannel[Value], b: SharedChannel[Value], value: Value) -> None:
        self.uncertain.append(value)
        try:
            result = select_blocking(Send(a, value), Get(b), timeout=0.02)
        except TimeoutError:
            self.uncertain.pop()
            return
        except KeyboardInterrupt as exc:
            if _completed(exc):
                self.sent.append(value)
            raise
        if isinstance(result, GetResult):
            self.received.append(result.value)
        else:
            assert isinstance(result, SendResult)
            self.sent.append(value)

    def acquire_release(self, prim: SharedSemaphore | SharedLock) -> None:
        if not prim.blocking.acquire(timeout=0.02):
            return
        # Held: give it back whatever happens, once. A KeyboardInterrupt out of release
        # without the "completed" note came before the release began: again. Every one caught
        # is kept (a second one may land while the first is examined, and only the first may
        # carry the note). The storm never raises into this frame (see _storm): its loop and
        # `except` clause run to the end.
        caught: list[BaseException] = []
        while True:
            try:
                if any(_completed(exc) for exc in caught):
                    return
                prim.blocking.release()
                return
            except KeyboardInterrupt as exc:
                caught.append(exc)
                self.interrupts += 1


def _run(factory: LoopFactory, seed: int, budget: float) -> Campaign:
    # The garbage of earlier tests (their channels, loops and tasks, in cycles) is collected
    # now, not during the storm: a weakref callback run by the collector in the main thread
    # would get the handler's KeyboardInterrupt, which Python reports as unraisable.
    gc.collect()
    c = Campaign(seed)
    loop = factory()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    counter = iter(range(1, 10**9))

    async def task_get(ch: SharedChannel[Value]) -> None:
        try:
            while True:
                c.received.append(await ch.get())
        except ChannelClosed:
            pass

    async def task_send(ch: SharedChannel[Value], tag: str) -> None:
        try:
            while not c.stop.is_set():
                value = (tag, next(counter))
                await ch.send(value)
                c.sent.append(value)
                await asyncio.sleep(0)
        except ChannelClosed:
            pass

    async def task_acquire(prim: SharedSemaphore | SharedLock) -> None:
        while not c.stop.is_set():
            async with prim:
                pass
            await asyncio.sleep(0)

    def thread_send(ch: SharedChannel[Value], tag: str) -> None:
        while not c.stop.is_set():
            value = (tag, next(counter))
            try:
                ch.blocking.send(value, timeout=0.02)
            except (TimeoutError, ChannelClosed):
                continue
            c.sent.append(value)

    def thread_get(ch: SharedChannel[Value]) -> None:
        while True:
            try:
                c.received.append(ch.blocking.get(timeout=0.02))
            except TimeoutError:
                continue
            except ChannelClosed:
                return

    def thread_acquire(prim: SharedSemaphore | SharedLock) -> None:
        while not c.stop.is_set():
            if prim.blocking.acquire(timeout=0.02):
                prim.blocking.release()

    futures = []
    for i, ch in enumerate(c.channels):
        futures.append(asyncio.run_coroutine_threadsafe(task_get(ch), loop))
        futures.append(asyncio.run_coroutine_threadsafe(task_send(ch, f"t{i}"), loop))
    futures += [asyncio.run_coroutine_threadsafe(task_acquire(p), loop) for p in (c.sem, c.lock)]
    # Daemon threads: a party stuck on a held mutex fails the test without keeping the
    # interpreter from exiting.
    threads = [threading.Thread(target=thread_send, args=(ch, f"h{i}"), daemon=True)
               for i, ch in enumerate(c.channels)]
    threads += [threading.Thread(target=thread_get, args=(ch,), daemon=True)
                for ch in c.channels]
    threads += [threading.Thread(target=thread_acquire, args=(p,), daemon=True)
                for p in (c.sem, c.lock)]
    for t in threads:
        t.start()

    _storm(c, counter, budget)
    # Quiet now: stop the parties, close the channels, drain what is left.
    c.stop.set()
    for prim in (c.sem, c.lock):
        assert not prim._mutex._is_owned(), "the main thread still holds a mutex"
    for ch in c.channels:
        assert not ch._mutex._is_owned(), "the main thread still holds a mutex"
    for t in threads[: len(c.channels)]:
        t.join(10)
    deadline = time.monotonic() + 10
    while not all(f.done() for f in futures[1::2][: len(c.channels)]) and (
            time.monotonic() < deadline):
        for ch in c.channels:  # a task sender parked on a full channel needs a getter
            try:
                c.received.append(ch.get_nowait())
            except WouldBlock:
                pass
        time.sleep(0.001)  # polling the futures of tasks on another loop: nothing to wait on
    for ch in c.channels:
        ch.close()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "a thread blocked"
    for f in futures:
        f.result(10)
    loop.call_soon_threadsafe(loop.stop)
    loop_thread.join(10)
    assert not loop_thread.is_alive(), "the loop did not stop"
    loop.close()
    for ch in c.channels:
        while True:
            try:
                c.received.append(ch.get_nowait())
            except (ChannelClosed, WouldBlock):
                break
    return c


def _storm(c: Campaign, counter: Iterator[int], budget: float) -> None:
    """The main thread's sends, gets, selects, acquires and releases for `budget` seconds,
    under the storm.

    The handler never raises into this function's own frame nor into acquire_release's: their
    `except` clauses and the `finally` are the harness. A KeyboardInterrupt escaping them
    reaches pytest, which takes it for the user's and ends the session; and the timer, still
    armed, kills the process at exit once Python has put SIGALRM's default action back (a CI
    run ended so: "Alarm clock", exit 142). Interrupts still land everywhere below these
    frames, in the library's own `except` and `finally` clauses too.
    """
    rng = c.rng
    storming = True

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if not storming:  # the storm is over: a last pending signal raises nothing
            return
        signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0002, 0.003))
        if frame is not None and frame.f_code in _HARNESS_CODE:
            return
        if sys.exc_info()[0] is KeyboardInterrupt:
            # Raised while the main thread handles another one (in an `except` or `finally`):
            # where, for the report of a failing run.
            where, f = [], frame
            while f is not None and len(where) < 4:
                where.append(f"{f.f_code.co_name}:{f.f_lineno}")
                f = f.f_back
            c.nested.append(" < ".join(where))
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    # The collector's callbacks run in the main thread too, and a KeyboardInterrupt raised in
    # one is reported as unraisable by CPython: the storm runs without those other libraries
    # registered for good (hypothesis's, once any hypothesis test of the run has started).
    gc_callbacks = gc.callbacks[:]
    gc.callbacks.clear()
    deadline = time.monotonic() + budget
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.001)
        while time.monotonic() < deadline:
            try:
                a, b = rng.sample(c.channels, 2)
                value = ("m", next(counter))
                op = rng.randrange(5)
                if op == 0:
                    c.send(a, value)
                elif op == 1:
                    c.get(a)
                elif op == 2:
                    c.select(a, b, value)
                else:
                    c.acquire_release(c.sem if op == 3 else c.lock)
            except KeyboardInterrupt:
                c.interrupts += 1
    finally:
        storming = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        gc.callbacks[:] = gc_callbacks


#: The frames the storm never raises into.
_HARNESS_CODE = frozenset({_storm.__code__, Campaign.acquire_release.__code__})


def _check(c: Campaign) -> None:
    counts = collections.Counter(c.received)
    assert not [v for v, n in counts.items() if n > 1], "a value was received twice"
    sent, received = set(c.sent), set(c.received)
    assert sent <= received, f"lost: {sorted(sent - received)[:5]}"
    assert received <= sent | set(c.uncertain), "received a value nobody sent"
    for ch in c.channels:
        assert ch._in_flight == 0, ch
        assert not ch._buffer, ch
    for prim, n in ((c.sem, 2), (c.lock, 1)):
        stats = prim.statistics()
        assert prim._value == n and stats.woken == 0 and stats.waiting == 0, prim
        assert prim._value >= 0 and prim._woken >= 0
        assert prim._mutex.acquire(blocking=False)  # from the main thread: not held by others
        prim._mutex.release()
    for ch in c.channels:
        assert ch._mutex.acquire(blocking=False)
        ch._mutex.release()


def _report(c: Campaign) -> None:
    print(f"interrupts={c.interrupts} nested={len(c.nested)} sent={len(c.sent)} "
          f"uncertain={len(c.uncertain)} received={len(c.received)}", file=sys.stderr)
    for where in c.nested:
        print(f"  nested at {where}", file=sys.stderr)


# pytest-timeout's own SIGALRM would collide with the test's signal storm: its thread method.
@pytest.mark.serial  # a signal storm that counts what a starved main thread saw
@pytest.mark.timeout(120, method="thread")
@pytest.mark.parametrize("seed", range(2))
def test_ctrl_c_everywhere_leaves_everything_consistent(
        loop_factory: LoopFactory, seed: int, background_exceptions: Any) -> None:
    """KeyboardInterrupt from a signal handler at any point of the main thread's sends, gets,
    selects, acquires and releases (tasks and other threads busy on the same primitives):
    every value sent is received once, nothing is negative, every permit comes back."""
    c = _run(loop_factory, seed, budget=2.0)
    _report(c)
    # Usually 100 to 450; a starved main thread on a loaded machine once saw 23.
    assert c.interrupts > 20, f"only {c.interrupts} interrupts: the test did not test"
    _check(c)
    _only_interrupted_finalizers(background_exceptions)


def _only_interrupted_finalizers(seen: Any) -> None:
    """The storm's signals land anywhere in the main thread, a finalizer the collector runs
    there included (a bridge batch's ``__del__``, seen once on 3.13): CPython reports an
    exception leaving ``__del__`` as unraisable and goes on. That Ctrl-C is not delivered to
    the program (a known limit, in the closing note of the change that met it); what the
    storm pins is that nothing is lost or left wrong (`_check`). Anything else is a failure."""
    other = [f"thread {a.thread.name if a.thread else '?'}: {a.exc_type.__name__}"
             for a in seen.thread]
    other += [f"unraisable in {u.object!r}: {u.exc_type.__name__}: {u.exc_value}"
              for u in seen.unraisable
              if not (u.exc_type is KeyboardInterrupt
                      and getattr(u.object, "__name__", "") == "__del__")]
    assert not other, "\n".join(other)


#: The soak's storm per loop: long enough for thousands of interrupts (a few of them landing
#: while another one is handled), short enough that each test stays well under its timeout
#: and the file under a minute.
SOAK_SECONDS = 15.0


@pytest.mark.slow
@pytest.mark.serial  # a signal storm
@pytest.mark.timeout(120, method="thread")
def test_ctrl_c_soak(loop_factory: LoopFactory) -> None:
    """The same for SOAK_SECONDS per loop, with a fresh seed (printed) each run."""
    seed = int.from_bytes(os.urandom(4), "big")
    print(f"seed={seed}", file=sys.stderr)
    c = _run(loop_factory, seed, budget=SOAK_SECONDS)
    _report(c)
    assert c.interrupts > 500, f"only {c.interrupts} interrupts: the test did not test"
    _check(c)


# -- the windows one at a time ------------------------------------------------------------------
#
# The storm finds a window now and then; these put the exception exactly into one. A trace
# function of the main thread raises KeyboardInterrupt at the first instruction of a chosen
# call, which is where a signal handler's exception lands at that checkpoint.


class _InjectAt:
    """``with _InjectAt(pred):`` raises KeyboardInterrupt once, in this thread, at the start of
    the first call for which ``pred(frame)`` is true (after `arm` is true, if given)."""

    def __init__(self, pred: Callable[[FrameType], bool]) -> None:
        self.pred = pred
        self.fired = False

    def _trace(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and not self.fired and self.pred(frame):
            self.fired = True
            raise KeyboardInterrupt

    def __enter__(self) -> _InjectAt:
        sys.settrace(self._trace)  # type: ignore[arg-type]
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


def _named(name: str) -> Callable[[FrameType], bool]:
    return lambda frame: frame.f_code.co_name == name and "integrations" in (
        frame.f_code.co_filename)


def test_interrupt_between_parking_and_waiting_leaves_no_live_getter() -> None:
    """A thread's get interrupted after it parked and before it waited (at `wait`'s first
    instruction) gives up its place: a later value is not handed to its dead registration."""
    ch: SharedChannel[int] = SharedChannel(0)
    with _InjectAt(_named("wait")) as inject, pytest.raises(KeyboardInterrupt):
        ch.blocking.get(timeout=5)
    assert inject.fired
    with pytest.raises(WouldBlock):
        ch.send_nowait(1)  # nobody waits: the value is not handed to the interrupted getter
    assert ch.statistics().waiting_getters == 0


def test_interrupt_right_after_a_take_still_wakes_the_taken_thread() -> None:
    """A send that took a parked thread getter and is interrupted at the next call (the
    wake-up) still wakes it: the getter receives the value (no timeout: it would wait
    forever), and the send's exception says the value was sent."""
    ch: SharedChannel[int] = SharedChannel(0)
    got: list[int] = []
    getter = threading.Thread(target=lambda: got.append(ch.blocking.get()), daemon=True)
    getter.start()
    wait_until(lambda: ch.statistics().waiting_getters == 1)
    taken = [False]

    def after_take(frame: FrameType) -> bool:
        return taken[0]

    def trace(frame: FrameType, event: str, arg: object) -> object:
        if event == "return" and frame.f_code.co_name == "take" and arg is True:
            taken[0] = True  # the waiter is taken: the next call is where the wake-up begins
        inject._trace(frame, event, arg)
        return trace  # trace every frame: its "return" event is needed

    inject = _InjectAt(after_take)
    sys.settrace(trace)  # type: ignore[arg-type]
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            ch.blocking.send(7)
    finally:
        sys.settrace(None)
    assert inject.fired
    assert _completed(info.value)
    getter.join(5)
    assert got == [7]


def test_select_interrupted_after_its_timeout_returns() -> None:
    """A blocking select interrupted as it leaves the lines after its timeout expired raises at
    once (it gave up: nothing to wait for) and leaves no live registration."""
    a: SharedChannel[int] = SharedChannel(0)
    b: SharedChannel[int] = SharedChannel(0)
    with _InjectAt(_named("_unpark_select")) as inject, pytest.raises(KeyboardInterrupt):
        select_blocking(Get(a), Get(b), timeout=0.01)
    assert inject.fired
    for ch in (a, b):
        with pytest.raises(WouldBlock):
            ch.send_nowait(1)
