"""A time budget for trigger searches made on this thread (the store loop's plans).

A search that can be long by construction (`executors.AllOf` asks its members round after
round until they agree) calls `check()` at each step; inside ``with budget(seconds):`` a search
that outlasts the budget raises `SearchTimeout` instead of holding its caller (and the store
lock the caller may hold) for as long as it takes. Outside a budget, `check()` costs one
attribute read and never raises.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

__all__ = ("SearchTimeout", "budget", "check")

_local = threading.local()


class SearchTimeout(TimeoutError):
    """A trigger search outlasted the budget it was given."""


@contextlib.contextmanager
def budget(seconds: float) -> Iterator[None]:
    """Give the trigger searches inside the block `seconds` (of real time) in all; nested
    budgets keep the earlier deadline."""
    previous = getattr(_local, "deadline", None)
    deadline = time.monotonic() + seconds
    _local.deadline = deadline if previous is None else min(previous, deadline)
    _local.seconds = seconds
    try:
        yield
    finally:
        _local.deadline = previous


def check() -> None:
    """Raise `SearchTimeout` if this thread's budget is spent (see `budget`)."""
    deadline = getattr(_local, "deadline", None)
    if deadline is not None and time.monotonic() > deadline:
        raise SearchTimeout(f"the trigger search took longer than its budget of "
                            f"{_local.seconds:g} s")
