"""TaskGroup: asyncio's structured task group, with Python 3.13's behaviour on 3.11 and later."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar, final

from executors._fatal import is_fatal

from ._cancel import absorb_stale_cancel, close_refused, redeliver_cancel

# The long-lived group used to live here; its names stay importable from this module.
from .persistent import PersistentTaskGroup as PersistentTaskGroup
from .persistent import PersistentTaskGroupStatistics as PersistentTaskGroupStatistics
from .persistent import spawn_background as spawn_background

__all__ = ("TaskGroup",)

T = TypeVar("T")


@final
class TaskGroup:
    """A drop-in for `asyncio.TaskGroup` that behaves like Python 3.13's on 3.11, 3.12 and 3.13.

    ``async with TaskGroup() as tg:`` runs the body, and `create_task` starts child tasks. The
    block exits only when every child has finished. The first child to fail with an exception
    other than `asyncio.CancelledError` cancels the remaining children and the body, and the
    block raises an `ExceptionGroup` (a `BaseExceptionGroup` if a member is not an `Exception`)
    of every error, the body's included.

    Guarantees (each is a bug or a change in CPython, now the same on every supported version):
        - Errors beat cancellation: if children failed, the group is raised even while the
          parent task is being cancelled (gh-95704), and an outside cancellation that arrived
          meanwhile is re-delivered at the parent's next ``await`` (gh-116720), unless it is
          withdrawn first: an ``asyncio.timeout()`` around the group that fired consumes its
          own cancellation, and the parent carries on (3.11/3.12 re-delivered it, issue 16).
        - ``current_task().cancelling()`` is balanced on every exit path: the group withdraws
          exactly the cancellation it requested (gh-95289), also when two nested groups fail at
          once on 3.11/3.12, whose ``Task.uncancel()`` leaves a stale cancellation behind.
        - A coroutine refused by `create_task` is closed: no "coroutine was never awaited"
          warning (gh-115957).
        - `KeyboardInterrupt` and `SystemExit` from the body or a child come out bare.
        - Finished children are released at once, and the group keeps no reference to the
          raised exceptions after it has raised them.
        - Works under `asyncio.eager_task_factory`, including a child that starts eagerly and
          creates a sibling that fails at once: a failure is always accounted from the done
          callback, after the child joined the group, so the child is cancelled too
          (gh-128550; stdlib 3.12.1 and 3.13.0 hang there). Only an eager success, which
          aborts nothing, is accounted at once.

    Known limits (interpreter-level, shared with asyncio): a `KeyboardInterrupt` or
    `SystemExit` raised in a child also propagates out of the event loop (gh-102572); a
    `GeneratorExit` raised in the body (an async generator yielding inside the block and then
    closed) is grouped (gh-135736): do not ``yield`` inside a task group.

    Raises:
        RuntimeError: from ``async with`` if the group was entered before or there is no current
            task; from `create_task` if the group has not been entered, is finished, or is
            shutting down (the messages are asyncio's).

    Example:
        >>> async def main() -> list[int]:
        ...     async with TaskGroup() as tg:
        ...         a = tg.create_task(asyncio.sleep(0, 1))
        ...         b = tg.create_task(asyncio.sleep(0, 2))
        ...     return [a.result(), b.result()]
        >>> asyncio.run(main())
        [1, 2]
    """

    __slots__ = (
        "__weakref__",
        "_aborting",
        "_base_error",
        "_entered",
        "_errors",
        "_exiting",
        "_loop",
        "_on_completed",
        "_parent",
        "_parent_cancel_requested",
        "_tasks",
    )

    def __init__(self) -> None:
        self._entered = False
        self._exiting = False
        self._aborting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._parent: asyncio.Task[Any] | None = None
        self._parent_cancel_requested = False
        # CPython's test_taskgroups inspects `_tasks` (test 23): a set of the unfinished children.
        self._tasks: set[asyncio.Task[Any]] = set()
        self._errors: list[BaseException] = []
        self._base_error: BaseException | None = None
        self._on_completed: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        parts = ["<TaskGroup"]
        if self._tasks:
            parts.append(f"tasks={len(self._tasks)}")
        if self._errors:
            parts.append(f"errors={len(self._errors)}")
        if self._aborting:
            parts.append("cancelling")
        elif self._exiting and not self._tasks:
            parts.append("finished")
        elif self._entered:
            parts.append("entered")
        return " ".join(parts) + ">"

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError(f"TaskGroup {self!r} has already been entered")
        loop = asyncio.get_running_loop()
        parent = asyncio.current_task(loop)
        if parent is None:
            raise RuntimeError(f"TaskGroup {self!r} cannot determine the parent task")
        self._loop = loop
        self._parent = parent
        self._entered = True
        return self

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self._exit(exc)
        finally:
            # Break the cycles frame -> exception -> traceback -> frame -> group (gh-124958,
            # gh-128552): the exceptions are raised, nobody needs them here any more.
            self._errors = []
            self._base_error = None
            self._parent = None
            exc = None

    async def _exit(self, exc: BaseException | None) -> None:
        parent = self._parent
        assert parent is not None and self._loop is not None
        self._exiting = True
        if exc is not None and is_fatal(exc) and self._base_error is None:
            self._base_error = exc
        # 3.13 tests the class (issubclass), 3.11/3.12 tested identity: a subclass of
        # CancelledError leaving the body is a cancellation too.
        propagate: BaseException | None = (
            exc if isinstance(exc, asyncio.CancelledError) else None
        )
        if exc is not None and not self._aborting:
            # The body raised, or the parent is being cancelled: stop the children.
            self._abort()
        # Loop: the parent may be cancelled any number of times while it waits here, and each
        # time it must still wait for every child (tests 15, 16, 22).
        while self._tasks:
            self._on_completed = self._loop.create_future()
            try:
                await self._on_completed
            except asyncio.CancelledError as cancel:
                if not self._aborting:
                    propagate = cancel
                    self._abort()
            self._on_completed = None

        if self._base_error is not None:
            raise self._base_error

        # Withdraw exactly the cancellation we requested, after the wait (3.13 order).
        if self._parent_cancel_requested and parent.uncancel() == 0:
            propagate = None
            await absorb_stale_cancel(parent)

        if propagate is not None and not self._errors:
            raise propagate

        errors = self._errors
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            errors.append(exc)
        if errors:
            # Someone outside may have cancelled the parent while we handled errors: the group
            # wins now, and that cancellation reaches the parent's next await.
            redeliver_cancel(parent)
            try:
                raise BaseExceptionGroup("unhandled errors in a TaskGroup", errors) from None
            finally:
                errors = []
                self._errors = []

    def create_task(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        """Start `coro` as a child task and return it; like `asyncio.TaskGroup.create_task`.

        Children may be added while the block is exiting (a child may spawn siblings), but not
        once the group is finished or shutting down. A refused coroutine is closed.

        Raises:
            RuntimeError: "has not been entered", "is finished" or "is shutting down".
        """
        if not self._entered:
            close_refused(coro)
            raise RuntimeError(f"TaskGroup {self!r} has not been entered")
        if self._exiting and not self._tasks:
            close_refused(coro)
            raise RuntimeError(f"TaskGroup {self!r} is finished")
        if self._aborting:
            close_refused(coro)
            raise RuntimeError(f"TaskGroup {self!r} is shutting down")
        loop = self._loop
        assert loop is not None
        if context is None:
            task = loop.create_task(coro, name=name)
        else:
            task = loop.create_task(coro, name=name, context=context)
        if task.done() and not task.cancelled() and task.exception() is None:
            # An eager task (3.12+) that succeeded during create_task has nothing to account
            # but its end: skip the done-callback round trip, which doubles the cost of an
            # eager group (gh-104144; benchmarks/taskgroups.py, eager variant).
            return task
        # Any other task goes through the done callback, a failed eager one included:
        # accounted inline, its failure would abort the group while the child that is creating
        # it still runs eagerly and is not yet in `_tasks`, so nothing would cancel that child
        # and the group would hang (gh-128550; CPython fixed it so in gh-128588).
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)
        return task

    def _abort(self) -> None:
        self._aborting = True
        for task in self._tasks:
            if not task.done():
                task.cancel()

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        # An atomic section: runs as a done-callback, never inline (gh-128550).
        self._tasks.discard(task)
        waiter = self._on_completed
        if waiter is not None and not self._tasks and not waiter.done():
            waiter.set_result(None)
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        self._errors.append(error)
        if is_fatal(error) and self._base_error is None:
            self._base_error = error
        parent = self._parent
        assert parent is not None and self._loop is not None
        if parent.done():
            self._loop.call_exception_handler({
                "message": f"Task {task!r} has errored out but its parent task {parent!r} "
                           "is already completed",
                "exception": error,
                "task": task,
            })
            return
        if not self._aborting and not self._parent_cancel_requested:
            # Interrupt whatever the body awaits; __aexit__ withdraws this cancellation.
            self._abort()
            self._parent_cancel_requested = True
            parent.cancel()
