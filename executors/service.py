"""BackgroundService: many periodic jobs and one-shot tasks on one scheduler thread, few threads.

`BackgroundService` is the entry point: `every` for periodic jobs, `schedule` and `cron` for
wall-clock schedules (kept in a store when one is given), `submit` for one-shot work,
`status` and `statistics` for health, `shutdown` under one deadline. The other names here
are what it hands back: `Job` and its statistics, the status snapshots, `current_run`, and
the events `subscribe` delivers.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import itertools
import json
import logging
import signal
import threading
import zoneinfo
from collections.abc import Callable, Iterable
from typing import Literal, TypeVar, TypeVarTuple, final, overload

from typing_extensions import Unpack

from . import _validate, registry
from ._clock import SYSTEM_CLOCK, Clock, SystemClock
from ._service.events import (
    ClockChanged,
    LeaseLost,
    RunFailed,
    RunFinished,
    RunMissed,
    RunStarted,
    ScheduleAdded,
    ScheduleChanged,
    SchedulePaused,
    ScheduleRemoved,
    ScheduleResumed,
    ServiceEvent,
    Subscription,
    SubscriptionStatistics,
)
from ._service.job import NO_PUBLIC_CONSTRUCTOR, Job, JobStatistics, OnError, Overrun
from ._service.limits import check_arguments, check_name
from ._service.options import (
    CronOptions,
    JobOptions,
    cron_options,
    every_options,
    schedule_options,
    unique_name,
)
from ._service.pool import Submission
from ._service.run_info import RunInfo, current_run
from ._service.schedule_data import check_target, not_bound_yet
from ._service.scheduler import Scheduler, shutting_down
from ._service.shutdown import ShutdownReport, alive, wait_all
from ._service.signals import DEFAULT_STOP_SIGNALS, SignalWait, check_signals
from ._service.status import ServiceStatistics, ServiceStatus, state_counts
from ._service.stored import (
    StoredLink,
    StoredSchedule,
    StoreLoop,
    StoreStatus,
    check_store,
    target_of,
)
from ._service.stored_faults import INTERRUPT_BEFORE, helper_threads, interrupt_blocked
from ._service.wallclock import Missed, TriggerLike, WallOnError
from .errors import ShutdownError
from .periodic import ForkPolicy, PeriodicExecutor
from .stores import OnCrash, ScheduleDefinition, ScheduleStore, open_store
from .stores._claimable import parse_serve

__all__ = (
    "BackgroundService", "Job", "JobStatistics", "ServiceStatistics", "ServiceStatus",
    "ShutdownReport", "current_run", "RunInfo", "ServiceEvent", "RunStarted", "RunFinished",
    "RunFailed", "RunMissed", "ScheduleAdded", "ScheduleChanged", "ScheduleRemoved",
    "SchedulePaused", "ScheduleResumed", "ClockChanged", "LeaseLost", "Subscription",
    "SubscriptionStatistics", "StoreStatus", "StoredSchedule",
)

logger = logging.getLogger("executors.service")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# BackgroundService(slack=None) on the real clock: 1 ms, far inside the lateness anyone tunes a
# periodic job for, and enough to serve ~3 runs per wake-up at 2,000 runs/s, ~13 at 10,000/s.
_DEFAULT_SLACK = 0.001
_names = itertools.count(1)


@final
class BackgroundService:
    """Named periodic jobs and one-shot background work on few threads, with graceful shutdown.

    Light periodic jobs share **one scheduler thread** that sleeps on a deadline heap until the
    earliest job is due (it never polls: it blocks in ``SimpleQueue.get(timeout=...)`` through
    the clock, and changes are a ``put()``), and run on a **bounded pool** of `workers` threads
    started on demand. A job made with ``dedicated=True`` gets its own `PeriodicExecutor`
    instead, for blocking work (a server monitor that waits on a socket) that must not hold a
    pool thread. `submit` runs one-shot work on the pool, or on the `executor` given.
    `schedule` and `cron` run jobs at the fire times of wall-clock triggers (cron, dates,
    calendars, exact across DST), on the same scheduler and pool; `subscribe` delivers the
    service's events.

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
        store: where `schedule` and `cron` jobs are kept: a URL (``"sqlite:///jobs.db"``,
            ``"mongodb://host/db"``, ``"postgresql://..."``, ``"memory:"``) or a store
            object; None (default): in memory, as `every` jobs. Schedules in a store
            survive restarts and are served by every process that points at it and declares
            them, each fire time claimed by one, run with the function and arguments of the
            code (see the Schedules page, "Many processes, one store").
            A URL that cannot be reached raises ConnectionError here, naming it (password
            hidden).
        store_lease: seconds a claimed run's lease lasts on the store's clock (renewed every
            third of it, at most every 10 s, while the run lasts): how long a crashed
            process's run holds its schedule before ``on_crash`` settles it. A store call
            in progress longer than that renewal period makes `status()` unhealthy
            (``status().store.blocked``).
        serve: records of the store that this process's code does not declare, written by
            another service or program, that it may run all the same: an allowlist of their
            targets, ``("pkg.module:function", "pkg.jobs:*")`` (``:*``: every function of
            that module). None (default): only the schedules this code declares run here,
            with the function and arguments of this code, whatever the store holds; a
            refused record is logged once and counted (`StoreStatus.refused`). Whoever can
            write the store can run any function the allowlist admits, with any arguments.

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
        store: str | ScheduleStore | None = None,
        store_lease: float = 30.0,
        serve: tuple[str, ...] | None = None,
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
        inline_below = _validate.seconds(inline_below, "inline_below")
        allowed = parse_serve(serve)
        if any(allowed) and store is None:
            raise ValueError("serve= admits records of a store: give store= too")
        clock = clock if clock is not None else SYSTEM_CLOCK
        if slack is None:
            # A test clock keeps exact due times; the real clock serves neighbours together.
            slack = 0.0 if not isinstance(clock, SystemClock) else _DEFAULT_SLACK
        else:
            slack = _validate.seconds(slack, "slack")
        self._name = name if name is not None else f"BackgroundService-{next(_names)}"
        self._workers = workers
        self._executor = executor
        self._shutdown_timeout = shutdown_timeout
        self._fork_policy: ForkPolicy = fork_policy
        self._scheduler = scheduler = Scheduler(
            self._name, clock, slack=slack, inline_below=inline_below, fork_policy=fork_policy,
            workers=workers)
        self._pool = scheduler.pool
        scheduler.restart = self._restart_after_fork
        self._jobs = scheduler.jobs  # one dict: the scheduler drops cancelled jobs from it
        self._name_counts: dict[str, int] = {}
        self._generation = 0
        self._submitted = 0
        self._submissions_failed = 0
        self._last_submission_error: str | None = None
        self._futures: set[concurrent.futures.Future[object]] = set()
        self._store: StoreLoop | None = None
        self._signal_wait: SignalWait | None = None  # while run_until_signal waits
        if store is not None:
            # A URL is opened here: an unreachable store is one clear error at construction,
            # naming the URL (password hidden).
            owned = isinstance(store, str)
            lease = _validate.seconds(store_lease, "store_lease", allow_zero=False)
            opened = open_store(store) if isinstance(store, str) else check_store(store)
            self._store = scheduler.store_loop = StoreLoop(
                self._name, opened, scheduler, owned=owned, lease=lease, serve=allowed)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> BackgroundService:
        """Start the scheduler thread and any dedicated jobs; idempotent. Returns the service.

        Raises:
            ShutdownError: the service was shut down.
            TypeError: a stored schedule's target does not import back as its function
                (checked here, not when a decorator added it: its name was not bound yet).
        """
        if shutting_down():
            raise ShutdownError("the interpreter is shutting down: cannot start a service")
        scheduler = self._scheduler
        if not scheduler.started:
            self._check_targets()
        with scheduler.lock:
            if scheduler.closing:
                raise ShutdownError(f"{self._name} was shut down; make a new BackgroundService")
            if scheduler.started:
                return self
            scheduler.started = True
            scheduler.needs_fork_restart = False
            now = scheduler.clock.monotonic()
            for job in self._jobs.values():
                if not job._dedicated and not (job._paused or job._cancelled or job._stopped):
                    scheduler.schedule_first(job, now)
            registry.register(self)
            scheduler.start()
        loop = self._store
        if loop is not None:
            loop.declare_all([(job._stored.definition, job) for job in list(self._jobs.values())
                              if job._stored is not None and not job._cancelled])
            loop.start()
        for job in list(self._jobs.values()):
            if job._executor is not None and not (job._paused or job._cancelled):
                job._executor.open()
        return self

    def _check_targets(self) -> None:
        # Here, not at schedule(): a decorator runs before the name it decorates is bound.
        for job in list(self._jobs.values()):
            link = job._stored
            if link is not None and not job._cancelled:
                try:
                    check_target(link.definition.target, job._fn)
                except TypeError as exc:
                    raise TypeError(f"stored schedule {job._name!r}: {exc}") from None

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
        self._scheduler.close()
        if self._store is not None:
            self._store.close()
        self._pool.stop()
        for job in list(self._jobs.values()):
            executor = job._executor
            if executor is not None:
                executor.close()
        signal_wait = self._signal_wait
        if signal_wait is not None:
            signal_wait.wake()

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
        are cancelled; runs still executing are reported (`ShutdownReport.unfinished_jobs`),
        not interrupted (threads cannot be); runs still queued behind a busy pool are dropped
        (`ShutdownReport.dropped_jobs`). With a store, calls to it still hanging 1 s before
        the deadline (half the timeout if shorter) are interrupted and later ones refused,
        so that its threads end by the deadline (a run's completion not written by then is
        settled by its ``on_crash`` once its lease expires). Idempotent.

        Args:
            cancel_pending: cancel submissions that have not started yet at once, instead of
                running them.
        """
        seconds = self._shutdown_timeout if timeout == "default" else _validate.timeout(timeout)
        began = SYSTEM_CLOCK.monotonic()
        deadline = None if seconds is None else began + seconds
        loop = self._store
        if loop is not None and deadline is not None:
            loop.deadline = deadline  # its thread waits for its helpers until then
        self.close()
        cancelled = 0
        if cancel_pending:
            cancelled += sum(f.cancel() for f in list(self._futures))
        if loop is not None and seconds is not None and loop.thread is not None:
            # A store call still hanging a moment before the deadline is interrupted, so
            # that the threads waiting on it end by the deadline (`stored_faults`).
            assert deadline is not None
            done = self._wait(deadline - min(INTERRUPT_BEFORE, seconds / 2))
            if not done:
                interrupt_blocked(loop)
                done = self._wait(deadline)
        else:
            done = self._wait(deadline)
        if loop is not None and loop.thread is None:
            loop.release()  # never started: its thread did not close the store
        if not done:
            cancelled += sum(f.cancel() for f in list(self._futures))
        slots = [j._slot for j in list(self._jobs.values())]
        unfinished = sum(1 for f in list(self._futures) if not f.done())
        return ShutdownReport(
            completed=done,
            unfinished_jobs=tuple(s.job.name for s in slots if s.executing),
            unfinished_submissions=unfinished,
            cancelled_submissions=cancelled,
            elapsed=SYSTEM_CLOCK.monotonic() - began,
            dropped_jobs=tuple(s.job.name for s in slots if s.running and not s.executing),
        )

    def run_until_signal(self, *signals: int,
                         timeout: float | Literal["default"] | None = "default"
                         ) -> ShutdownReport:
        """Start the service, serve until one of `signals` reaches the process, then shut down.

        The entry point of a program that runs a service until SIGTERM (a container or a
        process manager stopping it) or Ctrl-C: `signals` are SIGTERM and SIGINT if none are
        given. Their handlers are set before the service starts, so that a signal sent at any
        time from the call on stops it cleanly (Ctrl-C raises no `KeyboardInterrupt`), and
        put back when the wait ends, before ``shutdown(timeout)``: a second Ctrl-C interrupts
        a shutdown that takes too long. A `close` or `shutdown` from another thread (a job,
        say) ends the wait too. Returns the shutdown's report (a WARNING is logged if it did
        not complete); the start and the signal are logged at INFO.

        Unlike a handler that sets a `threading.Event` the main thread waits on, this does
        not hang when the kernel hands the signal to one of the service's threads, nor when
        the handler runs while the main thread holds the event's lock.

        Raises:
            RuntimeError: not called from the main thread (Python runs handlers there only).
            TypeError, ValueError: a bad `signals` (not a signal number, SIGKILL, ...) or
                `timeout`, before anything starts.
            ShutdownError, TypeError: as `start` (handlers restored, the service shut down).
        """
        wanted = check_signals(signals or DEFAULT_STOP_SIGNALS)
        if timeout != "default":
            _validate.timeout(timeout)
        received: signal.Signals | None = None
        with SignalWait(wanted) as signal_wait:  # a RuntimeError here: nothing started
            self._signal_wait = signal_wait
            try:
                self.start()
                logger.info("%s: serving until %s", self._name,
                            " or ".join(sig.name for sig in wanted))
                received = signal_wait.wait()
            finally:
                # Whatever ended the wait (a start that failed included), the handlers go
                # back first: a second Ctrl-C interrupts the shutdown, a second SIGTERM ends
                # the process, as they would without this call. Logged after.
                self._signal_wait = None
                signal_wait.restore()
                if received is not None:
                    logger.info("%s: %s received: shutting down", self._name, received.name)
                report = self.shutdown(timeout)
        if received is None:
            logger.info("%s: shut down while serving", self._name)
        if not report.completed:
            logger.warning("%s: shutdown did not complete: %r", self._name, report)
        return report

    def _threads(self) -> list[threading.Thread]:
        # The dispatcher last: it waits for the others to end (their runs emit events).
        loop = self._store
        return [*self._scheduler.producers(), *(helper_threads(loop) if loop else ()),
                *filter(None, [self._scheduler.events.thread])]

    def _executors(self) -> list[PeriodicExecutor]:
        return [e for j in list(self._jobs.values()) if (e := j._executor) is not None]

    def _wait(self, deadline: float | None) -> bool:
        done = wait_all(self._scheduler.producers(), self._pool, self._executors(),
                        self._futures, deadline)
        loop = self._store
        if loop is not None:  # read after the store thread: it starts no helper after its end
            done = wait_all(helper_threads(loop), self._pool, (), set(), deadline) and done
        # The dispatcher last, read only now: a run that ended during the close may have
        # started it with the first event anyone wanted (it waits for those threads itself).
        dispatcher = self._scheduler.events.thread
        if dispatcher is not None:
            done = wait_all([dispatcher], self._pool, (), set(), deadline) and done
        return done

    def _threads_alive(self) -> int:
        return alive(self._threads(), self._executors())

    # -- jobs -------------------------------------------------------------------------------

    @overload
    def every(self, interval: float, fn: None = None, /, *, name: str | None = None,
              min_interval: float = 0.0, jitter: float = 0.0, delay: float = 0.0,
              on_error: OnError = "continue", overrun: Overrun | None = None,
              backoff_max: float = 300.0, dedicated: bool = False,
              per_process: bool | None = None) -> Callable[[Callable[[], object]], Job]: ...

    @overload
    def every(self, interval: float, fn: Callable[[*Ts], object], /, *args: *Ts,
              name: str | None = None, min_interval: float = 0.0, jitter: float = 0.0,
              delay: float = 0.0, on_error: OnError = "continue",
              overrun: Overrun | None = None, backoff_max: float = 300.0,
              dedicated: bool = False, per_process: bool | None = None) -> Job: ...

    def every(self, interval: float, fn: Callable[..., object] | None = None, /,
              *args: object, name: str | None = None, min_interval: float = 0.0,
              jitter: float = 0.0, delay: float = 0.0, on_error: OnError = "continue",
              overrun: Overrun | None = None, backoff_max: float = 300.0,
              dedicated: bool = False, per_process: bool | None = None
              ) -> Job | Callable[[Callable[[], object]], Job]:
        """Run ``fn(*args)`` every `interval` seconds; return its `Job` handle.

        Without `fn`, returns a decorator that schedules the decorated function and returns
        its `Job` (the function stays reachable as ``job.fn``). Jobs may be added before or
        after `start()`.

        Args:
            interval: seconds between due times (finite, > 0). 0 is refused: a job due
                again the moment it ends keeps a core busy and is almost always a typo;
                continuous work belongs in one `submit`-ted loop. A tiny interval is
                honoured, and the scheduler still serves wakes and cancels between runs.
            fn: the function to run (omitted: `every` returns a decorator).
            *args: the positional arguments of each call.
            name: unique within the service (default: the function's qualified name, made
                unique with a ``#n`` suffix); as for `schedule`.
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
            per_process: an `every` job is kept in memory and runs in **each** process that
                adds it, store or not. On a service with a store (where `schedule` is shared)
                this must be said: ``per_process=True`` (a cache refresh, a local flush);
                work to run once per interval across the processes is
                ``schedule(Interval(interval), fn, name=...)``. Without a store it may be
                left out.

        Raises:
            TypeError: `fn` is not callable, or an option has the wrong type.
            ValueError: a bad interval, an unknown option value, or a duplicate `name`;
                on a service with a store, `per_process` not ``True``.
            ShutdownError: the service was shut down.
        """
        self._check_per_process(per_process, interval)
        options = every_options(interval, min_interval, jitter, delay, on_error, overrun,
                                backoff_max, dedicated, name)
        return self._add_or_decorate(fn, args, name, options, "every")

    def _check_per_process(self, per_process: bool | None, interval: float) -> None:
        # Said where the job is added: N processes on one store would run it N times, and a
        # newcomer expects it shared like schedule() (nothing in the store says otherwise).
        if per_process is not None and not isinstance(per_process, bool):
            raise TypeError("per_process must be True, False or None, "
                            f"got {type(per_process).__name__}")
        if per_process is True or (per_process is None and self._store is None):
            return
        said = "per_process=False" if per_process is False else "without per_process=True"
        where = "on a service " + ("with" if self._store is not None else "without") + " a store"
        raise ValueError(
            f"every() {said} {where}: an every() job runs in memory in each process that "
            "adds it (N processes: N runs per interval); say per_process=True for "
            f"per-process work (a cache refresh), or use schedule(Interval({interval!r}), fn, "
            "name=...) to run it once per interval across the processes sharing the store")

    @overload
    def schedule(self, trigger: TriggerLike, fn: None = None, /, *, name: str | None = None,
                 missed: Missed = "latest", max_missed: int = 100, grace: float | None = None,
                 on_error: WallOnError = "continue", since: datetime.datetime | None = None,
                 on_crash: OnCrash = "drop") -> Callable[[Callable[[], object]], Job]: ...

    @overload
    def schedule(self, trigger: TriggerLike, fn: Callable[[*Ts], object], /, *args: *Ts,
                 name: str | None = None, missed: Missed = "latest", max_missed: int = 100,
                 grace: float | None = None, on_error: WallOnError = "continue",
                 since: datetime.datetime | None = None, on_crash: OnCrash = "drop") -> Job: ...

    def schedule(self, trigger: TriggerLike, fn: Callable[..., object] | None = None, /,
                 *args: object, name: str | None = None, missed: Missed = "latest",
                 max_missed: int = 100, grace: float | None = None,
                 on_error: WallOnError = "continue", since: datetime.datetime | None = None,
                 on_crash: OnCrash = "drop") -> Job | Callable[[Callable[[], object]], Job]:
        """Run ``fn(*args)`` at each fire time of a wall-clock `trigger`; return its `Job`.

        Without `fn`, a decorator (as `every`). The trigger (`executors.Cron`, `Date`,
        `CalendarInterval`, `Interval`, `AnyOf`, `AllOf`) gives aware UTC fire times; the
        scheduler sleeps on the monotonic clock until each. While such jobs exist it never
        sleeps longer than 60 s and compares the wall and boot clocks with the monotonic one
        at each wake-up: a step or a suspend (a change of more than 1 s) is seen within 60 s
        and recomputes every deadline. `executors.current_run` gives a run its fire time.
        When the trigger has no fire time left the job ends (state ``"finished"``).

        A fire time is **missed** when it passed while the service was not watching (after
        `since`, before the job was added; during a suspend; skipped by a forward step of the
        clock), when by the time it is handled the next fire time is due too (a run overran,
        the pool was busy), or when it is later than `grace`. The fire times due at one
        handling are one group; `missed` says what runs: ``"latest"`` (default) the latest
        of the group, once; ``"all"`` each, oldest first (at most `max_missed` missed ones);
        ``"skip"`` none of the missed ones. Every miss is counted (`JobStatistics.missed`),
        logged at WARNING and announced (`RunMissed`), up to 10,000 a group (then a lower
        bound). A step of the clock back never runs a fire time twice: the next fire time is
        always the trigger's first after the last one handled.

        Args:
            trigger: when to run (see `executors.triggers`).
            fn: the function to run (omitted: `schedule` returns a decorator). With a store,
                a module-level function, classmethod or staticmethod (below).
            *args: the positional arguments of each call (with a store: JSON values).
            name: unique within the service (default: the function's qualified name); not
                empty, at most 200 characters, no control character or lone surrogate.
            missed: ``"latest"``, ``"all"`` or ``"skip"`` (above).
            max_missed: the most missed fire times ``missed="all"`` runs at one handling.
            grace: seconds (> 0) after a fire time past which no policy runs it; None
                (default): no limit, nothing is dropped for lateness.
            on_error: ``"continue"`` (log, count, keep the schedule) or ``"stop"``.
            since: an aware datetime: the schedule was last handled then (how a restart
                hands its state over); the fire times since then that already passed are
                missed (reason ``"stopped"``). None: the first fire time is the trigger's
                first after the service starts (or after now). Not for a stored schedule
                (the store keeps its state).
            on_crash: a stored schedule's run whose process died (its lease expired):
                ``"drop"`` (default: counted lost, at most once) or ``"rerun"`` (run again
                by another process with ``current_run().attempt`` 2: at least once).

        With a store (``BackgroundService(store=...)``) the schedule is kept there as data:
        `fn` must import back as ``"module:qualname"`` (a module-level function, a
        classmethod or a staticmethod: a lambda, a closure or a bound method of an object
        is refused, with the reason; that it imports back is checked at `start()`, as the
        name a decorator decorates is bound only after it) and `args` must be JSON that every
        store keeps: no NUL or lone surrogate in a string or key, at most 32 levels of lists
        and mappings, at most 1 MiB (1,048,576 bytes) of UTF-8 JSON in all (refused before
        anything is stored, naming the argument). Its name is `name`, else
        ``"module:qualname"`` (stable across processes); a program run as a script names it
        ``"__main__:fn"`` (a WARNING says so). Every process declares it at start; each fire
        time is claimed by one of them (see the Schedules page, "Many processes, one store").

        Raises:
            TypeError, ValueError: a bad argument, named: `trigger` is not a trigger,
                `missed`, `max_missed`, `grace` or `on_error` out of range, `since` naive,
                `name` or (with a store) `args` past the bounds above.
            ShutdownError: the service was shut down.

        Example:
            >>> import datetime
            >>> from executors import BackgroundService, Date
            >>> when = datetime.datetime(2030, 3, 1, 11, 0, tzinfo=datetime.timezone.utc)
            >>> with BackgroundService() as svc:
            ...     job = svc.schedule(Date(when), print, "report", name="report")
            ...     job.next_fire.isoformat()
            '2030-03-01T11:00:00+00:00'
        """
        options = schedule_options(trigger, missed, max_missed, grace, on_error, since, name,
                                   on_crash)
        return self._add_or_decorate(fn, args, name, options, "schedule")

    @overload
    def cron(self, expression: str, fn: None = None, /, *, tz: zoneinfo.ZoneInfo | str,
             name: str | None = None, **options: Unpack[CronOptions]
             ) -> Callable[[Callable[[], object]], Job]: ...

    @overload
    def cron(self, expression: str, fn: Callable[[*Ts], object], /, *args: *Ts,
             tz: zoneinfo.ZoneInfo | str, name: str | None = None,
             **options: Unpack[CronOptions]) -> Job: ...

    def cron(self, expression: str, fn: Callable[..., object] | None = None, /,
             *args: object, tz: zoneinfo.ZoneInfo | str, name: str | None = None,
             **options: Unpack[CronOptions]) -> Job | Callable[[Callable[[], object]], Job]:
        """``schedule(Cron(expression, tz=tz, ...), fn, *args, ...)``: a decorator or a call.

        The keyword `options` are the `executors.Cron` trigger's (``gap="shift"``,
        ``fold="first"``, ``start``, ``end``, ``jitter``: time that does not exist or happens
        twice follows Debian cron's rule by default, see the Schedules page), then
        `schedule`'s (``missed``, ``max_missed``, ``grace``, ``on_error``, ``since``,
        ``on_crash``).

        Args:
            expression: the cron expression: 5 fields (minute hour day month weekday), or 6
                with seconds first (``"*/5 * * * * *"``: every 5 s); see `executors.Cron`.
            fn: the function to run (omitted: `cron` returns a decorator).
            *args: the positional arguments of each call (with a store: JSON values).
            tz: the zone the expression reads in: a key (``"Europe/Berlin"``) or a
                `zoneinfo.ZoneInfo`. Required: a cron expression means nothing without one.
            name: unique within the service (see `schedule`).
            **options: the trigger's and `schedule`'s keywords (above).

        Raises:
            TypeError, ValueError: a bad argument, named (a bad expression names its field
                and token); an unknown option.
            ShutdownError: the service was shut down.

        Example:
            >>> from executors import BackgroundService
            >>> with BackgroundService() as svc:
            ...     @svc.cron("30 2 * * *", tz="Europe/Berlin")
            ...     def nightly() -> None: ...
            ...     nightly.statistics().trigger
            '30 2 * * * Europe/Berlin'
        """
        return self._add_or_decorate(fn, args, name, cron_options(expression, tz, name, options),
                                     "cron")

    def subscribe(self, callback: Callable[[ServiceEvent], object],
                  kinds: type[ServiceEvent] | Iterable[type[ServiceEvent]] | None = None
                  ) -> Subscription:
        """Call ``callback(event)`` for each event of the `kinds` (an event class, an
        iterable of them, or None: all); returns a `Subscription`.

        Events are frozen dataclasses (`RunStarted`, `RunFinished`, `RunFailed`, `RunMissed`,
        `ScheduleAdded`, `ScheduleChanged`, `ScheduleRemoved`, `SchedulePaused`,
        `ScheduleResumed`, `ClockChanged`), delivered in order on the service's one
        dispatcher thread, never on the scheduler or a worker: a slow or raising subscriber
        never delays a run. A raise is logged and counted (`Subscription.statistics`); at
        most 10,000 events wait for the dispatcher, past that new ones are dropped and
        counted. At shutdown the events of the runs that finish are still delivered.

        Raises:
            TypeError, ValueError: `callback` is not callable; `kinds` holds something other
                than event classes, or none. ShutdownError: the service was shut down.
        """
        if self._scheduler.closing:
            raise ShutdownError(f"{self._name} was shut down: cannot subscribe")
        return self._scheduler.events.subscribe(callback, kinds)

    def _add_or_decorate(self, fn: Callable[..., object] | None, args: tuple[object, ...],
                         name: str | None, options: JobOptions, method: str
                         ) -> Job | Callable[[Callable[[], object]], Job]:
        if fn is not None:
            return self._add(fn, args, name, options)
        if args:
            raise TypeError(f"the decorator form of {method}() takes no positional args")
        return lambda func: self._add(func, (), name, options)

    def _add(self, fn: Callable[..., object], args: tuple[object, ...], name: str | None,
             o: JobOptions) -> Job:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        stored = None
        if self._store is not None and o.wall is not None:
            stored = self._definition(fn, args, name, o)
            name = stored.name
        scheduler = self._scheduler
        with scheduler.lock:
            if scheduler.closing:
                raise ShutdownError(f"{self._name} was shut down: cannot add a job")
            if name is None:
                name = unique_name(fn, self._jobs, self._name_counts)
            elif name in self._jobs:
                raise ValueError(f"a job named {name!r} already exists in {self._name}: "
                                 f"{self._taken_by(name)}")
            job = Job(NO_PUBLIC_CONSTRUCTOR, scheduler, fn, args, name, o.interval,
                      o.min_interval, o.jitter, o.delay, o.on_error, o.overrun, o.backoff_max,
                      o.dedicated, f"{self._name}:{name}", o.wall)
            self._jobs[name] = job
            started = scheduler.started
            if stored is not None:
                assert self._store is not None
                job._serve_from(StoredLink(self._store, stored))
            else:
                if ScheduleAdded in scheduler.events.wanted:
                    scheduler.events.emit(ScheduleAdded(name, job._describe()))
                if started and not o.dedicated:
                    scheduler.schedule_first(job, scheduler.clock.monotonic())
        if stored is not None:
            if started:
                assert self._store is not None
                if not_bound_yet(stored.target):
                    self._store.declare_later(stored, job)  # checked by the loop then
                else:
                    self._store.declare(stored, job)  # events: added or changed, by the store
            return job
        if o.dedicated and started and job._executor is not None:
            job._executor.open()
        elif started:
            scheduler.nudge()
        return job

    def _definition(self, fn: Callable[..., object], args: tuple[object, ...],
                    name: str | None, o: JobOptions) -> ScheduleDefinition:
        """A stored schedule's definition: importable target, JSON data (refused otherwise,
        with the reason)."""
        wall = o.wall
        assert wall is not None
        if wall.since is not None:
            raise ValueError("since does not apply to a schedule kept in a store: the store "
                             "keeps its state across restarts")
        target = target_of(fn)
        if self._scheduler.started and not not_bound_yet(target):
            check_target(target, fn)  # before start() (or in a decorator), start() checks it
        if target.startswith("__main__:"):
            # Another process resolves "__main__" to its own main program, not this script.
            logger.warning("%s: stored schedule %r has the target %s: this program runs as "
                           "a script, and another process serving the store (or `executors "
                           "schedules`) imports its own __main__ instead; put the function in "
                           "an importable module and import it from the script", self._name,
                           name if name is not None else target, target)
        options: dict[str, object] = {"missed": wall.missed, "max_missed": wall.max_missed,
                                      "grace": wall.grace, "on_error": o.on_error,
                                      "on_crash": o.on_crash}
        definition = ScheduleDefinition(name if name is not None else target,
                                        wall.trigger.to_data(), target, args, {}, options)
        # Before anything is written: what some store would refuse later, refused here.
        check_name(definition.name, "name" if name is not None else
                   "the name of an unnamed stored schedule (its target; give it a name)")
        check_arguments(definition.args, definition.kwargs, definition.name)
        try:
            definition.digest()
        except ValueError:
            try:
                json.dumps(list(args), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"args of stored schedule {definition.name!r} must be JSON "
                                f"(nothing is pickled): {exc}") from None
            raise
        if definition.name in self._jobs:
            fix = (f"give each stored schedule of {target} a name" if name is None
                   else "give this one another name")
            raise ValueError(f"the name {definition.name!r} is taken in {self._name} by "
                             f"{self._taken_by(definition.name)}: {fix}")
        return definition

    def _taken_by(self, name: str) -> str:
        """The job called `name` as people tell it apart: its function and its trigger."""
        job = self._jobs[name]
        link = job._stored
        fn = link.definition.target if link is not None else getattr(
            job._fn, "__qualname__", repr(job._fn))
        kind = "the stored schedule" if link is not None else "the job"
        return f"{kind} {fn} ({job._describe()})"

    def unschedule(self, name: str) -> bool:
        """Remove the schedule `name`: from the store (whoever declared it; it stays removed
        until a process declares it again at its start), else the in-memory job of that name
        (cancelled). True if there was one.

        Raises:
            TypeError: `name` is not a str.
            Exception: the store's error, if it cannot be reached.
        """
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        job = self._jobs.get(name)
        if self._store is not None and (job is None or job._stored is not None):
            return self._store.unschedule(name) or job is not None
        if job is None:
            return False
        job.cancel()
        return True

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
            TypeError: `fn` is not callable. RuntimeError: the service was not started.
            ShutdownError: the service was shut down.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        scheduler = self._scheduler
        if scheduler.needs_fork_restart:
            self.start()
        if scheduler.closing:
            raise ShutdownError(f"{self._name} was shut down: cannot submit work")
        if not scheduler.started:
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
            self._pool.put(Submission(future, fn, args))  # type: ignore[arg-type]
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
        scheduler = self._scheduler
        if scheduler.closing:
            return "closed" if self._threads_alive() == 0 else "closing"
        return "running" if scheduler.started else "idle"

    def statistics(self) -> ServiceStatistics:
        """Service-wide counters (read without a lock)."""
        return ServiceStatistics(
            name=self._name,
            state=self._state_name(),
            workers=self._workers,
            threads=self._threads_alive(),
            jobs=len(self._jobs),
            job_runs=self._scheduler.job_runs,
            job_errors=self._scheduler.job_errors,
            submitted=self._submitted,
            submissions_pending=len(self._futures),
            submissions_failed=self._submissions_failed,
            last_submission_error=self._last_submission_error,
            generation=self._generation,
        )

    def status(self) -> ServiceStatus:
        """A snapshot of the service and every job, for health endpoints."""
        loop = self._store
        return ServiceStatus(self.statistics(),
                             tuple(j.statistics() for j in list(self._jobs.values())),
                             None if loop is None else loop.status())

    def __repr__(self) -> str:
        s = self.statistics()
        jobs = state_counts(list(self._jobs.values()))
        return (f"<BackgroundService {self._name!r} {s.state} jobs={s.jobs}"
                f"{' (' + jobs + ')' if jobs else ''} threads={s.threads}"
                f" workers={self._workers} pending={s.submissions_pending}>")

    # -- fork -------------------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        """Registry hook in a forked child: rebuild, never unlock; apply the fork policy."""
        eager = self._scheduler.after_fork()
        self._pool.reset()
        if self._store is not None:
            self._store.after_fork()
        self._futures = set()
        self._generation += 1
        if eager:
            self.start()

    def _restart_after_fork(self) -> None:
        lock = self._scheduler.lock
        if lock.acquire(blocking=False):
            try:
                restart = self._scheduler.needs_fork_restart and not self._scheduler.started
            finally:
                lock.release()
            if restart:
                self.start()
