"""integrations.bridge.Queue: janus's API over SharedChannel, threads and tasks together."""

from __future__ import annotations

import asyncio
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import integrations.bridge
from integrations.bridge import (
    AsyncQueue,
    AsyncQueueEmpty,
    AsyncQueueShutDown,
    BaseQueue,
    LifoQueue,
    PriorityQueue,
    Queue,
    SyncQueue,
    SyncQueueShutDown,
)


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


# -- janus's names (issue 23, item 4) ----------------------------------------------------------


def test_every_public_name_of_janus_is_exported_under_the_same_name() -> None:
    """Every name in janus.__all__ is importable from integrations.bridge and listed in its
    __all__ (janus is installed in the test extra; without it the test is skipped)."""
    janus = pytest.importorskip("janus")
    missing = [n for n in janus.__all__ if n not in integrations.bridge.__all__
               or not hasattr(integrations.bridge, n)]
    assert missing == []


def test_janus_exceptions_are_the_same_classes_where_janus_uses_the_stdlibs() -> None:
    """Empty/Full are the stdlib's, as janus's (a program catching janus's catches ours); the
    ShutDown exceptions too from 3.13 on, and before 3.13 classes of their own (as janus's,
    which are janus's own classes there: the docstrings say so)."""
    janus = pytest.importorskip("janus")
    shared = ["SyncQueueEmpty", "SyncQueueFull", "AsyncQueueEmpty", "AsyncQueueFull"]
    if sys.version_info >= (3, 13):
        shared += ["SyncQueueShutDown", "AsyncQueueShutDown"]
    for name in shared:
        assert getattr(integrations.bridge, name) is getattr(janus, name), name
    for name in ("SyncQueueShutDown", "AsyncQueueShutDown"):
        cls = getattr(integrations.bridge, name)
        assert issubclass(cls, Exception)
        if sys.version_info < (3, 13):  # ours, not janus's: the docstring says so
            assert cls is not getattr(janus, name) and "3.13" in (cls.__doc__ or "")


def test_the_proxies_implement_janus_protocols() -> None:
    """sync_q and async_q are SyncQueue/AsyncQueue (and BaseQueue) by inheritance, as janus's
    proxies, and have every member of janus's protocols."""
    janus = pytest.importorskip("janus")
    q: Queue[int] = Queue()
    for proxy, ours, theirs in ((q.sync_q, SyncQueue, janus.SyncQueue),
                                (q.async_q, AsyncQueue, janus.AsyncQueue)):
        assert ours in type(proxy).__mro__ and BaseQueue in type(proxy).__mro__
        members = {m for m in vars(theirs) | vars(janus.BaseQueue) if not m.startswith("_")}
        assert members and all(hasattr(proxy, m) for m in members), members
    q.close()


def test_async_get_nowait_on_an_empty_queue_outside_a_loop_raises_async_queue_empty() -> None:
    """As janus: async_q.get_nowait() on an empty queue outside a running loop raises
    AsyncQueueEmpty (it raised RuntimeError); AsyncQueueShutDown once shut down; with an item
    queued it still needs the loop (RuntimeError, as janus)."""
    q: Queue[int] = Queue()
    with pytest.raises(AsyncQueueEmpty):
        q.async_q.get_nowait()
    q.sync_q.put(1)
    with pytest.raises(RuntimeError):
        q.async_q.get_nowait()
    assert q.sync_q.get() == 1
    q.shutdown()
    with pytest.raises(AsyncQueueShutDown):
        q.async_q.get_nowait()


@pytest.mark.parametrize(("cls", "order"), [(LifoQueue, [3, 4, 1, 2]),
                                            (PriorityQueue, [1, 2, 3, 4])])
def test_lifo_and_priority_orders_with_threads_and_tasks(cls: type[Queue[int]],
                                                         order: list[int]) -> None:
    """LifoQueue gets the newest item first, PriorityQueue the lowest, whichever side put and
    got; a parked thread putter's item moves in when a get makes room, in that order; an item
    handed back by a getter cancelled before it resumed is got again next."""

    async def main() -> list[int]:
        q: Queue[int] = cls(3)
        for i in (2, 1, 3):
            await q.async_q.put(i)
        putter = threading.Thread(target=q.sync_q.put, args=(4,))
        putter.start()
        await asyncio.to_thread(_wait_parked, q)
        got = [await q.async_q.get()]  # room: the thread's 4 moves in
        await asyncio.to_thread(putter.join, 10)
        got += [q.sync_q.get() for _ in range(3)]
        # A getter handed an item and cancelled before it resumes gives it back.
        getter = asyncio.create_task(q.async_q.get())
        await asyncio.sleep(0)
        q.sync_q.put(9)
        getter.cancel()
        await asyncio.wait([getter])
        assert getter.cancelled() and q.sync_q.get_nowait() == 9
        return got

    assert asyncio.run(main()) == order


def _wait_parked(q: Queue[int]) -> None:
    from executors.testing import wait_until

    wait_until(lambda: q._channel.statistics().waiting_senders == 1)


ROOT = Path(__file__).resolve().parents[2]


def _migration_example() -> str:
    page = (ROOT / "docs" / "content" / "threads-meet-asyncio.md").read_text()
    match = re.search(r"<!-- janus-migration -->\n```python\n(.*?)```", page, re.DOTALL)
    assert match, "the janus migration example is missing from threads-meet-asyncio.md"
    return match.group(1)


def test_docs_migration_example_is_a_janus_program_that_migrates_by_its_import() -> None:
    """The page's migration example (janus exceptions, janus protocol annotations, a
    PriorityQueue) prints the same with janus (its import line put back) and with ours."""
    pytest.importorskip("janus")
    ours = _migration_example()
    import_line = "# was: from janus import (\nfrom integrations.bridge import ("
    assert import_line in ours
    theirs = ours.replace(import_line, "from janus import (")
    outputs = []
    for code in (ours, theirs):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                              text=True, timeout=60, check=False,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] == "shut down\n['reply', 'index', 'compact']\n"
