"""Every timeout of the bridge follows the library's one rule (`executors._validate`).

None waits as long as it takes and ``math.inf`` means the same; NaN and negatives are
ValueErrors, bools and strings TypeErrors, each naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest

from executors.aio import Channel, Get, Semaphore
from integrations.bridge import Portal, SharedChannel, SharedSemaphore, select_blocking


@pytest.fixture
def portal() -> Iterator[Portal]:
    with Portal(name="timeouts") as opened:
        yield opened


def _entries(portal: Portal) -> dict[str, Callable[[object], object]]:
    """Calls that succeed at once when allowed to, each taking the timeout under test."""
    def loop_only_channel_get(timeout: object) -> object:
        view = portal.channel(Channel[int](1))
        view.send_nowait(1)
        return view.get(timeout=timeout)  # type: ignore[arg-type]

    def shared_channel_get(timeout: object) -> object:
        channel: SharedChannel[int] = SharedChannel(1)
        channel.send_nowait(1)
        return channel.blocking.get(timeout=timeout)  # type: ignore[arg-type]

    def shared_select(timeout: object) -> object:
        channel: SharedChannel[int] = SharedChannel(1)
        channel.send_nowait(1)
        return select_blocking(Get(channel), timeout=timeout)  # type: ignore[arg-type]

    return {
        "Portal.join": lambda t: Portal(name="never opened").join(t),  # type: ignore[arg-type]
        "Portal.semaphore().acquire": lambda t: portal.semaphore(Semaphore(1)).acquire(
            timeout=t),  # type: ignore[arg-type]
        "Portal.channel().get": loop_only_channel_get,
        "SharedSemaphore.blocking.acquire": lambda t: SharedSemaphore(1).blocking.acquire(
            timeout=t),  # type: ignore[arg-type]
        "SharedChannel.blocking.get": shared_channel_get,
        "select_blocking": shared_select,
    }


ENTRIES = ["Portal.join", "Portal.semaphore().acquire", "Portal.channel().get",
           "SharedSemaphore.blocking.acquire", "SharedChannel.blocking.get", "select_blocking"]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("value", [None, math.inf, 5])
def test_none_and_infinity_wait_as_long_as_it_takes(portal: Portal, entry: str,
                                                    value: object) -> None:
    """None, inf and a positive number are accepted (the call succeeds at once here).

    (0 is accepted too, but a Portal view's call with no time to wait may give up before the
    loop serves it, so it is not asserted to succeed.)
    """
    assert _entries(portal)[entry](value)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(("value", "error"), [
    (-1, ValueError), (math.nan, ValueError), (-math.inf, ValueError),
    (True, TypeError), ("1", TypeError)])
def test_bad_timeouts_are_refused_naming_the_argument(portal: Portal, entry: str, value: object,
                                                      error: type[Exception]) -> None:
    """NaN, negatives, bools and strings are refused with the argument named."""
    with pytest.raises(error, match="timeout"):
        _entries(portal)[entry](value)
