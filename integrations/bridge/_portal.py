"""Portal: a background event loop that plain threads call into and share primitives through."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import sys
import threading
from _thread import allocate_lock as _allocate_lock
from _thread import get_ident as _get_ident
from collections.abc import Awaitable, Callable
from concurrent.futures import CancelledError as FutureCancelledError
from concurrent.futures import wait as wait_futures
from contextvars import copy_context as _copy_context
from types import CoroutineType as _CoroutineType
from types import TracebackType
from typing import Self, TypeVar, TypeVarTuple, Unpack, final, overload

from executors import library_threads, registry, validate
from executors.aio import Channel as _Channel
from executors.aio import Lock, Operation, SelectResult, Semaphore
from executors.errors import ShutdownError

from ._core import PortalCore
from ._core import shutdown_error as _shutdown_error
from ._shared_channel import BlockingSharedChannel, SharedChannel
from ._shared_locks import (
    BlockingSharedLock,
    BlockingSharedSemaphore,
    SharedLock,
    SharedSemaphore,
)
from ._views import (
    BlockingChannel,
    BlockingLock,
    BlockingSemaphore,
    BlockingTaskGroup,
    select_blocking,
)
from ._waiter import PortalFuture, _abort_call, _Call

__all__ = ("Portal", "PortalStatistics")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

@final
@dataclasses.dataclass(frozen=True)
class PortalStatistics:
    """A snapshot of a `Portal`."""

    #: The portal's name (``Portal(name=...)``, else ``Portal-N``); its own loop thread has it too.
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
class Portal(PortalCore):
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
    - After ``os.fork()`` an open portal is closed in the child (the child has no loop
      thread): its calls and views fail with `ShutdownError` there, and a new ``Portal()``
      works. Threads that were parked through its views at fork time do not exist in the child:
      the aio primitives they waited on skip them and serve the child's own parties.

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

    __slots__ = ()

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
            pending=len(self._pending) + len(self._calls),
            tasks=len(self._tasks),
            timeouts=self._timeouts,
        )

    def __repr__(self) -> str:
        kind = "" if self._own else " attached"
        pending = len(self._pending) + len(self._calls)
        return (f"<Portal {self._name!r}{kind} {self._state} pending={pending} "
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
            thread = self._thread = library_threads.new_thread(self._run, self._name)
            library_threads.start(thread)
            self._started.wait()
            if self._startup_error is not None:
                error, self._startup_error = self._startup_error, None
                raise error
        else:
            self._attach()
        self._state = "open"
        registry.register(self)
        return self

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
            TypeError, ValueError: `timeout` is not None or a number >= 0 (``math.inf`` waits
                as long as None does, as every timeout of the library does).
        """
        timeout = validate.timeout(timeout)
        if self._state == "idle":
            return True
        if threading.get_ident() == self._loop_ident:
            return False
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return self._drained.wait(timeout)

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
        # The round trip's hot path (see `_Call`): one raw lock, one claim table, one post, no
        # Python-level helper on this side. The checks are `_check_caller`'s, inlined; it runs
        # only to raise.
        loop = self._loop
        if (self._closed or self._dead or loop is None or self._state == "idle"
                or _get_ident() == self._loop_ident):
            self._check_caller("Portal.call")
            raise AssertionError("unreachable")  # pragma: no cover
        call = _Call()
        call.fn = fn
        call.args = args
        call.failed = False
        call.task = None
        done = call.done = _allocate_lock()
        done.acquire()
        calls = self._calls
        try:
            calls[call] = True
            self._submitted += 1
            if self._hooked:
                # `_post` for our own loop, inline (see there).
                self._inbox.append((self._start_call, (call, _copy_context())))
                if self._sleeping and not self._kicked:
                    self._kicked = True
                    try:
                        self._wake(b"\0")
                    except OSError:
                        pass
            else:
                self._post(loop, self._start_call, (call, _copy_context()))
            if self._dead:
                # The loop died after we checked: the final sweep may have missed `call`.
                self._fail_call(call)  # type: ignore[unreachable]  # (another thread's write)
            done.acquire()
        except RuntimeError:  # from _post: the loop was closed meanwhile
            if calls.pop(call, False):
                raise _shutdown_error() from None
            raise
        except BaseException:
            # Ctrl-C (or any exception) while blocked: if the call was still unresolved it is
            # ours to undo (its task is cancelled on the loop); else its outcome is dropped.
            # (If it struck at the wake-up, the byte may not have gone: the next post kicks
            # again; one wake-up too many costs nothing.)
            self._kicked = False
            if calls.pop(call, False):
                self._soon(_abort_call, call)
            raise
        if call.failed:
            error = call.value
            del call.value
            assert isinstance(error, BaseException)
            try:
                raise error
            finally:
                error = None
        return call.value  # type: ignore[return-value]

    def _start_call(self, call: _Call, context: contextvars.Context) -> None:
        if call not in self._calls:
            return  # the caller gave up (Ctrl-C) before we got here: nothing to undo
        if self._closing:
            self._fail_call(call)
            return
        try:
            # The wrapper's coroutine is made here (making one runs none of its code); `fn` is
            # called inside the task, in `context`.
            task = self._spawn(self._deliver(call), context, None)
        except BaseException as exc:
            self._resolve_call(call, exc, True)
            return
        if not task.done():  # (a trivial callee finished in its first step, run at once)
            call.task = task
            self._tasks.add(task)
            # Off the round trip's path (the caller is woken from inside the task), and also
            # run for a task cancelled before its first step, whose body never runs.
            task.add_done_callback(self._tasks.discard)

    async def _deliver(self, call: _Call) -> None:
        # The outcome goes to the caller from inside the task's own step: no done-callback,
        # so no extra loop iteration on the round trip.
        try:
            awaitable = call.fn(*call.args)
            if type(awaitable) is not _CoroutineType and not inspect.isawaitable(awaitable):
                raise TypeError(f"fn must return an awaitable (pass an async function), got "
                                f"{type(awaitable).__name__}")
            result = await awaitable
        except asyncio.CancelledError:
            self._resolve_call(call, _shutdown_error() if self._closing else FutureCancelledError(
                "the portal call's task was cancelled"), True)
            raise
        except BaseException as exc:
            # Raised in the caller, not on the loop: a KeyboardInterrupt or SystemExit let out
            # of a task would also stop the loop (gh-102572).
            self._resolve_call(call, exc, True)
        else:
            # `_resolve_call`, inlined on the round trip's path.
            if self._calls.pop(call, False):
                call.value = result  # (`failed` is False already)
                # The task dies on the loop thread, not in the caller's (where its finalizers,
                # asyncio's weak task set among them, could meet a Ctrl-C).
                call.task = None
                call.done.release()

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

        Example:
            >>> import asyncio, concurrent.futures
            >>> with Portal() as portal:
            ...     future = portal.start_task_soon(asyncio.sleep, 3600)
            ...     future.cancel()  # the future completes once the task has finished
            ...     done, _ = concurrent.futures.wait([future], timeout=5)
            ...     print(future.cancelled())
            True
            True
        """
        return self._submit_task(fn, args, name, None)

    # -- blocking views ----------------------------------------------------------------------

    @overload
    def semaphore(self, semaphore: SharedSemaphore) -> BlockingSharedSemaphore: ...
    @overload
    def semaphore(self, semaphore: Semaphore) -> BlockingSemaphore: ...
    def semaphore(
        self, semaphore: Semaphore | SharedSemaphore
    ) -> BlockingSemaphore | BlockingSharedSemaphore:
        """A `threading.Semaphore`-style view of an `executors.aio.Semaphore` on this loop.

        For a `SharedSemaphore` this is its own ``.blocking`` view (it needs no portal).

        Threads queue in the semaphore's own FIFO, behind tasks and threads that came first.

        Raises:
            TypeError: `semaphore` is not an `executors.aio.Semaphore` (or BoundedSemaphore).

        Example:
            >>> from executors.aio import Semaphore
            >>> sem = Semaphore(1)
            >>> with Portal() as portal:
            ...     view = portal.semaphore(sem)
            ...     with view:  # holds the permit tasks also queue for
            ...         print(view.acquire(timeout=0.01))
            False
        """
        if isinstance(semaphore, SharedSemaphore):
            return semaphore.blocking
        if not isinstance(semaphore, Semaphore):
            raise TypeError(
                f"semaphore must be an executors.aio.Semaphore, got {type(semaphore).__name__}"
            )
        return BlockingSemaphore(self, semaphore)

    @overload
    def lock(self, lock: SharedLock) -> BlockingSharedLock: ...
    @overload
    def lock(self, lock: Lock) -> BlockingLock: ...
    def lock(self, lock: Lock | SharedLock) -> BlockingLock | BlockingSharedLock:
        """A `threading.Lock`-style view of an `executors.aio.Lock` on this loop.

        For a `SharedLock` this is its own ``.blocking`` view (it needs no portal).

        Raises:
            TypeError: `lock` is not an `executors.aio.Lock`.

        Example:
            >>> from executors.aio import Lock
            >>> with Portal() as portal:
            ...     view = portal.lock(Lock())
            ...     print(view.acquire(), view.acquire(blocking=False))
            ...     view.release()
            True False
        """
        if isinstance(lock, SharedLock):
            return lock.blocking
        if not isinstance(lock, Lock):
            raise TypeError(f"lock must be an executors.aio.Lock, got {type(lock).__name__}")
        return BlockingLock(self, lock)

    @overload
    def channel(self, channel: SharedChannel[T]) -> BlockingSharedChannel[T]: ...

    @overload
    def channel(self, channel: _Channel[T]) -> BlockingChannel[T]: ...

    def channel(
        self, channel: _Channel[T] | SharedChannel[T]
    ) -> BlockingChannel[T] | BlockingSharedChannel[T]:
        """A blocking view of an `executors.aio.Channel` on this loop.

        Given a `SharedChannel`, returns its own view, ``channel.blocking`` (no loop involved).

        Raises:
            TypeError: `channel` is not an `executors.aio.Channel`.

        Example:
            >>> from executors.aio import Channel
            >>> ch: Channel[int] = Channel(2)
            >>> with Portal() as portal:
            ...     view = portal.channel(ch)
            ...     view.send(1)
            ...     view.send(2)
            ...     view.close()
            ...     print(list(view))
            [1, 2]
        """
        if isinstance(channel, SharedChannel):  # shared: the same view as channel.blocking
            return channel.blocking
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

        Example:
            >>> from executors.aio import Channel, Get
            >>> a: Channel[str] = Channel(1)
            >>> b: Channel[str] = Channel(1)
            >>> with Portal() as portal:
            ...     portal.channel(b).send("b")
            ...     print(portal.select(Get(a), Get(b), timeout=1).value)
            b
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

        Example:
            >>> import asyncio
            >>> with Portal() as portal:
            ...     with portal.task_group() as tg:
            ...         futures = [tg.create_task(asyncio.sleep, 0, n) for n in range(3)]
            ...     print([f.result() for f in futures])
            [0, 1, 2]
        """
        if exception_handler is not None and not persistent:
            raise TypeError("exception_handler applies to persistent=True groups only")
        return BlockingTaskGroup(self, persistent, name, exception_handler)
