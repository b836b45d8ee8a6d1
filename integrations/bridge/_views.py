"""Blocking views for threads over a portal loop's aio primitives (semaphore, lock, channel,
select, task group)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine, Iterator
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Literal, Self, TypeVar, TypeVarTuple, Unpack, final

from executors import CancelToken, validate
from executors.aio import (
    Channel,
    GetResult,
    Lock,
    Operation,
    PersistentTaskGroup,
    Select,
    SelectResult,
    Semaphore,
    TaskGroup,
)

# The channels' waiter-agnostic entry points (documented in executors/aio/channels.py for the
# bridge) report outcomes with these module-level markers; they are part of the same private
# waiter protocol as executors.aio._waiters, the bridge rule's one sanctioned exception.
from executors.aio import channels as _channels_protocol
from executors.errors import ChannelClosed

from ._waiter import PortalFuture, ThreadWaiter

if TYPE_CHECKING:
    from ._portal import Portal

__all__ = (
    "BlockingSemaphore",
    "BlockingLock",
    "BlockingChannel",
    "BlockingTaskGroup",
    "select_blocking",
)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_NOTHING: Any = _channels_protocol._NOTHING
_SENT: Any = _channels_protocol._SENT
_CLOSED: Any = _channels_protocol._CLOSED
_ALL_CLOSED: Any = _channels_protocol._ALL_CLOSED


# -- semaphore and lock -----------------------------------------------------------------------


class _BlockingPermits:
    """The thread side of a Semaphore or Lock: acquire parks a ThreadWaiter in its FIFO."""

    __slots__ = ("_permits", "_portal")

    def __init__(self, portal: Portal, permits: Semaphore | Lock) -> None:
        self._portal = portal
        self._permits = permits

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        """Take a permit; True if taken. ``threading.Semaphore.acquire`` semantics.

        Blocking, the thread joins the primitive's FIFO behind every waiting task and thread
        and blocks (no polling). With `timeout` it gives up after that many seconds and returns
        False; a permit handed over at the same moment is kept (True), never lost. Non-blocking
        (``blocking=False`` or ``timeout=0``) it takes a permit only if nobody waits.

        Raises:
            ValueError: a timeout with ``blocking=False`` (as threading), or a negative one.
            RuntimeError: called from the loop's own thread.
            ShutdownError: the portal closed.
        """
        seconds = validate.timeout(timeout)
        if not blocking and timeout is not None:
            raise ValueError("can't specify a timeout for a non-blocking call")
        if not blocking or seconds == 0:
            _, taken = self._portal._blocking(self._try_acquire, None, self._hand_back_if_taken)
            return bool(taken)
        resolved, _ = self._portal._blocking(self._attempt, seconds, self._hand_back)
        return resolved

    def _try_acquire(self, waiter: ThreadWaiter) -> None:
        waiter.try_wake(self._permits._try_acquire())

    def _attempt(self, waiter: ThreadWaiter) -> None:
        permits = self._permits
        if permits._try_acquire():
            waiter.try_wake(True)
            return
        permits._park(waiter)  # may hand a permit over at once (try_wake inside)
        waiter.abort = partial(permits._leave, waiter)

    def _hand_back_if_taken(self, value: object) -> None:
        if value:
            self._permits.release()

    def _hand_back(self, value: object) -> None:
        # Interrupted after a permit was handed over: return it (to the next waiter).
        self._permits.release()

    def _release(self, waiter: ThreadWaiter) -> None:
        self._permits.release()
        waiter.try_wake(None)

    def release(self) -> None:
        """Return a permit, handing it to the longest waiter (task or thread).

        Waits for the loop to apply it, so an over-release raises here.

        Raises:
            ValueError: a BoundedSemaphore released too many times.
            RuntimeError: a Lock that is not acquired; or called from the loop's thread.
        """
        self._portal._blocking(self._release)

    def locked(self) -> bool:
        """Whether an acquire would wait now (a snapshot read from the thread)."""
        return self._permits.locked()

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # The permit was acquired by this block, so the release cannot fail: it is queued on
        # the loop without waiting for it (a later acquire by this thread is queued after it,
        # so it still lines up behind the waiters the release serves).
        self._portal._soon(self._permits.release)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._permits!r} via {self._portal!r}>"


@final
class BlockingSemaphore(_BlockingPermits):
    """A `threading.Semaphore`-style view of an `executors.aio.Semaphore`, for threads.

    Made by `Portal.semaphore`. Threads and tasks share one strict FIFO: a thread that
    releases and re-acquires queues behind the tasks and threads already waiting.
    """

    __slots__ = ()


@final
class BlockingLock(_BlockingPermits):
    """A `threading.Lock`-style view of an `executors.aio.Lock`, for threads.

    Made by `Portal.lock`. FIFO with direct hand-off, shared with the tasks using the lock.
    """

    __slots__ = ()


# -- channel ---------------------------------------------------------------------------------


@final
class BlockingChannel(Generic[T]):
    """A blocking view of an `executors.aio.Channel`, for threads. Made by `Portal.channel`.

    `send` and `get` park the thread in the channel's own sender/getter FIFOs, next to tasks,
    with the channel's guarantees (FIFO, exactly once, direct hand-off). A timeout that races a
    hand-off is decided by the waiter's lock: a value taken by a getter was sent (no
    `TimeoutError`), a value handed to a getter is received; otherwise nothing happened and
    nothing stays queued. Iterating gets values until the channel is closed and drained.
    """

    __slots__ = ("_channel", "_portal")

    def __init__(self, portal: Portal, channel: Channel[T]) -> None:
        self._portal = portal
        self._channel = channel

    @property
    def channel(self) -> Channel[T]:
        return self._channel

    def send(self, value: T, timeout: float | None = None) -> None:
        """Send `value`: wait until a getter takes it (unbuffered) or there is room.

        Raises:
            TimeoutError: not sent within `timeout` seconds (it never will be).
            ChannelClosed: the channel is closed, now or while waiting.
        """
        seconds = validate.timeout(timeout)
        resolved, payload = self._portal._blocking(partial(self._attempt_send, value), seconds)
        if not resolved:
            raise TimeoutError(f"send: not taken within {timeout} s (the value was not sent)")
        if payload is _CLOSED:
            raise ChannelClosed("channel closed while the send waited")

    def _attempt_send(self, value: T, waiter: ThreadWaiter) -> None:
        channel = self._channel
        if channel._closed:
            waiter.try_fail(ChannelClosed("send on a closed channel"))
        elif channel._offer(value):
            waiter.try_wake(_SENT)
        else:
            reg = channel._park(waiter, channel._senders, value)
            waiter.abort = partial(channel._leave_send, reg, _NOTHING)

    def get(self, timeout: float | None = None) -> T:
        """Get the next value, waiting for one.

        Raises:
            TimeoutError: no value within `timeout` seconds (none was taken).
            ChannelClosed: the channel is closed and drained.
        """
        seconds = validate.timeout(timeout)
        resolved, payload = self._portal._blocking(self._attempt_get, seconds, self._put_back)
        if not resolved:
            raise TimeoutError(f"get: no value within {timeout} s")
        if payload is _CLOSED:
            raise ChannelClosed("get on a closed and drained channel")
        return payload  # type: ignore[return-value]

    def _attempt_get(self, waiter: ThreadWaiter) -> None:
        channel = self._channel
        value = channel._take()
        if value is not _NOTHING:
            waiter.try_wake(value)
        elif channel._closed and not channel._in_flight:
            waiter.try_fail(ChannelClosed("get on a closed and drained channel"))
        else:
            # Open, or closed with a value in flight to a task that may yet hand it back: park
            # (the channel wakes its getters with ChannelClosed once nothing is in flight).
            reg = channel._park(waiter, channel._getters, None)
            waiter.abort = partial(channel._leave_get, reg, _NOTHING)

    def _put_back(self, value: object) -> None:
        if value is not _CLOSED:
            self._channel._put_back(value)  # type: ignore[arg-type]

    def _run(
        self, fn: Callable[[], object], hand_back: Callable[[object], object] | None = None
    ) -> object:
        def attempt(waiter: ThreadWaiter) -> None:
            waiter.try_wake(fn())

        return self._portal._blocking(attempt, None, hand_back)[1]

    def send_nowait(self, value: T) -> None:
        """Send `value` if that completes at once (a getter waits, or the buffer has room).

        Raises:
            WouldBlock: it would have to wait. ChannelClosed: the channel is closed.
        """
        self._run(partial(self._channel.send_nowait, value))

    def get_nowait(self) -> T:
        """Get a value if one is available at once.

        Raises:
            WouldBlock: none is available now. ChannelClosed: closed and drained.
        """
        return self._run(self._channel.get_nowait, self._put_back)  # type: ignore[return-value]

    def close(self) -> None:
        """Close the channel (from the send side), as `Channel.close`.

        Raises:
            ChannelClosed: already closed.
        """
        self._run(self._channel.close)

    def __iter__(self) -> Iterator[T]:
        """``for v in view:`` gets values until the channel is closed and drained."""
        while True:
            try:
                yield self.get()
            except ChannelClosed:
                return

    def __repr__(self) -> str:
        return f"<BlockingChannel of {self._channel!r} via {self._portal!r}>"


# -- select ----------------------------------------------------------------------------------


def select_blocking(
    portal: Portal, operations: tuple[Operation, ...], timeout: float | None, ordered: bool
) -> SelectResult:
    """`Portal.select`: park one ThreadWaiter on every channel of `operations`."""
    seconds = validate.timeout(timeout)
    select = Select(*operations, ordered=ordered)

    def attempt(waiter: ThreadWaiter) -> None:
        result = select._poll()
        if result is not None:
            waiter.try_wake(result)
            return
        regs = select._park(waiter)
        waiter.abort = partial(Select._leave, regs, _NOTHING)

    resolved, payload = portal._blocking(attempt, seconds, _hand_back_select)
    if not resolved:
        raise TimeoutError(f"select: nothing completed within {timeout} s")
    if payload is _ALL_CLOSED:
        raise ChannelClosed(
            "select: every operation is ignore_on_closed and its channel is closed; "
            "it can never complete"
        )
    return payload  # type: ignore[return-value]


def _hand_back_select(value: object) -> None:
    # Interrupted after a Get case received: pass the value on (a completed Send stays sent).
    if isinstance(value, GetResult):
        value.channel._put_back(value.value)


# -- task group ------------------------------------------------------------------------------


class _BodyRaised(Exception):
    """Raised inside the group when the thread's block raised: aborts the group's tasks."""


@final
class BlockingTaskGroup:
    """A task group on a portal's loop, driven from a thread. Made by `Portal.task_group`.

    ``with portal.task_group() as tg:`` enters an `executors.aio.TaskGroup` (or, with
    ``persistent=True``, a `PersistentTaskGroup`) in a host task on the loop; `create_task`
    starts children in it. Leaving the block waits for every child; if the block raised (or
    Ctrl-C arrived), the children are cancelled first. Errors: for a TaskGroup, every child
    error and the block's own exception are raised in the thread as an `ExceptionGroup`
    (`KeyboardInterrupt` and `SystemExit` bare); for a PersistentTaskGroup, failures go to its
    exception handler as they happen.

    `token` is cancelled when the group aborts (the first failure of a TaskGroup), so the
    thread's block can stop cooperatively; `create_task` then fails.
    """

    __slots__ = ("_group", "_handler", "_host", "_name", "_persistent", "_portal", "_release",
                 "_state", "token")

    def __init__(
        self,
        portal: Portal,
        persistent: bool,
        name: str | None,
        exception_handler: Callable[[BaseException, asyncio.Task[object]], object] | None,
    ) -> None:
        self._portal = portal
        self._persistent = persistent
        self._name = name
        self._handler = exception_handler
        self._state = "idle"
        self._group: TaskGroup | PersistentTaskGroup | None = None
        self._release: asyncio.Future[bool] | None = None
        self._host: PortalFuture[None] | None = None
        self.token = CancelToken()

    def __repr__(self) -> str:
        kind = "persistent" if self._persistent else "strict"
        return f"<BlockingTaskGroup {kind} {self._state} group={self._group!r}>"

    async def _main(self, entered: ThreadWaiter) -> None:
        if self._persistent:
            group: TaskGroup | PersistentTaskGroup = PersistentTaskGroup(
                name=self._name, exception_handler=self._handler)  # type: ignore[arg-type]
        else:
            group = TaskGroup()
        release: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        try:
            async with group:
                self._group = group
                self._release = release
                entered.try_wake(None)
                if await release:
                    raise _BodyRaised
        finally:
            self.token.cancel("the task group finished")

    def __enter__(self) -> Self:
        if self._state != "idle":
            raise RuntimeError(f"{self!r} has already been entered")
        portal = self._portal
        entered = ThreadWaiter()
        host: PortalFuture[None] = portal._submit_task(self._main, (entered,), self._name, None)
        portal._pending.add(entered)  # failed by the portal's shutdown sweep like any wait
        self._host = host
        # If the host ends before entering (portal closing, say), the thread must not hang.
        host.add_done_callback(
            lambda f: entered.try_fail(RuntimeError("the task group's host task ended")))
        portal._wait(entered)
        entered.outcome()
        self._state = "open"
        return self

    def create_task(
        self,
        fn: Callable[[Unpack[Ts]], Coroutine[Any, Any, T]],
        /,
        *args: *Ts,
        name: str | None = None,
    ) -> PortalFuture[T]:
        """Start ``fn(*args)`` as a task of the group (in a copy of the caller's context).

        Returns its `PortalFuture` (cancel() cancels the task and waits for its cleanup). The
        future fails with `RuntimeError` if the group is already finishing (after a failure).

        Raises:
            RuntimeError: the block has not been entered or has exited.
        """
        if self._state != "open":
            raise RuntimeError(f"{self!r} is not open: create tasks inside the with block")
        return self._portal._submit_task(fn, args, name, self._spawn)

    def _spawn(
        self, coro: Coroutine[Any, Any, T], name: str | None, context: contextvars.Context
    ) -> asyncio.Task[T]:
        group = self._group
        assert group is not None
        return group.create_task(coro, name=name, context=context)

    def _set_release(self, aborted: bool) -> None:
        release = self._release
        if release is not None and not release.done():
            release.set_result(aborted)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]:
        host = self._host
        assert host is not None
        self._state = "exiting"
        self._portal._soon(self._set_release, exc is not None)
        interrupt: KeyboardInterrupt | None = None
        try:
            error = host.exception()
        except KeyboardInterrupt as caught:
            # Ctrl-C while waiting: cancel the group (its tasks clean up), wait once more.
            interrupt = caught
            host.cancel()
            error = host.exception() if not host.cancelled() else None
        except BaseException as caught:  # the portal closed under us, say
            error = caught
        self._state = "closed"
        try:
            if interrupt is not None:
                raise interrupt
            if isinstance(error, BaseExceptionGroup):
                _, rest = error.split(_BodyRaised)
                errors: list[BaseException] = list(rest.exceptions) if rest else []
            elif error is None or isinstance(error, _BodyRaised):
                errors = []
            else:
                raise error  # KeyboardInterrupt/SystemExit from a task, ShutdownError
            if not errors or (exc is not None and not isinstance(exc, Exception)):
                return False  # the block's own exception (if any) propagates bare
            if exc is not None:
                errors.insert(0, exc)
            raise BaseExceptionGroup("unhandled errors in a TaskGroup", errors)
        finally:
            error = exc = interrupt = None
