"""What a job's run knows about itself: `RunInfo` and `current_run()` (a context variable).

Every run of a job executes in a fresh `contextvars.Context` in which the run's context
variable is set before the job's function is called, so `current_run()` answers inside the run
(and in anything that copies its context, such as a thread started with
``contextvars.copy_context().run``) and returns None everywhere else.

An `every()` job's run gets its `RunInfo` built lazily, on the first `current_run()` call: the
hot path of a periodic job pays for one small object per run, not for a datetime.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from executors._clock import Clock

__all__ = ("RunInfo", "current_run", "enter_run", "EveryRun")

UTC = datetime.UTC


@dataclasses.dataclass(frozen=True, slots=True)
class RunInfo:
    """The run in progress, as `executors.current_run()` reports it inside a job.

    ``(name, fire_time)`` identifies a run: use it as an idempotency key for the run's effects
    (a schedule kept in a store hands each fire time out once, never each effect).
    """

    #: The job's name in its service (``every(name=...)``, ``schedule(name=...)``).
    name: str
    #: The instant the run was due for, aware, in UTC: the fire time of a wall-clock schedule
    #: (not the moment it started), or for an ``every()`` job the wall-clock time of its due
    #: time on the monotonic grid.
    fire_time: datetime.datetime
    #: 1 for the first attempt at this fire time (retries of the same fire time count up).
    attempt: int


@final
class EveryRun:
    """A lazily built `RunInfo` of an ``every()`` job: the due time is on the monotonic clock,
    and its wall-clock equivalent is computed (once) only if the run asks for it."""

    __slots__ = ("_clock", "_due", "_info", "_name")

    def __init__(self, name: str, due: float, clock: Clock) -> None:
        self._name = name
        self._due = due
        self._clock = clock
        self._info: RunInfo | None = None

    def info(self) -> RunInfo:
        info = self._info
        if info is None:
            clock = self._clock
            wall = clock.time() - (clock.monotonic() - self._due)
            info = self._info = RunInfo(
                self._name, datetime.datetime.fromtimestamp(wall, UTC), 1)
        return info


_CURRENT: contextvars.ContextVar[RunInfo | EveryRun | None] = contextvars.ContextVar(
    "executors_current_run", default=None)


def current_run() -> RunInfo | None:
    """The run of a `BackgroundService` job executing in this context, or None outside one.

    Example:
        >>> current_run() is None
        True
    """
    run = _CURRENT.get()
    if run is None or type(run) is RunInfo:
        return run
    return run.info()  # type: ignore[union-attr]


def enter_run(run: RunInfo | EveryRun, fn: Callable[..., object],
              args: tuple[object, ...]) -> object:
    """Inside a fresh context: mark the run, then call ``fn(*args)``."""
    _CURRENT.set(run)
    return fn(*args)
