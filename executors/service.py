"""BackgroundService: many periodic jobs and one-shot tasks on one scheduler thread, few threads."""

from __future__ import annotations

import concurrent.futures
import contextvars
import dataclasses
import heapq
import itertools
import logging
import math
import queue
import random
import sys
import threading
from collections.abc import Callable
from typing import Literal, TypeVar, TypeVarTuple, final, overload

from . import _threads, _validate, registry
from ._clock import SYSTEM_CLOCK, Clock, SystemClock
from .errors import ShutdownError
from .periodic import PeriodicExecutor

__all__ = (
    "BackgroundService",
    "Job",
    "JobStatistics",
    "ServiceStatistics",
    "ServiceStatus",
    "ShutdownReport",
)

logger = logging.getLogger("executors.service")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

OnError = Literal["continue", "stop", "backoff"]
Overrun = Literal["skip", "catch_up"]
ForkPolicy = Literal["lazy", "eager", "stop"]

_INF = float("inf")
# BackgroundService(slack=None) on the real clock: 1 ms, far inside the lateness anyone tunes a
# periodic job for, and enough to serve ~3 runs per wake-up at 2,000 runs/s, ~13 at 10,000/s.
_DEFAULT_SLACK = 0.001
_names = itertools.count(1)
_NO_PUBLIC_CONSTRUCTOR = object()

# Messages for the scheduler thread's queue. wake() and cancel() only put one (lock-free).
_NUDGE = "nudge"  # the heap changed: re-read the earliest deadline
_CLOSE = "close"
_WAKE = "wake"
_CANCEL = "cancel"
# The worker queue's stop sentinel: each worker that takes it puts it back for the next one
# (the same trick as concurrent.futures.ThreadPoolExecutor), so close() needs no worker count.
_STOP = object()


def _job_interval(value: object) -> float:
    """A job's interval: finite seconds > 0 (issue: 0 spun a core, and was usually a typo)."""
    seconds = _validate.seconds(value, "interval")
    if seconds == 0:
        raise ValueError("interval must be > 0 seconds, got 0: a job due again the moment it "
                         "ends keeps a core busy; for continuous work, submit() one loop")
    return seconds


@dataclasses.dataclass(frozen=True)
class JobStatistics:
    """A snapshot of one job (see `Job.statistics` and `BackgroundService.status`).

    Times are on the service's clock (`time.monotonic` unless a clock was injected);
    `next_run_in` is relative to the moment of the snapshot.
    """

    name: str
    #: "pending" (service not started), "scheduled", "running", "paused", "failed" (stopped by
    #: ``on_error="stop"``), "cancelled", or "closed" (the service shut down).
    state: str
    dedicated: bool
    interval: float
    runs: int
    errors: int
    #: Errors since the last successful run (what ``on_error="backoff"`` doubles its delay by).
    consecutive_errors: int
    last_error: str | None
    last_run_at: float | None
    last_duration: float | None
    next_run_at: float | None
    next_run_in: float | None
    #: How late the last run started after its due time (seconds), and the worst so far.
    lateness: float | None
    max_lateness: float
    #: Runs that lasted longer than the interval; and due runs skipped by ``overrun="skip"``.
    overruns: int
    skipped: int
    wake_requests: int
    #: True while the job is light enough to run on the scheduler thread (no hand-off).
    inline: bool


@dataclasses.dataclass(frozen=True)
class ServiceStatistics:
    """Service-wide counters (see `BackgroundService.statistics`)."""

    name: str
    #: "idle" (not started), "running", "closing" (shutdown begun) or "closed".
    state: str
    workers: int
    #: Threads of this service alive now: scheduler + pool workers + dedicated jobs.
    threads: int
    jobs: int
    job_runs: int
    job_errors: int
    submitted: int
    #: Submissions not finished yet (queued or running).
    submissions_pending: int
    submissions_failed: int
    last_submission_error: str | None
    #: Bumped by every fork: the service's internals were rebuilt that many times.
    generation: int


@dataclasses.dataclass(frozen=True)
class ServiceStatus:
    """Everything a health endpoint needs: the service's counters and every job's snapshot."""

    service: ServiceStatistics
    jobs: tuple[JobStatistics, ...]

    @property
    def healthy(self) -> bool:
        """True while the service runs and no job has been stopped by an error."""
        return self.service.state == "running" and not any(
            j.state == "failed" for j in self.jobs
        )

    def as_dict(self) -> dict[str, object]:
        """A JSON-serialisable dict (for ``json.dumps`` in a health endpoint)."""
        return {
            "healthy": self.healthy,
            "service": dataclasses.asdict(self.service),
            "jobs": [dataclasses.asdict(j) for j in self.jobs],
        }


@dataclasses.dataclass(frozen=True)
class ShutdownReport:
    """What `BackgroundService.shutdown` achieved by its deadline."""

    #: True if every thread stopped and every submission finished (or was cancelled on request).
    completed: bool
    #: Jobs whose run was still executing at the deadline.
    unfinished_jobs: tuple[str, ...]
    #: Submissions still running at the deadline (they may finish later; nothing waits).
    unfinished_submissions: int
    #: Submissions cancelled before they started (at the deadline, or by ``cancel_pending``).
    cancelled_submissions: int
    #: Real seconds the shutdown took.
    elapsed: float
    #: Jobs whose due run was still queued behind a busy pool at the deadline: it never
    #: started and never will (runs not started by the shutdown are dropped, not executed).
    dropped_jobs: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.completed


@final
class Job:
    """A periodic job of a `BackgroundService`; made by `BackgroundService.every`, never directly.

    Control methods may be called from any thread. `wake()` and `cancel()` take no lock (safe
    from destructors and weakref callbacks; ``cancel`` accepts and ignores one positional
    argument so that ``weakref.ref(owner, job.cancel)`` ends a job with its owner). `pause()`,
    `resume()` and `update_interval()` take the service's lock briefly.

    A job never runs concurrently with itself.
    """

    __slots__ = (
        "__weakref__",
        "_args",
        "_backoff_max",
        "_cancelled",
        "_consecutive_errors",
        "_dedicated",
        "_delay",
        "_due",
        "_errors",
        "_executing",
        "_executor",
        "_fn",
        "_heavy",
        "_inline",
        "_interval",
        "_jitter",
        "_last_duration",
        "_last_error",
        "_last_lateness",
        "_last_nominal",
        "_last_start",
        "_max_lateness",
        "_min_interval",
        "_name",
        "_nominal",
        "_on_error",
        "_overrun",
        "_overruns",
        "_paused",
        "_running",
        "_runs",
        "_service",
        "_skipped",
        "_stopped",
        "_token",
        "_wake_posted",
        "_wake_requested",
        "_wake_requests",
    )

    def __init__(self, key: object, service: BackgroundService, fn: Callable[..., object],
                 args: tuple[object, ...], name: str, interval: float, min_interval: float,
                 jitter: float, delay: float, on_error: OnError, overrun: Overrun,
                 backoff_max: float, dedicated: bool) -> None:
        if key is not _NO_PUBLIC_CONSTRUCTOR:
            raise TypeError("Job objects are made by BackgroundService.every()")
        self._service = service
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
        # Light jobs run on the scheduler thread itself: see BackgroundService(inline_below=).
        self._inline = False
        self._heavy = False
        # Schedule state, guarded by the service's lock (flags below are written lock-free).
        self._token = 0  # heap entries carrying another token are stale (lazy deletion)
        self._nominal: float | None = None  # the grid time of the next run (before jitter)
        self._due: float | None = None  # when the next run is due (nominal + jitter)
        self._last_nominal: float | None = None
        # _running: handed to the pool (or the scheduler) for a run; _executing: that run has
        # started (a run queued behind a busy pool is _running but not _executing, and a
        # shutdown drops it: ShutdownReport.dropped_jobs).
        self._running = False
        self._executing = False
        self._paused = False
        self._cancelled = False
        self._stopped = False
        self._wake_requested = False
        # True while a wake message of this job is in the scheduler's queue: repeated wakes
        # post one message, so the queue stays bounded however often wake() is called.
        self._wake_posted = False
        # Statistics.
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
        paused, cancelled or failed job is counted and otherwise ignored.
        """
        self._wake_requests += 1
        executor = self._executor
        if executor is not None:
            executor.wake()
            return
        self._wake_requested = True
        if not self._wake_posted:  # cleared by the scheduler before it reads _wake_requested
            self._wake_posted = True
            self._service._post((_WAKE, self))

    def cancel(self, dummy: object = None) -> None:
        """End the job for good; a run in progress finishes. Takes no lock (destructor-safe).

        The job leaves the service's `jobs` and `status()` once the scheduler has seen it.
        """
        already = self._cancelled
        self._cancelled = True
        executor = self._executor
        if executor is not None:
            executor.close()
        if not already:  # one message per job: the queue stays bounded
            self._service._post((_CANCEL, self))

    def pause(self) -> None:
        """Stop scheduling runs until `resume()`; a run in progress finishes."""
        self._service._pause(self)

    def resume(self) -> None:
        """Resume a paused job: it runs at once if a run fell due while paused, else when due.

        A dedicated job runs at once (its executor starts again).
        """
        self._service._resume(self)

    def update_interval(self, interval: float) -> None:
        """Change the interval; the next run is rescheduled at once (last start + `interval`).

        Raises:
            TypeError, ValueError: `interval` is not a finite number > 0 and >= `min_interval`
                (0 is refused as in `BackgroundService.every`).
        """
        seconds = _job_interval(interval)
        if seconds < self._min_interval:
            raise ValueError(
                f"interval ({interval!r}) must not be below min_interval ({self._min_interval!r})"
            )
        if seconds < self._jitter:
            raise ValueError(f"interval ({interval!r}) must not be below jitter "
                             f"({self._jitter!r})")
        self._service._update_interval(self, seconds)

    # -- introspection ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval(self) -> float:
        return self._interval

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
        service = self._service
        if service._closing:
            # A run queued behind a busy pool never starts once closing: it is dropped.
            return "running" if self._executing else "closed"
        if self._paused:
            return "running" if self._executing else "paused"
        executor = self._executor
        if executor is not None and executor.statistics().state == "running":
            return "running"
        if self._executing:
            return "running"
        return "scheduled" if service._started else "pending"

    def statistics(self) -> JobStatistics:
        """A snapshot (read without a lock: counters only grow, times may be a run apart)."""
        now = self._service._clock.monotonic()
        executor = self._executor
        state = self._state()
        if executor is not None:
            es = executor.statistics()
            next_at = es.next_run_at if state in ("scheduled", "running") else None
        else:
            next_at = self._due if state == "scheduled" else None
        return JobStatistics(
            name=self._name,
            state=state,
            dedicated=self._dedicated,
            interval=self._interval,
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
            inline=self._inline,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        parts = [f"<Job {self._name!r} {s.state} every {self._interval:g}s"]
        if s.next_run_in is not None:
            parts.append(f"next_run_in={s.next_run_in:.3g}s")
        parts.append(f"runs={s.runs}")
        if s.errors:
            parts.append(f"errors={s.errors}")
        if self._dedicated:
            parts.append("dedicated")
        return " ".join(parts) + ">"

    # -- running (called by the service with the job handed over: never concurrently) ------

    def _call(self) -> BaseException | None:
        """Run fn once in a fresh context; the exception it raised, if any (logged here)."""
        try:
            contextvars.Context().run(self._fn, *self._args)
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
            return exc
        self._consecutive_errors = 0
        return None

    def _backoff_delay(self) -> float:
        """The delay after `consecutive_errors` failures: doubling, capped, never < interval."""
        n = min(self._consecutive_errors, 64)
        return max(self._interval, min(self._interval * 2.0 ** n, self._backoff_max))

    def _dedicated_target(self) -> bool:
        # The target of a dedicated job's PeriodicExecutor; False stops the executor.
        if self._cancelled or self._paused:
            return False
        service = self._service
        clock = service._clock
        executor = self._executor
        # The executor's next_run_at still holds the due time this run was started for (None
        # for the first run after open(), which is due at once), and last_run_started the
        # start it schedules the next run from: report that one, not a later clock read.
        es = executor.statistics() if executor is not None else None
        due = es.next_run_at if es is not None else None
        start = es.last_run_started if es is not None else None
        if start is None:
            start = clock.monotonic()
        lateness = 0.0 if due is None else max(0.0, start - due)
        self._last_start = start
        self._last_lateness = lateness
        if lateness > self._max_lateness:
            self._max_lateness = lateness
        self._running = self._executing = True
        failed = False
        try:
            failed = self._call() is not None
        finally:
            self._running = self._executing = False
            self._runs += 1
            duration = clock.monotonic() - start
            self._last_duration = duration
            if self._interval and duration > self._interval:
                self._overruns += 1
            # The service's counters cover dedicated jobs too (lock-free, as for the pool's
            # runs: a statistic, read without a lock).
            service._job_runs += 1
            if failed:
                service._job_errors += 1
        if self._stopped:
            return False
        if executor is not None and self._on_error == "backoff":
            executor.update_interval(self._backoff_delay() if failed else self._interval)
        return not self._cancelled


@final
class BackgroundService:
    """Named periodic jobs and one-shot background work on few threads, with graceful shutdown.

    Light periodic jobs share **one scheduler thread** that sleeps on a deadline heap until the
    earliest job is due (it never polls: it blocks in ``SimpleQueue.get(timeout=...)`` through
    the clock, and changes are a ``put()``), and run on a **bounded pool** of `workers` threads
    started on demand. A job made with ``dedicated=True`` gets its own `PeriodicExecutor`
    instead, for blocking work (a server monitor that waits on a socket) that must not hold a
    pool thread. `submit` runs one-shot work on the pool, or on the `executor` given.

    Scheduling of shared jobs:
        Due times lie on a grid: the first run is due `delay` seconds after the job is added
        (or the service started), each later one `interval` after the previous *due* time, so
        lateness does not accumulate; `jitter` adds a random ``[0, jitter]`` to each due time
        (not to the grid), to spread jobs that would otherwise run in a burst. A job never
        runs concurrently with itself. A run that lasts longer than `interval` is an
        *overrun*, counted in its statistics. When a run ends after the next due time (an
        overrun, or a late start on a saturated pool), the next run is, by `overrun` policy:

        - ``"skip"`` (default): the missed due times are skipped (counted) and the job runs at
          the next grid time after the overrun ended;
        - ``"catch_up"``: the missed due times are run back to back, at once, until the job is
          on its grid again (for jobs whose every run counts, such as a per-minute tally).

        `wake()` asks for a run now, or `min_interval` after the previous run started, and
        the grid restarts from that run.

    Errors:
        An exception from a job is logged on ``executors.service`` with its traceback and
        counted (`Job.statistics`); then, by the job's `on_error`: ``"continue"`` (default)
        keeps the schedule, ``"stop"`` stops the job (state ``"failed"``, which makes
        `ServiceStatus.healthy` false), ``"backoff"`` delays the next run by ``interval *
        2**n`` after the n-th error in a row, capped at `backoff_max` seconds, until a run
        succeeds. An exception from submitted work is set on its future, and also logged and
        counted (fire-and-forget work is common here, and no error may be silent).

    Shutdown:
        `shutdown(timeout)` (and leaving the ``with`` block) stops scheduling, lets running
        job runs and already submitted work finish up to one deadline, cancels submissions
        that have not started by then, and returns a `ShutdownReport` of what did not finish.
        Services register with `executors.registry`, so interpreter exit shuts them down
        within the registry's global deadline. An `executor` passed in is not shut down: it
        belongs to the caller.

    Fork:
        In a forked child the service is rebuilt (fresh locks and queues), never unlocked;
        by `fork_policy` a service that was running restarts on its first use in the child
        (``"lazy"``: `submit`, `start`, `Job.wake`), at once (``"eager"``), or stays closed
        (``"stop"``: the child does not repeat the parent's jobs).

    Clock:
        With an injected clock other than the system clock (a test's
        `executors.testing.VirtualClock`) runs take no clock time: the scheduler waits for the
        runs it started before it sleeps on the clock again, so ``clock.advance(t)`` returns
        with every run due by ``t`` done, in order.

    Args:
        name: the service's name, used in thread names and reprs.
        workers: the most pool threads (>= 1), shared by shared jobs and `submit`.
        executor: where `submit` sends work (default: the service's own pool). Any
            `concurrent.futures.Executor`: a process pool, or a Dask
            ``distributed.Client.get_executor()`` for work that outgrows one machine.
        shutdown_timeout: the default deadline of `shutdown` and of ``with`` (None: no limit).
        inline_below: a shared job whose run on the pool took less than this many seconds
            runs on the scheduler thread from then on, saving a thread hand-off per run (the
            cost of most of the CPU of a busy scheduler); if a run there takes longer, the job
            goes back to the pool for good. 0 keeps every job on the pool.
        slack: timer slack, in seconds: when another run falls due within `slack` after the
            earliest one, the scheduler sleeps until ``earliest + slack`` and starts every run
            due by then in one wake-up, so a run may start up to `slack` late (counted in its
            lateness). A wake-up of the scheduler thread costs far more CPU than a light run
            (two thread switches and a GIL hand-off), so with many jobs this divides the
            scheduler's CPU by the runs each wake-up serves. None (default): 1 ms on the real
            clock, 0 on an injected clock (tests keep exact due times); 0 wakes for every
            due time.
        clock: where time comes from (default: the real monotonic clock).
        fork_policy: ``"lazy"`` (default), ``"eager"`` or ``"stop"``.

    Raises:
        TypeError, ValueError: a bad argument, naming it.

    Example:
        >>> import threading
        >>> done = threading.Event()
        >>> with BackgroundService("app", workers=2) as svc:
        ...     job = svc.every(60, done.set, name="refresh")
        ...     done.wait(5)
        ...     svc.submit(sum, [1, 2, 3]).result(5)
        True
        6
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        workers: int = 4,
        executor: concurrent.futures.Executor | None = None,
        shutdown_timeout: float | None = 10.0,
        inline_below: float = 0.001,
        slack: float | None = None,
        clock: Clock | None = None,
        fork_policy: ForkPolicy = "lazy",
    ) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        _validate.count(workers, "workers")
        if executor is not None and not isinstance(executor, concurrent.futures.Executor):
            raise TypeError("executor must be a concurrent.futures.Executor or None, "
                            f"got {type(executor).__name__}")
        shutdown_timeout = _validate.timeout(shutdown_timeout, "shutdown_timeout")
        if fork_policy not in ("lazy", "eager", "stop"):
            raise ValueError(f"fork_policy must be 'lazy', 'eager' or 'stop', got {fork_policy!r}")
        self._name = name if name is not None else f"BackgroundService-{next(_names)}"
        self._workers = workers
        self._executor = executor
        self._shutdown_timeout = shutdown_timeout
        self._inline_below = _validate.seconds(inline_below, "inline_below")
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        # A test clock does not move while runs execute: see "Clock" above.
        self._lockstep = not isinstance(self._clock, SystemClock)
        if slack is None:
            self._slack = 0.0 if self._lockstep else _DEFAULT_SLACK
        else:
            self._slack = _validate.seconds(slack, "slack")
        # The clock read of the hot path: for the real clock, the captured time.monotonic
        # itself (one C call instead of a method calling a static method, per read).
        self._monotonic: Callable[[], float] = (
            SystemClock._monotonic if type(self._clock) is SystemClock else self._clock.monotonic)
        self._fork_policy: ForkPolicy = fork_policy
        self._random = random.Random()
        self._jobs: dict[str, Job] = {}
        self._name_counts: dict[str, int] = {}
        self._seq = itertools.count()
        self._generation = 0
        self._job_runs = 0
        self._job_errors = 0
        self._submitted = 0
        self._submissions_failed = 0
        self._last_submission_error: str | None = None
        self._reset_internals()

    def _reset_internals(self) -> None:
        # Everything shared with threads; rebuilt after fork (never unlocked).
        self._lock = threading.Lock()
        self._messages: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._work: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._heap: list[tuple[float, int, int, Job]] = []
        self._scheduler: threading.Thread | None = None
        self._threads: list[threading.Thread] = []
        self._idle = 0  # pool threads waiting for work, not yet claimed by a put
        self._unclaimed = 0  # queued items no idle thread was reserved for
        self._in_flight = 0  # job runs handed to the pool and not finished
        self._sleep_until = _INF  # the scheduler's current deadline (read by completions)
        # True while a _NUDGE is in the queue: nudges coalesce into one message (cleared by
        # the scheduler when it takes that message, before it reads the heap).
        self._nudge_posted = False
        self._futures: set[concurrent.futures.Future[object]] = set()
        self._started = False
        self._closing = False
        self._needs_fork_restart = False

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> BackgroundService:
        """Start the scheduler thread and any dedicated jobs; idempotent. Returns the service.

        Raises:
            ShutdownError: the service was shut down.
        """
        if sys.is_finalizing() or registry.is_shutting_down():
            raise ShutdownError("the interpreter is shutting down: cannot start a service")
        with self._lock:
            if self._closing:
                raise ShutdownError(f"{self._name} was shut down; make a new BackgroundService")
            if self._started:
                return self
            self._started = True
            self._needs_fork_restart = False
            now = self._clock.monotonic()
            for job in self._jobs.values():
                if not job._dedicated and not (job._paused or job._cancelled or job._stopped):
                    self._schedule(job, now + job._delay, now)
            thread = _threads.new_thread(self._run_scheduler, f"{self._name}-scheduler")
            self._scheduler = thread
            registry.register(self)
            _threads.start(thread)
        for job in list(self._jobs.values()):
            if job._executor is not None and not (job._paused or job._cancelled):
                job._executor.open()
        return self

    def __enter__(self) -> BackgroundService:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        report = self.shutdown()
        if not report.completed:
            logger.warning("%s: shutdown did not complete: %r", self._name, report)

    def close(self, dummy: object = None) -> None:
        """Stop scheduling and ask every thread to stop; returns at once. Takes no lock.

        Work already submitted still runs (unless cancelled by `shutdown`); job runs not yet
        started are dropped. Safe from destructors and as a weakref callback (`dummy` is
        ignored). `join` or `shutdown` waits.
        """
        self._closing = True
        self._messages.put(_CLOSE)
        self._work.put(_STOP)
        for job in list(self._jobs.values()):
            executor = job._executor
            if executor is not None:
                executor.close()

    def join(self, timeout: float | None = None) -> bool:
        """Wait (after `close`) for every thread and submission; True if all are done."""
        timeout = _validate.timeout(timeout)
        deadline = None if timeout is None else SYSTEM_CLOCK.monotonic() + timeout
        return self._wait(deadline)

    def shutdown(self, timeout: float | Literal["default"] | None = "default", *,
                 cancel_pending: bool = False) -> ShutdownReport:
        """Stop scheduling, wait for running jobs and pending submissions, report what is left.

        Everything shares one deadline `timeout` seconds from now (default: the service's
        `shutdown_timeout`; None waits for all). Submissions that have not started by then
        are cancelled; runs still executing are reported, not interrupted (threads cannot be).
        Idempotent.

        Args:
            cancel_pending: cancel submissions that have not started yet at once, instead of
                running them.
        """
        seconds = self._shutdown_timeout if timeout == "default" else _validate.timeout(timeout)
        began = SYSTEM_CLOCK.monotonic()
        deadline = None if seconds is None else began + seconds
        self.close()
        cancelled = 0
        if cancel_pending:
            cancelled += sum(f.cancel() for f in list(self._futures))
        done = self._wait(deadline)
        if not done:
            cancelled += sum(f.cancel() for f in list(self._futures))
        jobs = list(self._jobs.values())
        unfinished_jobs = tuple(j._name for j in jobs if j._executing)
        dropped_jobs = tuple(j._name for j in jobs if j._running and not j._executing)
        unfinished = sum(1 for f in list(self._futures) if not f.done())
        return ShutdownReport(
            completed=done,
            unfinished_jobs=unfinished_jobs,
            unfinished_submissions=unfinished,
            cancelled_submissions=cancelled,
            elapsed=SYSTEM_CLOCK.monotonic() - began,
            dropped_jobs=dropped_jobs,
        )

    def _wait(self, deadline: float | None) -> bool:
        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - SYSTEM_CLOCK.monotonic())

        me = threading.current_thread()
        threads = [t for t in [self._scheduler, *list(self._threads)] if t is not None]
        for t in threads:
            if t is me:
                return False  # a job cannot wait for its own service
            if t.ident is not None:
                t.join(remaining())
        if not any(t.is_alive() for t in threads):
            self._cancel_leftovers()
        for job in list(self._jobs.values()):
            executor = job._executor
            if executor is not None:
                executor.join(remaining())
        futures = [f for f in list(self._futures) if not f.done()]
        if futures:
            concurrent.futures.wait(futures, timeout=remaining())
        return self._threads_alive() == 0 and all(f.done() for f in list(self._futures))

    def _cancel_leftovers(self) -> None:
        # Work put after the stop sentinel (a submit racing with close) would never run.
        try:
            while True:
                item = self._work.get_nowait()
                if isinstance(item, _Submission):
                    item.future.cancel()
        except queue.Empty:
            pass

    def _threads_alive(self) -> int:
        threads = [t for t in [self._scheduler, *list(self._threads)] if t is not None]
        n = sum(1 for t in threads if t.is_alive())
        for job in list(self._jobs.values()):
            executor = job._executor
            if executor is not None and executor.statistics().thread_alive:
                n += 1
        return n

    # -- jobs -------------------------------------------------------------------------------

    @overload
    def every(self, interval: float, fn: None = None, /, *, name: str | None = None,
              min_interval: float = 0.0, jitter: float = 0.0, delay: float = 0.0,
              on_error: OnError = "continue", overrun: Overrun | None = None,
              backoff_max: float = 300.0, dedicated: bool = False,
              ) -> Callable[[Callable[[], object]], Job]: ...

    @overload
    def every(self, interval: float, fn: Callable[[*Ts], object], /, *args: *Ts,
              name: str | None = None, min_interval: float = 0.0, jitter: float = 0.0,
              delay: float = 0.0, on_error: OnError = "continue",
              overrun: Overrun | None = None, backoff_max: float = 300.0,
              dedicated: bool = False) -> Job: ...

    def every(self, interval: float, fn: Callable[..., object] | None = None, /,
              *args: object, name: str | None = None, min_interval: float = 0.0,
              jitter: float = 0.0, delay: float = 0.0, on_error: OnError = "continue",
              overrun: Overrun | None = None, backoff_max: float = 300.0,
              dedicated: bool = False) -> Job | Callable[[Callable[[], object]], Job]:
        """Run ``fn(*args)`` every `interval` seconds; return its `Job` handle.

        Without `fn`, returns a decorator that schedules the decorated function and returns
        its `Job` (the function stays reachable as ``job.fn``). Jobs may be added before or
        after `start()`.

        Args:
            interval: seconds between due times (finite, > 0). 0 is refused: a job due
                again the moment it ends keeps a core busy (585,919 runs in 2 s of a no-op)
                and is almost always a typo; continuous work belongs in one `submit`-ted
                loop. A tiny interval is honoured, and the scheduler still serves wakes and
                cancels between runs.
            name: unique within the service (default: the function's qualified name, made
                unique with a ``#n`` suffix).
            min_interval: the least time between a run's start and an early run caused by
                `Job.wake` (<= interval).
            jitter: a random delay in ``[0, jitter]`` added to each due time (<= interval).
            delay: seconds before the first run (default 0: at once).
            on_error: ``"continue"``, ``"stop"`` or ``"backoff"`` (see the class).
            overrun: ``"skip"`` (default) or ``"catch_up"`` (see the class).
            backoff_max: the cap of the backoff delay, in seconds.
            dedicated: run on its own `PeriodicExecutor` thread (blocking work). A dedicated
                job follows that executor's schedule (the next run `interval` after the
                previous start, at once after an overrun), so `jitter`, `delay` and `overrun`
                do not apply to it; its lateness is measured against that schedule.

        Raises:
            TypeError: `fn` is not callable, or an option has the wrong type.
            ValueError: a bad interval, an unknown option value, or a duplicate `name`.
            ShutdownError: the service was shut down.
        """
        ival = _job_interval(interval)
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
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        if fn is None:
            if args:
                raise TypeError("the decorator form of every() takes no positional args")

            def decorator(func: Callable[[], object]) -> Job:
                return self._add(func, (), name, ival, mini, jit, dly, on_error,
                                 overrun or "skip", bmax, dedicated)

            return decorator
        return self._add(fn, args, name, ival, mini, jit, dly, on_error, overrun or "skip",
                         bmax, dedicated)

    def _add(self, fn: Callable[..., object], args: tuple[object, ...], name: str | None,
             interval: float, min_interval: float, jitter: float, delay: float,
             on_error: OnError, overrun: Overrun, backoff_max: float, dedicated: bool) -> Job:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        with self._lock:
            if self._closing:
                raise ShutdownError(f"{self._name} was shut down: cannot add a job")
            if name is None:
                base = getattr(fn, "__qualname__", None) or type(fn).__name__
                # A counter per base name keeps adding many jobs of one function O(1) each.
                n = self._name_counts.get(base, 0)
                name = base if n == 0 else f"{base}#{n + 1}"
                while name in self._jobs:
                    n += 1
                    name = f"{base}#{n + 1}"
                self._name_counts[base] = n + 1
            elif name in self._jobs:
                raise ValueError(f"a job named {name!r} already exists in {self._name}")
            job = Job(_NO_PUBLIC_CONSTRUCTOR, self, fn, args, name, interval, min_interval,
                      jitter, delay, on_error, overrun, backoff_max, dedicated)
            self._jobs[name] = job
            if dedicated:
                job._executor = PeriodicExecutor(
                    interval, min_interval, job._dedicated_target,
                    name=f"{self._name}:{name}", clock=self._clock,
                    fork_policy=self._fork_policy,
                )
            elif self._started:
                now = self._clock.monotonic()
                self._schedule(job, now + delay, now)
            started = self._started
        if dedicated and started and job._executor is not None:
            job._executor.open()
        elif started:
            self._nudge()
        return job

    @property
    def jobs(self) -> tuple[Job, ...]:
        """The service's jobs (cancelled ones leave once the scheduler has seen the cancel)."""
        return tuple(self._jobs.values())

    # -- one-shot work ----------------------------------------------------------------------

    def submit(self, fn: Callable[[*Ts], T], /, *args: *Ts) -> concurrent.futures.Future[T]:
        """Run ``fn(*args)`` once in the background; its `concurrent.futures.Future`.

        On the service's pool (in a fresh `contextvars.Context`), or on the `executor` the
        service was given. Shutdown waits for it (up to its deadline).

        Raises:
            TypeError: `fn` is not callable.
            RuntimeError: the service was not started.
            ShutdownError: the service was shut down.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if self._needs_fork_restart:
            self.start()
        if self._closing:
            raise ShutdownError(f"{self._name} was shut down: cannot submit work")
        if not self._started:
            raise RuntimeError(f"{self._name} is not started: call start() or use 'with'")
        future: concurrent.futures.Future[T]
        if self._executor is not None:
            future = self._executor.submit(fn, *args)
        else:
            future = concurrent.futures.Future()
        self._submitted += 1
        self._futures.add(future)  # type: ignore[arg-type]
        future.add_done_callback(self._submission_done)
        if self._executor is None:
            self._put_work(_Submission(future, fn, args))  # type: ignore[arg-type]
        return future

    def _submission_done(self, future: concurrent.futures.Future[T]) -> None:
        self._futures.discard(future)
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            logger.error("%s: submitted work raised", self._name,
                         exc_info=(type(exc), exc, exc.__traceback__))
            self._submissions_failed += 1
            self._last_submission_error = f"{type(exc).__name__}: {exc}"

    # -- status -----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    def _state_name(self) -> str:
        if self._closing:
            return "closed" if self._threads_alive() == 0 else "closing"
        return "running" if self._started else "idle"

    def statistics(self) -> ServiceStatistics:
        """Service-wide counters (read without a lock)."""
        return ServiceStatistics(
            name=self._name,
            state=self._state_name(),
            workers=self._workers,
            threads=self._threads_alive(),
            jobs=len(self._jobs),
            job_runs=self._job_runs,
            job_errors=self._job_errors,
            submitted=self._submitted,
            submissions_pending=len(self._futures),
            submissions_failed=self._submissions_failed,
            last_submission_error=self._last_submission_error,
            generation=self._generation,
        )

    def status(self) -> ServiceStatus:
        """A snapshot of the service and every job, for health endpoints."""
        return ServiceStatus(self.statistics(),
                             tuple(j.statistics() for j in list(self._jobs.values())))

    def __repr__(self) -> str:
        s = self.statistics()
        counts: dict[str, int] = {}
        for job in list(self._jobs.values()):
            state = job._state()
            counts[state] = counts.get(state, 0) + 1
        jobs = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        return (f"<BackgroundService {self._name!r} {s.state} jobs={s.jobs}"
                f"{' (' + jobs + ')' if jobs else ''} threads={s.threads}"
                f" workers={self._workers} pending={s.submissions_pending}>")

    # -- job control (called by Job) --------------------------------------------------------

    def _post(self, message: object) -> None:
        # Lock-free: one put. After a fork, a lazily restarting service starts on first use.
        self._messages.put(message)
        if self._needs_fork_restart:
            self._restart_after_fork()

    def _nudge(self) -> None:
        # The heap changed. Lock-free; one message however many nudges come before the
        # scheduler takes it (it clears the flag first, then reads the heap).
        if not self._nudge_posted:
            self._nudge_posted = True
            self._messages.put(_NUDGE)

    def _pause(self, job: Job) -> None:
        if job._executor is not None:
            job._paused = True
            job._executor.close()
            return
        with self._lock:
            job._paused = True
            job._token += 1  # drop its heap entry
            job._due = None

    def _resume(self, job: Job) -> None:
        if job._executor is not None:
            job._paused = False
            if self._started and not self._closing and not job._cancelled:
                job._executor.open()
                # A thread kept from before the pause sleeps until its next due time.
                job._executor.wake()
            return
        with self._lock:
            if not job._paused:
                return
            job._paused = False
            if not self._started or job._running or job._cancelled or job._stopped:
                return
            now = self._clock.monotonic()
            nominal = now if job._last_nominal is None else max(
                now, job._last_nominal + job._interval)
            self._schedule(job, nominal, now)
        self._nudge()

    def _update_interval(self, job: Job, interval: float) -> None:
        if job._executor is not None:
            job._interval = interval
            job._executor.update_interval(interval)
            return
        with self._lock:
            job._interval = interval
            if job._due is None or job._running or job._last_nominal is None:
                return  # a run in progress reads the new interval when it ends
            now = self._clock.monotonic()
            self._schedule(job, max(now, job._last_nominal + interval), now)
        self._nudge()

    # -- the scheduler thread ---------------------------------------------------------------

    def _schedule(self, job: Job, nominal: float, now: float, *, jitter: bool = True) -> None:
        """Put `job` on the heap at grid time `nominal` (plus jitter). Caller holds the lock."""
        job._token += 1
        job._nominal = nominal
        due = nominal
        if jitter and job._jitter:
            due += self._random.uniform(0.0, job._jitter)
        job._due = due
        heapq.heappush(self._heap, (due, next(self._seq), job._token, job))

    def _run_scheduler(self) -> None:
        monotonic = self._monotonic
        wait = self._clock.wait
        messages = self._messages
        heap = self._heap
        lock = self._lock
        lockstep = self._lockstep
        slack = self._slack
        heappop = heapq.heappop
        run_job = self._run_job
        put_work = self._put_work
        handle_all = self._handle_all
        me = threading.current_thread()
        message: object = None
        while True:
            # Control messages are served on every iteration, also when the scheduler never
            # sleeps (a back-to-back job, an overloaded pool): a wake or cancel waits at most
            # one run, and the queue cannot grow while the scheduler is busy.
            if message is not None:
                self._handle(message)
                message = None
                handle_all()
            elif not messages.empty():
                handle_all()
            if self._closing or self._scheduler is not me:
                return
            now = monotonic()
            due_jobs: list[Job] = []
            inline_jobs: list[Job] = []
            with lock:
                while heap:
                    due, _, token, job = heap[0]
                    if token == job._token and due > now:
                        break
                    heappop(heap)
                    if token != job._token:
                        # Stale (rescheduled, paused or cancelled since): dropped here, so
                        # the scheduler never wakes for a deadline that no longer exists.
                        continue
                    job._running = True
                    (inline_jobs if job._inline else due_jobs).append(job)
                if due_jobs:
                    self._in_flight += len(due_jobs)
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
                self._sleep_until = deadline
            for job in due_jobs:
                put_work(job)
            for job in inline_jobs:
                if not messages.empty():
                    handle_all()  # between inline runs too: one run is the longest wait
                run_job(job, inline=True)
            if due_jobs or inline_jobs:
                continue
            if lockstep and self._in_flight:
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
                self._handle(self._messages.get_nowait())
        except queue.Empty:
            pass

    def _handle(self, message: object) -> None:
        if message is _NUDGE:
            self._nudge_posted = False
            return
        if not isinstance(message, tuple):
            return  # _CLOSE (read from _closing), or a stale clock tick
        kind, job = message
        if not isinstance(job, Job):
            return
        if kind == _WAKE:
            job._wake_posted = False  # before reading _wake_requested: see Job.wake
            with self._lock:
                if not job._wake_requested or job._due is None or job._running:
                    return  # served already, or served when the run in progress ends
                job._wake_requested = False
                now = self._clock.monotonic()
                at = now if job._last_start is None else max(
                    now, job._last_start + job._min_interval)
                if at < job._due:
                    self._schedule(job, at, now, jitter=False)  # a wake-up run has no jitter
        elif kind == _CANCEL:
            with self._lock:
                job._token += 1
                job._due = None
                if self._jobs.get(job._name) is job:
                    del self._jobs[job._name]

    # -- the pool ---------------------------------------------------------------------------

    def _put_work(self, item: object) -> None:
        # Each queued item is matched with exactly one taker: an idle thread, a new thread,
        # or (pool full) the next thread that finishes, which then skips going idle.
        spawn = False
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._workers and not self._closing:
                spawn = True
                thread = _threads.new_thread(
                    self._run_worker, f"{self._name}-worker-{len(self._threads) + 1}")
                self._threads.append(thread)
            else:
                self._unclaimed += 1
        self._work.put(item)
        if spawn:
            try:
                _threads.start(thread)
            except RuntimeError:
                # "can't create new thread at interpreter shutdown" (cpython#114570).
                with self._lock:
                    self._threads.remove(thread)
                    self._unclaimed += 1
                if not (sys.is_finalizing() or registry.is_shutting_down()):
                    raise

    def _run_worker(self) -> None:
        work = self._work
        lock = self._lock
        while True:
            item = work.get()
            if item is _STOP:
                work.put(_STOP)
                return
            if isinstance(item, Job):
                self._run_job(item)
            elif isinstance(item, _Submission):
                item.run()
            with lock:
                if self._unclaimed:
                    self._unclaimed -= 1
                else:
                    self._idle += 1

    def _run_job(self, job: Job, *, inline: bool = False) -> None:
        """Run a due job once and schedule its next run; on a pool thread, or `inline`."""
        monotonic = self._monotonic
        if self._closing or job._cancelled or job._paused:
            with self._lock:
                job._running = False
                if not inline:
                    self._in_flight -= 1
                nudge = self._lockstep and not self._in_flight and not inline
            if nudge:
                self._nudge()
            return
        job._wake_requested = False  # a wake from now on asks for another run
        job._executing = True
        start = monotonic()
        due = job._nominal if job._nominal is not None else start
        lateness = max(0.0, start - (job._due if job._due is not None else due))
        job._last_start = start
        job._last_lateness = lateness
        if lateness > job._max_lateness:
            job._max_lateness = lateness
        exc = job._call()
        end = monotonic()
        job._runs += 1
        duration = end - start
        job._last_duration = duration
        # Counted here, not when the next run is scheduled: the last run before a pause,
        # cancel or shutdown, and a run that failed under backoff, are overruns too.
        if job._interval and duration > job._interval:
            job._overruns += 1
        # Adaptive placement: a job whose pool run was shorter than inline_below runs on the
        # scheduler thread from then on (one thread wake-up per run instead of two); one that
        # is slow there goes back to the pool for good, so a job can stall the scheduler at
        # most once.
        if inline:
            if duration >= self._inline_below:
                job._inline = False
                job._heavy = True
        elif not job._heavy and duration < self._inline_below:
            job._inline = True
        self._job_runs += 1
        if exc is not None:
            self._job_errors += 1
            del exc
        with self._lock:
            job._running = job._executing = False
            if not inline:
                self._in_flight -= 1
            # A test clock's scheduler waits for the runs in flight: wake it when the last
            # ends (time stands still meanwhile, so nothing else can fall due but at once).
            nudge = self._lockstep and not self._in_flight and not inline
            job._last_nominal = due
            if not (job._cancelled or job._paused or job._stopped or self._closing):
                nominal = self._next_nominal(job, due, start, end)
                self._schedule(job, nominal, end)
                if job._wake_requested:
                    job._wake_requested = False
                    at = max(end, start + job._min_interval)
                    if at < job._due:  # type: ignore[operator]
                        self._schedule(job, at, end, jitter=False)
                due_at: float = job._due  # type: ignore[assignment]
                if not inline:  # the scheduler itself re-reads the heap after an inline run
                    nudge = nudge or due_at < self._sleep_until or (
                        self._lockstep and due_at <= end)
        if nudge:
            self._nudge()

    @staticmethod
    def _next_nominal(job: Job, due: float, start: float, end: float) -> float:
        """The grid time of the next run after a run due at `due` ran from `start` to `end`."""
        interval = job._interval
        if job._consecutive_errors and job._on_error == "backoff":
            return start + job._backoff_delay()  # the grid restarts after the backoff
        nxt = due + interval
        if end <= nxt:
            return nxt
        if job._overrun == "catch_up":
            return nxt
        # skip: the first grid time after the overrun ended.
        k = math.floor((end - due) / interval) + 1
        job._skipped += k - 1
        return due + k * interval

    # -- fork -------------------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        """Registry hook in a forked child: rebuild, never unlock; apply the fork policy."""
        was_running = self._started and not self._closing
        for job in self._jobs.values():
            job._running = job._executing = False
            job._wake_posted = False
            job._due = None
        self._reset_internals()
        self._generation += 1
        if not was_running:
            self._closing = True
            return
        if self._fork_policy == "eager":
            self.start()
        elif self._fork_policy == "lazy":
            self._needs_fork_restart = True
        else:
            self._closing = True

    def _restart_after_fork(self) -> None:
        if self._lock.acquire(blocking=False):
            try:
                restart = self._needs_fork_restart and not self._started
            finally:
                self._lock.release()
            if restart:
                self.start()


@final
class _Submission:
    """One `submit` call queued on the service's own pool."""

    __slots__ = ("args", "fn", "future")

    def __init__(self, future: concurrent.futures.Future[object],
                 fn: Callable[..., object], args: tuple[object, ...]) -> None:
        self.future = future
        self.fn = fn
        self.args = args

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = contextvars.Context().run(self.fn, *self.args)
        except BaseException as exc:
            self.future.set_exception(exc)
            del exc
        else:
            self.future.set_result(result)
