"""A stored schedule's job: its link to the store loop, and running one claimed fire time.

The store loop (`executors._service.stored`) puts an `InFlight` on the pool for each claim: it
runs the declared job's function with the arguments of its declaration (never the record's:
`executors._service.stored_trust`), with `executors.current_run()` set, and hands the run's
end to the loop, which writes it to the store fenced by the claim. Only a record written
elsewhere that ``serve=`` admits is run from its stored target (``"module:qualname"``,
imported then) and arguments, as a job made for it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, final

from .schedule_data import resolve_target, trigger_of
from .stored_trust import TrustLoop, give_back

if TYPE_CHECKING:
    from executors.stores import Claim, ScheduleDefinition

    from .job import Job, JobSlot, ServiceHost
    from .wallclock import TriggerLike

__all__ = ("UNKNOWN", "InFlight", "RunLoop", "StoredLink", "run_claim")

logger = logging.getLogger("executors.service")


#: A claim whose next fire time its planner did not give (a rerun of a crashed owner's run).
UNKNOWN = -math.inf


@dataclasses.dataclass(slots=True)
class InFlight:
    """A claim of this process, from its claim until its completion is written; and the pool's
    work item that runs it (`run`): one object per claim, made once, on the loop's hand-off."""

    loop: RunLoop = dataclasses.field(repr=False, compare=False)
    claim: Claim
    renew_at: float  # monotonic
    # The record's next fire time after this claim (epoch seconds on the store's clock; None:
    # none; UNKNOWN: not planned here): its completion wakes the loop only if that is
    # before the loop's wake-up.
    next_fire: float | None = UNKNOWN
    lost: bool = False
    started: bool = False  # a pool thread took the run (set before it runs anything)

    def run(self) -> None:
        """Run the claim (on a pool thread) and record its end."""
        run_claim(self.loop, self.claim)


class RunLoop(TrustLoop, Protocol):
    """What a stored schedule's job and runs read and call of the store loop
    (`executors._service.stored`)."""

    #: This process's claims, by (name, version).
    in_flight: dict[tuple[str, int], InFlight]
    #: The store's clock minus this process's wall clock, at the latest read (seconds).
    offset: float

    @property
    def scheduler(self) -> ServiceHost: ...

    def post(self, message: object) -> None: ...

    def declare(self, definition: ScheduleDefinition, job: Job) -> None: ...

    def complete(self, claim: Claim, result: str) -> None: ...


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


def run_claim(loop: RunLoop, claim: Claim) -> None:
    """Run one claimed fire time (on a pool thread) and record its end."""
    scheduler = loop.scheduler
    with loop.lock:
        flight = loop.in_flight.get((claim.name, claim.version))
        if flight is not None:
            flight.started = True  # not given back at close: it runs, and completes
        job = loop.jobs.get(claim.name)
    link = job._stored if job is not None else None
    if job is not None and link is not None:
        # Declared here: the code's function and arguments, whatever the record holds.
        fn: Callable[..., object] = job._fn
        definition = link.definition
    else:
        definition = claim.definition
        if not loop.trust.claimable.admits_target(definition.target):
            # Removed here since the loop let it run: never imported, never run.
            with loop.lock:
                loop.in_flight.pop((claim.name, claim.version), None)
            give_back(loop, claim)
            return
        try:
            fn = resolve_target(definition.target)
        except Exception as exc:
            logger.error("%s: stored schedule %r: its target %s does not import here (%s)",
                         loop.name, claim.name, definition.target, exc)
            loop.complete(claim, f"error: {type(exc).__name__}: {exc}"[:500])
            return
        job = _undeclared_job(loop, claim.name, fn, definition)
    clock = scheduler.clock
    monotonic = scheduler.monotonic
    start = monotonic()
    # Lateness against the store's clock (the offset measured at the latest read).
    lateness = clock.time() + loop.offset - claim.fire_time.timestamp()
    call = functools.partial(fn, *definition.args, **definition.kwargs)
    wall = job._wall
    if wall is not None:
        wall.last_fire = claim.fire_time
    # The claim marks the run: `current_run()` reads it into a RunInfo if it is asked.
    failed, _ = job._run_once(start, start - max(0.0, lateness), monotonic, claim, call)
    result = "ok" if not failed else f"error: {job._last_error}"[:500]
    loop.complete(claim, result)
    if failed and definition.options.get("on_error") == "stop":
        job._set_flags(stopped=True)
        loop.post(("control", claim.name, "pause"))


def _undeclared_job(loop: RunLoop, name: str, fn: Callable[..., object],
                    definition: ScheduleDefinition) -> Job:
    from .job import NO_PUBLIC_CONSTRUCTOR, Job
    from .wallclock import WallState

    trigger = trigger_of(definition.trigger)
    wall = WallState(trigger, "latest", 100, None, None)
    job = Job(NO_PUBLIC_CONSTRUCTOR, loop.scheduler, fn, (), name, float("inf"), 0.0, 0.0,
              0.0, "continue", "skip", 0.0, False, "", wall)
    job._serve_from(StoredLink(loop, definition))
    return job
