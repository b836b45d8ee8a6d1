"""Channels: ours, trio's memory channels, anyio's memory object streams, asyncio.Queue, aiochannel.

Measures, interleaved round by round (the harness's rule: ratios, never lone absolute times):

- producer -> consumer throughput, one task each, unbuffered (a rendezvous: ours, trio, anyio;
  asyncio.Queue and aiochannel have no rendezvous, 0 means unbounded there);
- the same with a buffer of one (ours, trio, anyio, ``asyncio.Queue(maxsize=1)``,
  ``aiochannel.Channel(1)``);
- beside the unbuffered row, its floor: `FloorChannel`, a deque of parked futures and
  ``set_result`` on hand-off, nothing else (no cancellation, no select, no close, no FIFO
  repair), measured in the same rounds, so the multiple of the floor's cost ours pays is
  measured in every run;
- select under contention: k producer tasks each send on their own unbuffered channel and one
  consumer runs ``select(Get(c1), ..., Get(ck))`` for k = 2, 4 and 8. No peer has a select (trio
  #242); the floor beside it is the same k producers sending on one shared channel and a plain
  ``get()``, so the gap is the cost of the select itself.

trio runs under ``trio.run``; everything else under ``asyncio.run`` (anyio on its asyncio
backend). Every contender moves the same N integers per round; the time runs from before the
producer starts until the consumer holds the last value.

Run: ``python -m benchmarks.channels [--quick]`` or ``executors bench channels``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Protocol

import aiochannel
import anyio
import trio

from benchmarks._harness import OURS, Metric, run_area
from executors.aio import Channel, Get, Select

__all__ = ("FloorChannel", "main", "metrics")

Sample = Callable[[], float]


# -- producer -> consumer ------------------------------------------------------------------------


class _SendGet(Protocol):
    async def send(self, value: int) -> None: ...
    async def get(self) -> int: ...


def _send_get(make: Callable[[], _SendGet], n: int) -> Sample:
    """One producer task sends N integers to the consumer (the main task) through make()."""
    async def body() -> float:
        ch = make()

        async def produce() -> None:
            send = ch.send
            for i in range(n):
                await send(i)

        start = time.perf_counter()
        task = asyncio.create_task(produce())
        get = ch.get
        for _ in range(n):
            await get()
        elapsed = time.perf_counter() - start
        await task
        return n / elapsed

    return lambda: asyncio.run(body())


def ours(size: int, n: int) -> Sample:
    return _send_get(partial(Channel[int], size), n)


def trio_channel(size: int, n: int) -> Sample:
    async def body() -> float:
        send_ch, recv_ch = trio.open_memory_channel[int](size)

        async def produce() -> None:
            send = send_ch.send
            for i in range(n):
                await send(i)

        async with trio.open_nursery() as nursery:
            start = time.perf_counter()
            nursery.start_soon(produce)
            receive = recv_ch.receive
            for _ in range(n):
                await receive()
            elapsed = time.perf_counter() - start
        return n / elapsed

    return lambda: trio.run(body)


def anyio_stream(size: int, n: int) -> Sample:
    async def body() -> float:
        send_s, recv_s = anyio.create_memory_object_stream[int](size)

        async def produce() -> None:
            send = send_s.send
            for i in range(n):
                await send(i)

        async with anyio.create_task_group() as tg:
            start = time.perf_counter()
            tg.start_soon(produce)
            receive = recv_s.receive
            for _ in range(n):
                await receive()
            elapsed = time.perf_counter() - start
        return n / elapsed

    return lambda: asyncio.run(body())


def asyncio_queue(n: int) -> Sample:
    async def body() -> float:
        q: asyncio.Queue[int] = asyncio.Queue(maxsize=1)

        async def produce() -> None:
            put = q.put
            for i in range(n):
                await put(i)

        start = time.perf_counter()
        task = asyncio.create_task(produce())
        get = q.get
        for _ in range(n):
            await get()
        elapsed = time.perf_counter() - start
        await task
        return n / elapsed

    return lambda: asyncio.run(body())


def aiochannel_channel(n: int) -> Sample:
    async def body() -> float:
        ch: aiochannel.Channel[int] = aiochannel.Channel(1)

        async def produce() -> None:
            put = ch.put
            for i in range(n):
                await put(i)

        start = time.perf_counter()
        task = asyncio.create_task(produce())
        get = ch.get
        for _ in range(n):
            await get()
        elapsed = time.perf_counter() - start
        await task
        return n / elapsed

    return lambda: asyncio.run(body())


class FloorChannel:
    """The unbuffered hand-off's floor: a deque of parked futures, ``set_result`` on hand-off.

    Nothing else: a cancelled party strands its entry (and a value), there is no close, no
    select, no loop check. Futures are made the cheapest way (``asyncio.Future()``), as ours.
    """

    __slots__ = ("_getters", "_senders")

    def __init__(self) -> None:
        self._getters: deque[asyncio.Future[int]] = deque()
        self._senders: deque[tuple[asyncio.Future[None], int]] = deque()

    async def send(self, value: int) -> None:
        if self._getters:
            self._getters.popleft().set_result(value)
            return
        future: asyncio.Future[None] = asyncio.Future()
        self._senders.append((future, value))
        await future

    async def get(self) -> int:
        if self._senders:
            future, value = self._senders.popleft()
            future.set_result(None)
            return value
        parked: asyncio.Future[int] = asyncio.Future()
        self._getters.append(parked)
        return await parked


def floor_channel(n: int) -> Sample:
    return _send_get(FloorChannel, n)


# -- select under contention ----------------------------------------------------------------------


def select_contended(k: int, n: int) -> Sample:
    async def body() -> float:
        chans = [Channel[int]() for _ in range(k)]

        async def produce(ch: Channel[int]) -> None:
            send = ch.send
            for i in range(n // k):
                await send(i)

        sel = Select(*(Get(c) for c in chans))
        start = time.perf_counter()
        tasks = [asyncio.create_task(produce(c)) for c in chans]
        pick = sel.select
        for _ in range(n // k * k):
            await pick()
        elapsed = time.perf_counter() - start
        await asyncio.gather(*tasks)
        return n // k * k / elapsed

    return lambda: asyncio.run(body())


def shared_channel_floor(k: int, n: int) -> Sample:
    async def body() -> float:
        ch: Channel[int] = Channel()

        async def produce() -> None:
            send = ch.send
            for i in range(n // k):
                await send(i)

        start = time.perf_counter()
        tasks = [asyncio.create_task(produce()) for _ in range(k)]
        get = ch.get
        for _ in range(n // k * k):
            await get()
        elapsed = time.perf_counter() - start
        await asyncio.gather(*tasks)
        return n // k * k / elapsed

    return lambda: asyncio.run(body())


FLOOR = "plain get, one shared channel"
UNBUFFERED_FLOOR = "floor: parked futures"


def metrics(quick: bool) -> list[Metric]:
    n = 5_000 if quick else 50_000
    unbuffered: dict[str, Sample | None] = {
        OURS: ours(0, n),
        "trio": trio_channel(0, n),
        "anyio": anyio_stream(0, n),
        UNBUFFERED_FLOOR: floor_channel(n),
    }
    buffered: dict[str, Sample | None] = {
        OURS: ours(1, n),
        "trio": trio_channel(1, n),
        "anyio": anyio_stream(1, n),
        "asyncio.Queue": asyncio_queue(n),
        "aiochannel": aiochannel_channel(n),
    }
    result = [
        Metric("unbuffered producer->consumer", "msgs/s", "higher", unbuffered,
               floor=UNBUFFERED_FLOOR,
               note="size 0: each send completes when the consumer has the value; floor: a "
                    "deque of parked futures, set_result on hand-off, nothing else"),
        Metric("size-1 producer->consumer", "msgs/s", "higher", buffered,
               note="buffer of one; asyncio.Queue(maxsize=1), aiochannel.Channel(1)"),
    ]
    for k in (2, 4, 8):
        result.append(Metric(
            f"select over {k} channels, {k} producers", "msgs/s", "higher",
            {OURS: select_contended(k, n), FLOOR: shared_channel_floor(k, n)},
            floor=FLOOR,
            note="no peer offers a select; the floor is a plain get on one shared channel",
        ))
    return result


def main(argv: list[str] | None = None) -> None:
    run_area("channels", metrics, argv)


if __name__ == "__main__":
    main()
