"""A cancellation that arrives after a channel operation's point of no return (issue 23, item 1).

The rule (``executors.aio._cancel.defer_cancel``): the operation took effect, so the task goes
on with its result; the cancellation is re-delivered at the task's next await only if the task
is still counted as cancelling when it yields (an ``asyncio.timeout()`` that withdrew it with
``uncancel()`` meanwhile leaves nothing behind), and a task that ends without yielding ends
with its result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from helpers.cancel_delivery import (
    MODES,
    Endpoint,
    run_tasks,
    select_endpoint,
    sender_task_cancelled_after_hand_off,
)

from executors.aio import Channel, Send, SendResult, select
from executors.aio._cancel import defer_cancel
from executors.errors import ChannelClosed


def _channel_endpoint(size: int, via_select: bool) -> Callable[[], Endpoint]:
    def make() -> Endpoint:
        ch: Channel[int] = Channel(size)
        if not via_select:
            return Endpoint(ch.send, ch.get, ch.close, (ChannelClosed,))
        return select_endpoint(ch, Channel())  # a second case that never fires

    return make


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("via_select", [False, True], ids=["send-get", "select"])
@pytest.mark.parametrize("size", [0, 1])
def test_a_value_is_received_iff_its_sender_saw_success(size: int, via_select: bool,
                                                        mode: str, seed: int) -> None:
    """3 producers, 3 consumers on a loop-only Channel, every operation cut short by
    asyncio.wait_for, asyncio.timeout(), an outside cancel() or a cancel() of its own task
    (0.5 ms, 1 ms, 1 s): every value is received once iff its sender saw success, no
    CancelledError reaches a task whose cancelling() is 0, every cancel() that landed arrives,
    and no task is left counted as cancelling."""
    ledger = asyncio.run(run_tasks(_channel_endpoint(size, via_select), mode, seed, 150))
    assert ledger.violations() == {}
    assert ledger.sent, "nothing went through: the run tested nothing"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", MODES)
def test_campaign_many_seeds(mode: str) -> None:
    """The issue's campaign (3 producers and 3 consumers, 9,000 values, Channel(0)) over
    several seeds, send/get and select alike: no promise broken once."""
    for seed in range(4):
        for via_select in (False, True):
            ledger = asyncio.run(run_tasks(_channel_endpoint(0, via_select), mode, seed, 3000))
            assert ledger.violations() == {}, (seed, via_select)


# -- the single scenarios, deterministic --------------------------------------------------------


@pytest.mark.parametrize("how", ["send", "select"])
def test_a_task_cancelled_after_its_value_was_taken_ends_with_its_result(how: str) -> None:
    """The 3.11 wait_for shape: a task running only the send, cancelled after a getter took the
    value and before it resumed, ends with its result, not cancelled (it used to end both
    cancelled and delivered)."""

    cancelled, result = sender_task_cancelled_after_hand_off(Channel(), how)
    assert not cancelled
    assert result is None if how == "send" else isinstance(result, SendResult)


async def wait_until_parked(ch: Channel[int]) -> None:
    await asyncio.sleep(0)  # the sender's first step parks it
    assert ch.statistics().waiting_senders == 1


def _timeout_expiring_at_the_hand_off(how: str, outside_cancel: bool) -> list[object]:
    """Send in an asyncio.timeout() block; in one step the timeout becomes due, a getter takes
    the value and (optionally) an outside cancel() lands; the sender resumes after all three.
    Returns what the sender saw, up to its next await."""

    async def main() -> list[object]:
        ch: Channel[int] = Channel()
        scopes: list[asyncio.Timeout] = []
        log: list[object] = []

        async def sender() -> None:
            async with asyncio.timeout(10) as scope:
                scopes.append(scope)
                if how == "send":
                    await ch.send(1)
                else:
                    await select(Send(ch, 1))
            log.append("block exited")
            try:
                await asyncio.sleep(0)
                log.append("nothing pending")
            except asyncio.CancelledError:
                log.append(("cancelled", _cancelling()))

        task = asyncio.create_task(sender())
        await wait_until_parked(ch)
        scopes[0].reschedule(asyncio.get_running_loop().time() - 1)
        assert ch.get_nowait() == 1
        if outside_cancel:
            task.cancel()
        await asyncio.wait([task])
        return log

    return asyncio.run(main())


def _cancelling() -> int:
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling()


@pytest.mark.parametrize("how", ["send", "select"])
def test_a_timeout_that_expires_as_the_send_completes_leaves_nothing_pending(how: str) -> None:
    """asyncio.timeout() expires in the iteration in which a getter takes the value: the send
    returns, the block exits normally, and no CancelledError reaches the task at its next
    await (it used to on 3.11/3.12, with cancelling() == 0)."""
    assert _timeout_expiring_at_the_hand_off(how, False) == ["block exited", "nothing pending"]


@pytest.mark.parametrize("how", ["send", "select"])
def test_an_outside_cancel_beside_the_timeout_still_arrives(how: str) -> None:
    """The timeout expired and an outside cancel() landed too, both after the hand-off: the
    timeout withdraws its own request when the block exits, the outside one arrives at the
    next await with cancelling() == 1."""
    assert _timeout_expiring_at_the_hand_off(how, True) == ["block exited", ("cancelled", 1)]


def test_an_outside_cancel_after_the_hand_off_arrives_at_the_next_await() -> None:
    """A task that goes on after a send that a cancel() met past its point of no return: the
    send returns, and the cancellation arrives at its next await, cancelling() == 1."""

    async def main() -> list[object]:
        ch: Channel[int] = Channel()
        log: list[object] = []

        async def sender() -> None:
            await ch.send(1)
            log.append("sent")
            try:
                await asyncio.sleep(0)
                log.append("not cancelled")
            except asyncio.CancelledError:
                log.append(("cancelled", _cancelling()))

        task = asyncio.create_task(sender())
        await wait_until_parked(ch)
        ch.get_nowait()
        task.cancel()
        await task
        return log

    assert asyncio.run(main()) == ["sent", ("cancelled", 1)]



def test_the_deferred_cancellation_keeps_its_message_and_is_a_no_op_outside_a_task() -> None:
    """The re-delivered cancellation carries the message of the cancel() it stands for; the
    rule does nothing when no task is running (a loop callback)."""

    async def main() -> object:
        ch: Channel[int] = Channel()

        async def sender() -> object:
            await ch.send(1)
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError as exc:
                return exc.args
            return "not cancelled"

        task = asyncio.create_task(sender())
        await wait_until_parked(ch)
        ch.get_nowait()
        task.cancel("why")
        return await task

    async def outside_a_task() -> int:
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def callback() -> None:  # on the loop, but no task is running
            defer_cancel(asyncio.CancelledError("outside"))
            done.set_result(None)

        loop.call_soon(callback)
        await done
        await asyncio.sleep(0)  # nothing was requested of this task either
        return _cancelling()

    assert asyncio.run(main()) == ("why",)
    assert asyncio.run(outside_a_task()) == 0
