"""Channel and Select: API contracts, FIFO and no-barging, close, cancellation, invariants."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import executors.aio
from executors.aio import (
    Channel,
    ChannelStatistics,
    Closed,
    Get,
    GetResult,
    Select,
    Send,
    SendResult,
    select,
)
from executors.aio._cancel import defer_cancel
from executors.aio.channels import _Registration
from executors.errors import ChannelClosed, WouldBlock

T = TypeVar("T")


def run(fn: Callable[[], Coroutine[object, object, T]]) -> T:
    return asyncio.run(fn())


async def wait_until(cond: Callable[[], bool], steps: int = 10_000) -> None:
    """Yield to the loop until `cond()` holds (bounded: fails instead of hanging)."""
    for _ in range(steps):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


def assert_idle(*channels: Channel[Any]) -> None:
    """No registration is left in any wait queue."""
    for ch in channels:
        stats = ch.statistics()
        assert (stats.waiting_senders, stats.waiting_getters) == (0, 0), ch


# --- construction and introspection ---------------------------------------------------------


def test_size_validation() -> None:
    """size must be an int >= 0; bools and floats are refused with an error naming `size`."""
    with pytest.raises(ValueError, match="size"):
        Channel(-1)
    with pytest.raises(TypeError, match="size"):
        Channel(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="size"):
        Channel(True)


def test_operation_validation() -> None:
    """Send/Get/Select reject a non-channel, a non-bool flag, a non-operation and duplicates."""
    ch: Channel[int] = Channel()
    with pytest.raises(TypeError, match="channel"):
        Send("nope", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="channel"):
        Get(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ignore_on_closed"):
        Get(ch, ignore_on_closed=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="operation"):
        Select(ch)  # type: ignore[arg-type]
    op = Get(ch)
    with pytest.raises(ValueError, match="already"):
        Select(op, op)
    sel = Select(op)
    sel.remove(op)
    with pytest.raises(ValueError, match="not in"):
        sel.remove(op)


def test_introspection() -> None:
    """len() is the buffered count; size, closed, statistics() and repr show the state."""
    ch: Channel[int] = Channel(2)
    ch.send_nowait(1)
    assert len(ch) == 1 and ch.size == 2 and not ch.closed
    assert ch.statistics() == ChannelStatistics(
        size=2, buffered=1, closed=False, waiting_senders=0, waiting_getters=0
    )
    assert repr(ch) == "<Channel size=2 buffered=1 senders=0 getters=0 open>"
    ch.close()
    assert ch.statistics().closed and "closed" in repr(ch)
    sel = Select(Get(ch), ordered=True)
    assert repr(sel) == "<Select operations=1 ordered>" and len(sel) == 1 and sel.ordered


def test_public_names_exported() -> None:
    """The channel names are re-exported from executors.aio."""
    for name in ("Channel", "Send", "Get", "Select", "select", "SendResult", "GetResult",
                 "Closed", "atomic"):
        assert name in executors.aio.__all__


def test_state_changes_are_marked_atomic() -> None:
    """Every state-changing function of the channel module carries the atomic mark."""
    for fn in (Channel.send_nowait, Channel.get_nowait, Channel.close, Channel._take,
               Channel._offer, Channel._put_back, Channel._leave_get, Channel._leave_send,
               Channel._park, Channel._received,
               Select._poll, Select._park, Select._leave, Select.add, Select.remove,
               _Registration.claim, _Registration.claim_sent, _Registration.claim_value,
               _Registration.claim_closed, defer_cancel):
        assert getattr(fn, "__executors_atomic__", False), fn


# --- rendezvous and nowait ---------------------------------------------------------------------


def test_rendezvous_send_completes_only_when_taken() -> None:
    """size=0: a send stays pending until a getter takes that value; the buffer stays empty."""

    async def main() -> None:
        ch: Channel[int] = Channel()
        for i in range(200):
            done = asyncio.Event()

            async def sender(i: int = i, done: asyncio.Event = done) -> None:
                await ch.send(i)
                done.set()

            task = asyncio.create_task(sender())
            await wait_until(lambda: ch.statistics().waiting_senders == 1)
            for _ in range(3):
                await asyncio.sleep(0)
            assert not done.is_set() and len(ch) == 0
            assert await ch.get() == i
            await task
            assert done.is_set()
        assert_idle(ch)

    run(main)


def test_nowait_on_unbuffered_needs_a_parked_partner() -> None:
    """send_nowait succeeds only while a getter is parked; get_nowait only while a sender is."""

    async def main() -> None:
        ch: Channel[str] = Channel()
        with pytest.raises(WouldBlock):
            ch.send_nowait("x")
        with pytest.raises(WouldBlock):
            ch.get_nowait()
        getter = asyncio.create_task(ch.get())
        await wait_until(lambda: ch.statistics().waiting_getters == 1)
        ch.send_nowait("a")
        assert await getter == "a"
        sender = asyncio.create_task(ch.send("b"))
        await wait_until(lambda: ch.statistics().waiting_senders == 1)
        assert ch.get_nowait() == "b"
        await sender
        assert_idle(ch)

    run(main)


def test_buffered_nowait() -> None:
    """size=1: send_nowait succeeds once, then raises WouldBlock; get_nowait drains it."""
    ch: Channel[int] = Channel(1)
    ch.send_nowait(1)
    with pytest.raises(WouldBlock):
        ch.send_nowait(2)
    assert ch.get_nowait() == 1
    with pytest.raises(WouldBlock):
        ch.get_nowait()


# --- FIFO of waiters, no barging -----------------------------------------------------------------


def test_parked_getters_served_in_order_and_no_barging() -> None:
    """Getters G1..Gk parked in order get 1..k; a newcomer's get_nowait never takes their values."""

    async def main() -> None:
        ch: Channel[int] = Channel(3)
        tasks = []
        for _ in range(5):
            tasks.append(asyncio.create_task(ch.get()))
            await asyncio.sleep(0)
        await wait_until(lambda: ch.statistics().waiting_getters == 5)
        for i in range(1, 6):
            ch.send_nowait(i)
            with pytest.raises(WouldBlock):
                ch.get_nowait()  # the value belongs to a parked getter
        assert [await t for t in tasks] == [1, 2, 3, 4, 5]
        assert_idle(ch)

    run(main)


def test_parked_senders_in_order_buffer_refilled_from_the_head() -> None:
    """Full buffer + parked senders: a get returns the buffer head, the first parked sender's
    value enters the tail (chan.go recv), and a newcomer's send_nowait cannot take that slot."""

    async def main() -> None:
        ch: Channel[int] = Channel(2)
        ch.send_nowait(0)
        ch.send_nowait(1)
        senders = []
        for i in range(2, 6):
            senders.append(asyncio.create_task(ch.send(i)))
            await asyncio.sleep(0)
        await wait_until(lambda: ch.statistics().waiting_senders == 4)
        assert ch.get_nowait() == 0
        assert len(ch) == 2 and ch.statistics().waiting_senders == 3
        with pytest.raises(WouldBlock):
            ch.send_nowait(99)
        got = [await ch.get() for _ in range(5)]
        assert got == [1, 2, 3, 4, 5]
        await asyncio.gather(*senders)
        assert_idle(ch)

    run(main)


def test_unbuffered_parked_senders_served_in_order() -> None:
    """size=0: senders S1..Sk parked in order are taken in order, each by direct hand-off; a
    newcomer's send_nowait cannot jump the line (no getter is parked); repr shows the line."""

    async def main() -> None:
        ch: Channel[int] = Channel()
        senders = []
        for i in range(5):
            senders.append(asyncio.create_task(ch.send(i)))
            await asyncio.sleep(0)
        await wait_until(lambda: ch.statistics().waiting_senders == 5)
        assert repr(ch) == "<Channel size=0 buffered=0 senders=5 getters=0 open>"
        with pytest.raises(WouldBlock):
            ch.send_nowait(99)
        assert ch.get_nowait() == 0
        assert [await ch.get() for _ in range(4)] == [1, 2, 3, 4]
        await asyncio.gather(*senders)
        getter = asyncio.create_task(ch.get())
        await wait_until(lambda: ch.statistics().waiting_getters == 1)
        assert repr(ch) == "<Channel size=0 buffered=0 senders=0 getters=1 open>"
        ch.send_nowait(5)
        assert await getter == 5
        assert_idle(ch)

    run(main)


# --- close -------------------------------------------------------------------------------------


def test_close_keeps_buffered_values_then_raises() -> None:
    """After close, buffered values are received in order, then every get raises ChannelClosed."""

    async def main() -> None:
        ch: Channel[int] = Channel(3)
        for i in range(3):
            await ch.send(i)
        ch.close()
        with pytest.raises(ChannelClosed):
            await ch.send(9)
        with pytest.raises(ChannelClosed):
            ch.send_nowait(9)
        assert [await ch.get() for _ in range(3)] == [0, 1, 2]
        for _ in range(3):
            with pytest.raises(ChannelClosed):
                await ch.get()
            with pytest.raises(ChannelClosed):
                ch.get_nowait()
        with pytest.raises(ChannelClosed, match="close of a closed"):
            ch.close()

    run(main)


def test_close_wakes_every_parked_getter_sender_and_select() -> None:
    """close() wakes k parked getters (ChannelClosed), parked senders (ChannelClosed, value not
    sent) and parked selects (Closed naming the case); nothing stays parked."""

    async def main() -> None:
        getters_ch: Channel[int] = Channel()
        senders_ch: Channel[int] = Channel()
        getters = [asyncio.create_task(getters_ch.get()) for _ in range(5)]
        senders = [asyncio.create_task(senders_ch.send(i)) for i in range(5)]
        op = Get(getters_ch)
        sel = asyncio.create_task(select(op, Get(Channel())))
        await wait_until(lambda: getters_ch.statistics().waiting_getters == 6
                         and senders_ch.statistics().waiting_senders == 5)
        getters_ch.close()
        senders_ch.close()
        for t in getters + senders:
            with pytest.raises(ChannelClosed):
                await t
        assert await sel == Closed(getters_ch, op)
        assert_idle(getters_ch, senders_ch)
        assert len(senders_ch) == 0

    run(main)


def test_async_for_runs_until_closed_and_drained() -> None:
    """`async for` yields every value sent, then stops when the channel is closed and drained."""

    async def main() -> list[int]:
        ch: Channel[int] = Channel(2)

        async def produce() -> None:
            for i in range(10):
                await ch.send(i)
            ch.close()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(produce())
            return [v async for v in ch]

    assert run(main) == list(range(10))


# --- select contracts ----------------------------------------------------------------------------


def test_select_results_name_the_operation() -> None:
    """select returns SendResult/GetResult(value)/Closed naming the channel and op object."""

    async def main() -> None:
        a: Channel[int] = Channel(1)
        send = Send(a, 5)
        assert await select(send, Get(Channel())) == SendResult(a, send)
        get = Get(a)
        assert await select(get, Get(Channel())) == GetResult(a, get, 5)
        a.close()
        assert await select(get) == Closed(a, get)
        sop = Send(a, 1)
        assert Select(sop).select_nowait() == Closed(a, sop)

    run(main)


def test_select_nowait_changes_nothing_when_nothing_ready() -> None:
    """select_nowait with only unready cases raises WouldBlock, consumes nothing, parks nothing."""
    a: Channel[int] = Channel()
    b: Channel[int] = Channel(1)
    b.send_nowait(1)
    c: Channel[int] = Channel(1)
    with pytest.raises(WouldBlock):
        Select(Get(a), Send(b, 2), Send(a, 3), Get(c)).select_nowait()
    assert len(b) == 1 and len(c) == 0
    assert_idle(a, b, c)


def test_empty_select_raises_value_error() -> None:
    """Decision: a select with no operations (or all removed) raises ValueError, both forms."""

    async def main() -> None:
        with pytest.raises(ValueError, match="no operations"):
            await select()
        ch: Channel[int] = Channel()
        op = Get(ch)
        sel = Select(op)
        sel.remove(op)
        with pytest.raises(ValueError, match="no operations"):
            sel.select_nowait()

    run(main)


def test_all_ignored_and_closed_select_raises_channel_closed() -> None:
    """Decision: a select whose every case is ignore_on_closed on a closed channel raises
    ChannelClosed at once, and a parked one does so when its last channel closes."""

    async def main() -> None:
        a: Channel[int] = Channel()
        b: Channel[int] = Channel()
        a.close()
        sel = Select(Get(a, ignore_on_closed=True), Send(a, 1, ignore_on_closed=True))
        with pytest.raises(ChannelClosed):
            sel.select_nowait()
        with pytest.raises(ChannelClosed):
            await sel.select()
        c: Channel[int] = Channel()
        parked = asyncio.create_task(
            select(Get(b, ignore_on_closed=True), Send(c, 1, ignore_on_closed=True)))
        await wait_until(lambda: b.statistics().waiting_getters == 1)
        b.close()  # c still open: the select keeps waiting, b's registration is dropped
        for _ in range(5):
            await asyncio.sleep(0)
        assert not parked.done() and b.statistics().waiting_getters == 0
        c.close()
        with pytest.raises(ChannelClosed):
            await parked
        assert_idle(a, b, c)

    run(main)


def test_close_reports_closed_for_the_case_not_ignored() -> None:
    """A parked select with an ignored Get and a non-ignored Send on one channel: close()
    reports Closed for the Send (it does not raise ChannelClosed for the whole select)."""

    async def main() -> None:
        c: Channel[int] = Channel()
        send = Send(c, 1)
        task = asyncio.create_task(select(Get(c, ignore_on_closed=True), send))
        await wait_until(lambda: c.statistics().waiting_getters == 1)
        c.close()
        assert await task == Closed(c, send)
        assert_idle(c)

    run(main)


def test_ignored_case_is_never_chosen_once_closed() -> None:
    """An ignore_on_closed Get on a closed channel is never chosen; the other case wins."""

    async def main() -> None:
        a: Channel[int] = Channel()
        b: Channel[int] = Channel(1)
        a.close()
        ignored = Get(a, ignore_on_closed=True)
        for i in range(200):
            b.send_nowait(i)
            result = await select(ignored, Get(b))
            assert isinstance(result, GetResult) and result.value == i

    run(main)


def test_select_reuse_add_remove() -> None:
    """A removed case never fires again; re-adding works; send values are fixed per op."""

    async def main() -> None:
        a: Channel[int] = Channel(5)
        b: Channel[int] = Channel(5)
        sa, sb = Send(a, 1), Send(b, 2)
        sel = Select(sa, sb)
        fired = []
        for _ in range(2):
            result = await sel.select()
            assert isinstance(result, SendResult)
            fired.append(result.operation)
            sel.remove(result.operation)
        assert set(fired) == {sa, sb} and len(sel) == 0
        sel.add(sa)
        assert await sel.select() == SendResult(a, sa)
        assert [a.get_nowait(), a.get_nowait(), b.get_nowait()] == [1, 1, 2]

    run(main)


def test_select_with_same_channel_twice() -> None:
    """Two Gets on one channel in one select: one completes, no registration is left behind
    (TestSelectDuplicateChannel), and a later plain getter on that channel is served."""

    async def main() -> None:
        c: Channel[int] = Channel()
        d: Channel[int] = Channel()
        sel = asyncio.create_task(select(Get(c), Get(c), Get(d)))
        await wait_until(lambda: c.statistics().waiting_getters == 2)
        plain = asyncio.create_task(c.get())
        await wait_until(lambda: c.statistics().waiting_getters == 3)
        await d.send(7)
        result = await sel
        assert isinstance(result, GetResult) and result.value == 7
        assert c.statistics().waiting_getters == 1
        await c.send(8)
        assert await plain == 8
        assert_idle(c, d)

    run(main)


def test_select_never_pairs_with_itself() -> None:
    """Alone on an unbuffered channel, select(Send(c), Get(c)) blocks; a partner completes it."""

    async def main() -> None:
        c: Channel[int] = Channel()
        task = asyncio.create_task(select(Send(c, 1), Get(c)))
        await wait_until(lambda: c.statistics().waiting_getters == 1)
        for _ in range(10):
            await asyncio.sleep(0)
        assert not task.done()
        assert c.get_nowait() == 1
        assert isinstance(await task, SendResult)
        assert_idle(c)

    run(main)


def test_ordered_select_is_deterministic() -> None:
    """ordered=True: the first ready case in add order wins in every trial."""

    async def main() -> None:
        never: Channel[int] = Channel()
        a: Channel[int] = Channel(1)
        b: Channel[int] = Channel(1)
        first = Get(a)
        sel = Select(Get(never), first, Get(b), ordered=True)
        for i in range(1000):
            if not len(a):
                a.send_nowait(i)
            if not len(b):
                b.send_nowait(i)
            result = await sel.select()
            assert result.operation is first

    run(main)


def test_ten_thousand_parked_selects_stay_fast() -> None:
    """10^4 selects parked on one shared channel: each completes or is cancelled in O(1)
    (no list.remove), and nothing is left parked."""

    async def main() -> float:
        shared: Channel[int] = Channel()
        own = [Channel[int]() for _ in range(10_000)]
        tasks = [asyncio.create_task(select(Get(shared), Get(c))) for c in own]
        await wait_until(lambda: shared.statistics().waiting_getters == 10_000)
        start = time.perf_counter()
        for c in own[:5000]:
            c.send_nowait(1)  # claims the select: its registration on `shared` goes at once
        assert shared.statistics().waiting_getters == 5000
        for t in tasks[5000:]:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = time.perf_counter() - start
        assert_idle(shared, *own)
        return elapsed

    # Generous: O(n^2) removal of 10^4 waiters takes seconds; O(1) takes tens of milliseconds.
    assert run(main) < 3.0


# --- cancellation ---------------------------------------------------------------------------------


def test_cancelled_getter_passes_handed_value_to_next_getter() -> None:
    """A value handed to a getter that is cancelled before it resumes goes to the next getter."""

    async def main() -> None:
        ch: Channel[str] = Channel()
        g1 = asyncio.create_task(ch.get())
        await asyncio.sleep(0)
        g2 = asyncio.create_task(ch.get())
        await wait_until(lambda: ch.statistics().waiting_getters == 2)
        await ch.send("v")  # returns at once: handed to g1
        g1.cancel()
        with pytest.raises(asyncio.CancelledError):
            await g1
        assert await g2 == "v"
        assert_idle(ch)

    run(main)


def test_cancelled_getter_puts_value_back_at_head() -> None:
    """With no other getter, the handed value goes back to the head of the buffer, even on an
    unbuffered channel, and is received before later values (and survives close)."""

    async def main() -> None:
        ch: Channel[str] = Channel()
        g1 = asyncio.create_task(ch.get())
        await wait_until(lambda: ch.statistics().waiting_getters == 1)
        ch.send_nowait("first")
        g1.cancel()
        with pytest.raises(asyncio.CancelledError):
            await g1
        assert len(ch) == 1
        later = asyncio.create_task(ch.send("second"))
        await wait_until(lambda: ch.statistics().waiting_senders == 1)
        ch.close()
        with pytest.raises(ChannelClosed):
            await later
        assert ch.get_nowait() == "first"
        with pytest.raises(ChannelClosed):
            ch.get_nowait()

    run(main)


def test_cancelled_select_puts_value_back() -> None:
    """A select claimed by a Get and cancelled before resuming hands the value back."""

    async def main() -> None:
        a: Channel[int] = Channel()
        b: Channel[int] = Channel()
        sel = asyncio.create_task(select(Get(a), Get(b)))
        await wait_until(lambda: a.statistics().waiting_getters == 1)
        a.send_nowait(42)
        sel.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sel
        assert a.get_nowait() == 42
        assert_idle(a, b)

    run(main)


def test_sender_cancelled_after_value_taken_returns_normally() -> None:
    """Past the point of no return (value taken) a cancelled send returns normally and the
    cancellation fires at the task's next await; the value was received exactly once."""

    async def main() -> None:
        ch: Channel[int] = Channel()
        log = []

        async def sender() -> None:
            await ch.send(1)
            log.append("send returned")
            await asyncio.sleep(0)
            log.append("not reached")

        task = asyncio.create_task(sender())
        await wait_until(lambda: ch.statistics().waiting_senders == 1)
        assert ch.get_nowait() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log == ["send returned"]

    run(main)


def test_select_send_cancelled_after_taken_returns_result() -> None:
    """A select whose Send was taken and whose asyncio.timeout expires before it resumes returns
    its SendResult; the cancellation fires at the next await and still becomes TimeoutError."""

    async def main() -> None:
        ch: Channel[int] = Channel()
        op = Send(ch, 5)
        seen: list[object] = []
        scopes: list[asyncio.Timeout] = []

        async def selector() -> None:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(10) as scope:
                    scopes.append(scope)
                    seen.append(await select(op, Get(Channel())))
                    await asyncio.sleep(0)
                    seen.append("not reached")
            seen.append("timed out")

        task = asyncio.create_task(selector())
        await wait_until(lambda: ch.statistics().waiting_senders == 1)
        # The timeout's callback is queued first, then the hand-off wakes the selector: the
        # cancellation lands in the window after its value was taken.
        scopes[0].reschedule(asyncio.get_running_loop().time() - 1)
        assert ch.get_nowait() == 5
        await task
        assert seen == [SendResult(ch, op), "timed out"]

    run(main)


def test_cancelled_select_leaves_no_registration() -> None:
    """A parked select cancelled before any counterpart leaves no registration anywhere."""

    async def main() -> None:
        chans = [Channel[int](i % 2) for i in range(6)]
        for c in chans[1::2]:
            c.send_nowait(0)  # buffered full: Sends park
        ops = [Get(c) for c in chans[::2]] + [Send(c, 1) for c in chans[1::2]]
        task = asyncio.create_task(select(*ops))
        await wait_until(lambda: chans[0].statistics().waiting_getters == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert_idle(*chans)

    run(main)


def test_close_while_a_value_is_in_flight_hands_it_to_a_waiting_getter() -> None:
    """A value handed to getter g1 is in flight (g1 has not resumed) when the channel closes:
    the channel is not drained yet, so the parked g2 keeps waiting instead of raising; g1 is
    cancelled and hands the value back; g2 gets it. The send returned normally, so the value is
    received, and "closed and drained" is reported only once nothing is left."""

    async def main() -> None:
        ch: Channel[str] = Channel()
        g1 = asyncio.create_task(ch.get())
        await asyncio.sleep(0)
        g2 = asyncio.create_task(ch.get())
        await wait_until(lambda: ch.statistics().waiting_getters == 2)
        ch.send_nowait("v")  # handed to g1, which has not resumed
        ch.close()
        assert ch.statistics().waiting_getters == 1  # g2 still waits: "v" may come back
        with pytest.raises(WouldBlock):
            ch.get_nowait()  # neither a value nor "drained" yet
        g1.cancel()
        with pytest.raises(asyncio.CancelledError):
            await g1
        assert await g2 == "v"
        assert len(ch) == 0
        with pytest.raises(ChannelClosed):
            await ch.get()
        with pytest.raises(ChannelClosed):
            ch.get_nowait()
        assert_idle(ch)

    run(main)


async def _released_by(go: asyncio.Future[None], aw: Awaitable[T]) -> T:
    """Await `aw` once `go` is resolved: resolving `go` queues this task's next step at once, so
    it runs before any wake-up queued later (a getter's, in the tests below)."""
    await go
    return await aw


def test_close_while_a_value_is_in_flight_then_received() -> None:
    """Getters and selects that arrive at a closed channel while a value is in flight wait
    (they cannot tell "drained" yet); when the value's getter resumes with it, they all wake
    reporting the channel drained (ChannelClosed, Closed, or ChannelClosed for a select whose
    cases are all ignored)."""

    async def main() -> None:
        ch: Channel[int] = Channel(1)
        go: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        g1 = asyncio.create_task(ch.get())
        op = Get(ch)
        late = asyncio.create_task(_released_by(go, ch.get()))
        sel = asyncio.create_task(_released_by(go, select(op)))
        ignored = asyncio.create_task(_released_by(go, select(Get(ch, ignore_on_closed=True))))

        async def parked_getters() -> int:
            return ch.statistics().waiting_getters

        probe = asyncio.create_task(_released_by(go, parked_getters()))  # runs after the 3
        await wait_until(lambda: ch.statistics().waiting_getters == 1)
        go.set_result(None)  # the late arrivals run before g1 resumes
        ch.send_nowait(1)  # to g1, in flight
        ch.close()
        with pytest.raises(WouldBlock):
            Select(Get(ch)).select_nowait()
        assert await probe == 3  # all three parked (none saw "drained" while 1 was in flight)
        assert await g1 == 1
        with pytest.raises(ChannelClosed):
            await late
        assert await sel == Closed(ch, op)
        with pytest.raises(ChannelClosed):
            await ignored
        assert_idle(ch)

    run(main)


def test_cancelled_select_in_flight_value_reaches_a_getter_after_close() -> None:
    """The same for a select: a value handed to its Get case, which is then cancelled, is
    passed to a getter that came after close() (it waited instead of seeing "drained")."""

    async def main() -> None:
        ch: Channel[int] = Channel()
        go: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sel = asyncio.create_task(select(Get(ch), Get(Channel())))
        late = asyncio.create_task(_released_by(go, ch.get()))
        await wait_until(lambda: ch.statistics().waiting_getters == 1)
        go.set_result(None)
        ch.send_nowait(7)  # to the select, in flight
        ch.close()
        sel.cancel()  # before it resumes: it hands 7 back
        with pytest.raises(asyncio.CancelledError):
            await sel
        assert await late == 7
        assert len(ch) == 0
        assert_idle(ch)

    run(main)


def test_select_get_on_closed_channel_drains_the_buffer_first() -> None:
    """A Get case on a closed channel receives its buffered values (in order) before it
    reports Closed; an ignore_on_closed Get does too, and only then stops being chosen."""

    async def main() -> None:
        ch: Channel[int] = Channel(2)
        ch.send_nowait(0)
        ch.send_nowait(1)
        ch.close()
        op = Get(ch)
        never: Channel[int] = Channel()
        sel = Select(op, Get(never))
        assert [await sel.select() for _ in range(2)] == [GetResult(ch, op, 0),
                                                         GetResult(ch, op, 1)]
        assert await sel.select() == Closed(ch, op)
        ch2: Channel[int] = Channel(1)
        ch2.send_nowait(5)
        ch2.close()
        ignored = Get(ch2, ignore_on_closed=True)
        sel2 = Select(ignored, Get(never))
        assert sel2.select_nowait() == GetResult(ch2, ignored, 5)
        with pytest.raises(WouldBlock):
            sel2.select_nowait()
        assert_idle(ch, ch2, never)

    run(main)


def test_timeout_on_parked_get_leaves_nothing() -> None:
    """asyncio.timeout around a parked get raises TimeoutError and leaves the channel idle."""

    async def main() -> None:
        ch: Channel[int] = Channel()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await ch.get()
        assert_idle(ch)

    run(main)


def _cancellation_stress(seed: int, rounds: int) -> None:
    """Random senders, getters and selects over shared channels, randomly cancelled (also in
    the hand-off window) and, late in the run, closed; every send that returned normally is
    received exactly once, no cancelled send's value is received, a channel some get reported
    drained holds no value afterwards, and all queues end empty."""
    rng = random.Random(seed)

    async def main() -> None:
        chans = [Channel[int](size) for size in (0, 0, 1, 3)]
        completed: collections.Counter[int] = collections.Counter()
        received: collections.Counter[int] = collections.Counter()
        counter = iter(range(10**9))
        tasks: list[asyncio.Task[None]] = []

        drained: set[Channel[Any]] = set()

        async def sender(ch: Channel[int], v: int) -> None:
            with contextlib.suppress(ChannelClosed):
                await ch.send(v)
                completed[v] += 1

        async def getter(ch: Channel[int]) -> None:
            try:
                received[await ch.get()] += 1
            except ChannelClosed:
                drained.add(ch)

        async def selector(ops: list[Send[int] | Get[int]]) -> None:
            result = await select(*ops)
            if isinstance(result, GetResult):
                received[result.value] += 1  # type: ignore[index]
            elif isinstance(result, SendResult):
                completed[result.operation.value] += 1  # type: ignore[index]
            elif isinstance(result.operation, Get):
                drained.add(result.channel)

        for round_ in range(rounds):
            kind = rng.random()
            ch = rng.choice(chans)
            if kind < 0.35:
                tasks.append(asyncio.create_task(sender(ch, next(counter))))
            elif kind < 0.7:
                tasks.append(asyncio.create_task(getter(ch)))
            else:
                ops: list[Send[int] | Get[int]] = [
                    Send(c, next(counter)) if rng.random() < 0.5 else Get(c)
                    for c in rng.sample(chans, rng.randint(1, 3))
                ]
                tasks.append(asyncio.create_task(selector(ops)))
            for _ in range(rng.randint(0, 2)):
                victim = rng.choice(tasks)
                victim.cancel()
            if round_ > rounds * 3 // 4 and rng.random() < 0.002:
                target = rng.choice(chans)
                if not target.closed:
                    target.close()
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        # Drain: cancel whatever is still parked, then collect what is buffered.
        for _ in range(3):
            await asyncio.sleep(0)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ch in drained:
            assert len(ch) == 0, "a value reappeared in a channel reported drained"
        for ch in chans:
            while len(ch):
                received[ch.get_nowait()] += 1
        assert received == completed
        assert_idle(*chans)

    asyncio.run(main())


def test_cancellation_stress_multiset() -> None:
    """Randomized cancellation stress with a final multiset check (see _cancellation_stress)."""
    for seed in range(4):
        _cancellation_stress(seed, 5000)


@pytest.mark.slow
def test_cancellation_stress_multiset_long() -> None:
    """The same stress, 10^5 operations."""
    _cancellation_stress(1234, 100_000)


# --- hypothesis: a channel's invariants ---------------------------------------------------


class ChannelMachine(RuleBasedStateMachine):
    """Parked senders/getters/selects and nowait calls, randomly cancelled and stepped; after
    every step: a live parked getter implies an empty buffer; a live parked sender implies a
    full buffer; once any get reported the channel closed and drained, it stays empty (no value
    reappears); at the end every completed send was received exactly once."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.size = 0
        self.ch: Channel[int] = Channel(0)
        self.other: Channel[int] = Channel(1)
        self.next_value = 0
        self.completed: collections.Counter[int] = collections.Counter()
        self.received: collections.Counter[int] = collections.Counter()
        self.tasks: list[asyncio.Task[None]] = []
        self.drained_seen = False

    @rule(size=st.integers(0, 3))
    @precondition(lambda self: not self.tasks and self.next_value == 0)
    def resize(self, size: int) -> None:
        self.ch = Channel(size)
        self.size = size
        # "Drained" was a fact about the old channel: the new one starts open and empty.
        self.drained_seen = False

    def _value(self) -> int:
        self.next_value += 1
        return self.next_value

    @rule()
    def park_sender(self) -> None:
        v = self._value()

        async def sender() -> None:
            await self.ch.send(v)
            self.completed[v] += 1

        self.tasks.append(self.loop.create_task(sender()))

    @rule()
    def park_getter(self) -> None:
        async def getter() -> None:
            try:
                self.received[await self.ch.get()] += 1
            except ChannelClosed:
                self.drained_seen = True

        self.tasks.append(self.loop.create_task(getter()))

    @rule(send=st.booleans())
    def park_select(self, send: bool) -> None:
        v = self._value()
        ops = [Send(self.ch, v) if send else Get(self.ch), Get(self.other)]

        async def selector() -> None:
            result = await select(*ops)
            if isinstance(result, SendResult):
                self.completed[v] += 1
            elif isinstance(result, GetResult) and result.channel is self.ch:
                self.received[result.value] += 1  # type: ignore[index]
            elif isinstance(result, Closed) and isinstance(result.operation, Get):
                self.drained_seen = True

        self.tasks.append(self.loop.create_task(selector()))

    @rule()
    def send_nowait(self) -> None:
        v = self._value()
        try:
            self.ch.send_nowait(v)
        except (WouldBlock, ChannelClosed):
            return
        self.completed[v] += 1

    @rule()
    def get_nowait(self) -> None:
        try:
            self.received[self.ch.get_nowait()] += 1
        except WouldBlock:
            pass
        except ChannelClosed:
            self.drained_seen = True

    @rule(index=st.integers(0, 50))
    @precondition(lambda self: self.tasks)
    def cancel(self, index: int) -> None:
        self.tasks[index % len(self.tasks)].cancel()

    @rule(steps=st.integers(1, 3))
    def step(self, steps: int) -> None:
        for _ in range(steps):
            self.loop.run_until_complete(asyncio.sleep(0))

    @rule()
    @precondition(lambda self: not self.ch.closed)
    def close(self) -> None:
        self.ch.close()

    @invariant()
    def channel_invariants(self) -> None:
        ch = self.ch
        live_getters = [r for r in ch._getters if r.waiting]
        live_senders = [r for r in ch._senders if r.waiting]
        if live_getters:
            assert len(ch) == 0
            own = {r.waiter for r in live_getters}
            assert all(r.waiter in own for r in live_senders)  # only a self-select on both
        if live_senders:
            assert len(ch) >= ch.size
        if ch.closed:
            assert not live_senders
            # Getters wait on a closed channel only while a value is in flight to a task that
            # may still hand it back.
            assert not live_getters or ch._in_flight
        if self.drained_seen:
            assert len(ch) == 0 and ch._in_flight == 0, "a value reappeared after 'drained'"

    def teardown(self) -> None:
        try:
            for t in self.tasks:
                t.cancel()

            async def finish() -> None:
                await asyncio.gather(*self.tasks, return_exceptions=True)

            self.loop.run_until_complete(finish())
            while True:
                try:
                    self.received[self.ch.get_nowait()] += 1
                except (WouldBlock, ChannelClosed):
                    break
            assert self.received == self.completed
            assert_idle(self.ch, self.other)
            assert self.ch._in_flight == 0 and self.other._in_flight == 0
        finally:
            self.loop.close()


ChannelMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None
)
test_channel_state_machine = ChannelMachine.TestCase


def test_channel_machine_resize_after_drained_is_a_new_channel() -> None:
    """The model itself: close -> get_nowait ("drained") -> resize(1) -> send_nowait is correct
    behaviour (the value lands in the new channel), not "a value reappeared after drained".
    Hypothesis once found this sequence; the resize rule must forget the old channel's flag."""
    machine = ChannelMachine()
    try:
        machine.channel_invariants()
        machine.close()
        machine.channel_invariants()
        machine.get_nowait()
        machine.channel_invariants()
        assert machine.drained_seen
        assert not machine.tasks and machine.next_value == 0  # resize's precondition holds
        machine.resize(1)
        machine.channel_invariants()
        machine.send_nowait()
        machine.channel_invariants()
        assert len(machine.ch) == 1
    finally:
        machine.teardown()


def test_deferred_cancellation_keeps_cancel_count() -> None:
    """A deferred cancellation leaves Task.cancelling() at its requested count."""
    async def main() -> None:
        ch: Channel[int] = Channel()
        counts = []

        async def sender() -> None:
            await ch.send(1)
            task = asyncio.current_task()
            assert task is not None
            counts.append(task.cancelling())
            await asyncio.sleep(0)

        task = asyncio.create_task(sender())
        await wait_until(lambda: ch.statistics().waiting_senders == 1)
        ch.get_nowait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert counts == [1]

    run(main)


@pytest.mark.parametrize("how", ["get", "send", "select"])
def test_parking_from_a_second_loop_while_one_waits_raises(how: str) -> None:
    """Issue 17, for channels: a task of a second event loop that would park on a channel
    while a task of the first is parked raises asyncio's "is bound to a different event loop"
    RuntimeError naming SharedChannel (it used to park, and a wake-up from the first loop's
    thread would never reach it), and registers nothing. Once the first loop's task is gone,
    the channel serves the second loop."""
    ch: Channel[int] = Channel(0)
    loop1 = asyncio.new_event_loop()
    try:
        # A getter parks on the first loop (a sender for the "send" case, so that the second
        # loop's send must park too rather than being matched at once).
        parked = loop1.create_task(ch.send(1) if how == "send" else ch.get())
        loop1.run_until_complete(asyncio.sleep(0))
        before = ch.statistics()
        assert before.waiting_getters + before.waiting_senders == 1

        async def second() -> object:
            async with asyncio.timeout(5):  # before the fix: parked until this timeout
                if how == "get":
                    return await ch.get()
                if how == "send":
                    return await ch.send(2)
                return await select(Get(Channel()), Get(ch))

        with pytest.raises(RuntimeError, match=r"different event loop.*SharedChannel"):
            asyncio.run(second())
        assert ch.statistics() == before
        parked.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop1.run_until_complete(parked)

        async def third() -> int:
            getter = asyncio.create_task(ch.get())
            await ch.send(7)
            return await getter

        assert asyncio.run(third()) == 7
    finally:
        loop1.close()
