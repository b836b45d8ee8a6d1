"""SharedChannel: a Go-style channel shared by plain threads and tasks of any event loop.

Design (research/bridge_shared_state.md; the loop-only `executors.aio.channels` is the model,
and its comment block states the invariants kept here too):

- The state (buffer, parked senders, parked getters, ``closed``, values in flight) lives behind
  one ``threading.RLock`` *mutex* (reentrant only so that a re-entrant call can *detect* that its
  own thread is inside a section, with ``_is_owned()``; sections never nest). Every section is
  O(1) amortized, runs no user code, never blocks and never awaits: a thread or a task acts on
  the state itself and touches a loop only to resume a parked task (through that loop's waker).
- Parked parties are `SharedThreadWaiter`/`SharedTaskWaiter` (see `_shared_waiter`): one-shot
  claim tokens; a newcomer matches the head of the opposite FIFO by direct hand-off under the
  mutex (``claim`` stores the value and takes the token in one step). Only newcomers match, so
  nobody takes a value or a slot while someone waits: one strict FIFO for threads and tasks.
- A select holds all its shared channels' mutexes (taken in ``id()`` order, Go's ``sellock``)
  while it polls and parks, and parks ONE waiter on every case. A counterpart holds only its own
  channel's mutex; the token makes exactly one claim win. The woken select removes its other
  registrations afterwards, one mutex at a time (stale ones fail their claim meanwhile and are
  skipped). Loop-only `Channel` cases of a task's select are polled and parked on the task's
  loop thread, inside the same locked region, through an adapter `Waiter`.
- Re-entry (``close``/``send_nowait`` from ``__del__``, a weakref callback or a signal handler
  that runs on a thread inside a section; bpo-14976) is detected and deferred to the end of the
  interrupted section's caller, which drains the pending list after releasing the mutex.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final, Generic, TypeVar, final

from executors import validate
from executors.aio import Channel, ChannelStatistics
from executors.aio import channels as _aio_channels
from executors.aio._waiters import defer_cancel
from executors.aio.channels import (
    Closed,
    ForeignChannel,
    Get,
    GetResult,
    Operation,
    Select,
    SelectResult,
    Send,
    SendResult,
    _Registration,
)
from executors.errors import ChannelClosed, WouldBlock

from ._queue_storage import Withdrawable
from ._shared_channel_view import BlockingSharedChannel
from ._shared_registrations import (
    _ALL_CLOSED,
    _CLOSED,
    _NOTHING,
    _SENT,
    _Line,
    _LoopOnlyAdapter,
    _Reg,
)
from ._shared_waiter import (
    _HELD,
    COMPLETED_NOTE,
    THREAD,
    UNSET,
    SharedTaskWaiter,
    SharedThreadWaiter,
    SharedWaiter,
    finish,
    hold,
    raise_held,
)
from ._waker import running_loop

__all__ = ("SharedChannel", "BlockingSharedChannel", "select_blocking")

T = TypeVar("T")


_channels: weakref.WeakSet[SharedChannel[object]] = weakref.WeakSet()


@final
class SharedChannel(ForeignChannel[T], Generic[T]):
    """A FIFO channel for plain threads and tasks of any event loop, at once.

    Tasks use it exactly as an `executors.aio.Channel` (``await send``, ``await get``,
    `send_nowait`, `get_nowait`, `close`, ``async for``, `executors.aio.select` over any mix of
    shared and loop-only channels); threads use `blocking` (a `BlockingSharedChannel`) and
    `select_blocking`. The guarantees of `executors.aio.Channel` hold for threads and tasks
    together:

    - One strict FIFO: parked senders and getters, threads and tasks alike, are served in arrival
      order by direct hand-off; a newcomer never takes a value or a slot while someone waits.
    - Exactly once: every value whose send returned is received once; a value handed to a task
      that is cancelled before it resumes is passed on; a thread whose timeout loses the race
      with a hand-off reports the hand-off (sent, or the value received).
    - Closed and drained is final (values in flight to tasks count as not drained).
    - A thread never touches an event loop unless it resumes a parked task; a burst of
      resumptions for one loop costs one ``call_soon_threadsafe``.
    - `close` and `send_nowait` may be called from ``__del__``, weakref callbacks and signal
      handlers, also on a thread inside the channel at that moment: the call is then deferred to
      the end of that section (a deferred `send_nowait` enters the buffer even if it is full,
      since its caller has already returned).
    - A task parked on a loop that closes is dropped when a counterpart meets it; after
      ``os.fork()`` the child keeps no waiter of the parent's other threads.

    Args:
        size: the buffer capacity, an int >= 0 (0: rendezvous).

    Example:
        >>> import asyncio, threading
        >>> ch: SharedChannel[int] = SharedChannel(2)
        >>> def produce() -> None:
        ...     for i in range(3):
        ...         ch.blocking.send(i)
        ...     ch.close()
        >>> async def consume() -> list[int]:
        ...     return [v async for v in ch]
        >>> t = threading.Thread(target=produce); t.start()
        >>> asyncio.run(consume())
        [0, 1, 2]
        >>> t.join()
    """

    __slots__ = ("__weakref__", "_blocking", "_buffer", "_closed", "_deferred", "_getters",
                 "_in_flight", "_mutex", "_senders", "_size")

    def __init__(self, size: int = 0) -> None:
        self._size = validate.count(size, "size", minimum=0)
        self._mutex = threading.RLock()
        self._buffer: deque[T] = deque()
        self._closed = False
        self._in_flight = 0
        self._senders = _Line()
        self._getters = _Line()
        self._deferred: deque[Callable[[], object]] = deque()
        self._blocking: BlockingSharedChannel[T] = BlockingSharedChannel(self)
        _channels.add(self)  # type: ignore[arg-type]

    # -- introspection ----------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def blocking(self) -> BlockingSharedChannel[T]:
        """The view for plain threads (blocking `send`/`get` with timeouts, iteration)."""
        return self._blocking

    def __len__(self) -> int:
        return len(self._buffer)

    def statistics(self) -> ChannelStatistics:
        mutex = self._mutex
        mutex.acquire()
        try:
            return ChannelStatistics(size=self._size, buffered=len(self._buffer),
                                     closed=self._closed, waiting_senders=len(self._senders),
                                     waiting_getters=len(self._getters))
        finally:
            mutex.release()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"<SharedChannel size={self._size} buffered={len(self._buffer)} "
                f"senders={len(self._senders)} getters={len(self._getters)} "
                f"in_flight={self._in_flight} {state}>")

    # -- sections: the caller holds the mutex -----------------------------------------------
    #
    # Ctrl-C (design.md, "Ctrl-C"): a signal handler may raise at any checkpoint (a function's
    # start, a backward jump, the return of a call into C). Sections read a FIFO's head with
    # ``items[0]``, claim it, and only then drop it with ``del items[0]`` (no checkpoint between
    # the claim's return and the drop), so an exception leaves every registration either
    # queued or claimed. The sections that must not stop half-way (they hand something back or
    # tell parked parties the channel closed) are restartable and run through `_complete`.

    def _take(self) -> T | _aio_channels._Nothing:
        """Take the next value (buffer head, else a parked sender's), or NOTHING."""
        buffer = self._buffer
        items = self._senders.items
        if buffer:
            value = buffer[0]
            del buffer[0]  # no call: no checkpoint between the read and the removal
            try:
                # A slot opened: the head parked sender's value moves in (Go's chan.go recv).
                while items and len(buffer) < self._size:
                    reg = items[0]
                    if reg.claim_sent():
                        del items[0]
                        buffer.append(reg.value)  # type: ignore[arg-type]
                    else:
                        del items[0]
            except BaseException:  # Ctrl-C: the taken value is not returned, put it back
                buffer.appendleft(value)
                raise
            return value
        while items:
            reg = items[0]
            if reg.claim_sent():
                del items[0]
                return reg.value  # type: ignore[return-value]
            del items[0]
        return _NOTHING

    def _offer(self, value: T) -> bool:
        """Hand `value` to the first live parked getter, else buffer it if there is room."""
        items = self._getters.items
        while items:
            reg = items[0]
            if reg.claim_value(value):
                del items[0]
                return True
            del items[0]
        if len(self._buffer) < self._size:
            try:
                self._buffer.append(value)
            except BaseException as exc:  # at the check after the append: the value is in
                if exc.__class__ is MemoryError:
                    raise
                # A signal's (main thread): held, as in a section, with no call (see THREAD).
                THREAD.holds = True
                if _HELD[0] is None:
                    _HELD[0] = exc
            return True
        return False

    def _put_back_locked(self, value: object, done: list[bool], tail: bool = False) -> None:
        # Restartable: `done` is set in the same checkpoint-free stretch as the commit. At the
        # head of the buffer (a value handed back keeps its place), or its tail (a late send).
        if done[0]:
            return
        items = self._getters.items
        while items:
            reg = items[0]
            if reg.claim_value(value):
                del items[0]
                done[0] = True
                return
            del items[0]
        done[0] = True
        if tail:
            self._buffer.append(value)  # type: ignore[arg-type]
        else:
            self._buffer.appendleft(value)  # type: ignore[arg-type]

    def _received_locked(self, done: list[bool]) -> None:
        if not done[0]:
            done[0] = True
            self._in_flight -= 1
        self._closed_drained_locked()

    def _closed_drained_locked(self) -> None:
        # Restartable: tell the parked getters once the channel is closed and drained.
        if not self._in_flight and self._closed and not self._buffer:
            items = self._getters.items
            while items:
                items[0].claim_closed()
                del items[0]

    def _close_locked(self, done: list[bool] | None = None) -> None:
        if done is None:
            done = [False]
        if not done[0]:
            if self._closed:
                raise ChannelClosed("close of a closed channel")
            done[0] = True
            self._closed = True
        queues = (self._senders,) if self._in_flight else (self._getters, self._senders)
        for queue in queues:
            items = queue.items
            while items:
                items[0].claim_closed()
                del items[0]

    def _hand_back_locked(self, waiter: SharedWaiter, state: list[object],
                          put: list[bool]) -> None:
        """Pass on what `waiter` was handed and will not use (once: its value is reset).

        Restartable: ``state`` is ``[value to pass on, or UNSET; counted]``, ``put`` the
        put-back's `done` flag.
        """
        if state[0] is UNSET and not put[0]:
            payload = waiter.value
            if payload is UNSET:  # handed back already (a closing loop, a second path)
                put[0] = True
                state[1] = True
                return
            is_result = isinstance(payload, GetResult)
            nothing = (payload is _CLOSED or payload is _SENT or payload is _ALL_CLOSED
                       or isinstance(payload, (SendResult, Closed)))
            # One checkpoint-free stretch: the waiter lets go, `state` takes over.
            waiter.value = UNSET
            state[0] = payload.value if is_result else payload  # type: ignore[attr-defined]
            if nothing:
                put[0] = True
                state[1] = True
                return
        if not put[0]:
            self._put_back_locked(state[0], put)
        if not state[1]:
            state[1] = True
            if waiter.resumes_on_loop:
                self._in_flight -= 1
                waiter.returned()  # type: ignore[attr-defined]
        self._closed_drained_locked()

    # -- sections that take the mutex (also the duck-typed hooks a select uses) ---------------

    def _put_back(self, value: object, done: list[bool] | None = None) -> None:
        """A value handed to a party that gave up: pass it on, never drop it.

        Completed even if a signal handler raises meanwhile (the exception is held); one that
        arrives at its very start makes it start again. With `done` (``[False]`` at first), it
        can be run again (by `finish`) and passes the value on once.
        """
        if done is None:
            done = [False]
        try:
            self._complete(self._put_back_locked, value, done)
        except BaseException as exc:  # raised at _complete's first checkpoint: not begun
            hold(exc)
            self._complete(self._put_back_locked, value, done)
        if self._deferred:
            self._run_deferred()

    def _received(self) -> None:
        """A task handed a value resumed with it (or handed it back): no longer in flight."""
        done = [False]
        try:
            self._complete(self._received_locked, done)
        except BaseException as exc:  # raised at _complete's first checkpoint: not begun
            hold(exc)
            self._complete(self._received_locked, done)
        if self._deferred:
            self._run_deferred()

    def _hand_back(self, waiter: SharedWaiter) -> None:
        """`waiter` gave up after it was handed a value: pass it on (once; idempotent)."""
        state: list[object] = [UNSET, False]
        put = [False]
        try:
            self._complete(self._hand_back_locked, waiter, state, put)
        except BaseException as exc:  # raised at _complete's first checkpoint: not begun
            hold(exc)
            self._complete(self._hand_back_locked, waiter, state, put)
        if self._deferred:
            self._run_deferred()

    def _lost(self, waiter: SharedTaskWaiter) -> None:
        """Owner hook: `waiter`'s loop closed before its task consumed the value it was handed.

        From a loop's close (or the collector), on any thread, perhaps one inside this
        channel's mutex: deferred to the end of that section then (bpo-14976).
        """
        if self._mutex._is_owned():  # type: ignore[attr-defined]
            self._deferred.append(lambda: self._hand_back(waiter))
        else:
            self._hand_back(waiter)

    def _discard(self, reg: _Reg) -> None:
        self._locked(reg.queue.discard, reg)

    def _locked(self, fn: Callable[..., object], *args: object) -> None:
        mutex = self._mutex
        try:
            mutex.acquire()  # inside the try: see _complete
            fn(*args)
        finally:
            try:
                mutex.release()
            except RuntimeError:  # the acquire was interrupted before it took the mutex
                pass
        if self._deferred:
            self._run_deferred()

    def _complete(self, section: Callable[..., object], *args: object) -> None:
        """Run the restartable `section` under the mutex to its end, whatever a signal handler
        raises meanwhile: the exception is held (`hold`) and the section run again (it skips
        what it did). The caller raises the held exception once it is done (`raise_held`).

        The mutex is taken inside the ``try``: an exception raised right after ``acquire``
        returned still releases it. If the ``acquire`` itself was interrupted while it waited,
        the release finds the mutex not owned (RuntimeError, ignored).
        """
        mutex = self._mutex
        while True:
            try:
                while True:
                    try:
                        try:
                            mutex.acquire()
                            section(*args)
                        finally:
                            try:
                                mutex.release()
                            except RuntimeError:
                                pass
                        break
                    except BaseException as exc:
                        if isinstance(exc, ChannelClosed):
                            raise
                        hold(exc)
                break
            except ChannelClosed:
                raise
            except BaseException as exc:
                hold(exc)

    def _run_deferred(self) -> None:
        deferred = self._deferred
        while deferred:
            try:
                fn = deferred.popleft()
            except IndexError:
                return
            fn()

    def _park(self, waiter: SharedWaiter, queue: _Line, value: object) -> _Reg:
        reg = _Reg(waiter, self, queue, None, value)  # type: ignore[arg-type]
        queue.append(reg)
        return reg

    # -- task API ----------------------------------------------------------------------------

    def send_nowait(self, value: T) -> None:
        """Send `value` if that completes at once: a getter is parked, or the buffer has room.

        Safe from ``__del__`` and signal handlers (see the class docstring).

        Raises:
            ChannelClosed: the channel is closed.
            WouldBlock: no getter is parked and the buffer is full (or the channel unbuffered).
        """
        mutex = self._mutex
        if mutex._is_owned():  # type: ignore[attr-defined]  # re-entry: defer (bpo-14976)
            if self._closed:
                raise ChannelClosed("send on a closed channel")
            self._deferred.append(lambda: self._deferred_send(value))
            return
        sent = False
        try:
            try:
                mutex.acquire()  # inside the try: an exception right after it still releases
                if self._closed:
                    raise ChannelClosed("send on a closed channel")
                if not self._offer(value):
                    raise WouldBlock(
                        "channel full: no getter is waiting and the buffer has no room")
                sent = True  # no checkpoint since the commit in _offer
            finally:
                try:
                    mutex.release()
                except RuntimeError:  # interrupted while it waited for the mutex: never taken
                    pass
            if self._deferred:
                self._run_deferred()
            if _HELD[0] is not None:
                raise_held(True)  # sent: the exception of a signal that came meanwhile
        except BaseException as exc:  # no call from here to the raise: see THREAD
            late = _HELD[0] if THREAD.holds else None
            out = exc if late is None else late  # a held one leaves instead
            if late is not None:
                _HELD[0] = None
            if sent:
                if "__notes__" not in out.__dict__:
                    out.__notes__ = [COMPLETED_NOTE]
                elif COMPLETED_NOTE not in out.__notes__:
                    out.__notes__ += [COMPLETED_NOTE]
            if late is not None:
                raise late  # noqa: B904  (it came first: not caused by the one caught)
            raise

    def _deferred_send(self, value: T) -> None:
        # The caller returned already: the value must be received, even past `size`.
        self._complete(self._deferred_send_locked, value, [False])

    def _deferred_send_locked(self, value: T, done: list[bool]) -> None:
        self._put_back_locked(value, done, True)  # to a parked getter, else the buffer

    def get_nowait(self) -> T:
        """Get a value if one is available at once (buffered, or from a parked sender).

        Raises:
            ChannelClosed: the channel is closed and drained.
            WouldBlock: nothing is available now.
        """
        mutex = self._mutex
        value: T | _aio_channels._Nothing = _NOTHING
        try:
            try:
                mutex.acquire()  # inside the try: an exception right after it still releases
                value = self._take()
                if value is _NOTHING:
                    if self._closed and not self._in_flight:
                        raise ChannelClosed("get on a closed and drained channel")
                    raise WouldBlock(
                        "channel empty: no value is buffered and no sender is waiting")
            finally:
                try:
                    mutex.release()
                except RuntimeError:  # interrupted while it waited for the mutex: never taken
                    pass
            if self._deferred:
                self._run_deferred()
            if _HELD[0] is not None:
                raise_held()  # handled below: the value goes back
        except BaseException:
            if value is not _NOTHING:  # taken, but never returned (Ctrl-C): put it back
                done = [False]  # shared by both runs below
                try:
                    finish(self._put_back, value, done)
                except BaseException:  # a second signal at finish's first instruction
                    finish(self._put_back, value, done)
            late = _HELD[0] if THREAD.holds else None  # no call from here on: see THREAD
            if late is not None:
                _HELD[0] = None
                raise late  # noqa: B904  (it came first: not caused by the one caught)
            raise
        return value

    async def send(self, value: T) -> None:
        """Send `value`, waiting until a getter takes it (``size=0``) or there is room.

        Cancellation: raising `asyncio.CancelledError` means the value was not sent; one that
        arrives after the value was taken (or moved into the buffer) is deferred, as for
        `executors.aio.Channel.send`: the send returns, and the cancellation reaches the task's
        next await if it is still requested then.

        Raises:
            ChannelClosed: the channel is closed, now or while waiting.
        """
        mutex = self._mutex
        try:
            mutex.acquire()  # inside the try: an exception right after it still releases
            if self._closed:
                raise ChannelClosed("send on a closed channel")
            if self._offer(value):
                return
            waiter = SharedTaskWaiter()
            reg = self._park(waiter, self._senders, value)
        finally:
            try:
                mutex.release()
            except RuntimeError:  # interrupted while it waited for the mutex: never taken
                pass
            if self._deferred:
                self._run_deferred()
        try:
            await waiter.future
        except asyncio.CancelledError as exc:
            if waiter.abandon():
                self._discard(reg)
                raise
            # Both sections take the mutex: the claim stored the payload under it.
            if isinstance(value, Withdrawable):  # final class: one type test
                self._locked(self._withdraw_locked, value)
                if value.withdrawn:  # a Queue's put, not yet got: it did not happen
                    raise
            else:
                self._locked(_noop)
            if waiter.value is _SENT:
                defer_cancel(exc)
                return
            raise
        if waiter.value is _CLOSED:
            raise ChannelClosed("channel closed while the send waited")

    def _withdraw_locked(self, value: Withdrawable[T]) -> None:
        # A Queue's put cancelled after its value moved into the buffer (Withdrawable): take
        # it back if no getter has it yet. The slot it frees goes to the head parked sender,
        # as a get's would (_take).
        buffer = self._buffer
        if not buffer.withdraw(value):  # type: ignore[attr-defined]  # a Queue's buffer
            return
        value.withdrawn = True
        items = self._senders.items
        while items and len(buffer) < self._size:
            reg = items[0]
            if reg.claim_sent():
                del items[0]
                buffer.append(reg.value)  # type: ignore[arg-type]
            else:
                del items[0]

    async def get(self) -> T:
        """Get the next value, waiting for one.

        Cancellation: raising `asyncio.CancelledError` means no value was taken; a value handed
        to this getter just before is passed on.

        Raises:
            ChannelClosed: the channel is closed and drained.
        """
        mutex = self._mutex
        try:
            mutex.acquire()  # inside the try: an exception right after it still releases
            value = self._take()
            if value is not _NOTHING:
                return value
            if self._closed and not self._in_flight:
                raise ChannelClosed("get on a closed and drained channel")
            waiter = SharedTaskWaiter(self)  # owned: a closing loop hands its value back
            reg = self._park(waiter, self._getters, None)
        finally:
            try:
                mutex.release()
            except RuntimeError:  # interrupted while it waited for the mutex: never taken
                pass
            if self._deferred:
                self._run_deferred()
        try:
            await waiter.future
        except BaseException:
            # Cancelled, or GeneratorExit (the coroutine is closed: its loop is gone and the
            # task collected): leave the line, or pass on a value handed to us meanwhile.
            if waiter.abandon():
                self._discard(reg)
                raise
            self._hand_back(waiter)
            raise
        payload = waiter.consume()
        if payload is _CLOSED:
            raise ChannelClosed("get on a closed and drained channel")
        self._received()
        return payload  # type: ignore[return-value]

    def close(self) -> None:
        """Close the channel from the send side (as `executors.aio.Channel.close`).

        Safe from ``__del__`` and signal handlers, also re-entrantly (then deferred).

        Raises:
            ChannelClosed: the channel is already closed.
        """
        mutex = self._mutex
        if mutex._is_owned():  # type: ignore[attr-defined]  # re-entry: defer (bpo-14976)
            if self._closed:
                raise ChannelClosed("close of a closed channel")
            self._deferred.append(self._deferred_close)
            return
        self._complete(self._close_locked, [False])  # parked parties must all be told
        if _HELD[0] is not None:
            raise_held()

    def _deferred_close(self) -> None:
        try:
            self._complete(self._close_locked, [False])
        except ChannelClosed:  # closed meanwhile by someone else: the one close stands
            pass

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except ChannelClosed:
            raise StopAsyncIteration from None

    # -- select hooks (executors.aio.select) ---------------------------------------------------

    @classmethod
    async def _foreign_select(cls, select: Select) -> SelectResult:
        return await _task_select(select)

    @classmethod
    def _foreign_select_nowait(cls, select: Select) -> SelectResult:
        ops = _operations(select)
        mutexes = _mutexes(ops)
        _acquire_all(mutexes)
        try:
            result = _poll(_order(select, ops))
        finally:
            _release_all(mutexes)
        if result is None:
            raise WouldBlock("select: no operation is ready")
        return result


def _noop() -> None:
    pass


# -- select ------------------------------------------------------------------------------------

_Op = Send[object] | Get[object]


def _operations(select: Select) -> tuple[_Op, ...]:
    ops = select.operations
    if not ops:
        raise ValueError("select with no operations can never complete")
    return ops


def _order(select: Select, ops: tuple[_Op, ...]) -> Sequence[_Op]:
    if select.ordered or len(ops) == 1:
        return ops
    return random.sample(ops, len(ops))


def _mutexes(ops: Sequence[_Op]) -> list[threading.RLock]:
    # Go's sellock: every shared channel's mutex once, in a global order (by id).
    channels = {id(ch): ch for op in ops if isinstance(ch := _channel(op), SharedChannel)}
    return [channels[key]._mutex for key in sorted(channels)]


def _channel(op: _Op) -> object:
    return op._channel


def _acquire_all(mutexes: list[threading.RLock]) -> None:
    # Interrupted (Ctrl-C), it releases what this thread holds: the owner check, not a count,
    # tells, since an exception may come right after an acquire returned.
    try:
        for mutex in mutexes:
            mutex.acquire()
    except BaseException:
        _release_all(mutexes)
        raise


def _release_all(mutexes: list[threading.RLock]) -> None:
    # Every mutex is released even if a signal handler raises meanwhile (the exception is held:
    # the caller raises it). Idempotent: only the mutexes this thread still holds.
    while True:
        try:
            while True:
                try:
                    for mutex in reversed(mutexes):
                        if mutex._is_owned():  # type: ignore[attr-defined]
                            mutex.release()
                    return
                except BaseException as exc:
                    hold(exc)
        except BaseException as exc:
            hold(exc)


def _poll(order: Sequence[_Op], sent: list[bool] | None = None) -> SelectResult | None:
    """Go's selectgo pass 1 under every shared mutex (loop-only cases: on their loop thread).

    ``sent[0]`` becomes True as a send case completes: a blocking select interrupted before it
    has the result still knows that it sent.
    """
    open_case = False
    for op in order:
        channel: Channel[object] | SharedChannel[object] = op._channel
        if isinstance(op, Get):
            value = channel._take()
            if value is not _NOTHING:
                try:
                    return GetResult(channel, op, value)  # type: ignore[arg-type]
                except BaseException:  # Ctrl-C before the result existed: the value goes back
                    if isinstance(channel, SharedChannel):
                        channel._put_back_locked(value, [False])
                    raise
            ended = channel._closed and not channel._in_flight
        else:
            ended = channel._closed
            if not ended and channel._offer(op._value):
                if sent is not None:
                    sent[0] = True  # no checkpoint since the commit in _offer
                try:
                    return SendResult(channel, op)  # type: ignore[arg-type]
                except BaseException as exc:  # Ctrl-C before the result existed: it was sent
                    if "__notes__" not in exc.__dict__:  # no call: see THREAD
                        exc.__notes__ = [COMPLETED_NOTE]
                    elif COMPLETED_NOTE not in exc.__notes__:
                        exc.__notes__ += [COMPLETED_NOTE]
                    raise
        if not ended:
            open_case = True
        elif not op._ignore_on_closed:
            return Closed(channel, op)  # type: ignore[arg-type]
    if not open_case:
        raise ChannelClosed("select: every operation is ignore_on_closed and its channel is "
                            "closed; it can never complete")
    return None


def _park_select(ops: Sequence[_Op], waiter: SharedWaiter
                 ) -> tuple[tuple[_Reg, ...], tuple[_Registration, ...]]:
    """Go's selectgo pass 2: one waiter registered on every case that can still fire."""
    shared: list[_Reg] = []
    loop_only: list[_Registration] = []
    adapter: _LoopOnlyAdapter | None = None
    for op in ops:
        channel: object = op._channel
        is_get = isinstance(op, Get)
        if isinstance(channel, SharedChannel):
            if channel._closed and (not is_get or not channel._in_flight):
                continue
            queue = channel._getters if is_get else channel._senders
            reg = _Reg(waiter, channel, queue, op, None if is_get else op._value)  # type: ignore[union-attr]
            queue.append(reg)
            shared.append(reg)
        else:
            assert isinstance(channel, Channel) and isinstance(waiter, SharedTaskWaiter)
            if channel._closed and (not is_get or not channel._in_flight):
                continue
            if adapter is None:
                adapter = _LoopOnlyAdapter(waiter)
            aio_queue = channel._getters if is_get else channel._senders
            aio_reg = _Registration(adapter, channel, aio_queue, op,
                                    None if is_get else op._value)  # type: ignore[union-attr]
            aio_queue.append(aio_reg)
            loop_only.append(aio_reg)
    group = tuple(shared)
    for reg in group:
        reg.group = group
    aio_group = tuple(loop_only)
    for aio_reg in aio_group:
        aio_reg.group = aio_group
    return group, aio_group


def _unpark_select(regs: tuple[_Reg, ...], aio_regs: tuple[_Registration, ...]) -> None:
    """Remove a select's registrations, one mutex at a time (never nested)."""
    for reg in regs:
        reg.channel._discard(reg)
    for aio_reg in aio_regs:
        aio_reg.queue.discard(aio_reg)


def _hand_back_result(payload: object, from_task: bool) -> None:
    # A select that received and then gave up (cancelled, Ctrl-C): pass the value on.
    if isinstance(payload, GetResult):
        channel: Channel[object] | SharedChannel[object] = payload.channel
        channel._put_back(payload.value)
        if from_task:
            channel._received()


def _put_back_result(result: GetResult[object], done: list[bool]) -> None:
    # A blocking select that received and then was interrupted: the value goes back, once.
    channel: SharedChannel[object] = result.channel  # type: ignore[assignment]
    channel._put_back(result.value, done)


def _leave_select(waiter: SharedThreadWaiter, regs: tuple[_Reg, ...]) -> None:
    # A blocking select interrupted after it parked: it gives up, or (a claim won) waits for
    # the claim's value, which goes back first; then it leaves every line. Restartable.
    waiter.settle()
    if waiter.claimed:
        _hand_back_waiter(waiter)  # idempotent: the value is reset under its mutex
    _unpark_select(regs, ())


def _hand_back_waiter(waiter: SharedWaiter) -> None:
    # A parked select that received and then gave up: pass the value on, once.
    payload = waiter.value
    if isinstance(payload, GetResult):
        channel: object = payload.channel
        if isinstance(channel, SharedChannel):
            channel._hand_back(waiter)  # idempotent: the value is reset under its mutex
        else:
            waiter.value = UNSET
            _hand_back_result(payload, waiter.resumes_on_loop)


@final
class _SelectOwner:
    """The owner of a task select's waiter: a value it never consumed goes back to its channel."""

    __slots__ = ()

    def _lost(self, waiter: SharedTaskWaiter) -> None:
        payload = waiter.value
        if isinstance(payload, GetResult):
            channel: object = payload.channel
            if isinstance(channel, SharedChannel):
                channel._lost(waiter)


_SELECT_OWNER: Final = _SelectOwner()


async def _task_select(select: Select) -> SelectResult:
    ops = _operations(select)
    mutexes = _mutexes(ops)
    while True:
        _acquire_all(mutexes)
        try:
            result = _poll(_order(select, ops))
            if result is None:
                waiter = SharedTaskWaiter(_SELECT_OWNER)
                regs, aio_regs = _park_select(ops, waiter)
        finally:
            _release_all(mutexes)
        if result is not None:
            return result
        try:
            await waiter.future
        except BaseException as exc:
            # Cancelled, or GeneratorExit (the coroutine is closed: its loop is gone).
            abandoned = waiter.abandon()
            _unpark_select(regs, aio_regs)  # takes every mutex once: the payload is stored
            if abandoned:
                raise
            payload = waiter.value
            if isinstance(payload, SendResult) and isinstance(exc, asyncio.CancelledError):
                defer_cancel(exc)
                return payload
            _hand_back_waiter(waiter)
            raise
        _unpark_select(regs, aio_regs)
        payload = waiter.consume()
        if payload is _ALL_CLOSED:
            continue  # re-poll under all the locks: raises ChannelClosed if it still holds
        if isinstance(payload, GetResult):
            payload.channel._received()
        return payload  # type: ignore[return-value]


def select_blocking(*operations: Operation, timeout: float | None = None,
                    ordered: bool = False) -> SelectResult:
    """Block the calling thread until exactly one of `operations` completes.

    Every case must be on a `SharedChannel` (a loop-only channel can only be touched on its
    loop: use `Portal.select` for those). Returns the async select's result objects
    (`SendResult`, `GetResult`, `Closed`). Exactly once with threads and tasks together.

    Raises:
        TimeoutError: nothing completed within `timeout` seconds (nothing was sent or received,
            no registration is left).
        ChannelClosed: every operation is ignore_on_closed and its channel is closed.
        ValueError: no operations. TypeError: a case is not a Send/Get on a SharedChannel.

    Example:
        >>> from executors.aio import Get
        >>> a: SharedChannel[str] = SharedChannel(1)
        >>> b: SharedChannel[str] = SharedChannel(1)
        >>> b.blocking.send("b")
        >>> select_blocking(Get(a), Get(b), timeout=1).value
        'b'
    """
    seconds = validate.timeout(timeout)
    select = Select(*operations, ordered=ordered)
    ops = _operations(select)
    for op in ops:
        if not isinstance(_channel(op), SharedChannel):
            raise TypeError("select_blocking: every operation must be on a SharedChannel, got "
                            f"{type(_channel(op)).__name__} (use Portal.select)")
    mutexes = _mutexes(ops)
    deadline = None if seconds is None else time.monotonic() + seconds
    while True:
        result: SelectResult | None = None
        waiter: SharedThreadWaiter | None = None
        regs: tuple[_Reg, ...] = ()
        sent = [False]  # a send case completed (set by _poll)
        try:
            _acquire_all(mutexes)
            try:
                result = _poll(_order(select, ops), sent)
                if result is None and seconds != 0:
                    waiter = SharedThreadWaiter()
                    regs, _ = _park_select(ops, waiter)
            except BaseException:
                if waiter is not None:
                    # Parked on some cases only (every mutex is still held: nobody claimed
                    # it): it gives up, so all of them are dead now.
                    waiter.settle()
                raise
            finally:
                try:
                    _release_all(mutexes)
                except BaseException:  # raised at its first instruction: nothing released
                    try:
                        finish(_release_all, mutexes)
                    except BaseException:  # a second signal at finish's first instruction
                        finish(_release_all, mutexes)
                    raise
            if result is not None:
                if _HELD[0] is not None:
                    # A received value goes back (below); a send happened, and says so.
                    raise_held(sent[0])
                return result
            if seconds == 0:
                raise TimeoutError(f"select: nothing completed within {timeout} s")
            assert waiter is not None
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            claimed = waiter.wait(left)
            _unpark_select(regs, ())  # in the `try`: the claimed value goes back on Ctrl-C
            if _HELD[0] is not None:
                # The main thread's only. A received value goes back (below).
                raise_held(claimed and waiter.value.__class__ is SendResult)
        except BaseException as exc:
            # Each cleanup runs through `finish`, its first statement: see there. No call
            # before it (a signal at a call's return would skip it): `__class__`, not isinstance.
            if result.__class__ is GetResult:
                done = [False]  # shared by both runs below
                try:
                    finish(_put_back_result, result, done)
                except BaseException:  # a second signal at finish's first instruction
                    finish(_put_back_result, result, done)
            elif waiter is not None:
                # Interrupted after parking, before `wait` began (every registration is live,
                # and a counterpart may have claimed one since the mutexes were released) or
                # inside it: give up, or wait for the claim's value; then leave every line.
                try:
                    finish(_leave_select, waiter, regs)
                except BaseException:  # a second signal at finish's first instruction
                    finish(_leave_select, waiter, regs)
                sent[0] = waiter.value.__class__ is SendResult
            # No call from here to the raise: see THREAD.
            late = _HELD[0] if THREAD.holds else None
            out = exc if late is None else late  # a held one leaves instead
            if late is not None:
                _HELD[0] = None
            if sent[0]:
                if "__notes__" not in out.__dict__:
                    out.__notes__ = [COMPLETED_NOTE]
                elif COMPLETED_NOTE not in out.__notes__:
                    out.__notes__ += [COMPLETED_NOTE]
            if late is not None:
                raise late  # noqa: B904  (it came first: not caused by the one caught)
            raise
        if not claimed:
            raise TimeoutError(f"select: nothing completed within {timeout} s")
        payload = waiter.value
        if payload is _ALL_CLOSED:
            continue  # re-poll under all the locks: raises ChannelClosed if still so
        return payload  # type: ignore[return-value]


# -- fork --------------------------------------------------------------------------------------


def _after_fork_in_child() -> None:
    # Only the forking thread survives: every parked thread is gone, and so is every loop but
    # (perhaps) the one this thread runs. Drop their waiters; the mutex may have been held by a
    # thread that no longer exists.
    running = running_loop()
    for channel in list(_channels):
        channel._mutex = threading.RLock()
        channel._deferred.clear()
        for queue in (channel._senders, channel._getters):
            queue.items = deque(
                reg for reg in queue.items
                if isinstance(reg.waiter, SharedTaskWaiter) and reg.waiter.loop is running)
            queue.dead = 0


os.register_at_fork(after_in_child=_after_fork_in_child)
