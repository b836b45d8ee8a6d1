"""A periodic job of a `BackgroundService`: its handle, its statistics, and its runs.

`Job` is the public handle (control from any thread, a statistics snapshot) and owns what a
run does: `Job._run_once` is the one per-run bookkeeping, used alike by a shared job's run (on
the pool or the scheduler thread, see `executors._service.scheduler`) and by a dedicated job's
`PeriodicExecutor`. Where the job stands in the schedule (heap token, due time, in flight) is
the scheduler's, in the job's `JobSlot`: the job reads it, only the scheduler writes it.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, Protocol, final

from executors import _validate
from executors.periodic import PeriodicExecutor

from .context import ServiceContext
from .events import (
    RunFailed,
    RunFinished,
    RunStarted,
    ScheduleChanged,
    SchedulePaused,
    ScheduleResumed,
)
from .job_statistics import JobStatistics
from .run_info import EveryRun, Fired, RunInfo, mark_run, resolve
from .wallclock import check_trigger

if TYPE_CHECKING:
    from executors.stores import ScheduleDefinition

    from .wallclock import TriggerLike, WallState

__all__ = ("Job", "JobServer", "JobSlot", "JobStatistics", "OnError", "Overrun", "ServiceHost",
           "StoredServer", "job_interval")

logger = logging.getLogger("executors.service")

OnError = Literal["continue", "stop", "backoff"]
Overrun = Literal["skip", "catch_up"]

#: The key of `Job`'s constructor: jobs are made by `BackgroundService.every`, `schedule` and
#: `cron` only.
NO_PUBLIC_CONSTRUCTOR = object()


def job_interval(value: object) -> float:
    """A job's interval: finite seconds > 0 (0 spun a core, and was usually a typo)."""
    seconds = _validate.seconds(value, "interval")
    if seconds == 0:
        raise ValueError("interval must be > 0 seconds, got 0: a job due again the moment it "
                         "ends keeps a core busy; for continuous work, submit() one loop")
    return seconds


@final
class JobSlot:
    """Where a job stands in its scheduler: written by `executors._service.scheduler` only (and, for
    a dedicated job, whose scheduler is its own executor, `running`/`executing` by its run).

    Fields marked "under the lock" are written under the scheduler's lock; the flags are
    written lock-free (one store each). The heap holds slots, so the scheduler's hot path
    touches the job itself only to run it.
    """

    __slots__ = ("due", "executing", "heavy", "inline", "job", "last_nominal", "nominal",
                 "running", "token", "wake_posted", "wake_requested", "wake_run")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.token = 0  # under the lock; heap entries carrying another token are stale
        self.nominal: float | None = None  # under the lock: grid time of the next run
        self.due: float | None = None  # under the lock: nominal + jitter
        self.last_nominal: float | None = None  # under the lock
        # running: handed over for a run (queued or executing); executing: that run has
        # started. A run queued behind a busy pool is running but not executing, and a
        # shutdown drops it (ShutdownReport.dropped_jobs).
        self.running = False
        self.executing = False
        # A wake() asks for a run; wake_posted is True while its message is in the queue,
        # so repeated wakes are one message (the queue stays bounded).
        self.wake_requested = False
        self.wake_posted = False
        # Under the lock: this heap entry is a wake()'s, for a wall-clock job, whose run is
        # out of schedule (its pending fire time stays).
        self.wake_run = False
        # Light jobs run on the scheduler thread: see BackgroundService(inline_below=).
        self.inline = False
        self.heavy = False

    def __repr__(self) -> str:
        return (f"<JobSlot {self.job.name!r} token={self.token} due={self.due}"
                f"{' running' if self.running else ''}{' inline' if self.inline else ''}>")


@final
class Job:
    """A job of a `BackgroundService`: made by its `every`, `schedule` or `cron`, never directly.

    Control methods may be called from any thread. `wake()` and `cancel()` take no lock (safe
    from destructors and weakref callbacks; ``cancel`` accepts and ignores one positional
    argument so that ``weakref.ref(owner, job.cancel)`` ends a job with its owner). `pause()`,
    `resume()`, `update_interval()` and `reschedule()` take the service's lock briefly.

    A job never runs concurrently with itself.
    """

    __slots__ = (
        "__weakref__",
        "_args",
        "_backoff_max",
        "_cancelled",
        "_consecutive_errors",
        "_context",
        "_dedicated",
        "_delay",
        "_errors",
        "_executor",
        "_finished",
        "_fn",
        "_interval",
        "_jitter",
        "_last_duration",
        "_last_error",
        "_last_lateness",
        "_last_start",
        "_max_lateness",
        "_min_interval",
        "_name",
        "_on_error",
        "_overrun",
        "_overruns",
        "_paused",
        "_runs",
        "_server",
        "_skipped",
        "_slot",
        "_stopped",
        "_stored",
        "_wake_requests",
        "_wall",
    )

    def __init__(self, key: object, host: ServiceHost, fn: Callable[..., object],
                 args: tuple[object, ...], name: str, interval: float, min_interval: float,
                 jitter: float, delay: float, on_error: OnError, overrun: Overrun,
                 backoff_max: float, dedicated: bool, executor_name: str = "",
                 wall: WallState | None = None) -> None:
        if key is not NO_PUBLIC_CONSTRUCTOR:
            raise TypeError("Job objects are made by BackgroundService.every(), schedule() "
                            "and cron()")
        # A wall-clock job (schedule(), cron()) has a trigger instead of an interval: no
        # run of it is an "overrun" of an interval (its overruns are counted by fire times).
        self._wall = wall
        # A schedule kept in a store: its control methods go to the store (see stored.py).
        self._stored: StoredServer | None = None
        # Whoever serves the control methods (see `JobServer`): one call, no branching.
        self._server: JobServer = host
        self._context: ServiceContext = host
        self._slot = JobSlot(self)
        self._fn = fn
        self._args = args
        self._name = name
        self._interval = interval
        self._min_interval = min_interval
        self._jitter = jitter
        self._delay = delay
        self._on_error: OnError = on_error
        self._overrun: Overrun = overrun
        self._backoff_max = backoff_max
        self._dedicated = dedicated
        self._executor: PeriodicExecutor | None = None
        if dedicated:
            self._executor = PeriodicExecutor(
                interval, min_interval, self._dedicated_target, name=executor_name,
                clock=host.clock, fork_policy=host.fork_policy)
            self._server = _OwnThread(self._executor, host)
        # Control flags, written by this job's own methods (lock-free stores).
        self._paused = False
        self._cancelled = False
        self._stopped = False
        self._finished = False
        # Statistics, written by the run in progress (one at a time).
        self._runs = 0
        self._errors = 0
        self._consecutive_errors = 0
        self._last_error: str | None = None
        self._last_start: float | None = None
        self._last_duration: float | None = None
        self._last_lateness: float | None = None
        self._max_lateness = 0.0
        self._overruns = 0
        self._skipped = 0
        self._wake_requests = 0

    # -- control ----------------------------------------------------------------------------

    def wake(self) -> None:
        """Ask for a run soon: now, or `min_interval` after the start of the previous run.

        Takes no lock (destructor-safe). A wake during a run is served after it; a wake of a
        paused, cancelled, failed or finished job is counted and otherwise ignored. For a
        wall-clock job the run is out of schedule: its fire time (`executors.current_run`) is
        the moment it starts, and the pending fire time stays.
        """
        self._wake_requests += 1
        self._server.wake(self._slot)

    def cancel(self, dummy: object = None) -> None:
        """End the job for good; a run in progress finishes. Takes no lock (destructor-safe).

        The job leaves the service's `jobs` and `status()` once the scheduler has seen it.
        """
        already = self._cancelled
        self._cancelled = True
        self._server.cancel(self._slot, not already)  # one message per job: a bounded queue

    def pause(self) -> None:
        """Stop scheduling runs until `resume()`; a run in progress finishes."""
        already = self._paused
        self._paused = True
        self._server.pause(self._slot, not already)

    def resume(self) -> None:
        """Resume a paused job: it runs at once if a run fell due while paused, else when due.

        A dedicated job runs at once (its executor starts again). A wall-clock job does not
        catch up: fire times that passed while it was paused were skipped by intent (counted
        in `JobStatistics.skipped_paused`, not as missed), and it runs at its next fire time.
        """
        was_paused = self._paused
        self._paused = False
        self._server.resume(self._slot, was_paused)

    def update_interval(self, interval: float) -> None:
        """Change the interval; the next run is rescheduled at once (last start + `interval`).

        Raises:
            TypeError, ValueError: `interval` is not a finite number > 0 and >= `min_interval`
                (0 is refused as in `BackgroundService.every`).
            TypeError: a wall-clock job (``schedule()``, ``cron()``): use `reschedule`.
        """
        if self._wall is not None:
            raise TypeError(f"job {self._name!r} runs on a trigger, not an interval: "
                            "use reschedule(trigger)")
        seconds = job_interval(interval)
        if seconds < self._min_interval:
            raise ValueError(
                f"interval ({interval!r}) must not be below min_interval ({self._min_interval!r})"
            )
        if seconds < self._jitter:
            raise ValueError(f"interval ({interval!r}) must not be below jitter "
                             f"({self._jitter!r})")
        # A run in progress reads the new interval when it ends.
        self._interval = seconds
        self._server.interval_changed(self._slot)
        events = self._context.events
        if ScheduleChanged in events.wanted:
            events.emit(ScheduleChanged(self._name, self._describe()))

    def reschedule(self, trigger: TriggerLike) -> None:
        """Replace a wall-clock job's trigger; the next fire time is the new trigger's first
        after now (and after the last fire time handled, so nothing runs twice).

        Fire times of the new trigger that lie in the past are not missed runs: nothing is
        caught up. A run in progress finishes; the next one follows the new trigger. A
        finished job is scheduled again if the new trigger has fire times left.
        ``every()`` jobs change with `update_interval` instead (their schedule lives on the
        monotonic clock).

        Raises:
            TypeError: `trigger` is not a trigger, or the job is an ``every()`` job.
        """
        if self._wall is None:
            raise TypeError(f"job {self._name!r} is an every() job: change it with "
                            "update_interval(); reschedule() is for schedule() and cron() jobs")
        self._server.reschedule(self._slot, check_trigger(trigger))

    # -- for the service's parts (each writes the job's state through these) -----------------

    def _serve_from(self, link: StoredServer) -> None:
        """A schedule kept in a store: its control methods go to the store loop."""
        self._stored = self._server = link

    def _trigger_failed(self, exc: Exception) -> None:
        """Its trigger raised (or went backwards): the job stops, as ``on_error="stop"``."""
        self._errors += 1
        self._stopped = True
        self._last_error = f"{type(exc).__name__}: {exc}"

    def _set_flags(self, *, finished: bool | None = None, stopped: bool | None = None,
                   cancelled: bool | None = None, paused: bool | None = None) -> None:
        """Set the flags the scheduler or the store loop decided (None leaves one as it is)."""
        if finished is not None:
            self._finished = finished
        if stopped is not None:
            self._stopped = stopped
        if cancelled is not None:
            self._cancelled = cancelled
        if paused is not None:
            self._paused = paused

    def _overran(self) -> None:
        """A wall-clock run ended after its next fire time."""
        self._overruns += 1

    # -- introspection ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval(self) -> float | None:
        """Seconds between due times (``every()``), or None for a wall-clock job."""
        return None if self._wall is not None else self._interval

    @property
    def trigger(self) -> TriggerLike | None:
        """The trigger of a wall-clock job (``schedule()``, ``cron()``); None for ``every()``."""
        wall = self._wall
        return None if wall is None else wall.trigger

    @property
    def next_fire(self) -> datetime.datetime | None:
        """The next fire time, aware, in the trigger's zone (UTC if it has none); None for an
        ``every()`` job, and when no run is scheduled (paused, finished, cancelled, failed,
        closed). Before the service starts, known only for a job given ``since``."""
        wall = self._wall
        if wall is None or wall.fire is None or self._state() not in (
                "scheduled", "running", "pending"):
            return None
        return wall.fire.astimezone(wall.zone())

    @property
    def dedicated(self) -> bool:
        return self._dedicated

    @property
    def fn(self) -> Callable[..., object]:
        """The callable the job runs (the decorated function, for the decorator form)."""
        return self._fn

    def _state(self) -> str:
        if self._cancelled:
            return "cancelled"
        if self._stopped:
            return "failed"
        if self._finished:
            return "finished"
        executing = self._slot.executing
        scheduler = self._context
        if scheduler.closing:
            # A run queued behind a busy pool never starts once closing: it is dropped.
            return "running" if executing else "closed"
        if self._paused:
            return "running" if executing else "paused"
        executor = self._executor
        if executing or (executor is not None and executor.statistics().state == "running"):
            return "running"
        return "scheduled" if scheduler.started else "pending"

    def statistics(self) -> JobStatistics:
        """A snapshot (read without a lock: counters only grow, times may be a run apart)."""
        now = self._context.clock.monotonic()
        executor = self._executor
        state = self._state()
        if executor is not None:
            es = executor.statistics()
            next_at = es.next_run_at if state in ("scheduled", "running") else None
        else:
            next_at = self._slot.due if state == "scheduled" else None
        wall = self._wall
        fire = self.next_fire
        return JobStatistics(
            name=self._name,
            state=state,
            dedicated=self._dedicated,
            interval=None if wall is not None else self._interval,
            runs=self._runs,
            errors=self._errors,
            consecutive_errors=self._consecutive_errors,
            last_error=self._last_error,
            last_run_at=self._last_start,
            last_duration=self._last_duration,
            next_run_at=next_at,
            next_run_in=None if next_at is None else max(0.0, next_at - now),
            lateness=self._last_lateness,
            max_lateness=self._max_lateness,
            overruns=self._overruns,
            skipped=self._skipped,
            wake_requests=self._wake_requests,
            inline=self._slot.inline,
            trigger=self._describe(),
            next_fire=None if fire is None else fire.isoformat(),
            next_fire_utc=None if fire is None else fire.astimezone(datetime.UTC).isoformat(),
            last_fire=None if wall is None or wall.last_fire is None else
            wall.last_fire.isoformat(),
            missed_policy=None if wall is None else wall.missed,
            missed=0 if wall is None else wall.missed_count,
            missed_run=0 if wall is None else wall.missed_run,
            last_missed_reason=None if wall is None else wall.last_reason,
            skipped_paused=0 if wall is None else wall.paused_skipped,
        )

    def _describe(self) -> str:
        wall = self._wall
        return f"every {self._interval:g}s" if wall is None else wall.trigger.describe()

    def __repr__(self) -> str:
        s = self.statistics()
        parts = [f"<Job {self._name!r} {s.state} {s.trigger}"]
        if s.next_fire is not None:
            parts.append(f"next_fire={s.next_fire}")
        if s.next_run_in is not None:
            parts.append(f"next_run_in={s.next_run_in:.3g}s")
        parts.append(f"runs={s.runs}")
        if s.errors:
            parts.append(f"errors={s.errors}")
        if self._dedicated:
            parts.append("dedicated")
        return " ".join(parts) + ">"

    # -- running (by the scheduler or the job's executor: never concurrently) ---------------

    def _run_once(self, start: float, due: float | None, monotonic: Callable[[], float],
                  run: RunInfo | Fired | None = None,
                  call: Callable[[], object] | None = None) -> tuple[bool, float]:
        """Run fn once, started at `start` for a run due at `due`; (failed, end time).

        The per-run bookkeeping of every kind of job, written once: lateness, the call,
        runs, duration, overruns (counted here, not when the next run is scheduled: the
        last run before a pause, cancel or shutdown, and a failed run, are overruns too),
        the service's counters and the run's events. `run` is a wall-clock run's fire time;
        an ``every()`` run's is built only if asked for (`executors.current_run`). `call`
        replaces ``fn(*args)`` (a stored schedule runs the arguments its claim carries).
        """
        lateness = 0.0 if due is None else max(0.0, start - due)
        self._last_start = start
        self._last_lateness = lateness
        if lateness > self._max_lateness:
            self._max_lateness = lateness
        scheduler = self._context
        info: RunInfo | EveryRun[Any] | Fired = run if run is not None else [
            self._name, start if due is None else due, scheduler.clock, None]
        # A subscriber gets a run's events if it was subscribed when the run started.
        wanted = scheduler.events.wanted
        if wanted and RunStarted in wanted:
            scheduler.events.emit(RunStarted(self._name, _fire_time(info), lateness))
        failed = self._call(info, call)  # never raises: it catches, logs and counts
        end = monotonic()
        self._runs += 1
        duration = end - start
        self._last_duration = duration
        if duration > self._interval:
            self._overruns += 1
        # The service's counters (lock-free, as statistics: read without a lock).
        scheduler.job_runs += 1
        if failed:
            scheduler.job_errors += 1
        if wanted:
            if failed and RunFailed in wanted:
                scheduler.events.emit(RunFailed(self._name, _fire_time(info),
                                                self._last_error or ""))
            elif not failed and RunFinished in wanted:
                scheduler.events.emit(RunFinished(self._name, _fire_time(info), duration))
        return failed, end

    def _call(self, run: RunInfo | EveryRun[Any] | Fired,
              call: Callable[[], object] | None = None) -> bool:
        """Run fn once in a fresh context that knows the run (`executors.current_run`); True if
        it raised (the exception is logged here)."""
        try:
            context = contextvars.Context()
            context.run(mark_run, run)
            if call is None:
                context.run(self._fn, *self._args)
            else:
                context.run(call)
        except BaseException as exc:
            self._errors += 1
            self._consecutive_errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
            if self._on_error == "stop" or not isinstance(exc, Exception):
                # SystemExit/KeyboardInterrupt raised by a job stop the job, not a pool thread.
                self._stopped = True
                logger.exception("job %r raised; stopping it (on_error=%r)", self._name,
                                 self._on_error)
            else:
                logger.exception("job %r raised (error %d in a row; on_error=%r)", self._name,
                                 self._consecutive_errors, self._on_error)
            # Our reference only: the traceback pins the job's frames (PyMongo PYTHON-2433).
            exc.__traceback__ = None
            del exc
            return True
        self._consecutive_errors = 0
        return False

    def _backoff_delay(self) -> float:
        """The delay after `consecutive_errors` failures: doubling, capped, never < interval."""
        n = min(self._consecutive_errors, 64)
        return max(self._interval, min(self._interval * 2.0 ** n, self._backoff_max))

    def _next_nominal(self, due: float, start: float, end: float) -> float:
        """The grid time of the next run after a run due at `due` ran from `start` to `end`."""
        interval = self._interval
        if self._consecutive_errors and self._on_error == "backoff":
            return start + self._backoff_delay()  # the grid restarts after the backoff
        nxt = due + interval
        if end <= nxt or self._overrun == "catch_up":
            return nxt
        # skip: the first grid time after the overrun ended.
        k = math.floor((end - due) / interval) + 1
        self._skipped += k - 1
        return due + k * interval

    def _dedicated_target(self) -> bool:
        # The target of a dedicated job's PeriodicExecutor; False stops the executor.
        if self._cancelled or self._paused:
            return False
        executor = self._executor
        monotonic = self._context.clock.monotonic
        # The executor's next_run_at still holds the due time this run was started for (None
        # for the first run after open(), which is due at once), and last_run_started the
        # start it schedules the next run from: report that one, not a later clock read.
        es = executor.statistics() if executor is not None else None
        due = es.next_run_at if es is not None else None
        start = es.last_run_started if es is not None else None
        slot = self._slot
        slot.running = slot.executing = True
        try:
            failed, _ = self._run_once(monotonic() if start is None else start, due, monotonic)
        finally:
            slot.running = slot.executing = False
        if self._stopped:
            return False
        if executor is not None and self._on_error == "backoff":
            executor.update_interval(self._backoff_delay() if failed else self._interval)
        return not self._cancelled


def _fire_time(run: RunInfo | EveryRun[Any] | Fired) -> datetime.datetime:
    return resolve(run).fire_time


class JobServer(Protocol):
    """Whoever serves a job's control methods: the memory scheduler (`Scheduler`), a dedicated
    job's own executor (`_OwnThread`), or the store loop (`StoredLink`). `Job` calls this and
    never asks which one it has. `wake` and `cancel` take no lock (destructor-safe)."""

    def wake(self, slot: JobSlot) -> None: ...
    def cancel(self, slot: JobSlot, first: bool) -> None: ...
    def pause(self, slot: JobSlot, first: bool) -> None: ...
    def resume(self, slot: JobSlot, was_paused: bool) -> None: ...
    def interval_changed(self, slot: JobSlot) -> None: ...
    def reschedule(self, slot: JobSlot, trigger: TriggerLike) -> None: ...


class StoredServer(JobServer, Protocol):
    """The store loop serving a stored schedule's job (`stored_run.StoredLink`), with the
    definition this process declared for it (replaced by `reschedule`)."""

    definition: ScheduleDefinition


class ServiceHost(ServiceContext, JobServer, Protocol):
    """What a job is made with: its service's context, which serves shared jobs too."""


@final
class _OwnThread:
    """Serves a dedicated job: its `PeriodicExecutor` runs it; the scheduler hears of its end
    (a cancel) and of a new trigger, and announces its pauses as for any job."""

    __slots__ = ("executor", "scheduler")

    def __init__(self, executor: PeriodicExecutor, scheduler: ServiceHost) -> None:
        self.executor = executor
        self.scheduler = scheduler

    def wake(self, slot: JobSlot) -> None:
        self.executor.wake()

    def cancel(self, slot: JobSlot, first: bool) -> None:
        self.executor.close()
        self.scheduler.cancel(slot, first)

    def pause(self, slot: JobSlot, first: bool) -> None:
        self.executor.close()
        events = self.scheduler.events
        if first and SchedulePaused in events.wanted:
            events.emit(SchedulePaused(slot.job._name))

    def resume(self, slot: JobSlot, was_paused: bool) -> None:
        if not was_paused:
            return
        scheduler = self.scheduler
        if scheduler.started and not scheduler.closing and not slot.job._cancelled:
            self.executor.open()
            self.executor.wake()  # a thread kept from before the pause sleeps until its due
        if ScheduleResumed in scheduler.events.wanted:
            scheduler.events.emit(ScheduleResumed(slot.job._name, 0))

    def interval_changed(self, slot: JobSlot) -> None:
        self.executor.update_interval(slot.job._interval)

    def reschedule(self, slot: JobSlot, trigger: TriggerLike) -> None:
        self.scheduler.reschedule(slot, trigger)
