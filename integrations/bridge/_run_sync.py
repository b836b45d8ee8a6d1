"""run_sync: await blocking code in a worker thread, under a limiter, waiting on cancellation."""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Final, Protocol, TypeVar, TypeVarTuple, Unpack

from executors import CancelToken, registry
from executors.aio import Semaphore
from executors.library_threads import start_thread

__all__ = (
    "run_sync",
    "run_sync_limiter",
    "RUN_SYNC_LIMIT",
    "default_limiter",
    "DEFAULT_LIMIT",
    "Limiter",
)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Threads one event loop runs `run_sync` calls on at once by default (trio's and anyio's 40).
RUN_SYNC_LIMIT: Final = 40
#: The former name of `RUN_SYNC_LIMIT`: the same value.
DEFAULT_LIMIT: Final = RUN_SYNC_LIMIT
#: An idle worker thread exits after this many seconds (anyio prunes after 10 s).
_IDLE_SECONDS: Final = 10.0

_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Semaphore] = (
    weakref.WeakKeyDictionary()
)

# One call for a worker thread to run (not `executors.Job`, the service's periodic job).
_Work = Callable[[], None]


class Limiter(Protocol):
    """What `run_sync` accepts as a limiter: an async context manager holding a slot.

    `executors.aio.Semaphore` (fair), `asyncio.Semaphore` and anyio's ``CapacityLimiter`` fit.
    """

    def __aenter__(self) -> Awaitable[object]: ...

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Awaitable[object]: ...


def run_sync_limiter() -> Semaphore:
    """The running loop's default `run_sync` limiter: a fair `Semaphore(RUN_SYNC_LIMIT)`.

    One per event loop, so a limiter is never shared across loops. Its value can be read and
    changed (``release()`` adds a slot) like any semaphore's.

    Raises:
        RuntimeError: no running event loop.
    """
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = Semaphore(RUN_SYNC_LIMIT)
    return limiter


#: The former name of `run_sync_limiter`: the same function.
default_limiter = run_sync_limiter


class _Workers:
    """Daemon worker threads, reused LIFO (hot ones stay hot), pruned when idle.

    Daemon threads never hold up interpreter exit (crewAI#6743: a pool's non-daemon thread
    did); an idle worker blocks in ``SimpleQueue.get(timeout)``, no polling. Where the
    interpreter refuses daemon threads (subinterpreters) they are non-daemon, so the registry's
    exit shutdown ends the idle ones at once (`stop_idle`) and a busy one right after its call,
    instead of holding up the exit for its idle timeout.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Work | None]] = []
        self._count = 0

    def stop_idle(self, deadline: float = 0.0) -> None:
        """End every idle worker now (a registry shutdown hook; takes no time)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for inbox in idle:
            inbox.put(None)

    def submit(self, job: _Work) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                self._count += 1
                number = self._count
        if inbox is not None:
            inbox.put(job)
            return
        new_inbox: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        new_inbox.put(job)
        start_thread(self._work, f"executors-run_sync-{number}", (new_inbox,))

    def _work(self, inbox: queue.SimpleQueue[_Work | None]) -> None:
        while True:
            try:
                job = inbox.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if inbox in self._idle:
                        self._idle.remove(inbox)
                        return
                continue  # a submitter took this inbox a moment ago: its job is coming
            if job is None:  # stop_idle
                return
            job()
            del job
            if registry.is_shutting_down():
                return  # the exit has begun: idling would only hold it up
            with self._lock:
                self._idle.append(inbox)


_workers = _Workers()
registry.add_shutdown_hook(_workers.stop_idle)


def _resolve(future: asyncio.Future[T], ok: bool, value: object) -> None:
    if future.done():
        return  # abandoned (abandon_on_cancel): nobody waits for it
    if ok:
        future.set_result(value)  # type: ignore[arg-type]
    else:
        assert isinstance(value, BaseException)
        future.set_exception(value)


def _job(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[T],
    context: contextvars.Context,
    token: CancelToken,
    fn: Callable[..., T],
    args: tuple[object, ...],
) -> _Work:
    def job() -> None:
        try:
            outcome: tuple[bool, object] = (True, context.run(token.run, fn, *args))
        except BaseException as exc:
            outcome = (False, exc)
        try:
            loop.call_soon_threadsafe(_resolve, future, *outcome)
        except RuntimeError:
            pass  # the loop closed meanwhile: nobody can receive it (anyio PR #1303)

    return job


async def run_sync(
    fn: Callable[[Unpack[Ts]], T],
    /,
    *args: *Ts,
    limiter: Limiter | None = None,
    abandon_on_cancel: bool = False,
) -> T:
    """Run the blocking ``fn(*args)`` in a worker thread and await its result.

    - At most `limiter`'s capacity of calls run at once (default: `run_sync_limiter()`, a fair
      ``Semaphore(40)`` per event loop); the others wait in its FIFO.
    - `fn` runs in a copy of the caller's context (contextvars; changes do not flow back), and
      with a `CancelToken` as `CancelToken.current()`, cancelled when the awaiting task is.
    - Cancellation: by default the task keeps waiting for the thread (which can stop early by
      checking its token) and then raises `asyncio.CancelledError`: nothing the call does
      outlives the await (anyio's default). With ``abandon_on_cancel=True`` the cancellation
      propagates at once and the thread finishes on its own, its result discarded
      (`asyncio.to_thread`'s behaviour).

    Raises:
        Whatever `fn` raises; `asyncio.CancelledError` as above.

    Example:
        >>> import asyncio
        >>> async def main() -> int:
        ...     return await run_sync(sum, [1, 2, 3])
        >>> asyncio.run(main())
        6
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    slot: Limiter = run_sync_limiter() if limiter is None else limiter
    loop = asyncio.get_running_loop()
    async with slot:
        token = CancelToken()
        future: asyncio.Future[T] = loop.create_future()
        _workers.submit(_job(loop, future, contextvars.copy_context(), token, fn, args))
        if abandon_on_cancel:
            try:
                return await future
            except asyncio.CancelledError:
                token.cancel("the awaiting task was cancelled (abandoned)")
                raise
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            cancelled: asyncio.CancelledError | None = exc
        token.cancel("the awaiting task was cancelled")
        while not future.done():
            try:
                await asyncio.wait((future,))  # never raises the thread's exception
            except asyncio.CancelledError:
                pass  # cancelled again: still wait, then propagate the first one
        future.exception()  # retrieved: its outcome is superseded by the cancellation
        try:
            raise cancelled  # type: ignore[misc]
        finally:
            cancelled = None
