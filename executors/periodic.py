"""PeriodicExecutor: one daemon thread runs a target every `interval` seconds, and never polls."""

from __future__ import annotations

import contextvars
import dataclasses
import itertools
import logging
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Literal, TypedDict, TypeVar, final

from typing_extensions import Unpack

from . import _periodic_args, _threads, _validate, registry
from ._clock import SYSTEM_CLOCK, Clock
from ._periodic_args import OnError

__all__ = ("PeriodicExecutor", "PeriodicExecutorStatistics")

logger = logging.getLogger("executors.periodic")

ForkPolicy = Literal["lazy", "eager", "stop"]

_names = itertools.count(1)
OwnerT = TypeVar("OwnerT")


class _Options(TypedDict, total=False):
    on_error: OnError
    clock: Clock | None
    fork_policy: ForkPolicy


@dataclasses.dataclass(frozen=True)
class PeriodicExecutorStatistics:
    """A snapshot of a `PeriodicExecutor` (see `PeriodicExecutor.statistics`).

    Times are on the executor's clock (`time.monotonic` unless a clock was injected).
    """

    #: "idle" (never opened), "open" (thread sleeping or about to run), "running" (target
    #: executing), "closing" (close requested, thread not yet gone) or "closed".
    state: str
    #: Calls of the target that returned or raised (a call in progress is not counted yet).
    runs: int
    #: How many times the thread came out of its wait, for any reason. An idle executor adds
    #: one per due run and nothing in between (PyMongo's adds 1/min_interval per second).
    wakeups: int
    #: How many `wake()` calls were made.
    wake_requests: int
    #: Calls of the target that raised an `Exception` (each is logged too).
    errors: int
    #: ``"ExceptionType: message"`` of the latest call that raised, or None if none has.
    last_error: str | None
    #: When the latest call of the target started (seconds on the executor's monotonic
    #: clock), or None before the first.
    last_run_started: float | None
    #: When the next call is due (seconds on the executor's monotonic clock). While the target
    #: runs it still holds the due time of that run; None before the first run is scheduled
    #: and once the executor is stopping or stopped.
    next_run_at: float | None
    #: True while the executor's thread is alive (it outlives `close()` until its current run
    #: returns).
    thread_alive: bool
    #: Bumped by every fork: the executor's internal state was rebuilt that many times.
    generation: int


@final
class PeriodicExecutor:
    """Run `target` on a daemon thread every `interval` seconds, woken early by `wake()`.

    A drop-in for PyMongo's ``pymongo.periodic_executor.PeriodicExecutor``: same constructor
    ``(interval, min_interval, target, name=None)``, same methods (`open`, `close`, `join`,
    `wake`, `update_interval`, `skip_sleep`), and a target that returns a falsy value stops the
    executor. Unlike PyMongo's, the thread never polls: it blocks in
    ``queue.SimpleQueue.get(timeout=time_to_next_run)``, and `wake()`/`close()` are a ``put()``.
    An idle executor costs no wake-ups between runs, and wakes or stops within microseconds.

    Scheduling:
        Runs are spaced start to start: the next run is due `interval` seconds after the
        previous one started (immediately, if the target overran). The first run happens as soon
        as the thread starts. `wake()` asks for an early run, served no sooner than
        `min_interval` after the start of the previous run; a wake that arrives while the target
        runs is kept and served after it. `skip_sleep()` makes the next run follow at once,
        ignoring both intervals (PyMongo's streaming monitors rely on that).

    Thread-safety and destructor-safety:
        `close()` and `wake()` take no lock: they are safe from ``__del__``, weakref callbacks,
        signal handlers and any thread (CPython documents ``SimpleQueue.put`` as reentrant;
        PyMongo PYTHON-799 and PYTHON-863 were deadlocks of destructors taking locks). ``close``
        accepts and ignores one positional argument, so ``weakref.ref(owner, executor.close)``
        stops the executor when `owner` is collected. `open()` may be called from any thread;
        however it races with `close()`, exactly one thread ends up running.

    Errors:
        An exception from the target is logged on ``executors.periodic`` with its traceback and
        counted; with ``on_error="continue"`` (the default) the executor keeps its schedule, with
        ``on_error="stop"`` it stops. No exception or traceback is kept (PyMongo PYTHON-2433: kept
        tracebacks pinned frames); `statistics()` has its text.

    Each run executes in a fresh `contextvars.Context`, so values set by whoever opened the
    executor do not leak into the target (PyMongo PYTHON-5406).

    Args:
        interval: seconds between runs (finite, >= 0).
        min_interval: the least time between the start of a run and an early run caused by
            `wake()` (finite, >= 0, <= interval). It never delays `close()`.
        target: a callable taking no arguments; return a falsy value to stop.
        name: the thread's name (default ``PeriodicExecutor-<n>``).
        on_error: ``"continue"`` or ``"stop"`` after the target raises an `Exception`.
        clock: where time comes from (default: the real monotonic clock); tests pass an
            `executors.testing.VirtualClock`.
        fork_policy: what an executor that was open does in a forked child: ``"lazy"``
            (default) restarts on the first `open()` or `wake()` in the child, ``"eager"``
            restarts at once, ``"stop"`` stays closed until `open()`.

    Raises:
        TypeError: `target` is not callable, or an interval is not a number.
        ValueError: an interval is negative, NaN or infinite, or `min_interval > interval`,
            or an option has an unknown value.

    Example:
        >>> import threading
        >>> ran = threading.Event()
        >>> def check() -> bool:
        ...     ran.set()
        ...     return True
        >>> ex = PeriodicExecutor(interval=60, min_interval=0.5, target=check, name="monitor")
        >>> ex.open()
        >>> ran.wait(5)
        True
        >>> ex.close(wait=True)
        True
    """

    #: What the registry lists in `executors.registry.live_executors` (it imports no class).
    registry_kind: ClassVar[str] = "executor"

    __slots__ = (
        "__weakref__",
        "_clock",
        "_errors",
        "_fork_policy",
        "_generation",
        "_interval",
        "_last_error",
        "_last_start",
        "_lock",
        "_min_interval",
        "_name",
        "_needs_fork_restart",
        "_next_run",
        "_on_error",
        "_opened",
        "_queue",
        "_running",
        "_runs",
        "_skip_sleep",
        "_stopped",
        "_target",
        "_thread",
        "_wake_requested",
        "_wake_requests",
        "_wakeups",
    )

    def __init__(
        self,
        interval: float,
        min_interval: float,
        target: Callable[[], object],
        name: str | None = None,
        *,
        on_error: OnError = "continue",
        clock: Clock | None = None,
        fork_policy: ForkPolicy = "lazy",
    ) -> None:
        self._interval, self._min_interval = _periodic_args.check(
            interval, min_interval, target, name, on_error)
        if fork_policy not in ("lazy", "eager", "stop"):
            raise ValueError(f"fork_policy must be 'lazy', 'eager' or 'stop', got {fork_policy!r}")
        self._target = target
        self._name = name if name is not None else f"PeriodicExecutor-{next(_names)}"
        self._on_error: OnError = on_error
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._fork_policy: ForkPolicy = fork_policy
        self._reset_internals()
        self._generation = 0
        self._runs = 0
        self._wakeups = 0
        self._wake_requests = 0
        self._errors = 0
        self._last_error: str | None = None
        self._last_start: float | None = None

    def _reset_internals(self) -> None:
        # Everything a thread shares with its callers. After fork this is rebuilt, never
        # "unlocked": a lock held by a thread that does not exist in the child guards state that
        # may be half-updated (PyMongo releases them, and documents itself as not fork-safe).
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[None] = queue.SimpleQueue()
        # Only the executor's own thread clears _thread (under _lock, when it decides to exit);
        # only open() sets it. Whoever sees _thread is not None knows a thread will run.
        self._thread: threading.Thread | None = None
        self._stopped = True
        self._opened = False
        self._running = False
        self._skip_sleep = False
        self._wake_requested = False
        self._needs_fork_restart = False
        self._next_run: float | None = None

    @classmethod
    def for_owner(
        cls,
        owner: OwnerT,
        target: Callable[[OwnerT], object],
        interval: float,
        min_interval: float,
        name: str | None = None,
        **options: Unpack[_Options],
    ) -> PeriodicExecutor:
        """The monitor pattern, done right: run ``target(owner)`` while `owner` lives.

        The executor holds `owner` only by weak reference, so its thread never keeps the owner
        alive; when the owner is collected the executor closes itself at once (the weakref's
        callback is `close`) and the thread exits. Keep the returned executor on the owner.

        The weakref is kept in the target's closure, which the running thread keeps reachable.
        Storing ``weakref.ref(owner, executor.close)`` only on the owner is a trap: when the
        owner dies in a reference cycle, the weakref is garbage in the same collection and
        CPython then drops its callback, so the thread would run on for one more interval.

        Raises:
            TypeError: `target` is not callable, or `owner` does not support weak references;
                and as the constructor, for the intervals, `name` and options.

        Example:
            >>> class Monitor:
            ...     def __init__(self) -> None:
            ...         self.checks = 0
            ...         self.executor = PeriodicExecutor.for_owner(self, Monitor.check, 10, 0.5)
            ...         self.executor.open()
            ...     def check(self) -> bool:
            ...         self.checks += 1
            ...         return True
            >>> m = Monitor(); ex = m.executor; del m
            >>> ex.join(5)
            True
        """
        # The wrapper below is always callable: check what it wraps, or a bad target would
        # only show as an error logged at every run.
        if not callable(target):
            raise TypeError(f"target must be callable, got {type(target).__name__}")
        self_ref: weakref.ref[OwnerT]

        def run_for_owner() -> object:
            alive = self_ref()
            if alive is None:
                return False
            return target(alive)

        executor = cls(interval, min_interval, run_for_owner, name, **options)
        try:
            self_ref = weakref.ref(owner, executor.close)
        except TypeError:
            raise TypeError(
                f"owner must support weak references, got {type(owner).__name__}"
            ) from None
        return executor

    # -- control: open ----------------------------------------------------------------------

    def open(self) -> None:
        """Start the executor's thread, or keep the current one running. Idempotent.

        Safe against every restart race: right after `close()` (the thread that was about to
        exit is kept, or a new one is started once it has gone), after the target returned a
        falsy value, or after it raised. Never joins while holding a lock. Quietly does nothing
        while the interpreter is shutting down (PyMongo PYTHON-4147).
        """
        if sys.is_finalizing() or registry.is_shutting_down():
            return
        with self._lock:
            self._opened = True
            self._stopped = False
            self._needs_fork_restart = False
            if self._thread is not None:
                # The thread is alive (it clears _thread under this lock before exiting), and it
                # re-reads _stopped under this lock before exiting: it will carry on.
                self._queue.put(None)
                return
            thread = _threads.new_thread(self._run, self._name)
            self._thread = thread
            registry.register(self)
            try:
                _threads.start(thread)
            except RuntimeError:
                # "can't create new thread at interpreter shutdown" (cpython#114570): refuse
                # quietly, as the executor would have been stopped a moment later anyway.
                self._thread = None
                self._stopped = True
                if not (sys.is_finalizing() or registry.is_shutting_down()):
                    raise

    # -- control: lock-free, destructor-safe ------------------------------------------------

    def close(self, dummy: object = None, *, wait: bool = False,
              timeout: float | None = None) -> bool:
        """Stop the executor. Takes no lock: safe from destructors and weakref callbacks.

        The thread exits as soon as the current run (if any) returns; a sleeping thread exits
        at once. `dummy` is ignored, so that ``close`` can be a weakref callback.

        Args:
            wait: also wait for the thread to exit (not from the executor's own thread, and not
                from a destructor: waiting takes the thread's lock).
            timeout: with `wait`, give up after this many seconds.

        Returns:
            True if no executor thread is left running. Without `wait`, whether the thread
            had already gone when `close()` returned.
        """
        self._stopped = True
        self._queue.put(None)
        if wait:
            return self.join(timeout)
        return self._thread is None

    def wake(self) -> None:
        """Ask for a run soon: now, or `min_interval` after the start of the previous run.

        Takes no lock (destructor-safe). A wake during a run is served after it. After a fork,
        an executor that was open in the parent restarts on its first wake in the child; that
        one call starts a thread (which takes the interpreter's thread-start lock).
        """
        self._wake_requests += 1
        self._wake_requested = True
        self._queue.put(None)
        if self._needs_fork_restart:
            self._restart_after_fork()

    def skip_sleep(self) -> None:
        """Make the next run follow the current one at once, once (PyMongo's streaming hook)."""
        self._skip_sleep = True
        self._queue.put(None)

    def update_interval(self, new_interval: float) -> None:
        """Change `interval`; takes effect at once (the next run is rescheduled)."""
        seconds = _validate.seconds(new_interval, "new_interval")
        if seconds < self._min_interval:
            raise ValueError(
                f"new_interval ({new_interval!r}) must not be below min_interval "
                f"({self._min_interval!r})"
            )
        self._interval = seconds
        self._queue.put(None)

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to exit; True if no executor thread is running afterwards.

        Safe before `open()` (returns True at once, PyMongo PYTHON-1050) and from the executor's
        own thread (returns False at once: a thread cannot wait for itself).
        """
        timeout = _validate.timeout(timeout)
        thread = self._thread
        if thread is None:
            return True
        if thread is threading.current_thread():
            return False
        try:
            # Through _threads.join: the registry at exit and a service's shutdown may wait
            # for this thread at once (python/cpython#116372).
            return _threads.join(thread, timeout)
        except RuntimeError:  # started by open() a moment ago but not yet running
            return False

    # -- introspection ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def min_interval(self) -> float:
        return self._min_interval

    @property
    def target(self) -> Callable[[], object]:
        return self._target

    @property
    def closed(self) -> bool:
        """True once `close()` was called (or the target stopped it) and not reopened."""
        return self._stopped

    def _state(self) -> str:
        if not self._opened:
            return "idle"
        if self._stopped:
            return "closing" if self._thread is not None else "closed"
        return "running" if self._running else "open"

    def statistics(self) -> PeriodicExecutorStatistics:
        """A consistent-enough snapshot (read without a lock; counters only grow)."""
        thread = self._thread
        return PeriodicExecutorStatistics(
            state=self._state(),
            runs=self._runs,
            wakeups=self._wakeups,
            wake_requests=self._wake_requests,
            errors=self._errors,
            last_error=self._last_error,
            last_run_started=self._last_start,
            next_run_at=self._next_run if not self._stopped else None,
            thread_alive=thread is not None and _threads.alive(thread),
            generation=self._generation,
        )

    def __repr__(self) -> str:
        state = self._state()
        parts = [f"<PeriodicExecutor {self._name!r} {state}"]
        if state in ("open", "running") and self._next_run is not None:
            due = max(0.0, self._next_run - self._clock.monotonic())
            parts.append(f"next_run_in={due:.3g}s")
        parts.append(f"interval={self._interval:g}s runs={self._runs}")
        if self._errors:
            parts.append(f"errors={self._errors}")
        return " ".join(parts) + ">"

    # -- the thread -------------------------------------------------------------------------

    def _try_exit(self) -> bool:
        """Decide, atomically with open(), whether the thread exits. True: it must return."""
        with self._lock:
            if not self._stopped:
                return False  # reopened between close() and here: keep going
            if self._thread is threading.current_thread():
                self._thread = None
            self._next_run = None
            return True

    def _run(self) -> None:
        clock = self._clock
        q = self._queue
        me = threading.current_thread()
        try:
            while True:
                if self._stopped and self._try_exit():
                    return
                if self._thread is not me:  # a fork rebuilt us; this thread is stale
                    return
                # A wake() from now on asks for another run: clear before draining, so a wake
                # racing with the run is never lost (at worst it costs one extra loop).
                self._wake_requested = False
                _drain(q)
                start = clock.monotonic()
                self._last_start = start
                if not self._run_target_once():
                    self._stopped = True
                    continue
                self._wait_until_due(start)
        except BaseException:
            # SystemExit/KeyboardInterrupt from the target (or a bug): same exit bookkeeping as
            # every other path (PyMongo misses it on "target returned False"), then propagate.
            self._stopped = True
            self._try_exit()
            raise

    def _run_target_once(self) -> bool:
        """Run the target in a fresh context; False if the executor must stop."""
        self._running = True
        try:
            result = contextvars.Context().run(self._target)
        except Exception as exc:
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
            logger.exception("%s: target %r raised", self._name, self._target)
            # Drop our references at once; the traceback pins the target's frames.
            del exc
            return self._on_error == "continue"
        finally:
            self._running = False
            self._runs += 1
        return bool(result)

    def _wait_until_due(self, start: float) -> None:
        """Block until the next run is due, a served wake(), or close(). Never polls."""
        clock = self._clock
        q = self._queue
        if self._skip_sleep:
            self._skip_sleep = False
            return
        while True:
            # Read the interval each time: update_interval() reschedules the sleeping thread.
            due = start + self._interval
            if self._wake_requested:
                due = min(due, start + self._min_interval)
            self._next_run = due
            if self._stopped or self._skip_sleep:
                self._skip_sleep = False
                return
            remaining = due - clock.monotonic()
            if remaining <= 0:
                return
            try:
                clock.wait(q, remaining)
            except queue.Empty:
                pass
            self._wakeups += 1

    # -- fork -------------------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        """Called in a forked child (registry hook): rebuild, never unlock; maybe restart."""
        was_open = not self._stopped
        self._reset_internals()
        self._generation += 1
        self._opened = was_open
        if not was_open:
            return
        if self._fork_policy == "eager":
            self.open()
        elif self._fork_policy == "lazy":
            self._stopped = False
            self._needs_fork_restart = True
        # "stop": stays closed until open().

    def _restart_after_fork(self) -> None:
        # Only reached in a forked child, once: the first wake() there restarts the thread.
        if self._lock.acquire(blocking=False):
            try:
                restart = self._needs_fork_restart and self._thread is None
            finally:
                self._lock.release()
            if restart:
                self.open()


def _drain(q: queue.SimpleQueue[None]) -> None:
    """Discard the nudges already queued: their state change is about to be read."""
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass


if TYPE_CHECKING:
    def _listed_by_the_registry(ex: PeriodicExecutor) -> registry.LiveExecutor:
        # The registry names executors by its protocol (it imports no executor): the type
        # checker holds PeriodicExecutor to it here.
        return ex
