"""The one rule for seconds, timeouts and counts, checked at every public entry point.

The rule, after asyncio's:

- A **duration** (an interval, a grace period, a delay) is a real number of seconds, finite, not
  NaN, ``>= 0`` (or ``> 0`` where zero has no meaning). ``bool`` is refused although it is an
  ``int``: ``interval=True`` is a mistake, never one second.
- A **timeout** is ``None`` (wait as long as it takes) or a duration. ``math.inf`` is accepted and
  means exactly what ``None`` means: it is what a caller computing a remaining time naturally
  produces, and ``asyncio.timeout``/``threading.Condition.wait`` treat it so. Negative values and
  NaN are errors (``threading.Lock.acquire``'s ``-1`` convention is not carried over).
- A **count** is an ``int`` (not ``bool``) at or above its minimum.

Errors are ``TypeError`` for the wrong kind and ``ValueError`` for a value out of range, and the
message names the argument as the caller wrote it (pass ``name="--grace"`` from a command line).
Stdlib only: the registry and the coordinator use it too.
"""

from __future__ import annotations

import math

__all__ = ("seconds", "timeout", "count")


def seconds(value: object, name: str, *, allow_zero: bool = True) -> float:
    """Return `value` as a finite number of seconds ``>= 0`` (``> 0`` without `allow_zero`).

    Raises:
        TypeError: `value` is not an int or float (or is a bool).
        ValueError: `value` is NaN, infinite or negative (or zero, without `allow_zero`).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    result = float(value)
    if math.isnan(result) or math.isinf(result):
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if result < 0 or (result == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} seconds, got {value!r}")
    return result


def timeout(value: object, name: str = "timeout") -> float | None:
    """Return None (no limit) or a number of seconds ``>= 0``; ``math.inf`` is returned as None.

    Raises:
        TypeError: `value` is not None, an int or a float (or is a bool).
        ValueError: `value` is NaN or negative.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds or None, got {type(value).__name__}")
    result = float(value)
    if math.isnan(result) or result < 0:
        raise ValueError(f"{name} must be >= 0 seconds or None, got {value!r}")
    return None if math.isinf(result) else result


def count(value: object, name: str, *, minimum: int = 1) -> int:
    """Return `value` as an int ``>= minimum``.

    Raises:
        TypeError: `value` is not an int (or is a bool).
        ValueError: `value` is below `minimum`.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return value
