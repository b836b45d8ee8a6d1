"""The blocking view of a `SharedChannel`: what a plain thread calls (`SharedChannel.blocking`).

A thread acts on the channel's state itself, under the channel's mutex, exactly as a task does
(`_shared_channel` states the invariants); when it must wait it parks a `SharedThreadWaiter` in
the same FIFO line as the tasks and blocks on it. Every section from parking to the end of the
wait is one ``try``, so a Ctrl-C anywhere in it gives up cleanly or takes the value it was
handed (design.md, "Ctrl-C").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Generic, TypeVar, final

from executors import validate
from executors.errors import ChannelClosed

from ._shared_registrations import (
    _CLOSED,
    _NOTHING,
    _SENT,
    _Reg,
)
from ._shared_waiter import (
    _HELD,
    COMPLETED_NOTE,
    THREAD,
    SharedThreadWaiter,
    finish,
    raise_held,
)

if TYPE_CHECKING:
    from ._shared_channel import SharedChannel

__all__ = ("BlockingSharedChannel",)

T = TypeVar("T")


# -- blocking view -----------------------------------------------------------------------------


def _leave_line(ch: SharedChannel[object], waiter: SharedThreadWaiter, reg: _Reg | None
                ) -> None:
    # A thread's send or get interrupted after it parked: it gives up, or (a claim won) waits
    # for the claim's value; a received value goes on. Restartable (for `finish`): `settle`
    # and `_hand_back` do their part once, and a second discard only compacts earlier.
    waiter.settle()
    if waiter.claimed:
        if waiter.value is not _SENT and waiter.value is not _CLOSED:
            ch._hand_back(waiter)
    elif reg is not None:
        ch._discard(reg)


@final
class BlockingSharedChannel(Generic[T]):
    """The thread view of a `SharedChannel`: `SharedChannel.blocking` (and `Portal.channel`).

    The API of `integrations.bridge.BlockingChannel` with no Portal: the thread acts on the
    channel itself and blocks on a lock of its own when it must wait. A timeout that races a
    hand-off is decided by the waiter's one-shot claim: a value taken by a getter was sent (no
    `TimeoutError`), a value handed to a getter is received. Ctrl-C while blocked leaves the
    channel consistent (a value already handed to the thread is passed on).
    """

    __slots__ = ("_channel",)

    def __init__(self, channel: SharedChannel[T]) -> None:
        self._channel = channel

    @property
    def channel(self) -> SharedChannel[T]:
        return self._channel

    def send(self, value: T, timeout: float | None = None) -> None:
        """Send `value`: wait until a getter takes it (unbuffered) or there is room.

        An exception raised by a signal handler (Ctrl-C) while it runs leaves the channel
        consistent; the value may have been sent (then it is received once) or not.

        Raises:
            TimeoutError: not sent within `timeout` seconds (it never will be).
            ChannelClosed: the channel is closed, now or while waiting.
        """
        seconds = validate.timeout(timeout)
        ch = self._channel
        mutex = ch._mutex
        waiter: SharedThreadWaiter | None = None
        reg: _Reg | None = None
        sent = False
        waited = False  # the wait returned: its result says whether the value was taken
        try:
            try:
                mutex.acquire()  # inside the try: an exception right after it still releases
                if ch._closed:
                    raise ChannelClosed("send on a closed channel")
                if ch._offer(value):
                    sent = True  # no checkpoint between the offer's return and this store
                elif seconds == 0:
                    raise TimeoutError(
                        f"send: not taken within {timeout} s (the value was not sent)")
                else:
                    waiter = SharedThreadWaiter()
                    reg = ch._park(waiter, ch._senders, value)
            finally:
                try:
                    mutex.release()
                except RuntimeError:  # interrupted while it waited for the mutex: never taken
                    pass
                if ch._deferred:
                    ch._run_deferred()
            if waiter is not None:
                claimed = waiter.wait(seconds)
                waited = True  # no checkpoint since `wait` returned
                if claimed:
                    sent = waiter.value is _SENT  # else _CLOSED
                else:
                    ch._discard(reg)  # type: ignore[arg-type]  # it gave up: a dead entry
            if _HELD[0] is not None:
                raise_held(sent)  # the exception of a signal that came meanwhile
            if waiter is not None and not sent:
                if waited and not claimed:
                    raise TimeoutError(
                        f"send: not taken within {timeout} s (the value was not sent)")
                raise ChannelClosed("channel closed while the send waited")
        except BaseException as exc:
            if waiter is not None and not waited:
                # Interrupted after parking (before or inside `wait`): the registration may be
                # queued, and a getter may have claimed it since the mutex was released. Give
                # up, or learn that the value was taken: then the send happened, and says so.
                try:
                    finish(_leave_line, ch, waiter, reg)
                except BaseException:  # a second signal at finish's first instruction
                    finish(_leave_line, ch, waiter, reg)
                sent = waiter.value is _SENT
            # No call from here to the raise: see THREAD.
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

    def get(self, timeout: float | None = None) -> T:
        """Get the next value, waiting for one.

        An exception raised by a signal handler (Ctrl-C) while it runs leaves the channel
        consistent and takes no value: one already taken is put back at the head of the line.

        Raises:
            TimeoutError: no value within `timeout` seconds (none was taken).
            ChannelClosed: the channel is closed and drained.
        """
        seconds = validate.timeout(timeout)
        ch = self._channel
        mutex = ch._mutex
        yielded = seconds == 0 or ch._size <= 1  # no batch to wait for without a buffer
        value: object = _NOTHING
        waiter: SharedThreadWaiter | None = None
        reg: _Reg | None = None
        try:
            while True:
                try:
                    mutex.acquire()  # inside the try: an exception right after it releases
                    value = ch._take()
                    if value is not _NOTHING:
                        break
                    if ch._closed and not ch._in_flight:
                        raise ChannelClosed("get on a closed and drained channel")
                    if seconds == 0:
                        raise TimeoutError(f"get: no value within {timeout} s")
                    if yielded:
                        waiter = SharedThreadWaiter()
                        reg = ch._park(waiter, ch._getters, None)
                        break
                finally:
                    try:
                        mutex.release()
                    except RuntimeError:  # interrupted while it waited: never taken
                        pass
                    if ch._deferred:
                        ch._run_deferred()
                # Empty: before parking, let the other threads (a producing loop) run once. A
                # task producer then fills the buffer in one go instead of handing each value
                # to a parked thread (a thread switch per message); the retry is the same
                # section again.
                yielded = True
                time.sleep(0)
            if value is not _NOTHING:
                if _HELD[0] is not None:
                    raise_held()  # handled below: the value goes back
                return value
            assert waiter is not None
            claimed = waiter.wait(seconds)
            if not claimed:
                ch._discard(reg)  # type: ignore[arg-type]  # it gave up: a dead entry
            if _HELD[0] is not None:
                raise_held()  # handled below: a value handed over goes back (once)
        except BaseException:
            # Each cleanup runs through `finish`, its first statement: see there.
            if value is not _NOTHING:  # taken, but never returned: put it back
                done = [False]  # shared by both runs below
                try:
                    finish(ch._put_back, value, done)
                except BaseException:  # a second signal at finish's first instruction
                    finish(ch._put_back, value, done)
            elif waiter is not None:
                # Interrupted after parking: before `wait` began (its registration is live and
                # a sender may have claimed it since the mutex was released), inside it, or
                # after it. Give up, or wait for the claim's value and pass it on.
                try:
                    finish(_leave_line, ch, waiter, reg)
                except BaseException:  # a second signal at finish's first instruction
                    finish(_leave_line, ch, waiter, reg)
            late = _HELD[0] if THREAD.holds else None  # no call from here on: see THREAD
            if late is not None:
                _HELD[0] = None
                raise late  # noqa: B904  (it came first: not caused by the one caught)
            raise
        # Raised here, not in the `try`: its clause would leave the line again, and a signal
        # landing there would be lost behind the error.
        if not claimed:
            raise TimeoutError(f"get: no value within {timeout} s")
        payload = waiter.value
        if payload is _CLOSED:
            raise ChannelClosed("get on a closed and drained channel")
        return payload  # type: ignore[return-value]

    def send_nowait(self, value: T) -> None:
        """As `SharedChannel.send_nowait`."""
        self._channel.send_nowait(value)

    def get_nowait(self) -> T:
        """As `SharedChannel.get_nowait`."""
        return self._channel.get_nowait()

    def close(self) -> None:
        """As `SharedChannel.close`."""
        self._channel.close()

    def __iter__(self) -> Iterator[T]:
        """``for v in view:`` gets values until the channel is closed and drained."""
        while True:
            try:
                yield self.get()
            except ChannelClosed:
                return

    def __repr__(self) -> str:
        return f"<BlockingSharedChannel of {self._channel!r}>"
