"""ThreadGroup and CancelToken: structured concurrency for plain threads."""

from __future__ import annotations

import contextvars
import dataclasses
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import TracebackType
from typing import Literal, ParamSpec, Self, TypeVar, final

from . import _threads, _validate
from ._fatal import is_fatal
from .errors import ThreadCancelled

__all__ = ("ThreadGroup", "CancelToken", "ThreadGroupStatistics")

P = ParamSpec("P")
T = TypeVar("T")

_current_token: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "executors.threads.current_token", default=None
)
_group_names = itertools.count(1)


@final
class CancelToken:
    """A one-way flag for cooperative cancellation of threads, with an optional reason.

    A thread cannot be interrupted from outside; it checks its token at safe points
    (`raise_if_cancelled`, `cancelled`) or sleeps on it (`wait`), which returns as soon as the
    token is cancelled. Cancelling is idempotent and thread-safe; the first reason wins.

    Inside a `ThreadGroup` thread (or a function run by `integrations.bridge.run_sync`),
    `CancelToken.current()` returns the token that cancels it, so library code deep in the call
    stack can check it without being passed the token (trio's and anyio's ``check_cancelled``).

    Example:
        >>> token = CancelToken()
        >>> token.cancel("stop")
        >>> token.cancelled, token.reason, token.wait(0)
        (True, 'stop', True)
    """

    __slots__ = ("__weakref__", "_callbacks", "_event", "_lock", "_reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()  # orders cancel() against on_cancel(): no lost callback
        self._reason: str | None = None
        self._callbacks: list[Callable[[], object]] = []

    @staticmethod
    def current() -> CancelToken | None:
        """The token of the running `ThreadGroup` thread (or `run_sync` call); None elsewhere."""
        return _current_token.get()

    @property
    def cancelled(self) -> bool:
        """True once `cancel()` was called."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """The reason given to the first `cancel()` call (None if none or not cancelled)."""
        return self._reason

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the token: wake every `wait`, make `raise_if_cancelled` raise. Idempotent.

        Callbacks added with `on_cancel` run in the calling thread, once, after the flag is set.

        Raises:
            TypeError: `reason` is not a str or None.
        """
        if reason is not None and not isinstance(reason, str):
            raise TypeError(f"reason must be a str or None, got {type(reason).__name__}")
        if self._event.is_set():
            return
        with self._lock:
            if self._event.is_set():
                return  # of two racing cancels, exactly one runs the callbacks
            self._reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Call `callback()` when the token is cancelled (now, if it already is).

        Raises:
            TypeError: `callback` is not callable.
        """
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the token is cancelled or `timeout` seconds pass; True if cancelled.

        Use it as an interruptible sleep: ``while not token.wait(interval): work()``.
        """
        return self._event.wait(_validate.timeout(timeout))

    def raise_if_cancelled(self) -> None:
        """Raise `ThreadCancelled` if the token is cancelled; a cheap check for loops.

        A `ThreadGroup` does not count a `ThreadCancelled` from its own token as an error.
        """
        if self._event.is_set():
            raise ThreadCancelled(
                f"cancelled: {self._reason}" if self._reason else "cancelled"
            )

    def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Call ``fn(*args, **kwargs)`` with this token as `CancelToken.current()`."""
        reset = _current_token.set(self)
        try:
            return fn(*args, **kwargs)
        finally:
            _current_token.reset(reset)

    def __repr__(self) -> str:
        if not self.cancelled:
            return "<CancelToken active>"
        return f"<CancelToken cancelled reason={self._reason!r}>"


@final
@dataclasses.dataclass(frozen=True)
class ThreadGroupStatistics:
    """A snapshot of a `ThreadGroup`."""

    #: The group's name (``ThreadGroup(name=...)``, else ``ThreadGroup-N``), the prefix of
    #: its threads' names.
    name: str
    #: "idle" (not entered), "open", "joining" (the block is exiting) or "closed".
    state: str
    #: Threads `start` launched, over the group's life.
    started: int
    #: Started threads whose function has not returned or raised yet.
    running: int
    #: Threads whose function returned a result.
    succeeded: int
    #: Threads whose function raised (a `ThreadCancelled` raised after the group's token was
    #: cancelled is a cooperative exit and counts in neither `failed` nor `succeeded`).
    failed: int
    #: True once the group's token is cancelled: by the first failure, the block raising,
    #: Ctrl-C, or `ThreadGroup.cancel`.
    cancelled: bool


@final
class ThreadGroup:
    """Structured concurrency for threads: no thread started in the block outlives it.

    ``with ThreadGroup() as g: g.start(fn, *args)`` starts each `fn` in its own daemon thread.
    Leaving the block joins every thread, including threads started by other threads of the
    group while it joins. Guarantees:

    - The first thread to fail cancels the group's `token` (cooperative cancellation: the
      other threads see it through `CancelToken.current()`, `token.raise_if_cancelled()` or
      `token.wait()`); their `ThreadCancelled` exceptions are not counted as errors.
    - Errors come out when the block exits, as an `ExceptionGroup` of every thread error (the
      block's own exception included, as `asyncio.TaskGroup` does); `KeyboardInterrupt` and
      `SystemExit` come out bare.
    - If the block raises, or Ctrl-C (`KeyboardInterrupt`) arrives in the block or while it
      joins, the token is cancelled and every thread is still joined before the exception
      propagates. A second Ctrl-C while joining abandons the (daemon) threads and propagates at
      once, so a thread that ignores its token cannot make the program unkillable.

    Each thread runs in a copy of the starting thread's `contextvars` context.

    Args:
        name: a prefix for thread names (default ``ThreadGroup-<n>``).

    Raises:
        TypeError: `name` is not a str.

    Example:
        >>> results = []
        >>> with ThreadGroup() as g:
        ...     for i in range(3):
        ...         _ = g.start(results.append, i)
        >>> sorted(results)
        [0, 1, 2]
    """

    __slots__ = (
        "__weakref__",
        "_base_error",
        "_cond",
        "_entered",
        "_errors",
        "_exiting",
        "_failed",
        "_finished",
        "_name",
        "_running",
        "_started",
        "_succeeded",
        "_threads",
        "_token",
    )

    def __init__(self, *, name: str | None = None) -> None:
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self._name = name if name is not None else f"ThreadGroup-{next(_group_names)}"
        self._token = CancelToken()
        self._cond = threading.Condition(threading.Lock())
        self._threads: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._base_error: BaseException | None = None
        self._entered = False
        self._exiting = False
        self._finished = False
        self._started = 0
        self._running = 0
        self._succeeded = 0
        self._failed = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def token(self) -> CancelToken:
        """The group's cancel token: cancelled by the first failure, the block's exit on an
        exception, Ctrl-C, or `cancel()`."""
        return self._token

    def cancel(self, reason: str | None = None) -> None:
        """Cancel the group's token (the threads stop cooperatively; the block still joins)."""
        self._token.cancel(reason)

    def _state(self) -> str:
        if self._finished:
            return "closed"
        if self._exiting:
            return "joining"
        return "open" if self._entered else "idle"

    def statistics(self) -> ThreadGroupStatistics:
        """Counters and state; read without the group's lock (a consistent-enough snapshot)."""
        return ThreadGroupStatistics(
            name=self._name,
            state=self._state(),
            started=self._started,
            running=self._running,
            succeeded=self._succeeded,
            failed=self._failed,
            cancelled=self._token.cancelled,
        )

    def __repr__(self) -> str:
        parts = [f"<ThreadGroup {self._name!r} {self._state()} running={self._running}"]
        if self._failed:
            parts.append(f"failed={self._failed}")
        if self._token.cancelled:
            parts.append("cancelled")
        return " ".join(parts) + ">"

    # -- starting ----------------------------------------------------------------------------

    def start(self, fn: Callable[..., T], *args: object, name: str | None = None) -> Future[T]:
        """Start ``fn(*args)`` in a new daemon thread of the group; return its `Future`.

        The future holds the result or the exception (which also reaches the group's
        `ExceptionGroup`). May be called from the block or from a thread of the group, also
        while the block is joining.

        Raises:
            TypeError: `fn` is not callable.
            RuntimeError: the group has not been entered, or has finished joining.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        future: Future[T] = Future()
        future.set_running_or_notify_cancel()
        context = contextvars.copy_context()
        with self._cond:
            if not self._entered:
                raise RuntimeError(f"{self!r} has not been entered")
            if self._finished:
                raise RuntimeError(f"{self!r} is finished: it takes no new threads")
            self._started += 1
            self._running += 1
            thread = _threads.new_thread(
                context.run, name or f"{self._name}-{self._started}",
                (self._token.run, self._body, future, fn, *args))
            self._threads.append(thread)
        try:
            _threads.start(thread)
        except BaseException:
            with self._cond:
                self._threads.remove(thread)
                self._started -= 1
                self._running -= 1
                self._cond.notify_all()
            raise
        return future

    def _body(self, future: Future[T], fn: Callable[..., T], *args: object) -> None:
        error: BaseException | None = None
        try:
            result = fn(*args)
        except ThreadCancelled as exc:
            if self._token.cancelled:
                future.set_exception(exc)  # cooperative exit, not an error of the group
            else:
                error = exc
        except BaseException as exc:
            error = exc
        else:
            future.set_result(result)
            with self._cond:
                self._succeeded += 1
        if error is not None:
            future.set_exception(error)
            with self._cond:
                self._failed += 1
                if is_fatal(error):
                    if self._base_error is None:
                        self._base_error = error
                else:
                    self._errors.append(error)
            self._token.cancel(f"a thread of {self._name} failed: {error!r}")
        error = None  # the exception lives on in the future and the group; not in this frame
        with self._cond:
            self._running -= 1
            if not self._running:
                self._cond.notify_all()

    # -- the block ---------------------------------------------------------------------------

    def __enter__(self) -> Self:
        with self._cond:
            if self._entered:
                raise RuntimeError(f"{self!r} has already been entered")
            self._entered = True
        return self

    def _join_all(self) -> None:
        with self._cond:
            while self._running:
                self._cond.wait()
            self._finished = True
            threads, self._threads = self._threads, []
        for thread in threads:  # each has finished its body; this only reaps it
            thread.join()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        self._exiting = True
        if exc is not None:
            self._token.cancel(f"the block of {self._name} raised {exc!r}")
        interrupt: KeyboardInterrupt | None = None
        try:
            self._join_all()
        except KeyboardInterrupt as caught:
            # Ctrl-C while joining: cancel and join again. A second Ctrl-C escapes from this
            # second join: the threads are daemons, abandoned rather than unkillable.
            interrupt = caught
            self._token.cancel("KeyboardInterrupt")
            self._join_all()
        try:
            if self._base_error is not None:
                raise self._base_error
            if interrupt is not None:
                raise interrupt
            if exc is not None and is_fatal(exc):
                return False  # KeyboardInterrupt / SystemExit from the block: bare
            errors = list(self._errors)
            if not errors:
                return False  # the block's exception (if any) propagates as it is
            if exc is not None:
                errors.insert(0, exc)
            raise BaseExceptionGroup(f"unhandled errors in {self._name}", errors)
        finally:
            self._errors = []
            self._base_error = None
            exc = interrupt = None
