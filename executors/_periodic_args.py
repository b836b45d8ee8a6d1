"""The constructor arguments both periodic executors share, checked by one rule.

`executors.periodic.PeriodicExecutor` (threads) and `executors.aio.periodic.AsyncPeriodicExecutor`
(one event loop) take the same schedule: `interval`, `min_interval`, a `target`, a `name` and
`on_error`. Their checks and messages live here so the two cannot drift apart. Imports nothing
but `_validate` (no threading, no asyncio): both halves of the package may use it.
"""

from __future__ import annotations

from typing import Literal

from . import _validate

__all__ = ("OnError", "check")

#: What a periodic executor does when its target raises: log it and keep the schedule, or stop.
OnError = Literal["continue", "stop"]


def check(interval: object, min_interval: object, target: object, name: object,
          on_error: object) -> tuple[float, float]:
    """Check a periodic executor's schedule arguments; return ``(interval, min_interval)``.

    Raises:
        TypeError: a duration is not a number, `target` is not callable, or `name` is neither
            a str nor None.
        ValueError: a duration is not finite and >= 0 (`executors._validate`'s rule),
            `min_interval` exceeds `interval`, or `on_error` is not ``"continue"``/``"stop"``.
    """
    seconds = _validate.seconds(interval, "interval")
    minimum = _validate.seconds(min_interval, "min_interval")
    if minimum > seconds:
        raise ValueError(
            f"min_interval ({min_interval!r}) must not exceed interval ({interval!r}): "
            "it throttles early wake-ups between regular runs"
        )
    if not callable(target):
        raise TypeError(f"target must be callable, got {type(target).__name__}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    if on_error not in ("continue", "stop"):
        raise ValueError(f"on_error must be 'continue' or 'stop', got {on_error!r}")
    return seconds, minimum
