"""Go-style channels (rendezvous or buffered) and a `select` that completes exactly one case."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
import random
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final, Generic, TypeVar, final

from executors.errors import ChannelClosed, WouldBlock

from ._atomic import atomic
from ._cancel import defer_cancel
from ._waiters import TaskWaiter, Waiter, WaiterQueue, bind_loop

_Future: Final = asyncio.Future

__all__ = (
    "Channel",
    "ChannelStatistics",
    "Operation",
    "Send",
    "Get",
    "Select",
    "select",
    "SendResult",
    "GetResult",
    "Closed",
    "SelectResult",
)

# Design (the "host" model, see executors/aio/_waiters.py):
#
# - A channel holds a buffer (deque, capacity `size`, 0 = rendezvous) and two FIFOs of
#   *registrations*: parked senders and parked getters. A registration points to a `Waiter`
#   (a task's future today, a thread waiter through the bridge later); `Waiter.try_wake` is the
#   single linearization point of every hand-off.
# - Only a *newcomer* (an operation that is running, never a parked one) matches a registration,
#   and it does so by direct hand-off, as Go's chan.go and trio do: asyncio.Queue's
#   wake-then-recheck lets a newcomer take an item meant for a parked getter.
# - A parked select registers one shared waiter on every channel it involves. The first
#   counterpart whose try_wake succeeds claims it, and in the same atomic step removes the
#   select's other registrations (Go's selectgo pass 3, done by the winner). A registration whose
#   waiter is gone (claimed elsewhere, cancelled, timed out) fails try_wake and is dropped.
# - Invariants kept by every atomic section (checked by the stateful test):
#     a live parked getter  => the buffer is empty and no live sender is parked
#                              (except one select parked with a Send and a Get on this channel);
#     a live parked sender  => len(buffer) >= size.
#   A value handed back by a cancelled getter goes to the next getter, or to the head of the
#   buffer, which may then hold more than `size` values for a while (never refused: the send that
#   produced it has already returned, so it must be received).
# - "Closed and drained" is final: once a get has reported it, no value appears any more. So a
#   closed channel is drained only when its buffer is empty *and* no value is in flight to a
#   task that has not resumed yet (`_in_flight`): that task may still be cancelled and hand the
#   value back. Until then getters park (and close() leaves parked getters parked); the last
#   in-flight value to resolve wakes them with ChannelClosed (`_received`).
#
# For other kinds of waiters (the bridge's thread waiters), the task paths below are the model:
# on the loop thread, try `_take`/`_offer` (or `Select._poll`); else park with `Channel._park`
# (or `Select._park`) and a `Waiter`; a waiter that gives up calls `_leave_get`/`_leave_send`
# (or `Select._leave`) with what it received, `_NOTHING` if its try_wake never succeeded. A
# waiter whose try_wake success completes the hand-off (resumes_on_loop False) never gives up
# after receiving, so nothing is handed back for it.

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class _Nothing(enum.Enum):
    NOTHING = "nothing"  # no value available now


class _Marker(enum.Enum):
    SENT = "sent"  # payload for a plain parked sender whose value was taken
    CLOSED = "closed"  # payload for a plain parked operation woken by close()
    ALL_CLOSED = "all closed"  # payload for a select whose every operation is ignored-and-closed


_NOTHING: Final = _Nothing.NOTHING
_SENT = _Marker.SENT
_CLOSED = _Marker.CLOSED
_ALL_CLOSED = _Marker.ALL_CLOSED


# --------------------------------------------------------------------------------------------
# Channels implemented elsewhere


class ForeignChannel(Generic[T]):
    """The base class of channels defined outside `executors.aio` that `select` accepts.

    `executors.aio` stays loop-only: it knows nothing of threads. A channel kept elsewhere (the
    bridge's `SharedChannel`, whose state lives behind its own mutex) subclasses this and
    implements the two hooks below; `Send`/`Get` accept it, and a `Select` with at least one
    case on such a channel hands the whole call to the hooks of that case's channel class, which
    must handle loop-only `Channel` cases beside their own (this module's registration and poll
    sections are the model). A select without such a case never reaches them.
    """

    __slots__ = ()

    @classmethod
    async def _foreign_select(cls, select: Select) -> SelectResult:
        """`Select.select()` for a select with a case on a channel of this class."""
        raise NotImplementedError

    @classmethod
    def _foreign_select_nowait(cls, select: Select) -> SelectResult:
        """`Select.select_nowait()` for a select with a case on a channel of this class."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------
# Operations and results


class Operation:
    """The base class of `Send` and `Get`: one case of a `Select`.

    It is not generic, so a `Select` takes cases over channels of different value types, and a
    list of cases can be typed ``list[Operation]``. Not meant to be subclassed outside this
    module.
    """

    __slots__ = ()


@final
class Send(Operation, Generic[T_co]):
    """A send of `value` on `channel`, as one case of a `Select`.

    The value is fixed when the operation is built (Go evaluates a send case's value once per
    select entry; a reusable `Select` keeps its operations, so build a new `Send` to send another
    value). Operations compare by identity: a result names the very object that fired.

    With ``ignore_on_closed=True`` the operation is never chosen once its channel is closed
    (Go's nil-channel idiom); otherwise a closed channel makes it ready, reporting `Closed`.

    Raises:
        TypeError: `channel` is not a `Channel`, or `ignore_on_closed` is not a bool.

    Example:
        >>> ch: Channel[int] = Channel(1)
        >>> op = Send(ch, 7)
        >>> Select(op).select_nowait() == SendResult(ch, op)
        True
    """

    __slots__ = ("_channel", "_ignore_on_closed", "_value")

    def __init__(
        self, channel: Channel[T_co] | ForeignChannel[T_co], value: T_co,
        ignore_on_closed: bool = False,
    ) -> None:
        if not isinstance(channel, (Channel, ForeignChannel)):
            raise TypeError(f"Send: channel must be a Channel, got {type(channel).__name__}")
        if not isinstance(ignore_on_closed, bool):
            raise TypeError("Send: ignore_on_closed must be a bool")
        # Typed as a Channel for the loop-only sections; a ForeignChannel never reaches them.
        self._channel: Channel[T_co] = channel  # type: ignore[assignment]
        self._value = value
        self._ignore_on_closed = ignore_on_closed

    @property
    def channel(self) -> Channel[T_co]:
        return self._channel

    @property
    def value(self) -> T_co:
        return self._value

    @property
    def ignore_on_closed(self) -> bool:
        return self._ignore_on_closed

    def __repr__(self) -> str:
        extra = " ignore_on_closed" if self._ignore_on_closed else ""
        return f"<Send {self._value!r} on {self._channel!r}{extra}>"


@final
class Get(Operation, Generic[T_co]):
    """A get from `channel`, as one case of a `Select`.

    With ``ignore_on_closed=True`` the operation is never chosen once its channel is closed and
    drained; otherwise a closed, drained channel makes it ready, reporting `Closed`.

    Raises:
        TypeError: `channel` is not a `Channel`, or `ignore_on_closed` is not a bool.

    Example:
        >>> ch: Channel[int] = Channel(1)
        >>> ch.send_nowait(3)
        >>> Select(Get(ch)).select_nowait().value
        3
    """

    __slots__ = ("_channel", "_ignore_on_closed")

    def __init__(
        self, channel: Channel[T_co] | ForeignChannel[T_co], ignore_on_closed: bool = False
    ) -> None:
        if not isinstance(channel, (Channel, ForeignChannel)):
            raise TypeError(f"Get: channel must be a Channel, got {type(channel).__name__}")
        if not isinstance(ignore_on_closed, bool):
            raise TypeError("Get: ignore_on_closed must be a bool")
        # Typed as a Channel for the loop-only sections; a ForeignChannel never reaches them.
        self._channel: Channel[T_co] = channel  # type: ignore[assignment]
        self._ignore_on_closed = ignore_on_closed

    @property
    def channel(self) -> Channel[T_co]:
        return self._channel

    @property
    def ignore_on_closed(self) -> bool:
        return self._ignore_on_closed

    def __repr__(self) -> str:
        extra = " ignore_on_closed" if self._ignore_on_closed else ""
        return f"<Get on {self._channel!r}{extra}>"


@final
@dataclasses.dataclass(frozen=True, slots=True)
class SendResult(Generic[T_co]):
    """The select completed `operation`: its value was taken by a getter or entered the buffer."""

    #: The channel the value was sent on (the operation's channel).
    channel: Channel[T_co]
    #: The very `Send` object of the select that completed (compare with ``is``).
    operation: Send[T_co]


@final
@dataclasses.dataclass(frozen=True, slots=True)
class GetResult(Generic[T_co]):
    """The select completed `operation`, receiving `value`."""

    #: The channel the value was received from (the operation's channel).
    channel: Channel[T_co]
    #: The very `Get` object of the select that completed (compare with ``is``).
    operation: Get[T_co]
    #: The value received.
    value: T_co


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Closed(Generic[T_co]):
    """`operation` was chosen because its channel is closed (a Get: closed and drained).

    Nothing was sent or received.
    """

    #: The closed channel (the operation's channel).
    channel: Channel[T_co]
    #: The very `Send` or `Get` object of the select that was chosen (compare with ``is``).
    operation: Send[T_co] | Get[T_co]


#: What `Select.select()` returns: exactly one completed operation.
SelectResult = SendResult[object] | GetResult[object] | Closed[object]

# What a Select holds: every Operation is a Send or a Get (Operation is not subclassed).
_Op = Send[object] | Get[object]

# Up to this many cases, a Select caches all permutations of its cases (4! = 24 tuples).
_MAX_CACHED_PERMUTATIONS_OF = 4


# --------------------------------------------------------------------------------------------
# Registrations


@final
class _Registration:
    """One parked operation in one channel queue. Hashable by identity (WaiterQueue keys).

    Its `waiter` is a `Waiter`, or, for a task's plain `Channel.send`/`Channel.get`, the task's
    bare `asyncio.Future` (the hot path's cheaper form, as `aio.locks` parks its tasks): the
    claims recognise it by its exact type and treat it as a `TaskWaiter` around it would.
    """

    __slots__ = ("channel", "group", "op", "queue", "value", "waiter")

    def __init__(
        self,
        waiter: Waiter | asyncio.Future[object],
        channel: Channel[object],
        queue: WaiterQueue[_Registration],
        op: _Op | None,
        value: object,
    ) -> None:
        self.waiter = waiter
        self.channel = channel
        self.queue = queue
        self.op = op  # None for a plain send/get; the select case otherwise
        self.value = value  # the value of a parked send
        # The select's registrations (all sharing `waiter`); None for a plain operation.
        self.group: tuple[_Registration, ...] | None = None

    @atomic
    def claim(self, payload: object) -> bool:
        """try_wake the waiter with `payload`; on success drop the select's other registrations."""
        waiter = self.waiter
        if type(waiter) is _Future:  # a plain task's bare future: TaskWaiter.try_wake inlined
            if waiter.done():
                return False
            waiter.set_result(payload)
        elif not waiter.try_wake(payload):  # type: ignore[union-attr]
            return False
        group = self.group
        if group is not None:
            # Go's selectgo "pass 3", done by the winner in the same atomic step, so no channel
            # keeps a registration of a select that has completed ("otherwise they stack up on
            # quiet channels", runtime/select.go).
            for other in group:
                if other is not self:
                    other.queue.discard(other)
        return True

    @atomic
    def claim_sent(self) -> bool:
        op = self.op
        if op is None:  # a plain send: no group to clean, so straight to the waiter
            waiter = self.waiter
            if type(waiter) is not _Future:
                return waiter.try_wake(_SENT)  # type: ignore[union-attr]
            if waiter.done():  # a task's bare future: TaskWaiter.try_wake inlined (hot path)
                return False
            waiter.set_result(_SENT)
            return True
        assert isinstance(op, Send)
        return self.claim(SendResult(self.channel, op))

    @atomic
    def claim_value(self, value: object) -> bool:
        op = self.op
        if op is None:  # a plain get: no group to clean, so straight to the waiter
            waiter = self.waiter
            if type(waiter) is _Future:  # a task's bare future (the hot path): inlined
                if waiter.done():
                    return False
                waiter.set_result(value)
                self.channel._in_flight += 1  # see below
                return True
            claimed = waiter.try_wake(value)  # type: ignore[union-attr]
        else:
            assert isinstance(op, Get)
            claimed = self.claim(GetResult(self.channel, op, value))
        if claimed and self.resumes_on_loop:
            # In flight until the task resumes with it or hands it back: till then the
            # channel is not drained, even if closed (see Channel._received).
            self.channel._in_flight += 1
        return claimed

    @atomic
    def claim_closed(self) -> None:
        op = self.op
        if op is None:
            self.claim(_CLOSED)
        elif not op.ignore_on_closed:
            self.claim(Closed(self.channel, op))
        else:
            # An ignored case of a closed channel can never fire (Go's nil channel); it is
            # dropped. If every case of the select is now an ignored case of a closed channel,
            # the select can never complete: wake it to raise ChannelClosed rather than hang.
            # (A case that is not ignored, on this or another closed channel, is claimed with
            # Closed by its own channel's close(), possibly later in this same call.)
            assert self.group is not None
            if all(reg.op is not None and reg.op.ignore_on_closed and reg.channel._closed
                   and (isinstance(reg.op, Send) or not reg.channel._in_flight)
                   for reg in self.group):
                self.claim(_ALL_CLOSED)

    @property
    def resumes_on_loop(self) -> bool:
        """The waiter's `Waiter.resumes_on_loop` (True for a task's bare future)."""
        waiter = self.waiter
        return type(waiter) is _Future or waiter.resumes_on_loop  # type: ignore[union-attr]

    @property
    def waiting(self) -> bool:
        """The waiter's `Waiter.waiting` (a bare future: not done)."""
        waiter = self.waiter
        if type(waiter) is _Future:
            return not waiter.done()
        return waiter.waiting  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"<_Registration op={self.op!r} waiter={self.waiter!r}>"


# --------------------------------------------------------------------------------------------
# Channel


@final
@dataclasses.dataclass(frozen=True, slots=True)
class ChannelStatistics:
    """A snapshot of a `Channel`.

    A parked select counts once in each queue of each channel it waits on.
    """

    #: The buffer's capacity (``Channel(size)``); 0 for an unbuffered channel (a rendezvous).
    size: int
    #: Values in the buffer now, sent and not yet received.
    buffered: int
    #: True once `Channel.close` was called (buffered values can still be received).
    closed: bool
    #: Senders parked until a getter or buffer room takes their value (selects with a send
    #: case on this channel included).
    waiting_senders: int
    #: Getters parked until a value arrives (selects with a get case on this channel included).
    waiting_getters: int


@final
class Channel(Generic[T]):
    """A FIFO channel between tasks, unbuffered (``size=0``, a rendezvous) or buffered.

    Guarantees:

    - Values are received in the order they were sent, exactly once.
    - With ``size=0`` a `send` completes only when a getter has taken the value; with ``size=n``
      it completes once the value is in the buffer or taken.
    - Parked senders and getters are served first come, first served, by direct hand-off: a
      newcomer's `send_nowait`/`get_nowait` never takes a value or a buffer slot that belongs to
      a parked waiter.
    - Cancellation loses nothing. A getter cancelled after a value was handed to it passes the
      value on (to the next getter, or back to the head of the buffer). A sender cancelled after
      its value was taken returns normally, and the cancellation reaches its next await if it
      is still requested then (a timeout that withdrew it leaves nothing; a task that ends at
      once ends with its result: never both cancelled and sent); one cancelled before that
      raises `asyncio.CancelledError` and its value is never received.
    - `close()` (from the send side): parked senders and later sends raise `ChannelClosed`;
      buffered values are still delivered, then every get raises `ChannelClosed`. "Closed and
      drained" is final: while a value handed to a getter task is in flight (that task has not
      resumed yet, so a cancellation could still make it hand the value back), the channel is
      not drained and getters wait; once a get has raised `ChannelClosed`, no value is left.

    A channel belongs to one event loop at a time (all its state changes run on that loop's
    thread, in plain functions with no await).

    Args:
        size: the buffer capacity, an int >= 0.

    Raises:
        TypeError: `size` is not an int.
        ValueError: `size` is negative.

    Example:
        >>> import asyncio
        >>> async def main() -> list[int]:
        ...     ch: Channel[int] = Channel()
        ...     async def produce() -> None:
        ...         for i in range(3):
        ...             await ch.send(i)
        ...         ch.close()
        ...     async with asyncio.TaskGroup() as tg:
        ...         tg.create_task(produce())
        ...         return [v async for v in ch]
        >>> asyncio.run(main())
        [0, 1, 2]
    """

    __slots__ = ("__weakref__", "_buffer", "_closed", "_getters", "_in_flight", "_loop",
                 "_senders", "_size")

    def __init__(self, size: int = 0) -> None:
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"Channel: size must be an int >= 0, got {type(size).__name__}")
        if size < 0:
            raise ValueError(f"Channel: size must be an int >= 0, got {size}")
        self._size = size
        self._buffer: deque[T] = deque()
        self._closed = False
        # Values handed to parked tasks (plain getters or select Get cases) that have not
        # resumed yet: a cancelled one hands its value back (see the module comment).
        self._in_flight = 0
        self._senders: WaiterQueue[_Registration] = WaiterQueue()
        self._getters: WaiterQueue[_Registration] = WaiterQueue()
        # The loop of the parties parked here, checked on the parking path only (see _bind).
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- introspection ----------------------------------------------------------------------

    @property
    def size(self) -> int:
        """The buffer capacity (0: unbuffered)."""
        return self._size

    @property
    def closed(self) -> bool:
        """True once `close()` was called (values may still be buffered)."""
        return self._closed

    def __len__(self) -> int:
        """The number of buffered values."""
        return len(self._buffer)

    def statistics(self) -> ChannelStatistics:
        return ChannelStatistics(
            size=self._size,
            buffered=len(self._buffer),
            closed=self._closed,
            waiting_senders=len(self._senders),
            waiting_getters=len(self._getters),
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<Channel size={self._size} buffered={len(self._buffer)} "
            f"senders={len(self._senders)} getters={len(self._getters)} {state}>"
        )

    # -- atomic sections (plain functions, no await) -----------------------------------------

    @atomic
    def _take(self) -> T | _Nothing:
        """Take the next value (buffer head, else a parked sender's), or NOTHING."""
        buffer = self._buffer
        senders = self._senders
        parked = senders.live  # the queue's own set: a truth test without a method call
        if buffer:
            value = buffer.popleft()
            # A slot opened: the first parked sender's value moves into the tail (chan.go recv()),
            # so FIFO order holds with no wake-and-retry.
            while parked and len(buffer) < self._size:
                reg = senders.popleft()
                if reg.claim_sent():
                    buffer.append(reg.value)  # type: ignore[arg-type]
            return value
        while parked:
            reg = senders.popleft()
            if reg.claim_sent():
                return reg.value  # type: ignore[return-value]
        return _NOTHING

    @atomic
    def _offer(self, value: T) -> bool:
        """Hand `value` to the first live parked getter, else buffer it if there is room."""
        getters = self._getters
        parked = getters.live  # the queue's own set: a truth test without a method call
        while parked:
            if getters.popleft().claim_value(value):
                return True
        # No live sender is parked while there is room (invariant), so this slot is nobody's.
        if len(self._buffer) < self._size:
            self._buffer.append(value)
            return True
        return False

    @atomic
    def _put_back(self, value: T) -> None:
        """A value handed to a getter that gave up: pass it on, never drop it (anyio#146)."""
        getters = self._getters
        while getters:
            if getters.popleft().claim_value(value):
                return
        self._buffer.appendleft(value)

    @atomic
    def _received(self) -> None:
        """A task handed a value resumed with it (or handed it back): it is no longer in flight.

        If that was the last value in flight of a closed, empty channel, the channel is now
        drained: the getters that parked meanwhile are woken with ChannelClosed.
        """
        self._in_flight -= 1
        if not self._in_flight and self._closed and not self._buffer:
            getters = self._getters
            while getters:
                getters.popleft().claim_closed()

    @atomic
    def _bind(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Before parking: refuse a party of another loop while parties of the bound one are
        parked or have a value in flight (a silent hang otherwise; see `bind_loop`). `loop` is
        the parking party's running loop, when the caller has it at hand."""
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # parked from outside any running loop: nothing to compare
                return
        if loop is not self._loop:
            busy = bool(self._getters or self._senders or self._in_flight)
            self._loop = bind_loop(self, self._loop, loop, busy, "SharedChannel")

    @atomic
    def _park(self, waiter: Waiter, queue: WaiterQueue[_Registration], value: object,
              loop: asyncio.AbstractEventLoop | None = None) -> _Registration:
        # A task passes its loop (it made its future on it): parking on a channel already
        # bound to that loop then costs one identity test, not a `get_running_loop()` call.
        if loop is None or loop is not self._loop:
            self._bind(loop)
        reg = _Registration(waiter, self, queue, None, value)  # type: ignore[arg-type]
        queue.append(reg)
        return reg

    @atomic
    def _leave_get(self, reg: _Registration, received: object) -> None:
        """A parked getter gives up; `received` is what its waiter got (NOTHING if nothing)."""
        if received is _NOTHING:
            reg.queue.discard(reg)
        elif received is not _CLOSED:
            self._put_back(received)  # type: ignore[arg-type]
            if reg.resumes_on_loop:
                self._received()

    @atomic
    def _leave_send(self, reg: _Registration, received: object) -> bool:
        """A parked sender gives up; True if its value was already taken (the send happened)."""
        if received is _NOTHING:
            reg.queue.discard(reg)
            return False
        return received is _SENT

    # -- public API --------------------------------------------------------------------------

    @atomic
    def send_nowait(self, value: T) -> None:
        """Send `value` if that completes at once: a getter is parked, or the buffer has room.

        Raises:
            ChannelClosed: the channel is closed.
            WouldBlock: no getter is parked and the buffer is full (or the channel unbuffered).
        """
        if self._closed:
            raise ChannelClosed("send on a closed channel")
        if not self._offer(value):
            raise WouldBlock("channel full: no getter is waiting and the buffer has no room")

    @atomic
    def get_nowait(self) -> T:
        """Get a value if one is available at once (buffered, or from a parked sender).

        Raises:
            ChannelClosed: the channel is closed and drained.
            WouldBlock: nothing is available now (also on a closed channel while a value handed
                to a getter task is in flight: it may yet be handed back).
        """
        value = self._take()
        if value is not _NOTHING:
            return value
        if self._closed and not self._in_flight:
            raise ChannelClosed("get on a closed and drained channel")
        raise WouldBlock("channel empty: no value is buffered and no sender is waiting")

    async def send(self, value: T) -> None:
        """Send `value`, waiting until a getter takes it (``size=0``) or there is room.

        Cancellation: raising `asyncio.CancelledError` means the value was not sent. One that
        arrives after the value was taken cannot undo the send: the send returns normally, and
        the cancellation is requested again when the task next yields, if the task is still
        counted as cancelling then (an `asyncio.timeout` that expired and withdrew its request
        leaves nothing behind; a task that ends at once ends with its result).

        Raises:
            ChannelClosed: the channel is closed, now or while waiting.
        """
        if self._closed:
            raise ChannelClosed("send on a closed channel")
        # `_offer` inlined (the hot path): a parked getter takes it, else the buffer if it has
        # room. `live` is the queue's own set: a truth test without a method call.
        getters = self._getters
        parked = getters.live
        while parked:
            if getters.popleft().claim_value(value):
                return
        if len(self._buffer) < self._size:
            self._buffer.append(value)
            return
        # `_park` inlined, for the task's bare future (see _Registration), made by
        # asyncio.Future() rather than loop.create_future(): three Python calls less.
        future: asyncio.Future[object] = _Future()
        loop = future.get_loop()
        if loop is not self._loop:
            self._bind(loop)
        reg = _Registration(future, self, self._senders, None, value)  # type: ignore[arg-type]
        self._senders.append(reg)
        try:
            payload = await future
        except asyncio.CancelledError as exc:
            received = future.result() if future.done() and not future.cancelled() else _NOTHING
            if self._leave_send(reg, received):
                defer_cancel(exc)
                return
            raise
        if payload is _CLOSED:
            raise ChannelClosed("channel closed while the send waited")

    async def get(self) -> T:
        """Get the next value, waiting for one.

        Cancellation: raising `asyncio.CancelledError` means no value was taken; a value handed
        to this getter just before it was cancelled is passed on to the next getter (one that
        is waiting on a closed channel for that very value included).

        Raises:
            ChannelClosed: the channel is closed and drained (no value buffered or in flight).
        """
        if self._buffer:
            return self._take()  # type: ignore[return-value]  # the buffer head
        # `_take`'s unbuffered half inlined (the hot path): the first live parked sender's value.
        senders = self._senders
        parked = senders.live  # the queue's own set: a truth test without a method call
        while parked:
            reg = senders.popleft()
            if reg.claim_sent():
                return reg.value  # type: ignore[return-value]
        if self._closed and not self._in_flight:
            raise ChannelClosed("get on a closed and drained channel")
        # `_park` inlined, for the task's bare future (see _Registration), made by
        # asyncio.Future() rather than loop.create_future(): three Python calls less.
        future: asyncio.Future[object] = _Future()
        loop = future.get_loop()
        if loop is not self._loop:
            self._bind(loop)
        reg = _Registration(future, self, self._getters, None, None)  # type: ignore[arg-type]
        self._getters.append(reg)
        try:
            payload = await future
        except asyncio.CancelledError:
            received = future.result() if future.done() and not future.cancelled() else _NOTHING
            self._leave_get(reg, received)
            raise
        if payload is _CLOSED:
            raise ChannelClosed("get on a closed and drained channel")
        if self._closed:
            self._received()  # the last value in flight may leave the channel drained
        else:
            self._in_flight -= 1  # `_received` for an open channel, inlined (the hot path)
        return payload  # type: ignore[return-value]

    @atomic
    def close(self) -> None:
        """Close the channel from the send side.

        Every parked sender raises `ChannelClosed` (its value is not sent); buffered values stay
        and are delivered; every parked getter (the buffer is empty if any is parked) raises
        `ChannelClosed`; a parked select wakes with `Closed` for a case on this channel, unless
        that case is ``ignore_on_closed``. Exception: while a value handed to a getter task is
        in flight (the task has not resumed, and may yet be cancelled and hand it back), the
        channel is not drained: getters keep waiting, and are woken with `ChannelClosed` once
        the value is received (or get it, if it is handed back).

        Raises:
            ChannelClosed: the channel is already closed (a double close is a bug, as in Go).
        """
        if self._closed:
            raise ChannelClosed("close of a closed channel")
        self._closed = True
        queues = (self._senders,) if self._in_flight else (self._getters, self._senders)
        for queue in queues:
            while queue:
                queue.popleft().claim_closed()

    def __aiter__(self) -> Channel[T]:
        return self

    async def __anext__(self) -> T:
        """``async for v in ch`` gets values until the channel is closed and drained."""
        try:
            return await self.get()
        except ChannelClosed:
            raise StopAsyncIteration from None


# --------------------------------------------------------------------------------------------
# Select


@final
class Select:
    """A set of `Send`/`Get` operations of which `select()` completes exactly one.

    - If several operations are ready, one is chosen uniformly at random (Go), or the first in
      the order they were added with ``ordered=True``.
    - Otherwise the select parks on every channel involved; the first counterpart to arrive
      completes exactly one operation and the select's other registrations are removed in the
      same atomic step. A select never pairs its own `Send` with its own `Get`.
    - A `Get` on a closed, drained channel and a `Send` on a closed channel are ready and report
      `Closed`, unless built with ``ignore_on_closed=True``: then they are never chosen.
    - Cancellation loses nothing and leaves no registration on any channel (as for
      `Channel.get` and `Channel.send`: a completed `Send` returns its result and the
      cancellation is deferred to the next await, if still requested then).

    Decisions where Go would block forever: a select with no operations raises `ValueError`; a
    select whose every operation is ``ignore_on_closed`` on a closed channel raises
    `ChannelClosed` (at once, or when the last of its channels closes), which ends a
    ``while True`` merge loop cleanly instead of hanging it.

    The operations can be changed between calls with `add` and `remove`; a call already parked
    keeps the operations it started with.

    Raises:
        TypeError: an argument is not a `Send` or `Get`.
        ValueError: the same operation object is given twice.

    Example:
        >>> import asyncio
        >>> async def main() -> str:
        ...     a: Channel[str] = Channel(1)
        ...     b: Channel[str] = Channel(1)
        ...     a.send_nowait("from a")
        ...     result = await Select(Get(a), Get(b)).select()
        ...     assert isinstance(result, GetResult)
        ...     return str(result.value)
        >>> asyncio.run(main())
        'from a'
    """

    __slots__ = ("_foreign", "_operations", "_ordered", "_orders")

    def __init__(self, *operations: Operation, ordered: bool = False) -> None:
        if not isinstance(ordered, bool):
            raise TypeError("Select: ordered must be a bool")
        self._ordered = ordered
        self._operations: dict[_Op, None] = {}
        # Poll orders to draw from: every permutation for a small random select (drawing one
        # is much cheaper than random.sample per call), or the one add order when ordered.
        self._orders: tuple[tuple[_Op, ...], ...] | None = None
        # The class of the first case's channel that is not a loop-only Channel: its hooks run
        # the whole select (None: every case is loop-only, the fast path below).
        self._foreign: type[ForeignChannel[object]] | None = None
        for op in operations:
            self.add(op)

    @property
    def operations(self) -> tuple[_Op, ...]:
        """The operations, in the order they were added."""
        return tuple(self._operations)

    @property
    def ordered(self) -> bool:
        return self._ordered

    def __len__(self) -> int:
        return len(self._operations)

    @atomic
    def add(self, operation: Operation) -> None:
        """Add `operation` (a `Send` or `Get`) for the next call.

        Raises:
            TypeError: `operation` is not a `Send` or `Get`.
            ValueError: `operation` is already in this select.
        """
        if not isinstance(operation, Send | Get):
            raise TypeError(
                f"Select: operation must be a Send or Get, got {type(operation).__name__}"
            )
        if operation in self._operations:
            raise ValueError(f"Select: operation {operation!r} is already in this select")
        self._operations[operation] = None
        self._orders = None
        if self._foreign is None:
            self._foreign = _foreign_class((operation,))

    @atomic
    def remove(self, operation: Operation) -> None:
        """Remove `operation`; later calls never complete it.

        Raises:
            ValueError: `operation` is not in this select.
        """
        try:
            del self._operations[operation]  # type: ignore[arg-type]  # any key: KeyError
        except KeyError:
            raise ValueError(f"Select: operation {operation!r} is not in this select") from None
        self._orders = None
        self._foreign = _foreign_class(self._operations)

    def __repr__(self) -> str:
        mode = " ordered" if self._ordered else ""
        return f"<Select operations={len(self._operations)}{mode}>"

    # -- atomic sections ---------------------------------------------------------------------

    @atomic
    def _poll(self) -> SelectResult | None:
        """Go's selectgo pass 1: complete the first ready operation in poll order, or None.

        Raises ValueError (no operations) or ChannelClosed (all ignored and closed).
        """
        orders = self._orders
        if orders is None:
            operations = tuple(self._operations)
            if not operations:
                raise ValueError("select with no operations can never complete")
            if self._ordered or len(operations) == 1:
                orders = (operations,)
            elif len(operations) <= _MAX_CACHED_PERMUTATIONS_OF:
                orders = tuple(itertools.permutations(operations))
            else:
                orders = ()
            self._orders = orders
        # A uniformly random permutation, then the first ready case: uniform among the ready
        # (Go's pollorder). A random starting offset would favour cases after unready ones.
        if len(orders) == 1:
            order: Sequence[_Op] = orders[0]
        elif orders:
            order = orders[int(random.random() * len(orders))]
        else:
            order = random.sample(tuple(self._operations), len(self._operations))
        open_case = False
        for op in order:
            channel = op._channel
            if isinstance(op, Get):
                value = channel._take()
                if value is not _NOTHING:
                    return GetResult(channel, op, value)
                # Closed but a value still in flight: not drained yet, wait for it.
                ended = channel._closed and not channel._in_flight
            else:
                ended = channel._closed
                if not ended and channel._offer(op._value):
                    return SendResult(channel, op)
            if not ended:
                open_case = True
            elif not op._ignore_on_closed:
                return Closed(channel, op)
        if not open_case:
            raise ChannelClosed(
                "select: every operation is ignore_on_closed and its channel is closed; "
                "it can never complete"
            )
        return None

    @atomic
    def _park(self, waiter: Waiter) -> tuple[_Registration, ...]:
        """Go's selectgo pass 2: register `waiter` on every channel of a case that can fire.

        Registering never matches anything, so a select cannot meet itself: only a newcomer
        operation matches a parked registration, and a parked select is not a newcomer.
        """
        # Before any registration: all of them or none. The running loop is read once, and a
        # channel already bound to it is not asked again (select's hot path: one attribute
        # test per case instead of a `get_running_loop()` call per case).
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        for op in self._operations:
            channel = op._channel
            if channel._loop is not loop:
                channel._bind()
        regs = []
        for op in self._operations:
            channel = op._channel
            # After _poll, only ignored cases remain on closed channels (and Gets on closed
            # channels with a value in flight, which must wait like plain getters).
            if isinstance(op, Get):
                if channel._closed and not channel._in_flight:
                    continue
                reg = _Registration(waiter, channel, channel._getters, op, None)
            else:
                if channel._closed:
                    continue
                reg = _Registration(waiter, channel, channel._senders, op, op._value)
            reg.queue.append(reg)
            regs.append(reg)
        group = tuple(regs)
        for reg in group:
            reg.group = group
        return group

    @staticmethod
    @atomic
    def _leave(regs: tuple[_Registration, ...], received: object) -> SelectResult | None:
        """A parked select gives up. Returns its result if a Send case already completed."""
        if received is _NOTHING:
            for reg in regs:
                reg.queue.discard(reg)
            return None
        if isinstance(received, GetResult):
            channel = received.channel
            channel._put_back(received.value)
            if regs and regs[0].resumes_on_loop:
                channel._received()
            return None
        if isinstance(received, SendResult):
            return received
        return None  # Closed or ALL_CLOSED: nothing happened

    # -- public API --------------------------------------------------------------------------

    def select_nowait(self) -> SelectResult:
        """Complete one ready operation now.

        Raises:
            WouldBlock: no operation is ready (nothing was changed).
            ChannelClosed: every operation is ignore_on_closed and its channel is closed.
            ValueError: the select has no operations.
        """
        if self._foreign is not None:
            return self._foreign._foreign_select_nowait(self)
        result = self._poll()
        if result is None:
            raise WouldBlock("select: no operation is ready")
        return result

    async def select(self) -> SelectResult:
        """Complete exactly one operation, waiting until one is ready.

        Returns `SendResult`, `GetResult` (with the value) or `Closed`, naming the operation.

        Raises:
            ChannelClosed: every operation is ignore_on_closed and its channel is closed.
            ValueError: the select has no operations.
        """
        if self._foreign is not None:
            return await self._foreign._foreign_select(self)
        result = self._poll()
        if result is not None:
            return result
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        regs = self._park(TaskWaiter(future))
        try:
            payload = await future
        except asyncio.CancelledError as exc:
            received = future.result() if future.done() and not future.cancelled() else _NOTHING
            completed = self._leave(regs, received)
            if completed is not None:
                defer_cancel(exc)
                return completed
            raise
        if payload is _ALL_CLOSED:
            raise ChannelClosed(
                "select: every operation is ignore_on_closed and its channel is closed; "
                "it can never complete"
            )
        if type(payload) is GetResult:
            payload.channel._received()
        return payload  # type: ignore[return-value]


def _foreign_class(operations: Iterable[_Op]) -> type[ForeignChannel[object]] | None:
    """The class of the first channel among `operations` that is not a loop-only Channel."""
    for op in operations:
        channel: object = op._channel
        if type(channel) is not Channel:
            assert isinstance(channel, ForeignChannel)
            return type(channel)
    return None


async def select(*operations: Operation, ordered: bool = False) -> SelectResult:
    """Complete exactly one of `operations`: the one-shot form of ``Select(...).select()``.

    Example:
        >>> import asyncio
        >>> async def main() -> bool:
        ...     ch: Channel[int] = Channel(1)
        ...     op = Send(ch, 1)
        ...     return await select(op, Get(ch)) == SendResult(ch, op)
        >>> asyncio.run(main())
        True
    """
    return await Select(*operations, ordered=ordered).select()
