"""The scheduler thread of a `BackgroundService`: a deadline heap, its control messages, runs.

One thread sleeps on the heap's earliest deadline through the clock (``SimpleQueue.get`` with
a timeout: it never polls) and hands due runs to the pool (`executors._service.pool`), or runs light
ones itself. Everything else talks to it by a message in its queue, lock-free:

- `Signal.NUDGE`: the heap changed, re-read the earliest deadline; `Signal.CLOSE`: stop.
- `Wake(slot)` and `Cancel(slot)`: a job's `wake()` and `cancel()` (destructor-safe: a put).

Wall-clock jobs (``schedule()``, ``cron()``) sit on the same heap, at the monotonic deadline of
their next fire time; the scheduler's `WallSlots` (`executors._service.wall_slots`) computes
those deadlines, watches the clocks for jumps at each wake-up and handles missed fire times,
by the pure policy of `executors._service.wallclock`. The loop pays for it only while such
jobs exist (`WallSlots.slots`).

The queue stays bounded whatever the load: a job has at most one `Wake` queued (its slot's
`wake_posted` flag) and one `Cancel` (a job is cancelled once), and nudges coalesce into one
(`nudge_posted`). Messages are served on every iteration of the loop, and between runs made
on the scheduler thread, so no wake or cancel waits longer than one run, busy or not.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import heapq
import itertools
import queue
import random
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, final

from executors import _threads, registry
from executors._clock import Clock, SystemClock
from executors.periodic import ForkPolicy

from . import wallclock
from .events import (
    Events,
    ScheduleChanged,
    SchedulePaused,
    ScheduleRemoved,
    ScheduleResumed,
)
from .job import JobSlot
from .pool import Pool
from .wall_slots import WallSlots

if TYPE_CHECKING:
    from .job import Job
    from .wallclock import TriggerLike

__all__ = ("Cancel", "Producer", "Scheduler", "Signal", "Wake", "shutting_down")

_INF = float("inf")


class Signal(enum.Enum):
    """The scheduler's messages that concern no job in particular."""

    NUDGE = "nudge"  # the heap changed: re-read the earliest deadline
    CLOSE = "close"  # closing: the loop reads `Scheduler.closing` and returns


@dataclasses.dataclass(frozen=True, slots=True)
class Wake:
    """`Job.wake` of a shared job: run it now, or `min_interval` after its previous start."""

    slot: JobSlot


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel:
    """`Job.cancel` of a shared job: drop it from the heap and from the service's jobs."""

    slot: JobSlot


class Producer(Protocol):
    """Another thread whose runs emit events (the store loop's): see `producers`."""

    thread: threading.Thread | None


@final
class Scheduler:
    """The heap, its lock, the control queue and the scheduler thread of one service.

    Its public attributes are the package's (the service and its jobs read them); the
    service creates it, and `reset` rebuilds what threads share after a fork.
    """

    def __init__(self, name: str, clock: Clock, *, slack: float, inline_below: float,
                 fork_policy: ForkPolicy, workers: int) -> None:
        self.name = name
        self.clock = clock
        self.fork_policy: ForkPolicy = fork_policy
        # A test clock does not move while runs execute: see BackgroundService's "Clock".
        self.lockstep = not isinstance(clock, SystemClock)
        self.slack = slack
        self.inline_below = inline_below
        # The clock read of the hot path: for the real clock, the captured time.monotonic
        # itself (one C call instead of a method calling a static method, per read).
        self.monotonic: Callable[[], float] = (
            SystemClock._monotonic if type(clock) is SystemClock else clock.monotonic)
        self.random = random.Random()
        self.jobs: dict[str, Job] = {}
        self.job_runs = 0
        self.job_errors = 0
        # Its runs, and the service's submit() (up to `workers` threads, started on demand).
        self.pool = Pool(name, workers, self.run_job, shutting_down)
        self.store_loop: Producer | None = None  # set by a service with a store
        self.events = Events(name, self.producers)
        # Wall-clock jobs not cancelled or finished (under the lock): while there is one, the
        # loop watches the clocks and sleeps at most wallclock.MAX_SLEEP.
        self.wall = WallSlots(self)
        # Called on the first control message after a fork (fork_policy="lazy").
        self.restart: Callable[[], None] = lambda: None
        self.reset()

    def reset(self) -> None:
        """Everything shared with threads, new (at creation, and after fork: never unlocked)."""
        self.lock = threading.Lock()
        self.messages: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.heap: list[tuple[float, int, int, JobSlot]] = []
        self.seq = itertools.count()
        self.thread: threading.Thread | None = None
        self.in_flight = 0  # job runs handed to the pool and not finished
        self.sleep_until = _INF  # the scheduler's current deadline (read by completions)
        self.nudge_posted = False  # a NUDGE is in the queue (cleared when taken)
        self.started = False
        self.closing = False
        self.needs_fork_restart = False
        self.events.reset()
        for job in self.jobs.values():
            slot = job._slot
            slot.running = slot.executing = slot.wake_posted = False
            slot.due = None

    def after_fork(self) -> bool:
        """In a forked child: rebuild (never unlock) and apply the fork policy. True if the
        service must start again at once (``"eager"``); ``"lazy"`` restarts on first use,
        ``"stop"`` (and a service that was not running) stays closed."""
        was_running = self.started and not self.closing
        self.reset()
        if not was_running or self.fork_policy == "stop":
            self.closing = True
            self.events.close()  # an event emitted in the child starts no dispatcher
        elif self.fork_policy == "lazy":
            self.needs_fork_restart = True
        return was_running and self.fork_policy == "eager"

    # -- messages (lock-free) ---------------------------------------------------------------

    def post(self, message: Wake | Cancel | Signal) -> None:
        """Put a message for the scheduler thread; after a fork, restart on first use."""
        self.messages.put(message)
        if self.needs_fork_restart:
            self.restart()

    def nudge(self) -> None:
        """The heap changed. One message however many nudges come before the scheduler takes
        it (it clears the flag first, then reads the heap)."""
        if not self.nudge_posted:
            self.nudge_posted = True
            self.messages.put(Signal.NUDGE)

    # -- the control protocol of a shared job (`JobServer`: `Job`'s control methods) --------

    def wake(self, slot: JobSlot) -> None:
        slot.wake_requested = True
        if not slot.wake_posted:  # cleared by the scheduler before it reads wake_requested
            slot.wake_posted = True
            self.post(Wake(slot))

    def cancel(self, slot: JobSlot, first: bool) -> None:
        if first:  # one message per job: the queue stays bounded
            self.post(Cancel(slot))

    def close(self) -> None:
        self.closing = True
        self.messages.put(Signal.CLOSE)
        self.events.close()

    def producers(self) -> list[threading.Thread]:
        """The threads whose runs emit events (the dispatcher waits for them at close)."""
        pool = self.pool
        loop = self.store_loop
        return [t for t in [self.thread, *pool.threads,
                            loop.thread if loop else None] if t is not None]

    # -- schedule changes (from any thread) -------------------------------------------------

    def schedule(self, slot: JobSlot, nominal: float, now: float, *, jitter: bool = True
                 ) -> None:
        """Put `slot` on the heap at grid time `nominal` (plus jitter). Caller holds the lock."""
        slot.token += 1
        slot.nominal = nominal
        due = nominal
        spread = slot.job._jitter
        if jitter and spread:
            due += self.random.uniform(0.0, spread)
        slot.due = due
        heapq.heappush(self.heap, (due, next(self.seq), slot.token, slot))

    def schedule_first(self, job: Job, now: float) -> None:
        """Schedule a new or starting job's first run, `delay` from `now`. Caller holds the lock."""
        if job._stored is not None:
            return  # a schedule kept in a store: the store loop claims its runs
        if job._wall is None:
            self.schedule(job._slot, now + job._delay, now)
            return
        slot = job._slot
        due = self.wall.first_due(job, now)
        if due is None:
            self.wall.finished(slot)
            return
        self.wall.add(slot, now)
        self.schedule(slot, due, now, jitter=False)

    def pause(self, slot: JobSlot, first: bool) -> None:
        """Drop the job's heap entry (a pause): the stale entry is skipped when it surfaces."""
        with self.lock:
            slot.token += 1
            slot.due = None
        events = self.events
        if first and SchedulePaused in events.wanted:
            events.emit(SchedulePaused(slot.job._name))

    def resume(self, slot: JobSlot, was_paused: bool) -> None:
        if was_paused:
            skipped = self._resumed(slot)
            if ScheduleResumed in self.events.wanted:
                self.events.emit(ScheduleResumed(slot.job._name, skipped))

    def _resumed(self, slot: JobSlot) -> int:
        """A paused job resumed: due at once if a run fell due meanwhile, else when due (a
        wall-clock job: at its next fire time after now). Returns the fire times skipped."""
        job = slot.job
        skipped = 0
        with self.lock:
            if not self.started or slot.running or job._cancelled or job._stopped or \
                    job._finished:
                return 0
            now = self.clock.monotonic()
            if job._wall is not None:
                nominal, skipped = self.wall.resume(slot, now)
                if nominal is None:
                    self.wall.finished(slot)
                    return skipped
                self.schedule(slot, nominal, now, jitter=False)
            else:
                nominal = now if slot.last_nominal is None else max(
                    now, slot.last_nominal + job._interval)
                self.schedule(slot, nominal, now)
        self.nudge()
        return skipped

    def reschedule(self, slot: JobSlot, trigger: TriggerLike) -> None:
        self._rescheduled(slot, trigger)
        events = self.events
        if ScheduleChanged in events.wanted:
            events.emit(ScheduleChanged(slot.job._name, slot.job._describe()))

    def _rescheduled(self, slot: JobSlot, trigger: TriggerLike) -> None:
        """A wall-clock job's new trigger: its next fire time is the first after now and after
        the last one handled (never earlier: nothing runs twice)."""
        job = slot.job
        state = job._wall
        assert state is not None
        with self.lock:
            state.trigger = trigger
            wall = self.clock.time()
            state.floor = max(state.floor, wall)
            handled = state.handled
            base = wallclock.utc(wall) if handled is None or handled.timestamp() < wall \
                else handled
            state.unwatched = None
            if slot.running:
                return  # the run in progress computes its next fire time from the floor
            state.set_fire(trigger.next_after(base))
            if not self.started or self.closing or job._cancelled or job._stopped or \
                    job._paused:
                return
            now = self.clock.monotonic()
            if state.fire is None:
                self.wall.finished(slot)
                return
            job._set_flags(finished=False)
            self.wall.add(slot, now)
            self.schedule(slot, now + (state.fire_ts - wall), now, jitter=False)
        self.nudge()

    def interval_changed(self, slot: JobSlot) -> None:
        """Reschedule at once from the last run's grid time (a run in progress does it)."""
        with self.lock:
            if slot.due is None or slot.running or slot.last_nominal is None:
                return
            now = self.clock.monotonic()
            self.schedule(slot, max(now, slot.last_nominal + slot.job._interval), now)
        self.nudge()

    # -- the thread -------------------------------------------------------------------------

    def start(self) -> None:
        """Start the scheduler thread (the caller holds the lock and has set `started`)."""
        thread = _threads.new_thread(self._run, f"{self.name}-scheduler")
        self.thread = thread
        _threads.start(thread)

    def _run(self) -> None:
        monotonic = self.monotonic
        wait = self.clock.wait
        messages = self.messages
        heap = self.heap
        lock = self.lock
        lockstep = self.lockstep
        slack = self.slack
        heappop = heapq.heappop
        run_job = self.run_job
        handle_all = self._handle_all
        put_work = self.pool.put
        wall_slots = self.wall.slots
        watch = self.wall.watch
        me = threading.current_thread()
        message: object = None
        while True:
            # Control messages are served on every iteration, also when the scheduler never
            # sleeps (a job behind its grid, an overloaded pool): a wake or cancel waits at
            # most one run, and the queue cannot grow while the scheduler is busy.
            if message is not None:
                self._handle(message)
                message = None
                handle_all()
            elif not messages.empty():
                handle_all()
            if self.closing or self.thread is not me:
                return
            now = monotonic()
            if wall_slots:
                # Wall-clock schedules: a step or a suspend moves their deadlines.
                change = watch.check(now)
                if change is not None:
                    self.wall.recompute(now, change,
                                        functools.partial(self.schedule, jitter=False))
            due_slots: list[JobSlot] = []
            inline_slots: list[JobSlot] = []
            with lock:
                while heap:
                    due, _, token, slot = heap[0]
                    if token == slot.token and due > now:
                        break
                    heappop(heap)
                    if token != slot.token:
                        # Stale (rescheduled, paused or cancelled since): dropped here, so
                        # the scheduler never wakes for a deadline that no longer exists.
                        continue
                    slot.running = True
                    (inline_slots if slot.inline else due_slots).append(slot)
                if due_slots:
                    self.in_flight += len(due_slots)
                if heap:
                    deadline = heap[0][0]  # valid: the loop above drops stale heads
                    if slack:
                        # Timer slack: if another run falls due soon after this one, sleep
                        # until deadline + slack and serve all of them in one wake-up. The
                        # second-earliest entry is one of the head's two children.
                        size = len(heap)
                        second = heap[1][0] if size > 1 else _INF
                        if size > 2 and heap[2][0] < second:
                            second = heap[2][0]
                        if deadline < second <= deadline + slack:
                            deadline += slack
                else:
                    deadline = _INF
                if wall_slots and deadline > now + wallclock.MAX_SLEEP:
                    deadline = now + wallclock.MAX_SLEEP  # a clock jump is seen within this
                self.sleep_until = deadline
            for slot in due_slots:
                put_work(slot)
            for slot in inline_slots:
                if not messages.empty():
                    handle_all()  # between inline runs too: one run is the longest wait
                run_job(slot, inline=True)
            if due_slots or inline_slots:
                continue
            if lockstep and self.in_flight:
                # A test clock: wait (in real time) for the runs to finish before sleeping on
                # the clock, so that virtual time never passes while a run is executing.
                message = messages.get()
                continue
            try:
                message = wait(messages, deadline - now)
            except queue.Empty:
                message = None

    def _handle_all(self) -> None:
        # Drain what arrived: one pass over the heap afterwards serves them all.
        try:
            while True:
                self._handle(self.messages.get_nowait())
        except queue.Empty:
            pass

    def _handle(self, message: object) -> None:
        if message is Signal.NUDGE:
            self.nudge_posted = False
        elif type(message) is Wake:
            slot = message.slot
            slot.wake_posted = False  # before reading wake_requested: see wake
            with self.lock:
                if not slot.wake_requested or slot.due is None or slot.running:
                    return  # served already, or served when the run in progress ends
                slot.wake_requested = False
                now = self.clock.monotonic()
                last = slot.job._last_start
                at = now if last is None else max(now, last + slot.job._min_interval)
                if at < slot.due:
                    self.schedule(slot, at, now, jitter=False)  # a wake-up run has no jitter
                    slot.wake_run = True
        elif type(message) is Cancel:
            slot = message.slot
            job = slot.job
            with self.lock:
                slot.token += 1
                slot.due = None
                self.wall.slots.discard(slot)
                if self.jobs.get(job._name) is job:
                    del self.jobs[job._name]
            if ScheduleRemoved in self.events.wanted:
                self.events.emit(ScheduleRemoved(job._name, "cancelled"))
        # Signal.CLOSE is read from `closing`; anything else is a stale clock tick.

    # -- runs -------------------------------------------------------------------------------

    def run_job(self, slot: JobSlot, *, inline: bool = False) -> None:
        """Run a due job once and schedule its next run; on a pool thread, or `inline`."""
        job = slot.job
        if self.closing or job._cancelled or job._paused:
            with self.lock:
                slot.running = False
                if not inline:
                    self.in_flight -= 1
                nudge = self.lockstep and not self.in_flight and not inline
            if nudge:
                self.nudge()
            return
        slot.wake_requested = False  # a wake from now on asks for another run
        slot.executing = True
        monotonic = self.monotonic
        start = monotonic()
        due = slot.nominal if slot.nominal is not None else start
        wall_next: float | None = None
        if job._wall is None:
            _, end = job._run_once(start, slot.due if slot.due is not None else due, monotonic)
        else:
            end, wall_next = self.wall.run_due(slot)
        # Adaptive placement: a job whose pool run was shorter than inline_below runs on the
        # scheduler thread from then on (one thread wake-up per run instead of two); one that
        # is slow there goes back to the pool for good, so a job can stall the scheduler at
        # most once.
        duration = end - start
        if inline:
            if duration >= self.inline_below:
                slot.inline = False
                slot.heavy = True
        elif not slot.heavy and duration < self.inline_below:
            slot.inline = True
        with self.lock:
            slot.running = slot.executing = False
            if not inline:
                self.in_flight -= 1
            # A test clock's scheduler waits for the runs in flight: wake it when the last
            # ends (time stands still meanwhile, so nothing else can fall due but at once).
            nudge = self.lockstep and not self.in_flight and not inline
            slot.last_nominal = due
            if job._wall is not None and (wall_next is None or job._stopped):
                self.wall.finished(slot)
            elif not (job._cancelled or job._paused or job._stopped or self.closing):
                if wall_next is None:
                    self.schedule(slot, job._next_nominal(due, start, end), end)
                else:
                    self.schedule(slot, wall_next, end, jitter=False)
                if slot.wake_requested:
                    slot.wake_requested = False
                    at = max(end, start + job._min_interval)
                    if at < slot.due:  # type: ignore[operator]
                        self.schedule(slot, at, end, jitter=False)
                        slot.wake_run = True
                due_at: float = slot.due  # type: ignore[assignment]
                if not inline:  # the scheduler itself re-reads the heap after an inline run
                    nudge = nudge or due_at < self.sleep_until or (
                        self.lockstep and due_at <= end)
        if nudge:
            self.nudge()

    def __repr__(self) -> str:
        return (f"<Scheduler {self.name!r} heap={len(self.heap)} in_flight={self.in_flight}"
                f"{' closing' if self.closing else ''}>")



def shutting_down() -> bool:
    """True once the interpreter or the registry's exit shutdown has begun."""
    return sys.is_finalizing() or registry.is_shutting_down()
