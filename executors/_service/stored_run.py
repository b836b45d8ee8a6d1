"""A stored schedule's job: its link to the store loop, and the job made for a record
written elsewhere.

The store loop (`executors._service.stored`) runs each claim with the declared job's function
and the arguments of its declaration (never the record's: `executors._service.stored_trust`).
Only a record written elsewhere that ``serve=`` admits is run from its stored target
(``"module:qualname"``, imported then) and arguments, as a job made for it here
(`undeclared_job`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, final

from .job import ServiceHost
from .schedule_data import trigger_of
from .stored_trust import TrustLoop

if TYPE_CHECKING:
    from executors.stores import ScheduleDefinition

    from .job import Job, JobSlot
    from .wallclock import TriggerLike

__all__ = ("RunLoop", "StoreHost", "StoredLink", "WorkPool", "undeclared_job")


class _Runnable(Protocol):
    def run(self) -> None: ...


class WorkPool(Protocol):
    """The pool a store loop hands its claims to (`executors._service.pool.Pool`)."""

    threads: list[threading.Thread]

    def put(self, item: _Runnable) -> None: ...


class StoreHost(ServiceHost, Protocol):
    """What a store loop reads of its service (the scheduler): the context, the jobs, the
    pool its claims run on. A protocol, not the scheduler's class: the pool runs the loop's
    work items, so the loop stays beside the scheduler and its pool, never above them."""

    jobs: dict[str, Job]

    @property
    def pool(self) -> WorkPool: ...


class RunLoop(TrustLoop, Protocol):
    """What a stored schedule's job reads and calls of the store loop
    (`executors._service.stored`)."""

    @property
    def scheduler(self) -> ServiceHost: ...

    def post(self, message: object) -> None: ...

    def declare(self, definition: ScheduleDefinition, job: Job) -> None: ...


@final
class StoredLink:
    """What a stored schedule's `Job` control methods call (they go to the store loop)."""

    __slots__ = ("definition", "loop")

    def __init__(self, loop: RunLoop, definition: ScheduleDefinition) -> None:
        self.loop = loop
        self.definition = definition

    # The control protocol (`JobServer`): lock-free puts the store loop performs (cancel is
    # destructor-safe). The job's flags are only a copy: the store decides, and the store
    # loop announces what it did (no event here).

    def wake(self, slot: JobSlot) -> None:
        self.loop.post(("control", slot.job._name, "run-now"))

    def cancel(self, slot: JobSlot, first: bool) -> None:
        if first:
            self.loop.post(("control", slot.job._name, "remove"))

    def pause(self, slot: JobSlot, first: bool) -> None:
        self.loop.post(("control", slot.job._name, "pause"))

    def resume(self, slot: JobSlot, was_paused: bool) -> None:
        # Even if the copy says "not paused": a status read from before a pause may reset it.
        self.loop.post(("control", slot.job._name, "resume"))

    def interval_changed(self, slot: JobSlot) -> None:
        raise AssertionError("a stored schedule has a trigger, not an interval")

    def reschedule(self, slot: JobSlot, trigger: TriggerLike) -> None:
        """Declare the schedule again with the new trigger (a changed definition)."""
        definition = dataclasses.replace(self.definition, trigger=trigger.to_data())
        self.definition = definition
        job = slot.job
        wall = job._wall
        assert wall is not None
        wall.trigger = trigger
        self.loop.declare(definition, job)


def undeclared_job(loop: RunLoop, name: str, fn: Callable[..., object],
                   definition: ScheduleDefinition) -> Job:
    """A job for a record written elsewhere that ``serve=`` admits, served by `loop`."""
    from .job import NO_PUBLIC_CONSTRUCTOR, Job
    from .wallclock import WallState

    trigger = trigger_of(definition.trigger)
    wall = WallState(trigger, "latest", 100, None, None)
    job = Job(NO_PUBLIC_CONSTRUCTOR, loop.scheduler, fn, (), name, float("inf"), 0.0, 0.0,
              0.0, "continue", "skip", 0.0, False, "", wall)
    job._serve_from(StoredLink(loop, definition))
    return job
