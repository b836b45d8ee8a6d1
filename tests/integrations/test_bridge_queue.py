"""integrations.bridge.Queue: janus's API over SharedChannel, threads and tasks together."""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

from integrations.bridge import Queue
from integrations.bridge._queue import AsyncQueueShutDown, SyncQueueShutDown


def test_threads_to_task_in_order_and_join() -> None:
    """Items put by a thread arrive at a task in order; join() returns once every item is
    marked done, from either side."""
    async def main() -> list[int]:
        q: Queue[int] = Queue(maxsize=2)

        def produce() -> None:
            for i in range(100):
                q.sync_q.put(i)
            q.sync_q.join()

        t = threading.Thread(target=produce)
        t.start()
        got = []
        for _ in range(100):
            got.append(await q.async_q.get())
            q.async_q.task_done()
        await asyncio.to_thread(t.join, 20)
        assert q.async_q.unfinished_tasks == 0
        await q.aclose()
        return got

    assert asyncio.run(main()) == list(range(100))


def test_unbounded_by_default_and_exceptions() -> None:
    """maxsize=0 is unbounded (janus), empty/full raise the stdlib's exceptions per side."""
    async def main() -> None:
        q: Queue[int] = Queue()
        for i in range(1000):
            q.sync_q.put_nowait(i)
        assert q.sync_q.qsize() == 1000 and not q.async_q.full()
        b: Queue[int] = Queue(1)
        b.async_q.put_nowait(1)
        with pytest.raises(asyncio.QueueFull):
            b.async_q.put_nowait(2)
        with pytest.raises(queue.Full):
            b.sync_q.put(2, timeout=0.01)
        assert b.sync_q.get() == 1
        with pytest.raises(queue.Empty):
            b.sync_q.get(timeout=0.01)
        with pytest.raises(asyncio.QueueEmpty):
            b.async_q.get_nowait()
        await q.aclose()
        await b.aclose()

    asyncio.run(main())


def test_close_discards_and_raises_shutdown() -> None:
    """close() (janus's shutdown(immediate=True)) discards queued items and makes both sides
    raise janus's ShutDown exceptions; shutdown() lets gets drain first."""
    async def main() -> None:
        q: Queue[int] = Queue()
        q.sync_q.put(1)
        q.shutdown()
        assert await q.async_q.get() == 1
        with pytest.raises(AsyncQueueShutDown):
            await q.async_q.get()
        with pytest.raises(SyncQueueShutDown):
            q.sync_q.put(2)
        c: Queue[int] = Queue()
        c.sync_q.put(1)
        c.close()
        assert c.closed and c.sync_q.qsize() == 0 and c.sync_q.unfinished_tasks == 0
        with pytest.raises(SyncQueueShutDown):
            c.sync_q.get()
        await c.wait_closed()

    asyncio.run(main())


def test_async_side_binds_to_its_first_loop() -> None:
    """As janus, the async side refuses a second event loop."""
    q: Queue[int] = Queue()

    async def put() -> None:
        await q.async_q.put(1)

    asyncio.run(put())
    with pytest.raises(RuntimeError, match="different event loop"):
        asyncio.run(put())
