"""PersistentTaskGroup: a long-lived owner of tasks whose failures do not cancel each other.

Also `spawn_background`, which hands work to the group that owns the running code.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import inspect
import itertools
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar, final

from executors import _validate
from executors._fatal import is_fatal
from executors.errors import ShutdownError

from ._cancel import absorb_stale_cancel, close_refused

__all__ = (
    "PersistentTaskGroup",
    "PersistentTaskGroupStatistics",
    "spawn_background",
)

T = TypeVar("T")

#: What a `PersistentTaskGroup` calls for each failed task: ``handler(exc, task)``; a coroutine
#: function is fine too (its coroutine runs as a task of the group, so it is never detached).
ExceptionHandler = Callable[[BaseException, "asyncio.Task[object]"], "Awaitable[None] | None"]

_current_group: contextvars.ContextVar[PersistentTaskGroup | None] = contextvars.ContextVar(
    "executors.aio.current_persistent_task_group", default=None
)
_group_names = itertools.count(1)
_serials = itertools.count()
# Every group from its construction until it is closed with no task left, in creation order
# (aiotools' `all_ptaskgroups()`, which aiomonitor-style tools list). Weak: a group nobody holds
# is not kept alive by being listed.
_live: weakref.WeakValueDictionary[int, PersistentTaskGroup] = weakref.WeakValueDictionary()


@dataclasses.dataclass(frozen=True)
class PersistentTaskGroupStatistics:
    """A snapshot of a `PersistentTaskGroup` (see `PersistentTaskGroup.statistics`)."""

    #: The group's name (``PersistentTaskGroup(name=...)``, else ``PersistentTaskGroup-N``).
    name: str
    #: "idle" (no task yet), "open", "shutting down" or "closed".
    state: str
    #: Tasks started and not yet finished (exception-handler tasks included).
    running: int
    #: Tasks started by `create_task`, over the group's life (exception-handler tasks are
    #: not counted here).
    spawned: int
    #: Spawned tasks that returned normally.
    succeeded: int
    #: Spawned tasks that raised (each was reported to the exception handler, or, if it was
    #: not an `Exception`, shut the group down).
    failed: int
    #: Spawned tasks that ended cancelled.
    cancelled: int
    #: Failures of the exception handler itself (each went to the loop's exception handler).
    handler_errors: int


@final
class PersistentTaskGroup:
    """A long-lived owner of tasks: a failing task is reported, and does not cancel its siblings.

    The Backend.AI / aiotools pattern for servers and dispatchers, whose set of tasks changes
    over the process lifetime: each failure goes, as it happens, to `exception_handler`, and
    the group carries on. Use it as ``async with PersistentTaskGroup() as group:`` (the exit
    waits for every task, including tasks spawned while it waits) or keep it as an attribute
    and call ``await group.shutdown()`` when the owner stops (cancels what is left and waits).

    Guarantees (each fixes a sharp edge of ``aiotools.PersistentTaskGroup``, research §2.2):
        - `create_task` returns the `asyncio.Task` itself: await it for the result or the
          exception; cancelling it cancels the task, with no ``InvalidStateError`` noise.
        - A task that ends with a `BaseException` that is not an `Exception` (other than
          cancellation) is not swallowed: the group shuts down and re-raises it from the
          ``async with`` exit or from `shutdown` (`KeyboardInterrupt` and `SystemExit` bare,
          others in a `BaseExceptionGroup`).
        - After `shutdown()` (or the ``async with`` exit), `create_task` raises `ShutdownError`
          and closes the coroutine it refused.
        - Constructible anywhere, even with no running loop: the group binds to the loop of its
          first task.
        - Shutting down before a task ran its first step leaves no "never awaited" warning.
        - Nothing grows with the number of tasks: finished tasks are dropped at once and no
          exception is kept (aiotools #54); `statistics()` keeps counters only.

    Each task runs in a copy of its creator's context in which `PersistentTaskGroup.current()`
    is this group, so a task can hand work to its owner with `spawn_background`.

    Args:
        name: shown in repr and statistics (default ``PersistentTaskGroup-<n>``).
        exception_handler: ``handler(exc, task)``, called for each task that fails with an
            `Exception`, from the task's done-callback (so at once, not at exit). A coroutine
            function is run as a task of the group. If it raises, the error goes to the loop's
            exception handler. Default: report each failure to the loop's exception handler
            (asyncio's default handler logs it with its traceback).

    Raises:
        TypeError: `name` is not a str, or `exception_handler` is not callable.

    Example:
        >>> async def main() -> int:
        ...     group = PersistentTaskGroup(exception_handler=lambda exc, task: None)
        ...     ok = group.create_task(asyncio.sleep(0, 42))
        ...     group.create_task(asyncio.sleep(3600))  # cancelled by shutdown()
        ...     result = await ok
        ...     await group.shutdown()
        ...     return result
        >>> asyncio.run(main())
        42
    """

    __slots__ = (
        "__weakref__",
        "_base_error",
        "_cancelled",
        "_closed",
        "_context_token",
        "_entered",
        "_failed",
        "_handler",
        "_handler_errors",
        "_idle",
        "_loop",
        "_name",
        "_parent",
        "_parent_cancel_requested",
        "_serial",
        "_shutting_down",
        "_spawned",
        "_succeeded",
        "_tasks",
    )

    def __init__(
        self,
        *,
        name: str | None = None,
        exception_handler: ExceptionHandler | None = None,
    ) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        if exception_handler is not None and not callable(exception_handler):
            raise TypeError(
                f"exception_handler must be callable or None, got "
                f"{type(exception_handler).__name__}"
            )
        self._name = name if name is not None else f"PersistentTaskGroup-{next(_group_names)}"
        self._handler = exception_handler
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # Whoever waits for the group to empty (exit, shutdown, several at once): released
        # together when the last task finishes.
        self._idle: list[asyncio.Future[None]] = []
        self._entered = False
        self._parent: asyncio.Task[Any] | None = None
        self._parent_cancel_requested = False
        self._context_token: contextvars.Token[PersistentTaskGroup | None] | None = None
        self._shutting_down = False
        self._closed = False
        self._base_error: BaseException | None = None
        self._spawned = 0
        self._succeeded = 0
        self._failed = 0
        self._cancelled = 0
        self._handler_errors = 0
        self._serial = next(_serials)
        _live[self._serial] = self

    # -- introspection -----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    def get_name(self) -> str:
        """The group's name (aiotools' spelling)."""
        return self._name

    @property
    def closed(self) -> bool:
        """True once the group refuses new tasks (shutdown started or ``async with`` exited)."""
        return self._closed

    @classmethod
    def current(cls) -> PersistentTaskGroup | None:
        """The group owning the running code: the innermost ``async with`` group, or the group
        whose task is running; None outside any."""
        return _current_group.get()

    @classmethod
    def all_ptaskgroups(cls) -> list[PersistentTaskGroup]:
        """Every group not yet finished, in creation order (aiotools' name and meaning).

        A group is listed from its construction until it is closed (``shutdown()`` or the
        ``async with`` exit) and has no task left; groups of every event loop are listed.
        """
        # valuerefs() copies under the GIL: safe while other threads' loops make groups.
        groups = (ref() for ref in _live.valuerefs())
        return [g for g in groups if g is not None and g._state() != "closed"]

    def _state(self) -> str:
        if self._closed:
            return "shutting down" if self._tasks else "closed"
        if self._loop is None:
            return "idle"
        return "open"

    def statistics(self) -> PersistentTaskGroupStatistics:
        """Counters and the current state; no task or exception is retained to compute them."""
        return PersistentTaskGroupStatistics(
            name=self._name,
            state=self._state(),
            running=len(self._tasks),
            spawned=self._spawned,
            succeeded=self._succeeded,
            failed=self._failed,
            cancelled=self._cancelled,
            handler_errors=self._handler_errors,
        )

    def __repr__(self) -> str:
        parts = [f"<PersistentTaskGroup {self._name!r} {self._state()} running={len(self._tasks)}"]
        parts.append(f"spawned={self._spawned}")
        if self._failed:
            parts.append(f"failed={self._failed}")
        return " ".join(parts) + ">"

    # -- spawning ----------------------------------------------------------------------------

    def create_task(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        """Start `coro` as a task of the group and return the task.

        Await the task for its result or exception (the group's handler sees the exception as
        well); cancel it to cancel the work. Must be called on the group's event loop.

        Raises:
            ShutdownError: the group is shutting down or closed (the coroutine is closed).
            RuntimeError: no running event loop, or not the loop of the group's other tasks.
        """
        if self._closed:
            close_refused(coro)
            raise ShutdownError(
                f"{self!r} is shut down: it takes no new tasks (hand work to a group that "
                "outlives this one)"
            )
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            close_refused(coro)
            raise RuntimeError(
                f"{self!r}.create_task() needs a running event loop: call it from a coroutine"
            ) from None
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                close_refused(coro)
                raise RuntimeError(f"{self!r} is bound to another event loop")
            self._loop = loop
        if context is None:
            if _current_group.get() is self:
                # The common case (inside our block, or one of our tasks spawning): the task's
                # own copy of the current context already names us; let asyncio copy it.
                task = loop.create_task(coro, name=name)
            else:
                context = contextvars.copy_context()
                context.run(_current_group.set, self)
                task = loop.create_task(coro, name=name, context=context)
        else:
            if context.get(_current_group) is not self:
                context.run(_current_group.set, self)
            task = loop.create_task(coro, name=name, context=context)
        self._spawned += 1
        if task.done() and not task.cancelled() and task.exception() is None:
            # Succeeded eagerly (3.12+): count it, no done-callback round trip (which doubles
            # the cost of eager spawning, benchmarks/taskgroups.py).
            self._succeeded += 1
            return task
        # Any other task goes through the done callback, a failed eager one included: accounted
        # inline, a BaseException shutting the group down would miss the task that is creating
        # this one (running eagerly, not yet in `_tasks`), and the group would never end (CPython
        # gh-128550, fixed so by gh-128588); and the handler runs from a callback, as always.
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)
        return task

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        # Atomic section (a done-callback): count, report, forget.
        self._tasks.discard(task)
        if not self._tasks and self._idle:
            self._release_idle()
        if task.cancelled():
            self._cancelled += 1
            return
        # task.exception() also marks it retrieved: no "exception was never retrieved" log.
        error = task.exception()
        if error is None:
            self._succeeded += 1
            return
        if isinstance(error, asyncio.CancelledError):  # a subclass raised by hand
            self._cancelled += 1
            return
        self._failed += 1
        if not isinstance(error, Exception):
            # Not swallowed (aiotools' sharp edge): stop the group and re-raise it at exit.
            if self._base_error is None:
                self._base_error = error
            self._begin_shutdown()
            self._interrupt_parent()
            return
        self._report(error, task)

    def _report(self, error: BaseException, task: asyncio.Task[Any]) -> None:
        loop = self._loop
        assert loop is not None
        handler = self._handler
        if handler is None:
            loop.call_exception_handler({
                "message": f"Task {task.get_name()!r} of {self!r} failed",
                "exception": error,
                "task": task,
            })
            return
        try:
            outcome: object = handler(error, task)
        except Exception as handler_error:
            self._handler_failed(handler_error, task)
            return
        if not inspect.isawaitable(outcome):  # None from a plain handler
            return
        # An async handler runs as one of our tasks, so the group's exit waits for it; its own
        # failure goes to the loop's handler (never to itself: no loops).
        handler_task = loop.create_task(_await(outcome), name=f"{self._name}-exception-handler")
        self._tasks.add(handler_task)  # through the done callback even if eager, as above
        handler_task.add_done_callback(lambda t: self._on_handler_done(t, task))

    def _on_handler_done(self, handler_task: asyncio.Task[Any], task: asyncio.Task[Any]) -> None:
        self._tasks.discard(handler_task)
        if not self._tasks and self._idle:
            self._release_idle()
        if handler_task.cancelled():
            return
        error = handler_task.exception()
        if error is not None:
            self._handler_failed(error, task)

    def _handler_failed(self, error: BaseException, task: asyncio.Task[Any]) -> None:
        self._handler_errors += 1
        assert self._loop is not None
        self._loop.call_exception_handler({
            "message": f"the exception handler of {self!r} failed on task {task.get_name()!r}",
            "exception": error,
            "task": task,
        })

    # -- shutting down -----------------------------------------------------------------------

    def _begin_shutdown(self) -> None:
        self._closed = True
        if self._shutting_down:
            # Each task is cancelled once: a second cancel() (the caller cancelled again while
            # it waits) would interrupt the cleanup the first one started.
            return
        self._shutting_down = True
        for task in list(self._tasks):
            task.cancel()

    def _interrupt_parent(self) -> None:
        # Only in `async with` mode, as TaskGroup does: interrupt the body so the block exits.
        parent = self._parent
        if (self._entered and parent is not None and not parent.done()
                and not self._parent_cancel_requested):
            self._parent_cancel_requested = True
            parent.cancel()

    async def _wait_idle(self) -> BaseException | None:
        """Wait until no task is left; returns the caller's cancellation if one arrived.

        If the caller is cancelled while waiting, every task is cancelled and the wait goes on:
        no task outlives the wait, and its cleanup completes first.
        """
        cancelled: BaseException | None = None
        loop = self._loop
        while self._tasks:
            assert loop is not None
            idle: asyncio.Future[None] = loop.create_future()
            self._idle.append(idle)
            try:
                await idle
            except asyncio.CancelledError as exc:
                cancelled = exc
                self._begin_shutdown()
            finally:
                if idle in self._idle:
                    self._idle.remove(idle)
        return cancelled

    def _release_idle(self) -> None:
        waiters, self._idle = self._idle, []
        for idle in waiters:
            _release(idle)

    # ASYNC109: a grace period, not a deadline for the call; `asyncio.timeout` around it would
    # cancel the wait half-way instead of cancelling the tasks.
    async def shutdown(self, timeout: float | None = 0) -> None:  # noqa: ASYNC109
        """Refuse new tasks, let the running ones finish for up to `timeout` seconds, cancel the
        rest, and wait until all have finished.

        Idempotent. The tasks' cleanup (``except CancelledError: await ...``) completes before
        this returns. `timeout` is the grace period of a graceful drain, under the library's one
        rule for timeouts: ``0`` (the default) cancels at once, a number of seconds waits that
        long for the tasks to finish on their own, and ``None`` (or ``math.inf``) waits as long
        as they take. If the caller is cancelled while waiting, the tasks are cancelled, still
        awaited, and the cancellation propagates.

        Raises:
            TypeError, ValueError: `timeout` is not None or a number of seconds >= 0.
            KeyboardInterrupt, SystemExit, BaseExceptionGroup: a task ended with a
                `BaseException` that is not an `Exception` (it is raised once).
        """
        grace = _validate.timeout(timeout)
        self._closed = True
        cancelled: BaseException | None = None
        if grace != 0 and self._tasks and not self._shutting_down:
            # The grace period: one future and (with a limit) one timer, not a callback on
            # every task.
            loop = self._loop
            assert loop is not None
            idle: asyncio.Future[None] = loop.create_future()
            self._idle.append(idle)
            timer = None if grace is None else loop.call_later(grace, _release, idle)
            try:
                await idle
            except asyncio.CancelledError as exc:
                cancelled = exc
            finally:
                if timer is not None:
                    timer.cancel()
                if idle in self._idle:
                    self._idle.remove(idle)
        self._begin_shutdown()
        late_cancel = await self._wait_idle()
        _live.pop(self._serial, None)
        cancelled = cancelled or late_cancel
        self._raise_base_error()
        if cancelled is not None:
            raise cancelled

    def _raise_base_error(self) -> None:
        error, self._base_error = self._base_error, None
        if error is None:
            return
        try:
            if is_fatal(error):
                raise error
            raise BaseExceptionGroup(f"a task of {self._name!r} raised", [error])
        finally:
            error = None

    async def __aenter__(self) -> Self:
        if self._entered or self._closed:
            raise RuntimeError(f"{self!r} has already been entered or shut down")
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            raise RuntimeError(f"{self!r} is bound to another event loop")
        self._loop = loop
        self._entered = True
        self._parent = asyncio.current_task(loop)
        self._context_token = _current_group.set(self)
        return self

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Wait for every task (new ones may be spawned meanwhile); then refuse new tasks.

        If the body raised or the caller was cancelled, the tasks are cancelled first.
        """
        token, self._context_token = self._context_token, None
        try:
            if exc is not None:
                self._begin_shutdown()
            cancelled = await self._wait_idle()
            self._closed = True
            _live.pop(self._serial, None)
            if self._parent_cancel_requested and self._parent is not None:
                # We interrupted the body (a task raised a BaseException): withdraw exactly
                # that cancellation; the base error raised below replaces it.
                self._parent_cancel_requested = False
                if self._parent.uncancel() == 0:
                    cancelled = None
                    if isinstance(exc, asyncio.CancelledError):
                        exc = None
                    await absorb_stale_cancel(self._parent)
            self._raise_base_error()
            if cancelled is not None and exc is None:
                raise cancelled
        finally:
            self._parent = None
            exc = None
            if token is not None:
                try:
                    _current_group.reset(token)
                except ValueError:  # exited in another context than entered: nothing to undo
                    pass


def _release(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


def spawn_background(
    coro: Coroutine[Any, Any, T],
    *,
    group: PersistentTaskGroup | None = None,
    name: str | None = None,
) -> asyncio.Task[T]:
    """Hand `coro` to a longer-lived owner instead of detaching it: a managed background task.

    A short-lived scope (a request handler, a callback) often starts work that must outlive it
    (send the e-mail, write the audit log). ``asyncio.create_task`` would detach that work: no
    one awaits it, its errors are lost and shutdown does not wait for it. Instead, the work goes
    to `group` (default: `PersistentTaskGroup.current()`, the group that owns the running code),
    which reports its failures to its exception handler and cancels or awaits it when the
    application shuts down. The returned task may be awaited, or ignored.

    Raises:
        RuntimeError: no `group` was given and the running code belongs to none (the coroutine
            is closed). Hold a `PersistentTaskGroup` at application level and pass it, or run
            the handlers as its tasks.
        ShutdownError: the owner is shutting down (the coroutine is closed).

    Example:
        >>> async def handle_request(log: list[str]) -> str:
        ...     spawn_background(asyncio.sleep(0, "audit"))  # outlives this handler
        ...     return "response"
        >>> async def main() -> str:
        ...     async with PersistentTaskGroup(name="app") as app:
        ...         return await app.create_task(handle_request([]))
        >>> asyncio.run(main())
        'response'
    """
    owner = group if group is not None else _current_group.get()
    if owner is None:
        close_refused(coro)
        raise RuntimeError(
            "spawn_background() found no owner: pass group=, or call it from code running in "
            "a PersistentTaskGroup (its task, or its `async with` block)"
        )
    return owner.create_task(coro, name=name)
