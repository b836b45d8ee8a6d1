"""The scheduler's wall-clock jobs: their deadlines on the monotonic clock, their runs, jumps.

`WallSlots` is the part of a service's `Scheduler` that owns its wall-clock jobs: the set of
them (while there is one, the scheduler watches the clocks and sleeps at most
`wallclock.MAX_SLEEP`), the clock watch, and what happens at a job's start, resume, deadline
and end. The policy it applies (fire times, `decide`, the walk, jump detection, the one
missed-run announcement) is `executors._service.wallclock`'s, pure and shared with the
stores; the heap stays the scheduler's (`recompute` is given its `schedule`).
"""

from __future__ import annotations

import datetime
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, final

from .events import ClockChanged, ScheduleRemoved
from .run_info import RunInfo
from .wallclock import (
    EARLY,
    WALK_BOUND,
    ClockWatch,
    WallState,
    announce_missed,
    decide,
    utc,
)

if TYPE_CHECKING:
    from .context import ServiceContext
    from .job import Job, JobSlot

__all__ = ("Schedule", "WallSlots")

logger = logging.getLogger("executors.service")

#: The scheduler's heap push: (slot, monotonic deadline, now), no jitter.
Schedule = Callable[["JobSlot", float, float], None]


@final
class WallSlots:
    """A scheduler's wall-clock jobs (`slots`, under the context's lock) and their clock watch.

    Its methods are the scheduler's: called with the lock held where they say so, and
    `run_due` on the thread that runs the job (pool or scheduler), one run at a time per job.
    """

    __slots__ = ("clock", "context", "events", "monotonic", "slots", "watch")

    def __init__(self, context: ServiceContext) -> None:
        self.context = context
        # Fixed for the service's life (the lock and the flags are read from the context:
        # a fork renews the lock).
        self.clock = context.clock
        self.monotonic = context.monotonic
        self.events = context.events
        self.slots: set[JobSlot] = set()
        self.watch = ClockWatch(context.clock)

    def add(self, slot: JobSlot, now: float) -> None:
        """A wall-clock job is scheduled. Caller holds the lock."""
        if not self.slots:
            self.watch.reset(now)  # the first wall-clock job: the drifts start from here
        self.slots.add(slot)

    def first_due(self, job: Job, mono: float) -> float | None:
        """The monotonic deadline of a starting job's pending fire time (None: none is left).

        The first fire time is the trigger's first after ``since`` (fire times from then to now
        passed unwatched: missed, reason ``"stopped"``), else after now. Caller holds the lock.
        """
        state = job._wall
        assert state is not None
        wall = self.clock.time()
        if state.fire is None and state.handled is None:
            since = state.since
            try:
                fire = state.trigger.next_after(utc(wall) if since is None else since)
            except Exception as exc:
                _trigger_failed(job, exc, mono)
                return None
            state.set_fire(fire)
            if since is not None and fire is not None and state.fire_ts <= wall:
                state.unwatched = ("stopped", wall)
        if state.fire is None:
            return None
        return mono + (state.fire_ts - wall)

    def recompute(self, mono: float, change: tuple[str, float, float],
                  schedule: Schedule) -> None:
        """A jump was seen: log and announce it, mark the fire times it passed, recompute every
        pending wall-clock deadline."""
        kind, seconds, wall = change
        logger.warning("%s: the wall clock moved %+.3f s against the monotonic clock (%s); "
                       "wall-clock schedules recomputed", self.context.name, seconds, kind)
        reason = "suspended" if kind == "suspend" else "clock_jump"
        with self.context.lock:
            for slot in list(self.slots):
                state = slot.job._wall
                if state is None or state.fire is None:
                    continue
                if seconds > 0 and state.fire_ts <= wall and state.unwatched is None:
                    state.unwatched = (reason, wall)
                if slot.due is not None and not slot.running:
                    schedule(slot, mono + (state.fire_ts - wall), mono)
        if ClockChanged in self.events.wanted:
            self.events.emit(ClockChanged(kind, seconds))

    def resume(self, slot: JobSlot, mono: float) -> tuple[float | None, int]:
        """A paused wall-clock job resumes: fire times that passed while it was paused are skipped
        by intent (counted, not run, no missed policy). (its deadline or None, skipped count).
        Caller holds the lock."""
        state = slot.job._wall
        assert state is not None
        wall = self.clock.time()
        skipped = 0
        fire = state.fire
        while fire is not None and state.fire_ts <= wall:
            skipped += 1
            state.handled = fire
            if skipped >= WALK_BOUND:
                fire = state.trigger.next_after(utc(wall))
            else:
                fire = state.trigger.next_after(fire)
            state.set_fire(fire)
        state.paused_skipped += skipped
        state.unwatched = None
        if fire is None:
            return None, skipped
        return mono + (state.fire_ts - wall), skipped

    def run_due(self, slot: JobSlot) -> tuple[float, float | None]:
        """Handle a wall-clock job whose deadline came: (end, the next deadline or None: finished).

        Runs on the pool or the scheduler thread, like any run of a shared job (never two at
        once for one job). Trigger errors stop the job (state ``"failed"``), logged and counted.
        """
        job = slot.job
        state = job._wall
        assert state is not None
        clock = self.clock
        monotonic = self.monotonic
        wall = clock.time()
        fire = state.fire
        if fire is None:
            return monotonic(), None
        fire_ts = state.fire_ts
        if wall < fire_ts - EARLY:
            # Woken before the fire time: a wake() (run once, now, out of schedule), a step back
            # of the wall clock, or slewing. The pending fire time stays.
            mono = monotonic()
            if slot.wake_run:
                slot.wake_run = False
                _, mono = job._run_once(mono, mono, monotonic, RunInfo(job._name, utc(wall), 1))
                wall = clock.time()
            return mono, mono + (fire_ts - wall)
        slot.wake_run = False
        trigger = state.trigger
        try:
            nxt = trigger.next_after(fire)
        except Exception as exc:
            return _trigger_failed(job, exc, monotonic())
        nxt_ts = math.inf if nxt is None else nxt.timestamp()
        grace = state.grace
        last, last_ts = fire, fire_ts
        if nxt_ts > wall and state.unwatched is None and (grace is None or wall - fire_ts <= grace):
            # The common case: one fire time due, watched and in grace: run it.
            state.handled = state.last_fire = fire
            start = monotonic()
            job._run_once(start, start - (wall - fire_ts), monotonic, RunInfo(job._name, fire, 1))
            ran = True
        else:
            try:
                last, nxt, ran = self._run_group(job, state, wall, nxt)
            except Exception as exc:
                return _trigger_failed(job, exc, monotonic())
            last_ts = last.timestamp()
            nxt_ts = math.inf if nxt is None else nxt.timestamp()
        try:
            if state.trigger is not trigger or state.floor > last_ts:
                # Rescheduled meanwhile: from the later of the last fire handled and the change.
                nxt = state.trigger.next_after(last if state.floor <= last_ts else utc(state.floor))
                nxt_ts = math.inf if nxt is None else nxt.timestamp()
            if nxt_ts <= last_ts:
                raise ValueError(f"the trigger's next_after({last.isoformat()}) returned "
                                 f"{nxt}, not a later instant")
        except Exception as exc:
            return _trigger_failed(job, exc, monotonic())
        state.fire = nxt
        state.fire_ts = nxt_ts
        end = monotonic()
        if nxt is None:
            return end, None
        wall_end = clock.time()
        if ran and nxt_ts < wall_end:
            job._overran()  # the run ended after the next fire time
        return end, end + (nxt_ts - wall_end)

    def _run_group(self, job: Job, state: WallState, wall: float,
                   nxt: datetime.datetime | None
                   ) -> tuple[datetime.datetime, datetime.datetime | None, bool]:
        """Several fire times are due, or the pending one is missed: count the misses, apply the
        policy. Returns (the latest fire time handled, the next one, whether anything ran)."""
        first = state.fire
        assert first is not None
        unwatched = state.unwatched
        state.unwatched = None
        d = decide(state.trigger, first, nxt, wall, state.missed, state.max_missed, state.grace,
                   unwatched)
        if d.missed:
            announce_missed(self.events, "job", job._name, state, d.missed, d.ran, first,
                            d.last_missed, d.reason, state.missed, d.truncated)
        state.handled = last = d.last
        clock = self.clock
        monotonic = self.monotonic
        for fire in d.runs:
            start = monotonic()
            due = start - (clock.time() - fire.timestamp())
            state.last_fire = fire
            job._run_once(start, due, monotonic, RunInfo(job._name, fire, 1))
            if job._stopped or job._cancelled or job._paused or self.context.closing:
                break
        return last, d.next_fire, bool(d.runs)

    def finished(self, slot: JobSlot) -> None:
        """The trigger has no fire time left: the job ends (state "finished"). Caller holds the
        lock."""
        job = slot.job
        slot.token += 1
        slot.due = None
        self.slots.discard(slot)
        if job._stopped or job._cancelled:
            return  # "failed" or "cancelled" says it already
        job._set_flags(finished=True)
        if ScheduleRemoved in self.events.wanted:
            self.events.emit(ScheduleRemoved(job._name, "finished"))

    def __repr__(self) -> str:
        return f"<WallSlots jobs={len(self.slots)}>"


def _trigger_failed(job: Job, exc: Exception, mono: float) -> tuple[float, None]:
    """A trigger raised (or went backwards): stop the job, as ``on_error="stop"`` would."""
    job._trigger_failed(exc)
    logger.error("job %r: its trigger failed; stopping it", job._name, exc_info=exc)
    return mono, None
