"""The clock protocol executors sleep on, and the real clock (immune to time-freezing libraries)."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Protocol, TypeVar

__all__ = ("Clock", "SystemClock", "SYSTEM_CLOCK")

T = TypeVar("T")


#: A test hook, not a feature: seconds added to the service's wall clock in this process
#: (read once, at import), and to the SQLite store's clock, which is this process's clock
#: too (``julianday('now')`` reads it in the process running the statement). The race tests
#: of schedules kept in a store skew each process with it: on a server store no process's
#: clock decides who runs a fire time; on SQLite each process's does (the Schedules page).
SKEW_ENV = "EXECUTORS_TEST_WALL_SKEW"


def wall_skew() -> float:
    """The `SKEW_ENV` test hook's seconds (0.0 when unset)."""
    return float(os.environ.get(SKEW_ENV) or 0.0)


def _skewed(read: Callable[[], float]) -> Callable[[], float]:
    skew = wall_skew()
    if not skew:
        return read
    return lambda: read() + skew


def _real_time() -> Callable[[], float]:
    """The wall clock, read in a way freezegun does not replace (plus the `SKEW_ENV` test hook).

    freezegun swaps ``time.time`` (and module globals aliasing it) for its frozen clock, but it
    leaves ``time.clock_gettime`` alone: reading ``CLOCK_REALTIME`` through it gives real
    wall time even when this module is first imported inside a ``freeze_time`` block. Where
    ``clock_gettime`` is missing (Windows), ``time.time`` as captured at import.
    """
    realtime = getattr(time, "CLOCK_REALTIME", None)
    if realtime is not None and hasattr(time, "clock_gettime"):
        return _skewed(partial(time.clock_gettime, realtime))
    return _skewed(time.time)


def _real_boottime() -> Callable[[], float]:
    """``CLOCK_BOOTTIME`` (Linux: monotonic, but it keeps counting during a suspend), else the
    monotonic clock (then a suspend is seen as a step of the wall clock, see the service)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is not None and hasattr(time, "clock_gettime"):
        return partial(time.clock_gettime, boottime)
    return time.monotonic


class Clock(Protocol):
    """What an executor needs from time: read it, and wait on a queue until a deadline.

    `wait` blocks until an item is available in `q` (and returns it) or `timeout` seconds of
    this clock's time have passed (and raises `queue.Empty`). Sleeping through the clock is what
    lets `executors.testing.VirtualClock` run schedules with no real sleeping.

    Three readings, never mixed: `monotonic` paces every sleep; `time` (wall time, seconds
    since the Unix epoch) places the fire times of wall-clock schedules; `boottime` (a
    monotonic clock that keeps counting during a suspend) tells a suspend from a step of the
    wall clock. The service compares the three at each wake-up (see
    `executors.BackgroundService.schedule`).
    """

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def boottime(self) -> float: ...

    def wait(self, q: queue.SimpleQueue[T], timeout: float) -> T: ...


class SystemClock:
    """The real clocks; waits are `SimpleQueue.get(timeout=...)`, which never polls.

    `time.monotonic` is captured as a class attribute on purpose: freezegun rewrites module
    globals that alias `time` functions, so a frozen test clock would otherwise stall every
    background deadline (RUBY-1687: a cluster hung waiting for SDAM while time was frozen).
    The wall clock is kept real for the same reason: the scheduler places a cron fire time by
    ``fire - time()`` and compares ``time()`` against the monotonic clock to see clock steps,
    so a frozen wall clock would look like a clock stepping back by the elapsed time at every
    wake-up, and no wall-clock schedule would fire. A user's code inside a job still sees the
    frozen time it asked for (``datetime.now()``, ``time.time()``); only the service's own
    bookkeeping reads real time. Tests that want to drive the service use `VirtualClock`.
    """

    __slots__ = ()
    _monotonic = staticmethod(time.monotonic)
    _time = staticmethod(_real_time())
    _boottime = staticmethod(_real_boottime())
    # The readings are the captured functions themselves, not methods calling them: a
    # reading costs no Python call (the store loop and every run read the clock).
    #: The real monotonic clock.
    monotonic = _monotonic
    #: Real wall time, seconds since the Unix epoch (``CLOCK_REALTIME``).
    time = _time
    #: ``CLOCK_BOOTTIME`` where the OS has it (Linux), else the monotonic clock.
    boottime = _boottime

    def wait(self, q: queue.SimpleQueue[T], timeout: float) -> T:
        return q.get(timeout=min(max(timeout, 0.0), threading.TIMEOUT_MAX))

    def __repr__(self) -> str:
        return "<SystemClock>"


SYSTEM_CLOCK = SystemClock()
