"""ThreadWaiter, PortalFuture and the `Portal.call` record: how a plain thread waits for work done
on a portal's loop."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, ClassVar, Final, TypeVar, final

# The one sanctioned import of a private executors module (the bridge rule of ARCHITECTURE.md):
# the waiter protocol every aio primitive parks its waiters with, so threads can join the same
# FIFOs as tasks. Everything else the bridge uses is public.
from executors.aio._waiters import Waiter
from executors.errors import ShutdownError

__all__ = ("ThreadWaiter", "PortalFuture")

T = TypeVar("T")

_WAITING: Final = 0  # parked (or about to be): try_wake/try_fail/try_abandon may still win
_WOKEN: Final = 1  # try_wake won: the thread owns the value
_FAILED: Final = 2  # try_fail won: the thread raises the error
_ABANDONED: Final = 3  # the thread gave up first (timeout, Ctrl-C): it owns nothing

_STATES: Final = ("waiting", "woken", "failed", "abandoned")

# The process generation: bumped in a forked child. A ThreadWaiter made before the fork belongs
# to a thread the child does not have: the primitives it is parked in (loop-only ones used
# through a Portal view) must skip it, or a permit or value handed to it there is lost for good.
_generation: list[int] = [0]


def _forked() -> None:
    _generation[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


@final
class ThreadWaiter(Waiter):
    """A plain thread parked in an aio primitive's FIFO, next to tasks.

    The thread blocks on a raw lock (no polling, no CPU while parked). The loop thread hands it
    a value with `try_wake` (the primitive's linearization point) or an error with `try_fail`;
    the thread gives up with `try_abandon` (a timeout, Ctrl-C). Exactly one of the three wins:
    each takes the waiter's own small lock and only a waiter still waiting changes state. So a
    hand-off racing a timeout is decided in one place: if `try_wake` won, the thread takes the
    value even though its timeout expired; if `try_abandon` won, the primitive sees `try_wake`
    return False and passes the value to the next waiter. Nothing is lost or duplicated.

    After ``fork()``, in the child, a waiter made before the fork is dead (its thread is gone):
    `try_wake`, `try_fail` and `try_abandon` return False and `waiting` is False, so a FIFO
    that still holds it skips it and serves the next party.

    `resumes_on_loop` is False: a thread does not resume on the loop, so `try_wake` returning
    True completes the hand-off (no "woken, not resumed" state as for tasks).

    The lock is reentrant because the loop thread holds it across a whole park section (a fast
    path, then parking), during which the primitive may call `try_wake` at once; meanwhile the
    waiting thread's `try_abandon` waits for the section to finish (microseconds), so a fast
    path that takes a permit or a value can never meet a waiter that has just left.

    ``abort`` is set on the loop thread once the waiter is parked somewhere (or a task runs for
    it): the portal calls it on the loop thread to undo the wait after `try_abandon` or
    `try_fail` won (leave the primitive's queue, cancel the task).
    """

    __slots__ = ("_done", "_generation", "_state", "_value", "abort", "mutex")

    resumes_on_loop: ClassVar[bool] = False

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self._done = threading.Lock()
        self._done.acquire()  # released once, by whoever resolves the waiter
        self._state = _WAITING
        self._value: object = None
        self.abort: Callable[[], object] | None = None
        self._generation = _generation[0]

    def _dead(self) -> bool:
        # Parked before a fork, seen in the child: its thread does not exist here. Checked
        # before taking `mutex`, which the parent's loop thread may have held at the fork.
        return self._generation != _generation[0]

    def try_wake(self, value: object) -> bool:
        """Hand `value` to the thread if it still waits; True if it took it. Never blocks long."""
        if self._dead():
            return False
        with self.mutex:
            if self._state != _WAITING:
                return False
            self._state = _WOKEN
            self._value = value
            self._done.release()
        return True

    def try_fail(self, error: BaseException) -> bool:
        """Make the thread raise `error` if it still waits; True if that happened."""
        if self._dead():
            return False
        with self.mutex:
            if self._state != _WAITING:
                return False
            self._state = _FAILED
            self._value = error
            self._done.release()
        return True

    def try_abandon(self) -> bool:
        """The thread gives up; True if nothing was handed to it (it owns nothing)."""
        if self._dead():
            return False
        with self.mutex:
            if self._state != _WAITING:
                return False
            self._state = _ABANDONED
        return True

    @property
    def waiting(self) -> bool:
        return self._state == _WAITING and not self._dead()

    @property
    def woken(self) -> bool:
        """True if `try_wake` won: the value belongs to the thread."""
        return self._state == _WOKEN

    @property
    def value(self) -> object:
        """The value handed over by `try_wake` (None otherwise)."""
        return self._value if self._state == _WOKEN else None

    def wait(self, timeout: float | None) -> bool:
        """Block until resolved or `timeout` seconds pass; True if resolved. Thread side."""
        if timeout is None:
            return self._done.acquire()
        return self._done.acquire(True, max(timeout, 0.0))

    def outcome(self) -> object:
        """The value, or raise the error, of a resolved waiter (and drop the reference)."""
        value, self._value = self._value, None
        if self._state == _FAILED:
            assert isinstance(value, BaseException)
            try:
                raise value
            finally:
                value = None
        return value

    def __repr__(self) -> str:
        return f"<ThreadWaiter {_STATES[self._state]}>"


class PortalFuture(Future[T]):
    """A `concurrent.futures.Future` for a task run on a portal's loop.

    Unlike the future of `asyncio.run_coroutine_threadsafe`, `cancel()` does not mark the
    future cancelled at once: it asks the task to cancel and returns True, and the future
    completes only when the task has finished, its cleanup (``finally``, ``except
    CancelledError: await ...``) included (gh-105836). So ``fut.cancel(); fut.exception()`` (or
    ``concurrent.futures.wait([fut])``) waits for the cleanup; then `cancelled()` is True, or,
    if the task caught the cancellation and returned, the future holds that outcome.
    ``result(timeout)`` raising `TimeoutError` leaves the task running.

    Not constructed by users: `integrations.bridge.Portal.start_task_soon` and
    ``task_group().create_task`` return it.
    """

    _request_cancel: Callable[[PortalFuture[T]], None]
    _task: asyncio.Task[T] | None
    _cancel_requested: bool

    def __init__(self, request_cancel: Callable[[PortalFuture[T]], None]) -> None:
        super().__init__()
        self._request_cancel = request_cancel
        self._task = None
        self._cancel_requested = False

    def cancel(self) -> bool:
        """Request the task's cancellation; True unless the future is already done (then
        whether it was cancelled). Wait on the future to see the cleanup finish."""
        if self.done():
            return self.cancelled()
        if not self._cancel_requested:
            self._cancel_requested = True
            self._request_cancel(self)
        return True

    def running(self) -> bool:
        """True until the task has finished (the future stays pending while it runs)."""
        return not self.done()

    def _finish_cancelled(self) -> None:
        # The executor protocol of concurrent.futures: cancel a pending future, then notify
        # the waiters of wait()/as_completed() (set_running_or_notify_cancel does that).
        if not self.done() and Future.cancel(self):
            self.set_running_or_notify_cancel()

    def _settle(self, task: asyncio.Task[T], closing: bool) -> None:
        """Copy the finished task's outcome (loop thread); mark its exception retrieved."""
        if task.cancelled():
            if self._cancel_requested or not closing:
                self._finish_cancelled()
            else:
                self._fail(ShutdownError("the portal closed while the task was running"))
            return
        error = task.exception()
        try:
            if error is not None:
                self._fail(error)
            elif not self.done():
                self.set_result(task.result())
        finally:
            error = None

    def _fail(self, error: BaseException) -> None:
        if not self.done():
            try:
                self.set_exception(error)
            except Exception:  # InvalidStateError: completed by a racing shutdown sweep
                pass


@final
class _Call:
    """One `Portal.call` in flight: the thread blocks on `done`, a raw lock taken at once and
    released once, by whoever resolves the call.

    The claim is the call's entry in the portal's `_calls` table: whoever pops it (the task
    with the outcome, the shutdown or the final sweep with `ShutdownError`, the calling thread
    giving up on Ctrl-C) resolves the call, once; everyone else finds it gone. ``dict.pop`` is
    one C call that runs no Python code for these keys (identity hash), so it is atomic under
    the GIL (and under the per-object lock of a free-threaded build). The loop side writes
    `value` and `failed` before it releases `done`, and the thread reads them after.

    No `ThreadWaiter` (two locks, a reentrant one among them, and fork generations): a call
    never parks in a primitive's queue, and a forked child has no pending calls (it has no
    loop thread, and its table is emptied).
    """

    __slots__ = ("args", "done", "failed", "fn", "task", "value")

    # Set by `Portal.call` (no __init__: one Python frame fewer on the round trip), except
    # `value`, written by whoever resolves the call.
    fn: Callable[..., Awaitable[object]]
    args: tuple[object, ...]
    done: Any  # a _thread.lock
    failed: bool
    task: asyncio.Task[Any] | None
    value: object


def _abort_call(call: _Call) -> None:
    """Loop thread: the caller gave up on `call` (Ctrl-C): cancel its task if it has one."""
    task, call.task = call.task, None  # (it dies on the loop thread, not in the caller's)
    if task is not None:
        task.cancel()
