"""A parked operation on a shared channel, and the line it waits in (private).

`_Reg` is one parked send, get or select case; `_Line` a channel's FIFO of them; the claims
(`_Reg.claim_sent`, `claim_value`, `claim_closed`) run under the channel's mutex, in the
checkpoint-free stretches `_shared_channel` relies on (see design.md, "Ctrl-C").
`_LoopOnlyAdapter` lets a task's select park on a loop-only `Channel` too.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar, Final, final

from executors.aio import channels as _aio_channels
from executors.aio._waiters import Waiter
from executors.aio.channels import Closed, Get, GetResult, Send, SendResult

from ._shared_waiter import UNSET, SharedTaskWaiter, SharedWaiter, wake_or_hold

if TYPE_CHECKING:
    from ._shared_channel import SharedChannel

__all__ = ("_ALL_CLOSED", "_CLOSED", "_NOTHING", "_SENT", "_Line", "_LoopOnlyAdapter", "_Reg")


# The loop-only channels' markers, shared so that a select's poll and payloads read the same
# for both kinds of channel: NOTHING (no value now), SENT and CLOSED (payloads of a plain parked
# sender/getter), ALL_CLOSED (a select whose ignored cases may all be closed: re-poll).
_NOTHING: Final = _aio_channels._NOTHING
_SENT: Final = _aio_channels._SENT
_CLOSED: Final = _aio_channels._CLOSED
_ALL_CLOSED: Final = _aio_channels._ALL_CLOSED


@final
class _Reg:
    """One parked operation on one shared channel. Hashable by identity."""

    __slots__ = ("channel", "group", "op", "queue", "value", "waiter")

    def __init__(self, waiter: SharedWaiter, channel: SharedChannel[object],
                 queue: _Line, op: Send[object] | Get[object] | None,
                 value: object) -> None:
        self.waiter = waiter
        self.channel = channel
        self.queue = queue
        self.op = op  # None for a plain send/get, the select's case otherwise
        self.value = value  # a parked send's value
        self.group: tuple[_Reg, ...] | None = None  # a select's shared registrations

    # Each claim runs under self.channel's mutex.

    def claim_sent(self) -> bool:
        op = self.op
        return self.waiter.claim(_SENT if op is None else SendResult(self.channel, op))  # type: ignore[arg-type]

    def claim_value(self, value: object) -> bool:
        op = self.op
        payload = value if op is None else GetResult(self.channel, op, value)  # type: ignore[arg-type]
        waiter = self.waiter
        if not waiter.take(payload):
            return False
        # From the take's return, no checkpoint before a `try` around the wake-up (see
        # SharedWaiter.claim): a taken waiter is always woken.
        if not waiter.resumes_on_loop:
            try:
                waiter.wake()  # a thread waiter's wake never fails
            except BaseException as exc:
                wake_or_hold(waiter, exc)
            return True
        # Counted in the same checkpoint-free stretch as the take: in flight until the task
        # consumes it or it comes back.
        channel = self.channel
        channel._in_flight += 1
        try:
            woke = waiter.wake()
        except BaseException as exc:
            woke = wake_or_hold(waiter, exc)
        if woke:
            return True
        waiter.value = UNSET  # its loop closed after the take: the value stays here
        channel._in_flight -= 1
        waiter.returned()  # type: ignore[attr-defined]
        return False

    def claim_closed(self) -> None:
        op = self.op
        if op is None:
            self.waiter.claim(_CLOSED)
        elif not op.ignore_on_closed:
            self.waiter.claim(Closed(self.channel, op))  # type: ignore[arg-type]
        else:
            # An ignored case of a closed channel never fires. If every shared case of the
            # select looks ignored-and-closed (read without the other mutexes: a hint), wake it;
            # it re-polls under all its locks and raises ChannelClosed only if that holds.
            assert self.group is not None
            if all(reg.op is not None and reg.op.ignore_on_closed and reg.channel._closed
                   for reg in self.group):
                self.waiter.claim(_ALL_CLOSED)


@final
class _Line:
    """A FIFO of registrations (one channel's parked senders or getters) for the mutex holder.

    A plain deque whose entries die in place: a registration whose waiter gave up or was claimed
    through another case of its select fails its claim and is dropped when it reaches the head.
    Sections read the head with ``items[0]`` and drop it with ``del items[0]`` (no call, so no
    signal checkpoint between a claim and the removal of what it claimed). `discard` counts the
    dead and compacts once they may outnumber the live (into a new deque, stored in one step).
    """

    __slots__ = ("dead", "items")

    _COMPACT_MIN: ClassVar[int] = 64

    def __init__(self) -> None:
        self.items: deque[_Reg] = deque()
        self.dead = 0

    def append(self, reg: _Reg) -> None:
        self.items.append(reg)

    def discard(self, reg: _Reg) -> None:
        """`reg`'s waiter gave up (its token is gone): count it; compact when worth it."""
        self.dead += 1
        items = self.items
        if self.dead > self._COMPACT_MIN and self.dead * 2 > len(items):
            self.items = deque([r for r in items if r.waiter.waiting])
            self.dead = 0

    def __len__(self) -> int:
        """The live registrations (O(n): for statistics and repr, not for sections)."""
        return sum(1 for reg in list(self.items) if reg.waiter.waiting)

    def __iter__(self) -> Iterator[_Reg]:
        return iter(list(self.items))


@final
class _LoopOnlyAdapter(Waiter):
    """A task select's waiter as seen by a loop-only Channel's registration (loop thread)."""

    __slots__ = ("shared",)

    resumes_on_loop = True

    def __init__(self, shared: SharedTaskWaiter) -> None:
        self.shared = shared

    def try_wake(self, value: object) -> bool:
        return self.shared.claim(value)

    @property
    def waiting(self) -> bool:
        return self.shared.waiting
