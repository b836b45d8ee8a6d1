"""The bridge: a Portal runs an event loop for plain threads, which share its primitives' FIFOs.

Two directions:

- Threads into asyncio: `Portal` runs (or attaches to) an event loop; threads call coroutines
  on it (`Portal.call`, `Portal.start_task_soon`) and use the loop's aio primitives through
  blocking views with `threading`-style APIs (`Portal.semaphore`, `Portal.lock`,
  `Portal.channel`, `Portal.select`, `Portal.task_group`). A thread's blocking call parks a
  `ThreadWaiter` in the primitive's own FIFO (no Task per call, no second queue), so threads
  and tasks are served in one order.
- Asyncio into threads: ``await run_sync(fn, *args)`` runs blocking code in a worker thread,
  under a thread limiter, with the caller's contextvars, waiting for the thread on cancellation.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import inspect
import itertools
import math
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import CancelledError as FutureCancelledError
from concurrent.futures import wait as wait_futures
from functools import partial
from types import TracebackType
from typing import Any, Self, TypeVar, TypeVarTuple, Unpack, final

from executors import registry
from executors.aio import Channel as _Channel
from executors.aio import Lock, Operation, SelectResult, Semaphore
from executors.errors import ShutdownError

from ._bridge_run_sync import default_limiter, run_sync
from ._bridge_views import (
    BlockingChannel,
    BlockingLock,
    BlockingSemaphore,
    BlockingTaskGroup,
    select_blocking,
)
from ._bridge_waiter import PortalFuture, ThreadWaiter

__all__ = (
    "Portal",
    "PortalStatistics",
    "PortalFuture",
    "ThreadWaiter",
    "BlockingSemaphore",
    "BlockingLock",
    "BlockingChannel",
    "BlockingTaskGroup",
    "run_sync",
    "default_limiter",
)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# 3.12+: a Task can run its first step at once, inside the callback that creates it (what the
# eager task factory does): a round trip saves a loop iteration. Sound, unlike running the
# coroutine's first step without a Task (current_task() would be None there; research addendum).
_EAGER_START = sys.version_info >= (3, 12)
_names = itertools.count(1)


def _shutdown_error() -> ShutdownError:
    # A fresh instance per waiter: one exception raised in several threads would have its
    # traceback rewritten by each of them.
    return ShutdownError(
        "the portal is closed: its event loop no longer runs calls (open a new Portal)"
    )


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


@final
@dataclasses.dataclass(frozen=True)
class PortalStatistics:
    """A snapshot of a `Portal`."""

    name: str
    #: "idle" (not opened), "open", "closing" or "closed".
    state: str
    #: Whether the portal runs its own loop thread (False: attached with ``loop=``).
    owns_loop: bool
    #: Calls, tasks and blocking views started from threads so far.
    submitted: int
    #: Thread-side waits not yet resolved (calls, blocked views, unfinished task futures).
    pending: int
    #: Tasks the portal runs on the loop now (calls and start_task_soon).
    tasks: int
    #: Blocking waits that gave up at their timeout.
    timeouts: int


@final
class Portal:
    """An event loop in a background thread, for plain threads to use asyncio through.

    ``with Portal() as portal:`` starts a daemon thread running a new event loop, registered
    with `executors.registry` (closed and joined at interpreter exit under the global
    deadline); leaving the block waits for the tasks started with `start_task_soon` (or cancels
    them if the block raised), stops the loop and joins the thread. ``Portal(loop=loop)``
    attaches to a loop already running in another thread instead; closing it then cancels the
    portal's own work and leaves the loop running.

    Guarantees:

    - One loop for the portal's lifetime (loop affinity): loop-bound objects such as aio
      primitives, clients and sessions work across calls, unlike asgiref's loop per call.
    - A blocking method called from the loop's own thread raises `RuntimeError` at once instead
      of deadlocking.
    - Context variables: the callee runs in a copy of the calling thread's context. It sees the
      caller's values; its own changes do not flow back (as anyio and run_coroutine_threadsafe;
      asgiref copies them back).
    - Shutdown never hangs a caller: a call, blocked view or task future pending when the portal
      closes fails with `ShutdownError` (its task is cancelled and its queue entry removed), as
      does anything submitted afterwards, including while the loop is stopping.

    Args:
        loop: attach to this running loop (it must run in another thread) instead of starting
            one.
        name: the loop thread's name and the portal's repr (default ``Portal-<n>``).

    Raises:
        TypeError: `loop` is not an event loop or `name` is not a str.

    Example:
        >>> import asyncio
        >>> async def double(x: int) -> int:
        ...     await asyncio.sleep(0)
        ...     return 2 * x
        >>> with Portal() as portal:
        ...     portal.call(double, 21)
        42
    """

    __slots__ = (
        "__weakref__",
        "_closed",
        "_closing",
        "_dead",
        "_drained",
        "_futures",
        "_inbox",
        "_inbox_scheduled",
        "_loop",
        "_loop_ident",
        "_name",
        "_own",
        "_pending",
        "_started",
        "_startup_error",
        "_state",
        "_submitted",
        "_tasks",
        "_thread",
        "_timeouts",
    )

    def __init__(
        self, *, loop: asyncio.AbstractEventLoop | None = None, name: str | None = None
    ) -> None:
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError(f"loop must be an asyncio event loop, got {type(loop).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self._name = name if name is not None else f"Portal-{next(_names)}"
        self._own = loop is None
        self._loop: asyncio.AbstractEventLoop | None = loop
        self._loop_ident: int | None = None
        self._thread: threading.Thread | None = None
        self._state = "idle"
        self._closed = False  # close() was called: thread side refuses new work
        self._closing = False  # loop side: the shutdown began, new work fails there
        self._dead = False  # the loop no longer runs our callbacks
        # Thread-side waits not yet resolved: failed by the final sweep if the loop dies under
        # them, so no caller can hang on a callback that will never run (zigpy/bellows#745).
        self._pending: set[ThreadWaiter | PortalFuture[Any]] = set()
        self._futures: set[PortalFuture[Any]] = set()  # start_task_soon futures not done
        self._tasks: set[asyncio.Task[Any]] = set()  # loop thread only
        # Thread -> loop callbacks, run in order by one loop callback: threads posting while a
        # drain is already scheduled do not write to the loop's self-pipe again (one wake-up
        # for a burst, e.g. a release followed by the next acquire).
        self._inbox: collections.deque[tuple[Callable[..., object], tuple[object, ...]]] = (
            collections.deque())
        self._inbox_scheduled = False
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self._drained = threading.Event()
        self._submitted = 0
        self._timeouts = 0

    # -- introspection -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The portal's event loop.

        Raises:
            RuntimeError: the portal has not been opened (and has no loop yet).
        """
        if self._loop is None:
            raise RuntimeError(f"{self!r} has not been opened: it has no loop yet")
        return self._loop

    @property
    def closed(self) -> bool:
        return self._closed

    def statistics(self) -> PortalStatistics:
        """Counters and state, read without a lock (a consistent-enough snapshot)."""
        return PortalStatistics(
            name=self._name,
            state=self._state,
            owns_loop=self._own,
            submitted=self._submitted,
            pending=len(self._pending),
            tasks=len(self._tasks),
            timeouts=self._timeouts,
        )

    def __repr__(self) -> str:
        kind = "" if self._own else " attached"
        return (f"<Portal {self._name!r}{kind} {self._state} pending={len(self._pending)} "
                f"tasks={len(self._tasks)}>")

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> Self:
        """Start the loop thread (or attach to the given loop); register with the registry.

        Raises:
            RuntimeError: already opened; or the attached loop is closed or not running.
            ShutdownError: the interpreter is shutting down.
        """
        if self._state != "idle" or self._closed:
            raise RuntimeError(f"{self!r} was already opened: a portal opens once")
        if registry.is_shutting_down() or sys.is_finalizing():
            raise ShutdownError("the interpreter is shutting down: no new portal")
        if self._own:
            thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread = thread
            thread.start()
            self._started.wait()
            if self._startup_error is not None:
                error, self._startup_error = self._startup_error, None
                raise error
        else:
            self._attach()
        self._state = "open"
        registry.register(self)
        return self

    def _attach(self) -> None:
        loop = self._loop
        assert loop is not None
        if loop.is_closed() or not loop.is_running():
            raise RuntimeError("Portal(loop=...) needs a loop that runs (in another thread)")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._loop_ident = threading.get_ident()
            return
        seen = threading.Event()

        def record() -> None:
            self._loop_ident = threading.get_ident()
            seen.set()

        loop.call_soon_threadsafe(record)
        if not seen.wait(10.0):
            raise RuntimeError("Portal(loop=...): the loop did not run a callback in 10 s")

    def _run(self) -> None:
        try:
            loop = asyncio.new_event_loop()
        except BaseException as exc:
            self._startup_error = exc
            self._started.set()
            return
        self._loop = loop
        self._loop_ident = threading.get_ident()
        self._started.set()
        try:
            loop.run_forever()
        finally:
            self._finish(loop)

    def _finish(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop thread's last act: fail late arrivals, finish leftover tasks, close."""
        self._closing = True
        self._closed = True
        try:
            # Callbacks queued by threads while the loop stopped run here and fail cleanly
            # (they see _closing); tasks the callees started are cancelled and awaited, so no
            # "Task was destroyed but it is pending" and no late result to a closed loop.
            leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            self._dead = True
            loop.close()
            self._sweep()
            self._state = "closed"
            self._drained.set()

    def _sweep(self) -> None:
        # After _dead is set, a thread that adds a waiter re-checks _dead and fails it itself;
        # one added earlier is failed here. Either way nobody waits on a dead loop.
        for item in list(self._pending):
            if isinstance(item, ThreadWaiter):
                item.try_fail(_shutdown_error())
            elif not item.done():
                item._fail(_shutdown_error())

    def close(self, dummy: object = None) -> None:
        """Stop accepting work and begin shutting down; returns at once. Idempotent.

        Pending calls, blocked views and running tasks fail with `ShutdownError` (tasks are
        cancelled and awaited on the loop); then the loop stops (own loop) or is left running
        (attached). `dummy` is ignored so that ``close`` can be a weakref callback. Use
        `join` to wait for the shutdown to finish.
        """
        if self._closed:
            return
        self._closed = True
        loop = self._loop
        if self._state == "idle" or loop is None or self._dead:
            self._state = "closed"
            self._drained.set()
            return
        self._state = "closing"
        try:
            loop.call_soon_threadsafe(self._shutdown)
        except RuntimeError:  # the loop is already closed: its thread swept everything
            pass

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the shutdown finished; True if it did (the loop thread has exited).

        Returns True at once for a portal never opened, and False at once from the loop's own
        thread (it cannot wait for itself).

        Raises:
            TypeError, ValueError: `timeout` is not a finite number >= 0 or None.
        """
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be a number or None, got {type(timeout).__name__}")
            if math.isnan(timeout) or math.isinf(timeout) or timeout < 0:
                raise ValueError(f"timeout must be a finite number >= 0, got {timeout!r}")
        if self._state == "idle":
            return True
        if threading.get_ident() == self._loop_ident:
            return False
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return self._drained.wait(timeout)

    def _after_fork_in_child(self) -> None:
        # The child has no loop thread and must not touch the parent's loop: the portal is
        # simply gone there (a new Portal can be opened in the child).
        self._closed = self._closing = self._dead = True
        self._state = "closed"
        self._thread = None
        self._pending = set()
        self._futures = set()
        self._tasks = set()
        self._inbox = collections.deque()
        self._inbox_scheduled = False
        self._drained = threading.Event()
        self._drained.set()

    def _shutdown(self) -> None:
        """Loop thread: fail every pending thread wait, cancel our tasks, then stop."""
        self._closing = True
        for item in list(self._pending):
            if isinstance(item, ThreadWaiter) and item.abort is not None:
                with item.mutex:
                    if item.try_fail(_shutdown_error()):
                        item.abort()
        for task in list(self._tasks):
            task.cancel()
        loop = self._loop
        assert loop is not None
        loop.create_task(self._stop_when_idle())

    async def _stop_when_idle(self) -> None:
        while self._tasks:
            await asyncio.wait(list(self._tasks))
            self._tasks = {task for task in self._tasks if not task.done()}
        if self._own:
            assert self._loop is not None
            self._loop.stop()
        else:
            self._dead = True  # for us: an attached loop keeps running other code
            self._sweep()
            self._state = "closed"
            self._drained.set()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Wait for `start_task_soon` tasks (cancel them if the block raised), close, join.

        Ctrl-C while waiting cancels the remaining tasks and still joins.
        """
        try:
            if exc is None:
                while self._futures:
                    wait_futures(list(self._futures))
            else:
                for future in list(self._futures):
                    future.cancel()
        except KeyboardInterrupt:
            for future in list(self._futures):
                future.cancel()
            raise
        finally:
            self.close()
            self.join()

    # -- thread-side machinery ---------------------------------------------------------------

    def _check_caller(self, what: str) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if threading.get_ident() == self._loop_ident:
            raise RuntimeError(
                f"{what} cannot be called from the portal's event loop thread: it would block "
                "the loop it waits for (a deadlock). In a coroutine, await the coroutine or use "
                "the aio primitive directly."
            )
        if self._closed or self._dead:
            raise _shutdown_error()
        if loop is None or self._state == "idle":
            raise RuntimeError(f"{self!r} is not open: use `with Portal() as portal:`")
        return loop

    def _submit(
        self, item: ThreadWaiter | PortalFuture[Any], fn: Callable[..., object], *args: object
    ) -> None:
        """Schedule ``fn(*args)`` on the loop for `item`'s sake; fail `item` if it cannot run."""
        loop = self._check_caller("this portal method")
        self._submitted += 1
        self._pending.add(item)
        try:
            self._post(loop, fn, args)
        except RuntimeError:  # the loop was closed meanwhile
            self._fail_item(item)
            return
        if self._dead:
            # The loop died after we checked: the final sweep may have missed `item`.
            self._fail_item(item)

    def _post(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., object], args: tuple[object, ...]
    ) -> None:
        self._inbox.append((fn, args))
        if not self._inbox_scheduled:
            # Set before the drain can run: a post racing the drain either sees False (and
            # schedules another drain) or lands before the drain's final emptiness check.
            self._inbox_scheduled = True
            try:
                loop.call_soon_threadsafe(self._drain_inbox)
            except RuntimeError:
                self._inbox_scheduled = False
                raise

    def _drain_inbox(self) -> None:
        """Loop thread: run every posted callback, in the order they were posted."""
        self._inbox_scheduled = False
        inbox = self._inbox
        try:
            while inbox:
                fn, args = inbox.popleft()
                fn(*args)
        finally:
            if inbox and not self._inbox_scheduled:  # a callback raised: run the rest later
                self._inbox_scheduled = True
                assert self._loop is not None
                self._loop.call_soon(self._drain_inbox)

    def _fail_item(self, item: ThreadWaiter | PortalFuture[Any]) -> None:
        if isinstance(item, ThreadWaiter):
            item.try_fail(_shutdown_error())
        else:
            item._fail(_shutdown_error())

    def _soon(self, fn: Callable[..., object], *args: object) -> None:
        """Schedule a loop-thread callback with no waiter (an undo, a release); never raises."""
        loop = self._loop
        if loop is None or self._dead:
            return
        try:
            self._post(loop, fn, args)
        except RuntimeError:
            pass

    def _undo(self, waiter: ThreadWaiter) -> None:
        """After `try_abandon` won: undo the wait on the loop (leave the queue, cancel)."""
        self._soon(_run_abort, waiter)

    def _wait(
        self,
        waiter: ThreadWaiter,
        timeout: float | None = None,
        hand_back: Callable[[object], object] | None = None,
    ) -> bool:
        """Block until `waiter` is resolved; False if it gave up at `timeout` (and was undone).

        If the wait is interrupted (Ctrl-C) the waiter is abandoned and undone, or, when a value
        was already handed over, `hand_back(value)` returns it on the loop; then the
        interruption propagates.
        """
        try:
            if waiter.wait(timeout):
                return True
            if waiter.try_abandon():
                self._timeouts += 1
                self._undo(waiter)
                return False
            waiter.wait(None)  # resolved at the same moment: it is ours (released already)
            return True
        except BaseException:
            if waiter.try_abandon():
                self._undo(waiter)
            elif waiter.woken and hand_back is not None:
                self._soon(hand_back, waiter.value)
            raise
        finally:
            self._pending.discard(waiter)

    def _park(self, waiter: ThreadWaiter, attempt: Callable[[ThreadWaiter], None]) -> None:
        """Loop thread: run `attempt` (a fast path, else park `waiter`) under its lock."""
        with waiter.mutex:
            if not waiter.waiting:
                return  # gave up before we got here: nothing to do, nothing to undo
            if self._closing:
                waiter.try_fail(_shutdown_error())
                return
            try:
                attempt(waiter)
            except BaseException as exc:
                waiter.try_fail(exc)
                exc = None  # type: ignore[assignment]

    def _blocking(
        self,
        attempt: Callable[[ThreadWaiter], None],
        timeout: float | None = None,
        hand_back: Callable[[object], object] | None = None,
    ) -> tuple[bool, object]:
        """Run `attempt` on the loop for a new waiter and block: (resolved, value or raise)."""
        waiter = ThreadWaiter()
        self._submit(waiter, self._park, waiter, attempt)
        if not self._wait(waiter, timeout, hand_back):
            return False, None
        return True, waiter.outcome()

    # -- calls and tasks ---------------------------------------------------------------------

    def _new_task(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        context: contextvars.Context,
        name: str | None,
    ) -> asyncio.Task[T]:
        awaitable = context.run(fn, *args)
        if inspect.iscoroutine(awaitable):
            coro: Coroutine[Any, Any, T] = awaitable
        elif inspect.isawaitable(awaitable):
            coro = _await(awaitable)
        else:
            raise TypeError(
                f"fn must return an awaitable (pass an async function), got "
                f"{type(awaitable).__name__}"
            )
        loop = self._loop
        assert loop is not None
        if _EAGER_START:
            return asyncio.Task(coro, loop=loop, name=name, context=context,
                                eager_start=True)  # type: ignore[call-arg,unused-ignore]
        return loop.create_task(coro, name=name, context=context)

    def call(self, fn: Callable[[Unpack[Ts]], Awaitable[T]], /, *args: *Ts) -> T:
        """Run ``await fn(*args)`` on the portal's loop and block until it returns.

        The callee runs as a task in a copy of the caller's context. If the calling thread is
        interrupted (Ctrl-C) the task is cancelled. Exceptions are re-raised in the caller.

        Raises:
            RuntimeError: called from the loop's own thread (it would deadlock), or the portal
                is not open.
            ShutdownError: the portal is closed, or closed while the call was pending.
            concurrent.futures.CancelledError: the task was cancelled by something else.
        """
        waiter = ThreadWaiter()
        context = contextvars.copy_context()
        self._submit(waiter, self._start_call, waiter, fn, args, context)
        self._wait(waiter)
        return waiter.outcome()  # type: ignore[return-value]

    def _start_call(
        self,
        waiter: ThreadWaiter,
        fn: Callable[..., Awaitable[object]],
        args: tuple[object, ...],
        context: contextvars.Context,
    ) -> None:
        if not waiter.waiting:
            return
        if self._closing:
            waiter.try_fail(_shutdown_error())
            return
        try:
            task = self._new_task(self._deliver, (waiter, fn, args, context), context, None)
        except BaseException as exc:
            waiter.try_fail(exc)
            return
        if not task.done():  # (3.12+: a trivial callee finished inside the constructor)
            waiter.abort = task.cancel
            self._tasks.add(task)
            # Off the round trip's path (the caller is woken from inside the task), and also
            # run for a task cancelled before its first step, whose body never runs.
            task.add_done_callback(self._tasks.discard)

    async def _deliver(
        self,
        waiter: ThreadWaiter,
        fn: Callable[..., Awaitable[object]],
        args: tuple[object, ...],
        context: contextvars.Context,
    ) -> None:
        # The outcome goes to the caller from inside the task's own step: no done-callback,
        # so no extra loop iteration on the round trip.
        try:
            awaitable = fn(*args)
            if not inspect.isawaitable(awaitable):
                raise TypeError(f"fn must return an awaitable (pass an async function), got "
                                f"{type(awaitable).__name__}")
            result = await awaitable
        except asyncio.CancelledError:
            waiter.try_fail(_shutdown_error() if self._closing else FutureCancelledError(
                "the portal call's task was cancelled"))
            raise
        except BaseException as exc:
            # Raised in the caller, not on the loop: a KeyboardInterrupt or SystemExit let out
            # of a task would also stop the loop (gh-102572).
            waiter.try_fail(exc)
        else:
            waiter.try_wake(result)

    def start_task_soon(
        self,
        fn: Callable[[Unpack[Ts]], Awaitable[T]],
        /,
        *args: *Ts,
        name: str | None = None,
    ) -> PortalFuture[T]:
        """Start ``fn(*args)`` as a task on the portal's loop; return its future at once.

        The task runs in a copy of the caller's context. ``future.cancel()`` cancels the task,
        and the future completes only once the task has finished its cleanup (see
        `PortalFuture`). Leaving the portal's ``with`` block waits for these tasks.

        Raises:
            RuntimeError: called from the loop's own thread, or the portal is not open.
            ShutdownError: the portal is closed (the future fails with it if the portal closes
                before the task finishes).
        """
        return self._submit_task(fn, args, name, None)

    def _submit_task(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        name: str | None,
        spawn: Callable[[Coroutine[Any, Any, T], str | None, contextvars.Context],
                        asyncio.Task[T]] | None,
    ) -> PortalFuture[T]:
        future: PortalFuture[T] = PortalFuture(self._request_cancel)
        context = contextvars.copy_context()
        if spawn is None:
            self._futures.add(future)
        future.add_done_callback(self._forget_future)  # type: ignore[arg-type]
        self._submit(future, self._start_task, future, fn, args, context, name, spawn)
        return future

    def _forget_future(self, future: PortalFuture[Any]) -> None:
        self._futures.discard(future)
        self._pending.discard(future)

    def _start_task(
        self,
        future: PortalFuture[T],
        fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        context: contextvars.Context,
        name: str | None,
        spawn: Callable[[Coroutine[Any, Any, T], str | None, contextvars.Context],
                        asyncio.Task[T]] | None,
    ) -> None:
        if future.done():
            return
        if future._cancel_requested:
            future._finish_cancelled()
            return
        if self._closing:
            future._fail(_shutdown_error())
            return
        try:
            if spawn is None:
                task = self._new_task(fn, args, context, name)
            else:
                awaitable = context.run(fn, *args)
                coro = awaitable if inspect.iscoroutine(awaitable) else _await(awaitable)
                task = spawn(coro, name, context)
        except BaseException as exc:
            future._fail(exc)
            return
        future._task = task
        if task.done():
            future._settle(task, self._closing)
            return
        if spawn is None:
            self._tasks.add(task)
        task.add_done_callback(partial(self._task_done, future))

    def _task_done(self, future: PortalFuture[T], task: asyncio.Task[T]) -> None:
        self._tasks.discard(task)
        future._settle(task, self._closing)

    def _request_cancel(self, future: PortalFuture[Any]) -> None:
        self._soon(_cancel_task_of, future)

    # -- blocking views ----------------------------------------------------------------------

    def semaphore(self, semaphore: Semaphore) -> BlockingSemaphore:
        """A `threading.Semaphore`-style view of an `executors.aio.Semaphore` on this loop.

        Threads queue in the semaphore's own FIFO, behind tasks and threads that came first.

        Raises:
            TypeError: `semaphore` is not an `executors.aio.Semaphore` (or BoundedSemaphore).
        """
        if not isinstance(semaphore, Semaphore):
            raise TypeError(
                f"semaphore must be an executors.aio.Semaphore, got {type(semaphore).__name__}"
            )
        return BlockingSemaphore(self, semaphore)

    def lock(self, lock: Lock) -> BlockingLock:
        """A `threading.Lock`-style view of an `executors.aio.Lock` on this loop.

        Raises:
            TypeError: `lock` is not an `executors.aio.Lock`.
        """
        if not isinstance(lock, Lock):
            raise TypeError(f"lock must be an executors.aio.Lock, got {type(lock).__name__}")
        return BlockingLock(self, lock)

    def channel(self, channel: _Channel[T]) -> BlockingChannel[T]:
        """A blocking view of an `executors.aio.Channel` on this loop.

        Raises:
            TypeError: `channel` is not an `executors.aio.Channel`.
        """
        if not isinstance(channel, _Channel):
            raise TypeError(f"channel must be an executors.aio.Channel, got "
                            f"{type(channel).__name__}")
        return BlockingChannel(self, channel)

    def select(
        self, *operations: Operation, timeout: float | None = None, ordered: bool = False
    ) -> SelectResult:
        """Block until exactly one of `operations` completes; the async select's result.

        The thread parks one waiter on every channel involved, in the same queues as tasks; a
        task (or thread) on any of them completes exactly one operation.

        Raises:
            TimeoutError: nothing completed within `timeout` seconds (nothing was sent or
                received, and no registration is left behind).
            ChannelClosed: every operation is ignore_on_closed and its channel is closed.
            ValueError: no operations; TypeError: an operation is not a Send or Get.
        """
        return select_blocking(self, operations, timeout, ordered)

    def task_group(
        self,
        *,
        persistent: bool = False,
        name: str | None = None,
        exception_handler: Callable[[BaseException, asyncio.Task[object]], object] | None = None,
    ) -> BlockingTaskGroup:
        """A task group on this loop, driven from a thread: ``with portal.task_group() as tg:``.

        ``tg.create_task(async_fn, *args)`` returns a `PortalFuture`. Leaving the block waits
        for every task. With ``persistent=False`` (an `executors.aio.TaskGroup`) the first
        failure cancels the rest and the errors are raised in the thread as an
        `ExceptionGroup`; with ``persistent=True`` (an `executors.aio.PersistentTaskGroup`)
        failures go to `exception_handler` and do not cancel siblings. If the block raises,
        the tasks are cancelled first.

        Raises:
            TypeError: `exception_handler` given for a non-persistent group.
        """
        if exception_handler is not None and not persistent:
            raise TypeError("exception_handler applies to persistent=True groups only")
        return BlockingTaskGroup(self, persistent, name, exception_handler)


def _run_abort(waiter: ThreadWaiter) -> None:
    abort = waiter.abort
    if abort is not None:
        abort()


def _cancel_task_of(future: PortalFuture[Any]) -> None:
    task = future._task
    if task is not None:
        task.cancel()

