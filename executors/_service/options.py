"""The arguments that add a job (`every`, `schedule`, `cron`): checked once, each error naming
its argument, and gathered in a `JobOptions` for the service to make the `Job` from."""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Mapping
from typing import TypedDict

from executors import _validate
from executors.stores import OnCrash
from executors.triggers import Cron, FoldPolicy, GapPolicy

from .job import OnError, Overrun, job_interval
from .limits import check_name
from .wallclock import Missed, WallOnError, WallState, wall_state

__all__ = ("CronOptions", "JobOptions", "cron_options", "every_options", "schedule_options",
           "unique_name")


class CronOptions(TypedDict, total=False):
    """`BackgroundService.cron`'s keyword options: the `executors.Cron` trigger's (`gap`,
    `fold`, `start`, `end`, `jitter`), then `BackgroundService.schedule`'s."""

    gap: GapPolicy
    fold: FoldPolicy
    start: datetime.datetime | None
    end: datetime.datetime | None
    jitter: float
    missed: Missed
    max_missed: int
    grace: float | None
    on_error: WallOnError
    since: datetime.datetime | None
    on_crash: OnCrash


_TRIGGER_KEYS = ("gap", "fold", "start", "end", "jitter")


@dataclasses.dataclass(frozen=True, slots=True)
class JobOptions:
    """A new job's checked options (`wall` is None for an ``every()`` job)."""

    interval: float
    min_interval: float
    jitter: float
    delay: float
    on_error: OnError
    overrun: Overrun
    backoff_max: float
    dedicated: bool
    wall: WallState | None = None
    #: A stored schedule's run whose owner crashed: ``"drop"`` or ``"rerun"``.
    on_crash: OnCrash = "drop"


def _check_name(name: object) -> None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, got {type(name).__name__}")
    if name is not None:
        # One rule for every job's name, stored or not: it is printed in the same logs.
        check_name(name)


def every_options(interval: object, min_interval: object, jitter: object, delay: object,
                  on_error: object, overrun: object, backoff_max: object, dedicated: object,
                  name: object) -> JobOptions:
    """`every()`'s arguments, checked (see `BackgroundService.every`)."""
    ival = job_interval(interval)
    mini = _validate.seconds(min_interval, "min_interval")
    jit = _validate.seconds(jitter, "jitter")
    dly = _validate.seconds(delay, "delay")
    bmax = _validate.seconds(backoff_max, "backoff_max")
    if mini > ival:
        raise ValueError(f"min_interval ({min_interval!r}) must not exceed interval "
                         f"({interval!r})")
    if jit > ival:
        raise ValueError(f"jitter ({jitter!r}) must not exceed interval ({interval!r})")
    if on_error not in ("continue", "stop", "backoff"):
        raise ValueError(
            f"on_error must be 'continue', 'stop' or 'backoff', got {on_error!r}")
    if overrun is not None and overrun not in ("skip", "catch_up"):
        raise ValueError(f"overrun must be 'skip' or 'catch_up', got {overrun!r}")
    if not isinstance(dedicated, bool):
        raise TypeError(f"dedicated must be a bool, got {type(dedicated).__name__}")
    if dedicated and (jit or dly or overrun is not None):
        raise ValueError("jitter, delay and overrun do not apply to a dedicated job: it "
                         "follows its PeriodicExecutor's schedule")
    _check_name(name)
    return JobOptions(ival, mini, jit, dly, on_error, overrun or "skip",
                      bmax, dedicated)


def schedule_options(trigger: object, missed: object, max_missed: object, grace: object,
                     on_error: object, since: object, name: object,
                     on_crash: object = "drop") -> JobOptions:
    """`schedule()`'s (and `cron()`'s) arguments, checked. A wall-clock job has no interval
    (``inf``: no run is an overrun of one) and shares the scheduler (never dedicated)."""
    state = wall_state(trigger, missed, max_missed, grace, since)
    if on_error not in ("continue", "stop"):
        raise ValueError("on_error must be 'continue' or 'stop' for a wall-clock job (its "
                         f"fire times do not move), got {on_error!r}")
    if on_crash not in ("drop", "rerun"):
        raise ValueError(f"on_crash must be 'drop' or 'rerun', got {on_crash!r}")
    _check_name(name)
    return JobOptions(math.inf, 0.0, 0.0, 0.0, on_error, "skip", 0.0,
                      False, state, on_crash)


#: The triggers `cron()` made, by their arguments (each with its kind: ``1`` and ``True`` are
#: not one argument): a trigger is an immutable value, so 10,000 schedules of sixty
#: expressions hold sixty. Past `_CRONS_MAX` distinct ones, each is made anew.
_CRONS: dict[tuple[object, ...], Cron] = {}
_CRONS_MAX = 4096


def _cron(expression: object, tz: object, extra: tuple[tuple[str, object], ...]) -> Cron:
    key = (type(expression), expression, type(tz), tz,
           *((k, type(v), v) for k, v in extra))
    try:
        known = _CRONS.get(key)
    except TypeError:  # an argument that cannot be a key: `Cron` says what is wrong with it
        known, key = None, ()
    if known is not None:
        return known
    trigger = Cron(expression, tz=tz, **dict(extra))  # type: ignore[arg-type]
    if key and len(_CRONS) < _CRONS_MAX:
        _CRONS[key] = trigger
    return trigger


def cron_options(expression: object, tz: object, name: object,
                 options: Mapping[str, object]) -> JobOptions:
    """`cron()`'s arguments: its `Cron` trigger, made and checked, and `schedule()`'s options."""
    unknown = sorted(set(options) - CronOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"cron() got an unexpected keyword argument {unknown[0]!r}")
    trigger = _cron(expression, tz, tuple((k, options[k]) for k in _TRIGGER_KEYS if k in options))
    return schedule_options(trigger, options.get("missed", "latest"),
                            options.get("max_missed", 100), options.get("grace"),
                            options.get("on_error", "continue"), options.get("since"), name,
                            options.get("on_crash", "drop"))


def unique_name(fn: Callable[..., object], jobs: Mapping[str, object],
                counts: dict[str, int]) -> str:
    """A default job name: the function's qualified name, with ``#n`` added when taken.

    A counter per base name (`counts`) keeps adding many jobs of one function O(1) each.
    """
    base = getattr(fn, "__qualname__", None) or type(fn).__name__
    n = counts.get(base, 0)
    name = base if n == 0 else f"{base}#{n + 1}"
    while name in jobs:
        n += 1
        name = f"{base}#{n + 1}"
    counts[base] = n + 1
    return name
