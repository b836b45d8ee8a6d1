"""The clock protocol executors sleep on, and the real clock (immune to time-freezing libraries)."""

from __future__ import annotations

import queue
import threading
import time
from typing import Protocol, TypeVar

__all__ = ("Clock", "SystemClock", "SYSTEM_CLOCK")

T = TypeVar("T")


class Clock(Protocol):
    """What an executor needs from time: read it, and wait on a queue until a deadline.

    `wait` blocks until an item is available in `q` (and returns it) or `timeout` seconds of
    this clock's time have passed (and raises `queue.Empty`). Sleeping through the clock is what
    lets `executors.testing.VirtualClock` run schedules with no real sleeping.
    """

    def monotonic(self) -> float: ...

    def wait(self, q: queue.SimpleQueue[T], timeout: float) -> T: ...


class SystemClock:
    """The real monotonic clock; waits are `SimpleQueue.get(timeout=...)`, which never polls.

    `time.monotonic` is captured as a class attribute on purpose: freezegun rewrites module
    globals that alias `time` functions, so a frozen test clock would otherwise stall every
    background deadline (RUBY-1687: a cluster hung waiting for SDAM while time was frozen).
    Background machinery keeps real time; tests that want to drive it use `VirtualClock`.
    """

    __slots__ = ()
    _monotonic = staticmethod(time.monotonic)

    def monotonic(self) -> float:
        return self._monotonic()

    def wait(self, q: queue.SimpleQueue[T], timeout: float) -> T:
        return q.get(timeout=min(max(timeout, 0.0), threading.TIMEOUT_MAX))

    def __repr__(self) -> str:
        return "<SystemClock>"


SYSTEM_CLOCK = SystemClock()
