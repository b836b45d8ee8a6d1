"""Helpers for tests of code that uses executors (and for ours).

- `VirtualClock`: a clock that only moves when the test says so, for schedules without sleeping.
- `wait_until`: poll a condition against a deadline instead of sleeping and hoping.
- `free_port`: a free TCP port on loopback, for a throwaway server a test starts.

It imports only the standard library and the package's stdlib-only helpers: no asyncio, no
pymongo, and it starts nothing.
"""

from __future__ import annotations

import datetime
import math
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar, final

from . import _threads, _validate
from ._clock import SYSTEM_CLOCK

__all__ = ("VirtualClock", "wait_until", "free_port", "DEFAULT_WALL")

T = TypeVar("T")

_TICK = object()

#: `VirtualClock`'s wall time when none is given: a fixed instant, so tests are reproducible.
DEFAULT_WALL = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


def wait_until(condition: Callable[[], object], timeout: float | None = 10.0, *,
               interval: float = 0.001, message: str = "") -> None:
    """Return as soon as ``condition()`` is true; raise `TimeoutError` after `timeout` seconds.

    For tests of background threads: poll a cheap condition against a deadline, instead of
    sleeping a fixed time and hoping. The poll interval grows from `interval` to 50 ms.

    Example:
        >>> wait_until(lambda: True)
    """
    limit = _validate.timeout(timeout)
    deadline = SYSTEM_CLOCK.monotonic() + (math.inf if limit is None else limit)
    delay = _validate.seconds(interval, "interval", allow_zero=False)
    while not condition():
        if SYSTEM_CLOCK.monotonic() >= deadline:
            raise TimeoutError(message or f"condition not met within {timeout}s: {condition!r}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def free_port() -> int:
    """A TCP port on 127.0.0.1 (IPv4 loopback) that nothing listens on right now.

    The kernel picks it (bind to port 0), then the socket is closed so the caller's server can
    bind it. Another process could take the port in between; on a test machine that race is
    rare, and the server then fails loudly at start-up rather than talking to a stranger.

    Example:
        >>> 0 < free_port() < 65536
        True
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@final
class VirtualClock:
    """A clock that only moves when a test says so; executors sleeping on it wait.

    Pass it as ``clock=`` to a `PeriodicExecutor` (or anything taking a clock). Its threads then
    sleep until `advance` moves time past their deadline, so a test of a 60 s schedule runs in
    milliseconds with no real sleeping. `wake()` and `close()` still act at once in real time.

    `advance(seconds)` moves time and, by default, waits until every thread it woke has gone
    back to sleep on the clock (or exited): when it returns, the runs that were due have
    happened, and assertions need no waiting.

    It keeps the three clocks the library reads, as Linux does:

    - `monotonic`: starts at `start`; paces every sleep; stops during a `suspend`.
    - `time`: wall time (seconds since the Unix epoch), starting at `wall` (an aware
      datetime; default `DEFAULT_WALL`, 2024-01-01 00:00 UTC); `jump` steps it alone, as NTP
      or an administrator does.
    - `boottime`: like `monotonic`, but it keeps counting during a `suspend` (Linux's
      ``CLOCK_BOOTTIME``); it starts equal to `start`.

    `advance` moves all three together. Neither `jump` nor `suspend` wakes a sleeper (a
    thread sleeping on the real monotonic clock does not wake early either): the sleeper
    notices when its monotonic deadline comes.

    Example:
        >>> from executors import PeriodicExecutor
        >>> clock = VirtualClock()
        >>> runs = []
        >>> ex = PeriodicExecutor(10, 1, lambda: runs.append(clock.monotonic()) or True,
        ...                       clock=clock)
        >>> ex.open()
        >>> clock.wait_for_sleepers(1)
        >>> clock.advance(25)
        >>> runs
        [0.0, 10.0, 20.0]
        >>> ex.close(wait=True)
        True
        >>> clock.suspend(3600)  # the laptop sleeps an hour: wall time moves, monotonic not
        >>> clock.monotonic(), clock.time() - DEFAULT_WALL.timestamp()
        (25.0, 3625.0)

    Raises:
        TypeError, ValueError: `start` is not a finite number, or `wall` is not an aware
            datetime (naming the argument).
    """

    def __init__(self, start: float = 0.0, *, wall: datetime.datetime | None = None) -> None:
        if not _is_number(start):
            raise TypeError(f"start must be a number, got {type(start).__name__}")
        if not math.isfinite(start):
            raise ValueError(f"start must be finite, got {start!r}")
        if wall is None:
            wall = DEFAULT_WALL
        elif not isinstance(wall, datetime.datetime):
            raise TypeError(f"wall must be an aware datetime or None, got {type(wall).__name__}")
        elif wall.utcoffset() is None:
            raise ValueError(f"wall must be an aware datetime (with a tzinfo), got {wall!r}")
        self._now = float(start)
        self._wall = wall.timestamp()
        self._boot = float(start)
        self._cond = threading.Condition()
        # thread -> (deadline, queue) for threads blocked in wait()
        self._sleepers: dict[threading.Thread, tuple[float, queue.SimpleQueue[object]]] = {}

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        """Wall time, seconds since the Unix epoch (moved by `advance`, `jump` and `suspend`)."""
        return self._wall

    def boottime(self) -> float:
        """Monotonic time that kept counting through every `suspend`."""
        return self._boot

    def jump(self, seconds: float) -> None:
        """Step the wall clock alone by `seconds` (negative: back), as an NTP step does.

        Raises:
            TypeError, ValueError: `seconds` is not a finite number.
        """
        if not _is_number(seconds):
            raise TypeError(f"seconds must be a number of seconds, got {type(seconds).__name__}")
        if not math.isfinite(seconds):
            raise ValueError(f"seconds must be a finite number of seconds, got {seconds!r}")
        with self._cond:
            self._wall += float(seconds)

    def suspend(self, seconds: float) -> None:
        """Suspend the machine for `seconds`: wall time and `boottime` move, `monotonic` does not.

        Linux's ``CLOCK_MONOTONIC`` stops while the machine sleeps, so a thread sleeping on
        it wakes `seconds` of wall time later than it meant to; no sleeper wakes here.

        Raises:
            TypeError, ValueError: `seconds` is not a finite number >= 0.
        """
        step = _validate.seconds(seconds, "seconds")
        with self._cond:
            self._wall += step
            self._boot += step

    def _move_to(self, when: float) -> None:
        # Monotonic, wall and boot time move together (caller holds the condition).
        if when > self._now:
            delta = when - self._now
            self._now = when
            self._wall += delta
            self._boot += delta

    @property
    def sleepers(self) -> int:
        """How many threads are sleeping on this clock now."""
        with self._cond:
            return len(self._sleepers)

    def wait(self, q: queue.SimpleQueue[T], timeout: float) -> T:
        """Block until an item is put in `q` or virtual time passes `timeout` (then `Empty`)."""
        me = threading.current_thread()
        with self._cond:
            deadline = self._now + max(timeout, 0.0)
            if deadline <= self._now:
                raise queue.Empty
            self._sleepers[me] = (deadline, q)  # type: ignore[assignment]
            self._cond.notify_all()
        try:
            item = q.get()
        finally:
            with self._cond:
                self._sleepers.pop(me, None)
                self._cond.notify_all()
        if item is _TICK:
            raise queue.Empty
        return item

    def advance(self, seconds: float, *, settle: bool = True,
                timeout: float | None = 10.0) -> None:
        """Move time forward by `seconds`, one due deadline at a time, in order.

        Each sleeper whose deadline falls within the step is woken at its deadline (time is set
        to exactly that deadline), and with `settle` the clock waits until it sleeps again
        before moving on, so periodic runs inside one long step all happen, in order, each at
        its own due time.

        Raises:
            TypeError, ValueError: `seconds` is not a finite number >= 0, or `timeout` not a
                timeout (None or ``math.inf`` waits as long as it takes, as every timeout of
                the library does).
            TimeoutError: with `settle`, a woken thread did not sleep again or exit within
                `timeout` real seconds (its target is blocked, say).
        """
        seconds = _validate.seconds(seconds, "seconds")
        limit = _validate.timeout(timeout)
        with self._cond:
            end = self._now + seconds
            while True:
                due = [(d, t, q) for t, (d, q) in self._sleepers.items() if d <= end]
                if not due:
                    break
                step = min(d for d, _, _ in due)
                self._move_to(step)
                woken = [(t, q) for d, t, q in due if d <= step]
                for t, q in woken:
                    self._sleepers.pop(t, None)
                    q.put(_TICK)
                if not settle:
                    continue
                self._settle([t for t, _ in woken], limit)
            self._move_to(end)

    def wait_for_sleepers(self, count: int, timeout: float | None = 10.0) -> None:
        """Wait (real time) until at least `count` threads are sleeping on this clock."""
        _validate.count(count, "count", minimum=0)
        limit = _validate.timeout(timeout)
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._sleepers) >= count, limit):
                raise TimeoutError(
                    f"{len(self._sleepers)} thread(s) sleeping on the clock, expected {count}"
                )

    def _settle(self, threads: list[threading.Thread], timeout: float | None) -> None:
        deadline = SYSTEM_CLOCK.monotonic() + (math.inf if timeout is None else timeout)
        while not all(t in self._sleepers or not _threads.alive(t) for t in threads):
            remaining = deadline - SYSTEM_CLOCK.monotonic()
            if remaining <= 0:
                raise TimeoutError("a thread woken by VirtualClock.advance did not sleep again")
            # A thread that exits does not notify; bound each wait so its death is seen.
            self._cond.wait(min(remaining, 0.05))

    def __repr__(self) -> str:
        wall = datetime.datetime.fromtimestamp(self._wall, datetime.UTC)
        return (f"<VirtualClock now={self._now:g} wall={wall.isoformat()}"
                f" sleepers={len(self._sleepers)}>")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
