"""The clock protocol executors sleep on (``clock=``), and the real clock freezegun cannot stall.

`Clock` is what every ``clock=`` argument accepts (`executors.testing.VirtualClock` is one);
`SYSTEM_CLOCK` is the default: real monotonic, wall and boot time, read in a way that
time-freezing libraries do not replace, so a deadline of yours set on it is never stalled by a
frozen test clock (`integrations.mongo` bounds its cursor-kill flushes on it).

Example:
    >>> from executors.clock import SYSTEM_CLOCK
    >>> start = SYSTEM_CLOCK.monotonic()
    >>> SYSTEM_CLOCK.monotonic() >= start
    True
"""

from __future__ import annotations

from ._clock import SYSTEM_CLOCK as SYSTEM_CLOCK
from ._clock import Clock as Clock
from ._clock import SystemClock as SystemClock

__all__ = ("Clock", "SystemClock", "SYSTEM_CLOCK")
