"""`executors.clock`: the public face of the clocks the library sleeps on."""

from __future__ import annotations

import time

import freezegun
import freezegun.config

from executors import clock
from executors.testing import VirtualClock, wait_until


def test_public_clock_keeps_real_time_under_freezegun() -> None:
    """`executors.clock.SYSTEM_CLOCK` is importable by a public name and reads real monotonic
    and wall time while freezegun freezes ``time`` everywhere (deadlines set on it by an
    integration, the cursor reaper's flush, never stall in a frozen test)."""
    saved = freezegun.config.settings.default_ignore_list
    freezegun.config.settings.default_ignore_list = []  # freeze callers near threading too
    try:
        frozen_ctx = freezegun.freeze_time("2020-01-01")
    finally:
        freezegun.config.settings.default_ignore_list = saved
    with frozen_ctx:
        assert time.time() == 1577836800.0  # time really is frozen for the test
        frozen_monotonic = time.monotonic()
        assert clock.SYSTEM_CLOCK.time() > 1577836800.0 + 86400
        start = clock.SYSTEM_CLOCK.monotonic()
        wait_until(lambda: clock.SYSTEM_CLOCK.monotonic() > start, timeout=2)
        assert time.monotonic() == frozen_monotonic


def test_clock_protocol_is_what_the_clocks_offer() -> None:
    """`Clock` names the four operations the library needs; the system clock and the test
    clock both provide them, and `SystemClock` is the system clock's type."""
    assert isinstance(clock.SYSTEM_CLOCK, clock.SystemClock)
    members = {"monotonic", "time", "boottime", "wait"}
    for candidate in (clock.SYSTEM_CLOCK, VirtualClock()):
        assert all(callable(getattr(candidate, m)) for m in members), candidate
    assert members <= set(dir(clock.Clock))
