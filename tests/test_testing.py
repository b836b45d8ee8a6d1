"""`executors.testing`: `free_port`, `VirtualClock`'s wall clock (`jump`, `suspend`) and the real
clocks it stands in for.

`VirtualClock`'s monotonic sleeping and `wait_until` are pinned where they drive executors
(`test_periodic.py`, `test_service.py`, `test_validate_entry_points.py`); the wall clock driving
schedules in `test_service_schedules.py`.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import queue
import socket
import threading
import time

import pytest

from executors._clock import SYSTEM_CLOCK
from executors.testing import DEFAULT_WALL, VirtualClock, free_port


def test_free_port_is_released_for_the_caller_to_bind() -> None:
    """The port is a valid TCP port on loopback that a server can bind and listen on at once:
    the probing socket is closed before the function returns."""
    port = free_port()
    assert isinstance(port, int)
    assert 0 < port < 65536
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen(1)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass


def test_free_port_has_no_listener() -> None:
    """Nothing listens on the returned port: a connection to it is refused."""
    port = free_port()
    with pytest.raises(ConnectionRefusedError), socket.socket() as client:
        client.settimeout(5)
        client.connect(("127.0.0.1", port))



# -- VirtualClock's wall clock, and the real clocks ---------------------------------------------


def test_virtual_wall_clock_starts_at_the_given_instant() -> None:
    """`wall` sets the wall clock's start (an aware datetime, any zone); by default it is the
    fixed `DEFAULT_WALL`; boot time starts at `start`, like the monotonic clock."""
    berlin = datetime.timezone(datetime.timedelta(hours=1))
    clock = VirtualClock(5.0, wall=datetime.datetime(2024, 3, 1, 13, 0, tzinfo=berlin))
    assert clock.time() == datetime.datetime(2024, 3, 1, 12, 0, tzinfo=datetime.UTC).timestamp()
    assert (clock.monotonic(), clock.boottime()) == (5.0, 5.0)
    assert VirtualClock().time() == DEFAULT_WALL.timestamp()
    assert "wall=2024-03-01T12:00:00+00:00" in repr(clock)


def test_virtual_clock_refuses_a_naive_or_odd_wall_and_start() -> None:
    """A naive `wall`, a `wall` that is not a datetime, or a non-finite `start` is refused,
    naming the argument."""
    with pytest.raises(ValueError, match="wall"):
        VirtualClock(wall=datetime.datetime(2024, 1, 1))
    with pytest.raises(TypeError, match="wall"):
        VirtualClock(wall="2024-01-01T00:00:00Z")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="start"):
        VirtualClock(math.inf)
    with pytest.raises(TypeError, match="start"):
        VirtualClock(True)


def test_advance_moves_all_three_clocks_jump_only_the_wall_suspend_not_monotonic() -> None:
    """advance() moves monotonic, wall and boot time together; jump() steps the wall clock
    alone, either way (an NTP step); suspend() moves wall and boot time and leaves the
    monotonic clock where it was (Linux's CLOCK_MONOTONIC stops during a suspend)."""
    clock = VirtualClock()
    wall0 = clock.time()
    clock.advance(10)
    assert (clock.monotonic(), clock.boottime(), clock.time() - wall0) == (10, 10, 10)
    clock.jump(-3600)
    assert (clock.monotonic(), clock.boottime(), clock.time() - wall0) == (10, 10, -3590)
    clock.jump(7200)
    clock.suspend(100)
    assert (clock.monotonic(), clock.boottime(), clock.time() - wall0) == (10, 110, 3710)


@pytest.mark.parametrize(("method", "value", "error"), [
    ("jump", math.nan, ValueError), ("jump", math.inf, ValueError), ("jump", "1", TypeError),
    ("jump", True, TypeError), ("suspend", -1, ValueError), ("suspend", math.nan, ValueError),
    ("suspend", None, TypeError),
])
def test_jump_and_suspend_refuse_bad_seconds(method: str, value: object,
                                             error: type[Exception]) -> None:
    """jump() takes any finite number of seconds (negative steps back); suspend() a finite
    number >= 0; anything else is an error naming `seconds`, and the clock does not move."""
    clock = VirtualClock()
    with pytest.raises(error, match="seconds"):
        getattr(clock, method)(value)
    assert (clock.time(), clock.boottime()) == (DEFAULT_WALL.timestamp(), 0.0)


def test_sleepers_do_not_wake_on_a_jump_or_a_suspend() -> None:
    """A thread sleeping on the clock wakes when the monotonic clock reaches its deadline,
    not when the wall clock jumps or the machine is suspended (as a real monotonic sleep)."""
    clock = VirtualClock()
    q: queue.SimpleQueue[object] = queue.SimpleQueue()
    woke: list[float] = []

    def sleeper() -> None:
        with contextlib.suppress(queue.Empty):
            clock.wait(q, 10)
        woke.append(clock.monotonic())

    t = threading.Thread(target=sleeper)
    t.start()
    clock.wait_for_sleepers(1)
    clock.jump(3600)
    clock.suspend(3600)
    assert clock.sleepers == 1 and woke == []
    clock.advance(10)
    t.join(5)
    assert woke == [10.0]


def test_system_clock_reads_real_wall_and_boot_time_even_under_freezegun() -> None:
    """SYSTEM_CLOCK.time() is real wall time and boottime() a monotonic clock that counts a
    suspend (or the monotonic clock itself where the OS has none); freezegun's frozen time does
    not reach them, so the service's wall-clock deadlines never stall in a user's test."""
    import freezegun

    before = time.time()
    with freezegun.freeze_time("2020-01-01"):
        assert time.time() == datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC).timestamp()
        wall = SYSTEM_CLOCK.time()
        boot = SYSTEM_CLOCK.boottime()
    assert before - 1 <= wall <= time.time() + 1
    assert boot >= SYSTEM_CLOCK.monotonic() - 1  # boot time never runs behind monotonic
    assert SYSTEM_CLOCK.boottime() >= boot
