"""AsyncPeriodicExecutor: PyMongo's async periodic executor on one task, without polling."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, final

from executors import _periodic_args, _validate
from executors._periodic_args import OnError

__all__ = ("AsyncPeriodicExecutor", "AsyncPeriodicExecutorStatistics")

logger = logging.getLogger("executors.aio.periodic")

_names = itertools.count(1)


def _release(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@dataclasses.dataclass(frozen=True)
class AsyncPeriodicExecutorStatistics:
    """A snapshot of an `AsyncPeriodicExecutor` (see `AsyncPeriodicExecutor.statistics`).

    Times are on the event loop's clock (``loop.time()``).
    """

    #: "idle" (never opened), "open" (sleeping or about to run), "running" (target
    #: executing), "closing" (close requested, task not yet finished) or "closed".
    state: str
    #: Awaited calls of the target that returned or raised (a call in progress is not
    #: counted yet).
    runs: int
    #: How many times the task came out of its sleep, for any reason: one per due run plus one
    #: per wake()/update_interval()/close() that found it asleep; nothing in between.
    wakeups: int
    #: How many `wake()` calls were made.
    wake_requests: int
    #: Calls of the target that raised an `Exception` (each is logged too).
    errors: int
    #: ``"ExceptionType: message"`` of the latest call that raised, or None if none has.
    last_error: str | None
    #: When the latest call of the target started (seconds on ``loop.time()``), or None before
    #: the first.
    last_run_started: float | None
    #: When the next call is due (seconds on ``loop.time()``). While the target runs it still
    #: holds the due time of that run; None before the first run is scheduled and once the
    #: executor is stopping or stopped.
    next_run_at: float | None
    #: True while the executor's task exists and has not finished.
    task_alive: bool


@final
class AsyncPeriodicExecutor:
    """Run the coroutine function `target` every `interval` seconds on one task.

    The async twin of `executors.PeriodicExecutor`, and a drop-in for PyMongo's
    ``pymongo.periodic_executor.AsyncPeriodicExecutor``: same constructor ``(interval,
    min_interval, target, name=None)``, same methods (`open`, `close`, ``await join()``,
    `wake`, `update_interval`, `skip_sleep`); a target that returns a falsy value stops it.

    Fixed, compared with PyMongo's:
        - It never polls: between runs the task waits on one future and one loop timer, set by
          the due time or by `wake`/`close`/`update_interval`/`skip_sleep`. PyMongo's loops on
          ``await asyncio.sleep(min_interval)`` and needs up to `min_interval` to react.
        - `close()` called from the executor's own task (a target that decides to stop) does
          not cancel that task; the run completes and the task ends (PYTHON-6226, where a
          monitor closing itself cancelled its own task and never ran again).
        - `close()` from another task cancels a run in progress, so a long check stops
          promptly (PYTHON-5053); `open()` right after it starts a fresh task once the
          cancelled one has finished, instead of doing nothing.
        - The task runs in a fresh, empty `contextvars.Context`: values set by whoever opened
          the executor (timeouts, operation ids) do not leak into the target (PYTHON-5406).
        - ``join(timeout)`` waits without cancelling the task on timeout (PYTHON-5044 replaced
          ``asyncio.wait_for``, which cancels).

    Scheduling is the threaded executor's: runs are spaced start to start; `wake()` asks for
    an early run, no sooner than `min_interval` after the previous run started, and a wake
    during a run is served after it; `skip_sleep()` makes the next run follow at once.

    Thread-safety: use it from its event loop's thread. `close()`, `wake()`, `skip_sleep()`
    and `update_interval()` called from another thread (a weakref callback, say) hand over to
    the loop with ``call_soon_threadsafe``; ``close`` accepts and ignores one positional
    argument so that ``weakref.ref(owner, executor.close)`` works.

    Errors: an `Exception` from the target is logged on ``executors.aio.periodic`` and
    counted; ``on_error="continue"`` (default) keeps the schedule, ``"stop"`` stops. No
    exception object is kept.

    Args:
        interval: seconds between runs (finite, >= 0).
        min_interval: the least time between the start of a run and an early run caused by
            `wake()` (finite, >= 0, <= interval).
        target: a callable taking no arguments and returning an awaitable (a coroutine
            function); a falsy result stops the executor.
        name: the task's name (default ``AsyncPeriodicExecutor-<n>``).
        on_error: ``"continue"`` or ``"stop"``.

    Raises:
        TypeError: `target` is not callable, `name` not a str, or an interval not a number.
        ValueError: an interval is negative, NaN or infinite, `min_interval > interval`, or
            `on_error` is unknown.

    Example:
        >>> async def main() -> int:
        ...     runs = 0
        ...     async def check() -> bool:
        ...         nonlocal runs
        ...         runs += 1
        ...         return runs < 3
        ...     ex = AsyncPeriodicExecutor(interval=0.01, min_interval=0.001, target=check)
        ...     ex.open()
        ...     await ex.join(5)
        ...     return runs
        >>> asyncio.run(main())
        3
    """

    __slots__ = (
        "__weakref__",
        "_cancelled_task",
        "_errors",
        "_interval",
        "_last_error",
        "_last_start",
        "_loop",
        "_min_interval",
        "_name",
        "_next_run",
        "_on_error",
        "_opened",
        "_running",
        "_runs",
        "_skip_sleep",
        "_sleeper",
        "_stopped",
        "_target",
        "_task",
        "_wake_requested",
        "_wake_requests",
        "_wakeups",
    )

    def __init__(
        self,
        interval: float,
        min_interval: float,
        target: Callable[[], Awaitable[object]],
        name: str | None = None,
        *,
        on_error: OnError = "continue",
    ) -> None:
        self._interval, self._min_interval = _periodic_args.check(
            interval, min_interval, target, name, on_error)
        self._target = target
        self._name = name if name is not None else f"AsyncPeriodicExecutor-{next(_names)}"
        self._on_error: OnError = on_error
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        # The task close() cancelled: its CancelledError is ours to absorb, nobody else's.
        self._cancelled_task: asyncio.Task[None] | None = None
        self._sleeper: asyncio.Future[None] | None = None
        self._stopped = True
        self._opened = False
        self._running = False
        self._skip_sleep = False
        self._wake_requested = False
        self._next_run: float | None = None
        self._runs = 0
        self._wakeups = 0
        self._wake_requests = 0
        self._errors = 0
        self._last_error: str | None = None
        self._last_start: float | None = None

    # -- control ------------------------------------------------------------------------------

    def open(self) -> None:
        """Start the executor's task, or keep the current one running. Idempotent.

        Call it from a coroutine (or callback) on the event loop the executor will run on.
        Right after a `close()` that cancelled a run, a new task starts and first waits for the
        cancelled one to finish, so at most one run is ever in progress.

        Raises:
            RuntimeError: no running event loop in this thread, or the executor's task is
                still alive on another loop.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                f"{self._name}: open() needs a running event loop; call it from a coroutine"
            ) from None
        task = self._task
        if task is not None and not task.done() and self._loop is not loop:
            raise RuntimeError(f"{self._name}: its task is still running on another loop")
        self._loop = loop
        self._opened = True
        self._stopped = False
        if task is not None and not task.done() and task is not self._cancelled_task:
            # The live task re-reads _stopped before it decides to exit: it carries on.
            self._nudge()
            return
        previous = task if task is not None and not task.done() else None
        # A fresh, empty context: nothing of the opener's contextvars leaks in (PYTHON-5406).
        self._task = loop.create_task(
            self._run(previous), name=self._name, context=contextvars.Context()
        )

    def close(self, dummy: object = None) -> None:
        """Stop the executor. `dummy` is ignored, so ``close`` can be a weakref callback.

        From another task: a run in progress is cancelled, a sleeping task ends at once.
        From the executor's own task (the target closing its executor): nothing is cancelled;
        the task ends when the target returns (PYTHON-6226). From another thread: the same,
        handed to the loop. Use ``await join()`` to wait for the task to finish.
        """
        self._stopped = True
        if self._task is None or self._loop is None:
            return
        self._on_loop_or_threadsafe(self._close_on_loop)

    def _close_on_loop(self) -> None:
        task = self._task
        if task is None or task.done() or not self._stopped:
            return
        if task is asyncio.current_task():
            return  # never cancel ourselves (PYTHON-6226); the loop exits after this run
        if self._running and self._cancelled_task is not task:
            self._cancelled_task = task
            task.cancel()
        else:
            self._nudge()

    def wake(self) -> None:
        """Ask for a run soon: now, or `min_interval` after the start of the previous run."""
        self._wake_requests += 1
        self._wake_requested = True
        self._on_loop_or_threadsafe(self._nudge)

    def skip_sleep(self) -> None:
        """Make the next run follow the current one at once, once (PyMongo's streaming hook)."""
        self._skip_sleep = True
        self._on_loop_or_threadsafe(self._nudge)

    def update_interval(self, new_interval: float) -> None:
        """Change `interval`; takes effect at once (the sleeping task reschedules).

        Raises:
            TypeError, ValueError: `new_interval` is not a finite number >= `min_interval`.
        """
        seconds = _validate.seconds(new_interval, "new_interval")
        if seconds < self._min_interval:
            raise ValueError(
                f"new_interval ({new_interval!r}) must not be below min_interval "
                f"({self._min_interval!r})"
            )
        self._interval = seconds
        self._on_loop_or_threadsafe(self._nudge)

    # ASYNC109: PyMongo's signature, join(timeout=None); it must not cancel the task on
    # timeout, which wrapping it in asyncio.timeout() would (PYTHON-5044).
    async def join(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait for the executor's task to finish; True if no task is running afterwards.

        Never cancels the task, also on timeout (PYTHON-5044). Safe before `open()` (True at
        once) and from the executor's own task (False at once: a task cannot wait for itself).

        Raises:
            TypeError, ValueError: `timeout` is not None or a number >= 0 (``math.inf``
                means None: wait as long as it takes).
        """
        timeout = _validate.timeout(timeout)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            task = self._task
            if task is None or task.done():
                return True
            if task is asyncio.current_task():
                return False
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return False
            await asyncio.wait([task], timeout=remaining)

    # -- introspection ------------------------------------------------------------------------

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
    def target(self) -> Callable[[], Awaitable[object]]:
        return self._target

    @property
    def closed(self) -> bool:
        """True once `close()` was called (or the target stopped it) and not reopened."""
        return self._stopped

    def _task_alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def _state(self) -> str:
        if not self._opened:
            return "idle"
        if self._stopped:
            return "closing" if self._task_alive() else "closed"
        return "running" if self._running else "open"

    def statistics(self) -> AsyncPeriodicExecutorStatistics:
        """A snapshot of the executor's state and counters."""
        return AsyncPeriodicExecutorStatistics(
            state=self._state(),
            runs=self._runs,
            wakeups=self._wakeups,
            wake_requests=self._wake_requests,
            errors=self._errors,
            last_error=self._last_error,
            last_run_started=self._last_start,
            next_run_at=self._next_run if not self._stopped else None,
            task_alive=self._task_alive(),
        )

    def __repr__(self) -> str:
        state = self._state()
        parts = [f"<AsyncPeriodicExecutor {self._name!r} {state}"]
        loop = self._loop
        if state in ("open", "running") and self._next_run is not None and loop is not None:
            parts.append(f"next_run_in={max(0.0, self._next_run - loop.time()):.3g}s")
        parts.append(f"interval={self._interval:g}s runs={self._runs}")
        if self._errors:
            parts.append(f"errors={self._errors}")
        return " ".join(parts) + ">"

    # -- the task -----------------------------------------------------------------------------

    def _on_loop_or_threadsafe(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            fn()
            return
        try:
            loop.call_soon_threadsafe(fn)
        except RuntimeError:  # the loop is closed: its tasks are gone, nothing to tell
            pass

    def _nudge(self) -> None:
        sleeper = self._sleeper
        if sleeper is not None:
            _release(sleeper)

    async def _run(self, previous: asyncio.Task[None] | None) -> None:
        me = asyncio.current_task()
        try:
            if previous is not None:
                # At most one run at a time: the task close() cancelled finishes first.
                await asyncio.wait([previous])
            while not self._stopped and self._task is me:
                self._wake_requested = False
                loop = asyncio.get_running_loop()
                start = loop.time()
                self._last_start = start
                if not await self._run_target_once():
                    self._stopped = True
                    break
                await self._sleep_until_due(loop, start)
        except asyncio.CancelledError:
            if self._cancelled_task is me and me is not None:
                # close() cancelled this run: end quietly, and withdraw that request.
                me.uncancel()
                return
            self._stopped = True  # cancelled from outside (loop shutdown): stop, propagate
            raise
        except BaseException:
            self._stopped = True  # KeyboardInterrupt/SystemExit from the target
            raise
        finally:
            self._running = False
            if self._task is me:
                self._next_run = None

    async def _run_target_once(self) -> bool:
        """One run; False if the executor must stop. CancelledError propagates."""
        self._running = True
        try:
            result: Any = await self._target()
        except Exception as exc:
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
            logger.exception("%s: target %r raised", self._name, self._target)
            del exc  # the traceback pins the target's frames
            return self._on_error == "continue"
        finally:
            self._running = False
            self._runs += 1
        return bool(result)

    async def _sleep_until_due(self, loop: asyncio.AbstractEventLoop, start: float) -> None:
        """Wait until the next run is due, a served wake(), or close(). Never polls."""
        if self._skip_sleep:
            self._skip_sleep = False
            return
        while True:
            # Re-read each time: update_interval() and wake() reschedule the sleeping task.
            due = start + self._interval
            if self._wake_requested:
                due = min(due, start + self._min_interval)
            self._next_run = due
            if self._stopped or self._skip_sleep:
                self._skip_sleep = False
                return
            if due <= loop.time():
                return
            sleeper: asyncio.Future[None] = loop.create_future()
            timer = loop.call_at(due, _release, sleeper)
            self._sleeper = sleeper
            try:
                await sleeper
            finally:
                timer.cancel()
                self._sleeper = None
            self._wakeups += 1
