"""Channels: ours, trio's memory channels, anyio's memory object streams, asyncio.Queue, aiochannel.

Measures, interleaved round by round (the harness's rule: ratios, never lone absolute times):

- producer -> consumer throughput, one task each, unbuffered (a rendezvous: ours, trio, anyio;
  asyncio.Queue and aiochannel have no rendezvous, 0 means unbounded there);
- the same with a buffer of one (ours, trio, anyio, ``asyncio.Queue(maxsize=1)``,
  ``aiochannel.Channel(1)``);
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
from collections.abc import Callable

import aiochannel
import anyio
import trio

from benchmarks._harness import OURS, Metric, run_area
from executors.aio import Channel, Get, Select

__all__ = ("main", "metrics")

Sample = Callable[[], float]


# -- producer -> consumer ------------------------------------------------------------------------


def ours(size: int, n: int) -> Sample:
    async def body() -> float:
        ch: Channel[int] = Channel(size)

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


def metrics(quick: bool) -> list[Metric]:
    n = 5_000 if quick else 50_000
    unbuffered: dict[str, Sample | None] = {
        OURS: ours(0, n),
        "trio": trio_channel(0, n),
        "anyio": anyio_stream(0, n),
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
               note="size 0: each send completes when the consumer has the value"),
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
