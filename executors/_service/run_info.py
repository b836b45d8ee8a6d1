"""What a job's run knows about itself: `RunInfo` and `current_run()` (a context variable).

Every run of a job executes in a fresh `contextvars.Context` in which the run's context
variable is set before the job's function is called, so `current_run()` answers inside the run
(and in anything that copies its context, such as a thread started with
``contextvars.copy_context().run``) and returns None everywhere else.

An `every()` job's run gets its `RunInfo` built lazily, on the first `current_run()` call: the
hot path of a periodic job pays for one small list per run, not for a datetime. A stored
schedule's run is marked with its claim (a `Fired`: name, fire time, attempt), read into a
`RunInfo` only when asked for.
"""

from __future__ import annotations

import contextvars
import dataclasses
import datetime
from typing import Any, Protocol

__all__ = ("EveryRun", "Fired", "RunInfo", "current_run", "mark_run", "resolve")

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


class Fired(Protocol):
    """A run that knows its fire time (`executors.stores.Claim`): read into a `RunInfo` when
    `current_run()` asks."""

    @property
    def name(self) -> str: ...

    @property
    def fire_time(self) -> datetime.datetime: ...

    @property
    def attempt(self) -> int: ...


#: An ``every()`` run, built per run on the hot path as a list (cheaper than any object):
#: ``[name, due (monotonic), clock, RunInfo or None]``; the `RunInfo` is computed once, on the
#: first `current_run()` of the run, and kept in the last item so every call agrees.
EveryRun = list


def resolve(run: RunInfo | EveryRun[Any] | Fired) -> RunInfo:
    """The `RunInfo` of a run (computing an ``every()`` run's once)."""
    if type(run) is RunInfo:
        return run
    if type(run) is list:
        info: RunInfo | None = run[3]
        if info is None:
            name, due, clock = run[0], run[1], run[2]
            wall = clock.time() - (clock.monotonic() - due)
            info = run[3] = RunInfo(name, datetime.datetime.fromtimestamp(wall, UTC), 1)
        return info
    # A claim: its fields are the run's, and as fixed (each answer is equal).
    return RunInfo(run.name, run.fire_time, run.attempt)  # type: ignore[union-attr]


_CURRENT: contextvars.ContextVar[RunInfo | EveryRun[Any] | Fired | None] = contextvars.ContextVar(
    "executors_current_run", default=None)


def current_run() -> RunInfo | None:
    """The run of a `BackgroundService` job executing in this context, or None outside one.

    Example:
        >>> current_run() is None
        True
    """
    run = _CURRENT.get()
    return None if run is None else resolve(run)


#: Mark the run of the context it is run in (``context.run(mark_run, run)``): a job's run
#: marks its fresh context with it, then calls its function there, with no frame between.
mark_run = _CURRENT.set
