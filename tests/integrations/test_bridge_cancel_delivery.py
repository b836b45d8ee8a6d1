"""Cancellation past the point of no return, on the bridge's shared primitives and views.

Issue 23, item 1, for `SharedChannel` (send, get, select over shared and loop-only cases), the
janus-compatible queues' ``async_q.put``/``get``, and the task side of the blocking views
(threads on the other side through `Portal.channel`, ``SharedChannel.blocking`` and
``Queue.sync_q``). The harness (helpers/cancel_delivery.py) cuts every task operation short with
asyncio.wait_for, asyncio.timeout(), an outside cancel() or a cancel() of its own task, and
checks: a value is received iff its sender saw success, no CancelledError reaches a task whose
cancelling() is 0, every cancel() that landed arrives, no task reports both cancelled and done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from helpers.cancel_delivery import (
    MODES,
    Endpoint,
    Ledger,
    ThreadEndpoint,
    run_tasks,
    run_with_threads,
    select_endpoint,
    sender_task_cancelled_after_hand_off,
)

from executors.aio import Channel, SendResult
from executors.errors import ChannelClosed
from integrations.bridge import (
    AsyncQueueShutDown,
    LifoQueue,
    Portal,
    PriorityQueue,
    Queue,
    SharedChannel,
    SyncQueueEmpty,
    SyncQueueFull,
    SyncQueueShutDown,
)

QUEUES = {"fifo": Queue, "lifo": LifoQueue, "priority": PriorityQueue}


def _shared(size: int, via_select: bool) -> Callable[[], Endpoint]:
    def make() -> Endpoint:
        ch: SharedChannel[int] = SharedChannel(size)
        if not via_select:
            return Endpoint(ch.send, ch.get, ch.close, (ChannelClosed,))
        # The second case is on a loop-only channel: the select parks through the adapter.
        return select_endpoint(ch, Channel())

    return make


def _queue(kind: str) -> Callable[[], Endpoint]:
    def make() -> Endpoint:
        q: Queue[int] = QUEUES[kind](1)
        return Endpoint(q.async_q.put, q.async_q.get, q.shutdown, (AsyncQueueShutDown,))

    return make


ENDPOINTS: dict[str, Callable[[], Endpoint]] = {
    "shared0": _shared(0, False),
    "shared1": _shared(1, False),
    "shared0-select": _shared(0, True),
    "shared1-select": _shared(1, True),
    **{f"queue-{kind}": _queue(kind) for kind in QUEUES},
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("endpoint", list(ENDPOINTS))
def test_tasks_a_value_is_received_iff_its_sender_saw_success(endpoint: str, mode: str,
                                                              seed: int) -> None:
    """3 producer and 3 consumer tasks on a SharedChannel (sizes 0 and 1, plain and through a
    select with a loop-only case) or a Queue/LifoQueue/PriorityQueue of 1, every operation cut
    short (0.5 ms, 1 ms, 1 s): every promise of the ledger holds."""
    ledger = asyncio.run(run_tasks(ENDPOINTS[endpoint], mode, seed, 150))
    assert ledger.violations() == {}
    assert ledger.sent, "nothing went through: the run tested nothing"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", MODES)
def test_campaign_many_seeds(mode: str) -> None:
    """The issue's campaign (3 producers, 3 consumers, 9,000 values a run) over several seeds on
    SharedChannel(0), plain and through a select, and Queue(1): no promise broken once."""
    for seed in range(3):
        for endpoint in ("shared0", "shared0-select", "queue-fifo"):
            ledger = asyncio.run(run_tasks(ENDPOINTS[endpoint], mode, seed, 3000))
            assert ledger.violations() == {}, (seed, endpoint)


def _portal_view() -> tuple[Callable[[], tuple[Endpoint, ThreadEndpoint]],
                            Callable[[Callable[[], Awaitable[Ledger]]], Ledger],
                            Callable[[], None]]:
    portal = Portal().open()

    def make() -> tuple[Endpoint, ThreadEndpoint]:
        ch: Channel[int] = Channel()
        view = portal.channel(ch)
        return (Endpoint(ch.send, ch.get, ch.close, (ChannelClosed,)),
                ThreadEndpoint(view.send, view.get, view.close, (TimeoutError,),
                               (ChannelClosed,)))

    return make, lambda fn: portal.call(fn), portal.close


def _shared_view() -> tuple[Callable[[], tuple[Endpoint, ThreadEndpoint]],
                            Callable[[Callable[[], Awaitable[Ledger]]], Ledger],
                            Callable[[], None]]:
    def make() -> tuple[Endpoint, ThreadEndpoint]:
        ch: SharedChannel[int] = SharedChannel()
        view = ch.blocking
        return (Endpoint(ch.send, ch.get, ch.close, (ChannelClosed,)),
                ThreadEndpoint(view.send, view.get, view.close, (TimeoutError,),
                               (ChannelClosed,)))

    return make, _asyncio_run, _nothing


def _queue_view() -> tuple[Callable[[], tuple[Endpoint, ThreadEndpoint]],
                           Callable[[Callable[[], Awaitable[Ledger]]], Ledger],
                           Callable[[], None]]:
    def make() -> tuple[Endpoint, ThreadEndpoint]:
        q: Queue[int] = Queue(1)
        return (Endpoint(q.async_q.put, q.async_q.get, q.shutdown, (AsyncQueueShutDown,)),
                ThreadEndpoint(lambda v, t: q.sync_q.put(v, timeout=t),
                               lambda t: q.sync_q.get(timeout=t), q.shutdown,
                               (SyncQueueFull, SyncQueueEmpty), (SyncQueueShutDown,)))

    return make, _asyncio_run, _nothing


def _asyncio_run(fn: Callable[[], Awaitable[Ledger]]) -> Ledger:
    async def main() -> Ledger:
        return await fn()

    return asyncio.run(main())


def _nothing() -> None:
    pass


VIEWS = {"portal-channel": _portal_view, "shared-blocking": _shared_view,
         "queue-sync_q": _queue_view}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("threads_produce", [False, True], ids=["tasks-send", "threads-send"])
@pytest.mark.parametrize("view", list(VIEWS))
def test_views_task_side_a_value_is_received_iff_its_sender_saw_success(
        view: str, threads_produce: bool, mode: str) -> None:
    """Tasks on one side, cut short as above, and 3 threads on the other through a blocking
    view (a Portal's view of a loop-only Channel, SharedChannel.blocking, Queue.sync_q) with
    random timeouts: every promise of the ledger holds for the tasks and the threads."""
    make, run_on_loop, close = VIEWS[view]()
    try:
        ledger = run_with_threads(make, mode, 7, 100, threads_produce, run_on_loop)
    finally:
        close()
    assert ledger.violations() == {}
    assert ledger.sent, "nothing went through: the run tested nothing"


# -- the single scenarios, deterministic --------------------------------------------------------


@pytest.mark.parametrize("kind", list(QUEUES))
def test_put_cancel_drop(kind: str) -> None:
    """CPython's (and culsans') test_put_cancel_drop against the queues: a put parked on a full
    queue, whose item moved in when a get made room, is cancelled before it resumes: it ends
    cancelled and its item is withdrawn (janus: "cancelled, qsize 0"), so the retried put
    does not block. It used to end cancelled with its item queued, and the retry hung."""

    async def main() -> tuple[str, int, int, int]:
        q: Queue[int] = QUEUES[kind](1)
        q.async_q.put_nowait(1)
        writer = asyncio.create_task(q.async_q.put(2))
        await asyncio.sleep(0)
        assert q.async_q.get_nowait() == 1
        writer.cancel()
        try:
            await writer
            outcome = "result"
        except asyncio.CancelledError:
            outcome = "cancelled"
        qsize = q.async_q.qsize()
        writer = asyncio.create_task(q.async_q.put(2))  # the retry
        await asyncio.wait_for(writer, 5)
        value = q.async_q.get_nowait()
        return outcome, qsize, value, q.async_q.qsize()

    assert asyncio.run(main()) == ("cancelled", 0, 2, 0)


@pytest.mark.parametrize("kind", list(QUEUES))
def test_put_cancelled_after_its_item_was_got_ends_with_its_result(kind: str) -> None:
    """The other side of the rule: the item of the cancelled put was already got, so the put
    took effect and its task ends with its result (not cancelled), and the item is not
    counted twice for join."""

    async def main() -> tuple[bool, object, int]:
        q: Queue[int] = QUEUES[kind](1)
        q.async_q.put_nowait(1)
        writer = asyncio.create_task(q.async_q.put(2))
        await asyncio.sleep(0)
        assert q.async_q.get_nowait() == 1
        assert q.async_q.get_nowait() == 2
        writer.cancel()
        await asyncio.wait([writer])
        return writer.cancelled(), writer.result(), q.async_q.unfinished_tasks

    assert asyncio.run(main()) == (False, None, 2)


def test_withdrawn_put_frees_its_slot_for_the_next_parked_putter() -> None:
    """A withdrawn item leaves a slot; the next parked putter's item moves into it at once,
    in arrival order, so nothing waits with a free slot."""

    async def main() -> list[int]:
        q: Queue[int] = Queue(1)
        q.async_q.put_nowait(1)
        first = asyncio.create_task(q.async_q.put(2))
        second = asyncio.create_task(q.async_q.put(3))
        await asyncio.sleep(0)
        assert q.async_q.get_nowait() == 1  # 2 moves in
        first.cancel()
        await asyncio.wait([first])
        assert first.cancelled()
        await asyncio.wait_for(second, 5)
        return [q.async_q.get_nowait(), q.async_q.qsize(), q.async_q.unfinished_tasks]

    assert asyncio.run(main()) == [3, 0, 2]  # unfinished: 1 and 3 (the withdrawn 2 is done)


@pytest.mark.parametrize("how", ["send", "select"])
def test_shared_send_task_cancelled_after_hand_off_ends_with_its_result(how: str) -> None:
    """A task that only sends on a SharedChannel, cancelled after a getter took the value and
    before it resumed, ends with its result (it used to end cancelled, the value delivered)."""

    cancelled, result = sender_task_cancelled_after_hand_off(SharedChannel(), how)
    assert not cancelled
    assert result is None if how == "send" else isinstance(result, SendResult)
