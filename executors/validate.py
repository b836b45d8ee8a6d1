"""The one rule for seconds, timeouts and counts, for code built on the library.

Every public entry point of `executors` checks its durations, timeouts and counts with these
functions; an adapter or a store of your own that takes such arguments checks them the same
way, so a caller meets one rule and one kind of message everywhere: a duration is a finite
real number of seconds ``>= 0`` (``bool`` refused), a timeout is ``None``, ``math.inf`` or a
duration, a count an ``int`` at or above its minimum. ``TypeError`` for the wrong kind,
``ValueError`` for a value out of range, naming the argument.

Example:
    >>> from executors.validate import timeout
    >>> timeout(2, "grace")
    2.0
    >>> timeout(-1, "grace")
    Traceback (most recent call last):
    ...
    ValueError: grace must be >= 0 seconds or None, got -1
"""

from __future__ import annotations

from ._validate import count as count
from ._validate import seconds as seconds
from ._validate import timeout as timeout

__all__ = ("seconds", "timeout", "count")
