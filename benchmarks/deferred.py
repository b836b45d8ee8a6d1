"""Deferred cleanup: our CursorReaper and DeferredQueue against PyMongo's, one run, interleaved.

Measures, round by round:
- abandon -> killed: from dropping the last reference to a cursor's owner until the server's
  killCursors reply arrives (CommandListener), for `integrations.mongo.CursorReaper` and for
  PyMongo's own kill-cursors thread (1 s period, polled every 0.5 s), at a random phase;
- put() throughput from ``__del__`` on 8 threads: `DeferredQueue.put` against a plain
  ``list.append`` (PyMongo's kill-cursors queue) and ``queue.Queue.put``;
- an idle pymongo client's background wake-ups per second, with and without
  ``integrations.mongo.install()``;
- close() -> the client's background threads gone, with and without ``install()``.

A MongoDB server is needed: MONGODB_URI, or the demo's embedded nx-27017 on a free loopback port.
Run: ``python -m benchmarks.deferred [--quick]``.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import pymongo
import pymongo.periodic_executor as pymongo_pe
from pymongo import monitoring

from benchmarks._harness import OURS, Metric, run_area
from executors import DeferredQueue
from executors._cli import _demo_server
from integrations import mongo

PYMONGO = f"pymongo {pymongo.version}"
LIST = "list.append (PyMongo's queue)"
QUEUE = "queue.Queue.put"
DB = "executors_bench"


class KillWatcher(monitoring.CommandListener):
    """Sets an event when a killCursors reply reports a given cursor id killed."""

    def __init__(self) -> None:
        self.waiting: dict[int, tuple[threading.Event, list[float]]] = {}

    def expect(self, cursor_id: int) -> tuple[threading.Event, list[float]]:
        entry = (threading.Event(), [])
        self.waiting[cursor_id] = entry
        return entry

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name != "killCursors":
            return
        now = time.perf_counter()
        for cid in event.reply.get("cursorsKilled", []):
            entry = self.waiting.pop(int(cid), None)
            if entry is not None:
                entry[1].append(now)
                entry[0].set()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


class Owner:
    pass


class Latency:
    """Abandon -> killed, for one contender, against one live client."""

    def __init__(self, uri: str, kind: str) -> None:
        self.kind = kind
        self.watcher = KillWatcher()
        self.client: pymongo.MongoClient[Any] = pymongo.MongoClient(
            uri, event_listeners=[self.watcher])
        self.reaper = mongo.CursorReaper(self.client) if kind == OURS else None
        coll = self.client[DB]["docs"]
        if coll.estimated_document_count() < 20:
            coll.insert_many([{"i": i} for i in range(20)])

    def sample(self) -> float:
        time.sleep(random.uniform(0, 1.0))  # a random phase of PyMongo's 1 s / 0.5 s cycle
        if self.reaper is not None:
            cid = int(self.client[DB].command("find", "docs", batchSize=1)["cursor"]["id"])
            owner = Owner()
            self.reaper.track(owner, cid, f"{DB}.docs")
            event, stamp = self.watcher.expect(cid)
            t0 = time.perf_counter()
            del owner
        else:
            cursor = self.client[DB]["docs"].find(batch_size=1)
            next(cursor)
            cid = int(cursor.cursor_id or 0)
            event, stamp = self.watcher.expect(cid)
            t0 = time.perf_counter()
            del cursor  # Cursor.__del__ appends to the client's kill-cursors list
        if not event.wait(10):
            raise RuntimeError(f"{self.kind}: cursor {cid} was not killed within 10 s")
        return (stamp[0] - t0) * 1000

    def close(self) -> None:
        if self.reaper is not None:
            self.reaper.close()
        self.client.close()


def put_throughput(kind: str, per_thread: int) -> float:
    """Million puts per second from __del__ on 8 threads (higher is better)."""
    if kind == OURS:
        dq: DeferredQueue[int] = DeferredQueue()
        sink: Callable[[int], object] = dq.put
    elif kind == LIST:
        lst: list[int] = []
        sink = lst.append
    else:
        qq: queue.Queue[int] = queue.Queue()
        sink = qq.put

    class Dying:
        __slots__ = ("n",)

        def __init__(self, n: int) -> None:
            self.n = n

        def __del__(self) -> None:
            sink(self.n)

    barrier = threading.Barrier(9)

    def work() -> None:
        barrier.wait()
        for i in range(per_thread):
            Dying(i)  # freed at once: __del__ runs here

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    return 8 * per_thread / elapsed / 1e6


class _CountingTime:
    """Stands in for `time` inside pymongo.periodic_executor to count its sleeps."""

    def __init__(self) -> None:
        self.sleeps = 0

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        time.sleep(seconds)

    monotonic = staticmethod(time.monotonic)


def _client_executors(client: pymongo.MongoClient[Any]) -> list[Any]:
    execs = [client._kill_cursors_executor]
    for server in client._topology._servers.values():
        execs.append(server._monitor._executor)
        rtt = getattr(server._monitor, "_rtt_monitor", None)
        if rtt is not None and getattr(rtt._executor, "_thread", None) is not None:
            execs.append(rtt._executor)
    return execs


@contextlib.contextmanager
def idle_client(uri: str, kind: str
                ) -> Iterator[tuple[pymongo.MongoClient[Any], Callable[[], int]]]:
    """A connected client at rest, and a function counting its executors' wake-ups so far."""
    shim = _CountingTime()
    saved = pymongo_pe.time
    if kind == OURS:
        mongo.install()
    else:
        pymongo_pe.time = types.SimpleNamespace(  # type: ignore[assignment]
            sleep=shim.sleep, monotonic=time.monotonic)
    client: pymongo.MongoClient[Any] = pymongo.MongoClient(uri)
    try:
        client.admin.command("ping")
        execs = _client_executors(client)

        def woken() -> int:
            if kind == OURS:
                return sum(e.statistics().wakeups for e in execs)
            return shim.sleeps

        yield client, woken
    finally:
        client.close()
        if kind == OURS:
            mongo.uninstall()
        pymongo_pe.time = saved  # type: ignore[assignment]


def idle_wakeups(uri: str, kind: str, window: float) -> float:
    """Background wake-ups per second of one idle client (a single server)."""
    with idle_client(uri, kind) as (_, woken):
        time.sleep(0.6)  # past the first runs and PyMongo's first poll
        before = woken()
        time.sleep(window)
        return (woken() - before) / window


def close_to_gone(uri: str, kind: str) -> float:
    """Milliseconds from client.close() until its background threads have exited."""
    with idle_client(uri, kind) as (client, _):
        execs = _client_executors(client)
        time.sleep(random.uniform(0.1, 0.6))  # a random phase of PyMongo's 0.5 s poll
        t0 = time.perf_counter()
        client.close()
        for ex in execs:
            ex.join(5)
        return (time.perf_counter() - t0) * 1000


def metrics(quick: bool, uri: str) -> list[Metric]:
    per_thread = 20_000 if quick else 100_000
    window = 1.0 if quick else 5.0
    samples = 1 if quick else 5

    def lat(kind: str) -> Callable[[], float]:
        def run() -> float:
            # A client per round, closed after it: no other client's threads are running when
            # the idle wake-ups of the later metrics are counted.
            latency = Latency(uri, kind)
            try:
                values = sorted(latency.sample() for _ in range(samples))
            finally:
                latency.close()
            return values[len(values) // 2]
        return run

    return [
        Metric("abandon -> cursor killed", "ms", "lower",
               {OURS: lat(OURS), PYMONGO: lat(PYMONGO)},
               note="owner dropped to killCursors reply; PyMongo: 1 s period polled at 0.5 s"),
        Metric("put() from __del__, 8 threads", "M/s", "higher",
               {k: (lambda k=k: put_throughput(k, per_thread)) for k in (OURS, LIST, QUEUE)},
               note="DeferredQueue.put vs list.append (no bound, no counters) and Queue.put"),
        Metric("idle client wake-ups", "1/s", "lower",
               {k: (lambda k=k: idle_wakeups(uri, k, window)) for k in (OURS, PYMONGO)},
               note="one server: monitor + kill-cursors threads; executors = install()"),
        Metric("client.close() -> threads gone", "ms", "lower",
               {k: (lambda k=k: close_to_gone(uri, k)) for k in (OURS, PYMONGO)},
               note="executors = install()"),
    ]


def main(argv: list[str] | None = None) -> None:
    # The demo's server: MONGODB_URI if set, else its embedded nx-27017 for the duration.
    with _demo_server.server(os.environ.get("MONGODB_URI")) as (uri, _label):
        run_area("deferred", lambda quick: metrics(quick, uri), argv, default_rounds=3)


if __name__ == "__main__":
    main()
