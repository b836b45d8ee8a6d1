"""integrations.mongo against a real server (nx-27017 on loopback, or MONGODB_URI)."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pymongo
import pytest
from helpers.forking import in_forked_child
from pymongo import monitoring

from executors import ClosedError, PeriodicExecutor
from executors.testing import wait_until
from integrations import mongo
from integrations.mongo import CursorReaper

if TYPE_CHECKING:
    from conftest import MongoServer, TcpProxy

ROOT = Path(__file__).resolve().parents[2]
DB = "executors_test"


class KillListener(monitoring.CommandListener):
    """Records every killCursors command and its reply, as the server saw them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sent: list[list[int]] = []
        self.replies: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._requests: dict[int, list[int]] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "killCursors":
            ids = [int(i) for i in event.command["cursors"]]
            with self.lock:
                self.sent.append(ids)
                self._requests[event.request_id] = ids

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == "killCursors":
            with self.lock:
                self.replies.append({"sent": self._requests.pop(event.request_id, []),
                                     "reply": dict(event.reply)})

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        if event.command_name == "killCursors":
            with self.lock:
                self.failures.append(str(event.failure))

    def killed(self) -> list[int]:
        with self.lock:
            return [int(i) for r in self.replies for i in r["reply"].get("cursorsKilled", [])]


class Owner:
    """Stands for the application object that holds a raw cursor id (a request, a page)."""

    def __init__(self, cursor_id: int) -> None:
        self.cursor_id = cursor_id
        self.me: Owner | None = None


@pytest.fixture(scope="module")
def seeded(mongo_server: MongoServer) -> Iterator[str]:
    """A collection of 20 documents; yields its name."""
    client = mongo_server.client()
    coll = client[DB]["docs"]
    coll.drop()
    coll.insert_many([{"i": i} for i in range(20)])
    client.close()
    yield "docs"


@pytest.fixture
def opener(mongo_server: MongoServer, seeded: str) -> Iterator[pymongo.MongoClient[Any]]:
    """A client whose connections hold the cursors (it outlives whatever kills them)."""
    client = mongo_server.client()
    yield client
    client.close()


def open_cursors(client: pymongo.MongoClient[Any], n: int) -> list[int]:
    """Open `n` live server cursors with raw `find` commands (batch of 1 of 20 documents)."""
    ids = []
    for _ in range(n):
        reply = client[DB].command("find", "docs", batchSize=1)
        ids.append(int(reply["cursor"]["id"]))
    assert all(ids) and len(set(ids)) == n
    return ids


def alive(client: pymongo.MongoClient[Any], cursor_id: int) -> bool:
    """Whether the server still has the cursor: a getMore that returns data.

    A real mongod answers CursorNotFound (43) for a killed cursor; nx-27017 answers an empty
    batch with id 0. Both mean "gone".
    """
    try:
        reply = client[DB].command("getMore", cursor_id, collection="docs", batchSize=1)
    except pymongo.errors.OperationFailure as exc:
        if exc.code == 43:
            return False
        raise
    return bool(reply["cursor"]["nextBatch"]) or int(reply["cursor"]["id"]) != 0


def test_eight_threads_abandon_hundreds_every_one_killed_once(
    mongo_server: MongoServer, opener: pymongo.MongoClient[Any]
) -> None:
    """320 cursors abandoned by 8 threads: each id is sent in exactly one killCursors, the
    server's replies report every one killed, statistics agree, all within a few seconds."""
    ids = open_cursors(opener, 320)
    listener = KillListener()
    client = mongo_server.client(event_listeners=[listener])
    reaper = CursorReaper(client, min_interval=0.01)
    try:
        barrier = threading.Barrier(8)

        def abandon(chunk: list[int]) -> None:
            barrier.wait()
            for cid in chunk:
                owner = Owner(cid)
                reaper.track(owner, cid, f"{DB}.docs")
                del owner  # refcount drop: the weakref callback enqueues at once

        threads = [threading.Thread(target=abandon, args=(ids[i::8],)) for i in range(8)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        wait_until(lambda: reaper.statistics().killed == len(ids), 20,
                   message=f"not all killed: {reaper!r}")
        elapsed = time.monotonic() - started
        sent = [i for batch in listener.sent for i in batch]
        assert sorted(sent) == sorted(ids)  # every one, none twice
        assert sorted(listener.killed()) == sorted(ids)
        for r in listener.replies:
            assert sorted(int(i) for i in r["reply"]["cursorsKilled"]) == sorted(r["sent"])
        stats = reaper.statistics()
        assert (stats.killed, stats.not_found, stats.failed, stats.pending) == (320, 0, 0, 0)
        assert stats.commands == len(listener.sent) < 320  # batched
        assert elapsed < 20
        assert not any(alive(opener, cid) for cid in ids[:5])
    finally:
        reaper.close()
        client.close()


def test_gc_of_cycles_while_reaper_and_pymongo_locks_are_held_does_not_deadlock(
    mongo_server: MongoServer, opener: pymongo.MongoClient[Any]
) -> None:
    """PyMongo's _test_no_gc_deadlock: owners die in reference cycles during gc.collect() while
    another thread holds the reaper's lock and pymongo's client, topology and pool locks. The
    collection returns at once; once the locks are released every cursor is killed."""
    ids = open_cursors(opener, 30)
    client = mongo_server.client()
    client.admin.command("ping")
    reaper = CursorReaper(client, min_interval=0.01)
    server = client._topology.select_server_by_address(
        client.address, "ping")  # type: ignore[arg-type]
    locks = [reaper.reaper._lock, client._lock, client._topology._lock, server.pool.lock]
    holding, release = threading.Event(), threading.Event()

    def locker() -> None:
        for lock in locks:
            lock.acquire()
        holding.set()
        release.wait(30)
        for lock in reversed(locks):
            lock.release()

    t = threading.Thread(target=locker)
    t.start()
    try:
        assert holding.wait(10)
        gc.disable()
        try:
            for cid in ids:
                owner = Owner(cid)
                owner.me = owner  # a cycle: only the cyclic GC frees it
                reaper.track(owner, cid, f"{DB}.docs")
                del owner
            # Collect on a helper thread: a deadlock fails the test instead of hanging it.
            collector = threading.Thread(target=lambda: [gc.collect() for _ in range(3)])
            collector.start()
            collector.join(20)
            assert not collector.is_alive(), "gc.collect() deadlocked"
        finally:
            gc.enable()
        assert reaper.statistics().pending == len(ids)
    finally:
        release.set()
        t.join(10)
    assert not t.is_alive()
    try:
        wait_until(lambda: reaper.statistics().killed == len(ids), 10, message=repr(reaper))
    finally:
        reaper.close()
        client.close()


def test_server_down_kills_are_retried_and_land_when_it_returns(
    mongo_server: MongoServer, opener: pymongo.MongoClient[Any], tcp_proxy: TcpProxy
) -> None:
    """With the server unreachable the kills fail and are retried with backoff (statistics
    say so); when it comes back they land and the server reports them killed."""
    if mongo_server.external and "@" in mongo_server.uri:
        pytest.skip("the proxy client carries no credentials")
    ids = open_cursors(opener, 10)
    client = pymongo.MongoClient("127.0.0.1", tcp_proxy.port, directConnection=True,
                                 serverSelectionTimeoutMS=300, connectTimeoutMS=300)
    client.admin.command("ping")
    reaper = CursorReaper(client, timeout=0.3, retry_backoff=0.05, max_backoff=0.2,
                          max_retries=100)
    try:
        tcp_proxy.down()
        for cid in ids:
            reaper.kill_soon(cid, f"{DB}.docs")
        wait_until(lambda: reaper.statistics().retried >= 2, 10, message=repr(reaper))
        stats = reaper.statistics()
        assert stats.killed == 0 and stats.pending == len(ids) and stats.failed == 0
        assert stats.last_error is not None
        assert all(alive(opener, cid) for cid in ids[:3])
        tcp_proxy.up()
        wait_until(lambda: reaper.statistics().killed == len(ids), 15, message=repr(reaper))
        stats = reaper.statistics()
        assert (stats.pending, stats.failed, stats.not_found) == (0, 0, 0)
        assert not any(alive(opener, cid) for cid in ids)
    finally:
        reaper.close(timeout=2)
        client.close()


EXIT_SCRIPT = """
import atexit, gc, json, os, sys, time

# Registered first, so it runs last: after every flush and after pymongo's own shutdown.
atexit.register(lambda: print(json.dumps(report())))

if sys.argv[2] == "executors-first":
    import executors
    import pymongo
else:
    import pymongo
    import executors
from executors import deferred, registry
from integrations.mongo import CursorReaper

ids = json.loads(sys.argv[3])
client = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000)
# No wake-ups and a one-hour schedule: only the exit flush can send these kills.
reaper = CursorReaper(client, wake_threshold=None, interval=3600)
while reaper.reaper.statistics().runs < 1:  # the run at open: after it, only the exit drains
    time.sleep(0.001)
if os.environ.get("NO_EXIT_MACHINERY"):
    # The control: what PyMongo does with its queue at exit (nothing).
    atexit.unregister(deferred._flush_at_exit)
    atexit.unregister(registry._at_exit)

class Owner:
    pass

for cid in ids:
    owner = Owner()
    owner.me = owner
    reaper.track(owner, cid, "executors_test.docs")
    del owner
gc.collect()
before = reaper.statistics().pending

def report():
    s = reaper.statistics()
    return {"before": before, "killed": s.killed, "pending": s.pending, "failed": s.failed}
# The script ends here: no close(), no flush(); the client stays open too.
"""


@pytest.mark.parametrize("order", ["executors-first", "pymongo-first"])
def test_cursors_abandoned_just_before_exit_are_killed_by_the_exit_flush(
    mongo_server: MongoServer, opener: pymongo.MongoClient[Any], order: str
) -> None:
    """A process abandons cursors and exits without closing anything: the kills are sent at
    exit, while its client still works, and a second connection finds the cursors gone.

    The cursors are opened on this process's connection (nx-27017 drops a connection's cursors
    when it closes, so the subprocess's own cursors would vanish anyway); the control run, with
    the exit flush unhooked, shows they would otherwise survive the process."""
    ids = open_cursors(opener, 12)
    control = open_cursors(opener, 4)

    def run(cursor_ids: list[int], env: dict[str, str]) -> dict[str, Any]:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(EXIT_SCRIPT), mongo_server.uri, order,
             json.dumps(cursor_ids)],
            cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]

    report = run(ids, {})
    assert report == {"before": len(ids), "killed": len(ids), "pending": 0, "failed": 0}
    assert not any(alive(opener, cid) for cid in ids)

    report = run(control, {"NO_EXIT_MACHINERY": "1"})
    assert report["before"] == len(control) and report["killed"] == 0
    assert all(alive(opener, cid) for cid in control), "process exit alone killed them"


def test_exit_flush_runs_before_pymongo_shuts_its_client_down(mongo_server: MongoServer) -> None:
    """atexit runs last-in first-out: our flush is registered after pymongo's
    `_shutdown_resources` (it is re-registered whenever a reaper is made), so it runs first."""
    code = textwrap.dedent("""
        import atexit
        order = []
        atexit.register(lambda: print(order))  # first registered: runs last
        import executors, pymongo
        from pymongo.synchronous import monitor
        real_monitors = monitor._shutdown_monitors
        monitor._shutdown_monitors = lambda: (order.append("pymongo"), real_monitors())
        from executors import deferred
        real_flush = deferred._flush_all
        deferred._flush_all = lambda d: (order.append("flush"), real_flush(d))
        from integrations.mongo import CursorReaper
        client = pymongo.MongoClient(%r, connect=False)
        reaper = CursorReaper(client)
    """) % mongo_server.uri
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    order = proc.stdout.strip().splitlines()[-1]
    assert order.index("flush") < order.index("pymongo"), order


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_child_starts_empty_and_parent_keeps_its_kills(
    mongo_server: MongoServer, opener: pymongo.MongoClient[Any]
) -> None:
    """After fork the child's reaper has nothing pending and works on its own cursors; the
    parent's pending kills are untouched by the child and land when the parent flushes."""
    ids = open_cursors(opener, 5)
    client = mongo_server.client()
    client.admin.command("ping")
    reaper = CursorReaper(client, wake_threshold=None, interval=3600)
    try:
        wait_until(lambda: reaper.reaper.statistics().runs == 1, 5)  # the run at open is done
        for cid in ids:
            reaper.kill_soon(cid, f"{DB}.docs")
        assert reaper.statistics().pending == 5

        def in_child() -> list[object]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # pymongo: "MongoClient opened before fork"
                pending = reaper.statistics().pending
                own = int(client[DB].command("find", "docs", batchSize=1)["cursor"]["id"])
                reaper.kill_soon(own, f"{DB}.docs")
                flushed = reaper.flush(10)
                return [pending, flushed, reaper.statistics().killed]

        assert in_forked_child(in_child) == [0, True, 1]
        assert all(alive(opener, cid) for cid in ids)  # the child did not kill the parent's
        assert reaper.statistics().pending == 5
        assert reaper.flush(10)
        assert reaper.statistics().killed == 5
    finally:
        reaper.close()
        client.close()


def test_kills_sent_to_an_explicit_server_address_and_unknown_ids_counted(
    mongo_server: MongoServer, opener: pymongo.MongoClient[Any]
) -> None:
    """With `address` the kill goes to that server; ids the server does not know are counted
    as not found (from its reply), not as killed; one command per (server, namespace)."""
    ids = open_cursors(opener, 3)
    listener = KillListener()
    client = mongo_server.client(event_listeners=[listener])
    client.admin.command("ping")
    reaper = CursorReaper(client, wake_threshold=None, interval=3600)
    try:
        wait_until(lambda: reaper.reaper.statistics().runs == 1, 5)
        address = client.address
        assert address is not None
        for cid in ids:
            reaper.kill_soon(cid, f"{DB}.docs", address)
        reaper.kill_soon(987654321, f"{DB}.docs", address)
        reaper.kill_soon(987654322, f"{DB}.other")
        assert reaper.flush(10)
        stats = reaper.statistics()
        assert (stats.killed, stats.not_found, stats.commands) == (3, 2, 2)
        assert sorted(map(sorted, listener.sent)) == [sorted([*ids, 987654321]), [987654322]]
        assert not any(alive(opener, cid) for cid in ids)
    finally:
        reaper.close()
        client.close()


def test_bad_input_and_a_closed_reaper(mongo_server: MongoServer) -> None:
    """Wrong types and values raise TypeError/ValueError naming the argument; a closed
    reaper refuses `track` (ClosedError) and counts a `kill_soon` as dropped."""
    with pytest.raises(TypeError, match="client"):
        CursorReaper("mongodb://localhost")  # type: ignore[arg-type]
    client = mongo_server.client(connect=False)
    with pytest.raises(TypeError, match="timeout"):
        CursorReaper(client, timeout="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        CursorReaper(client, timeout=0)
    reaper = CursorReaper(client)
    try:
        for args, exc, word in [
            (("1", "db.c"), TypeError, "cursor_id"),
            ((True, "db.c"), TypeError, "cursor_id"),
            ((0, "db.c"), ValueError, "cursor_id"),
            ((2**63, "db.c"), ValueError, "cursor_id"),  # BSON int64 only: it would fail
            ((-(2**63) - 1, "db.c"), ValueError, "cursor_id"),  # its whole batch at send time
            ((5, b"db.c"), TypeError, "namespace"),
            ((5, "nodot"), ValueError, "namespace"),
            ((5, ".c"), ValueError, "namespace"),
            ((5, "db.c", "host:1"), TypeError, "address"),
            ((5, "db.c", ("h", "1")), TypeError, "address"),
        ]:
            with pytest.raises(exc, match=word):
                reaper.kill_soon(*args)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="owner"):
            reaper.track(1, 5, "db.c")
        assert reaper.close(timeout=1)
        assert reaper.closed
        with pytest.raises(ClosedError):
            reaper.track(Owner(5), 5, "db.c")
        assert reaper.kill_soon(5, "db.c") is False
        assert reaper.statistics().dropped == 1
        assert "closed" in repr(reaper)
    finally:
        reaper.close()
        client.close()


def test_a_closed_client_fails_the_batch_without_retrying(
    mongo_server: MongoServer, background_exceptions: object
) -> None:
    """Kills for a client that was closed cannot succeed: they are given up at once (counted
    as failed, logged), not retried."""
    client = mongo_server.client()
    client.admin.command("ping")
    reaper = CursorReaper(client, wake_threshold=None, interval=3600)
    client.close()
    try:
        reaper.kill_soon(12345, f"{DB}.docs")
        assert reaper.flush(5)
        stats = reaper.statistics()
        assert (stats.failed, stats.retried, stats.killed) == (1, 0, 0)
        assert "InvalidOperation" in (stats.last_error or "")
    finally:
        reaper.close()


def test_install_runs_pymongo_on_our_executors_and_leaves_no_thread(
    mongo_server: MongoServer, seeded: str
) -> None:
    """With install(), a client's monitor and kill-cursors threads are our PeriodicExecutors:
    the client queries, its monitor checks the server, and close() leaves no thread behind
    (within a fraction of PyMongo's 0.5 s poll). uninstall() restores pymongo's class."""
    original = pymongo.periodic_executor.PeriodicExecutor
    mongo.install()
    mongo.install()  # idempotent
    try:
        assert mongo.installed()
        before = set(threading.enumerate())
        client = mongo_server.client()
        assert client[DB]["docs"].count_documents({}) == 20
        assert len(list(client[DB]["docs"].find(batch_size=3))) == 20
        kill_exec = client._kill_cursors_executor
        assert isinstance(kill_exec, PeriodicExecutor)
        monitors = [s._monitor for s in client._topology._servers.values()]
        assert monitors and all(isinstance(m._executor, PeriodicExecutor) for m in monitors)
        assert all(isinstance(m._rtt_monitor._executor, PeriodicExecutor) for m in monitors)
        wait_until(lambda: all(m._executor.statistics().runs >= 1 for m in monitors), 10)
        ours = [kill_exec, *(m._executor for m in monitors)]
        assert all(ex.statistics().thread_alive for ex in ours)
        started = time.monotonic()
        client.close()
        wait_until(lambda: not any(ex.statistics().thread_alive for ex in ours), 5)
        # No thread of the client's is left at all, ours or any other pymongo started.
        wait_until(lambda: not [t for t in threading.enumerate() if t not in before], 5,
                   message=f"left behind: {set(threading.enumerate()) - before}")
        # PyMongo's threads need up to 0.5 s (their poll); ours exit at once. The bound is loose
        # for shared machines; benchmarks/deferred.py measures the figure.
        assert time.monotonic() - started < 2
        assert all(m._executor.statistics().state == "closed" for m in monitors)
    finally:
        mongo.uninstall()
    assert not mongo.installed()
    assert pymongo.periodic_executor.PeriodicExecutor is original
    plain = mongo_server.client(connect=False)
    assert type(plain._kill_cursors_executor) is original
    plain.close()


def _docs_mongo_example() -> str:
    page = (ROOT / "docs" / "content" / "deferred.md").read_text()
    match = re.search(r"<!-- mongo-example -->\n```text\n(.*?)```", page, re.DOTALL)
    assert match, "the mongo example block is missing from docs/content/deferred.md"
    return match.group(1)


def test_docs_mongo_example_runs_against_the_server(mongo_server: MongoServer) -> None:
    """The pymongo example of the deferred page (a ```text block: it needs a server) runs
    against the test server and prints what the page says."""
    proc = subprocess.run(
        [sys.executable, "-X", "dev", "-c", _docs_mongo_example()], cwd=ROOT,
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MONGODB_URI": mongo_server.uri},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""
    assert "killed=3" in proc.stdout


def test_executors_does_not_import_the_integration() -> None:
    """Imports only go down: importing executors loads neither integrations nor pymongo."""
    code = ("import sys, executors; print(sorted(m for m in sys.modules"
            " if m.startswith(('integrations', 'pymongo'))))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=30, check=True)
    assert proc.stdout.strip() == "[]"


def test_aggregate_cursor_of_a_collected_owner_is_killed_by_flush_without_timeout(
    mongo_server: MongoServer, opener: pymongo.MongoClient[Any]
) -> None:
    """An ``aggregate`` command cursor (``cursor={}``), its id handed to another thread that
    tracks it: when the owner dies the kill is queued; flush() with no timeout sends it, and
    the server reports it killed."""
    reply = opener[DB].command("aggregate", "docs", pipeline=[{"$match": {}}],
                               cursor={"batchSize": 1})
    cid = int(reply["cursor"]["id"])
    assert cid and alive(opener, cid)
    listener = KillListener()
    client = mongo_server.client(event_listeners=[listener])
    reaper = CursorReaper(client, wake_threshold=None, interval=3600)
    try:
        wait_until(lambda: reaper.reaper.statistics().runs == 1, 5)  # the run at open is done
        owners = [Owner(cid)]
        tracker = threading.Thread(
            target=lambda: reaper.track(owners[0], cid, f"{DB}.docs", client.address))
        tracker.start()
        tracker.join(10)
        owners.clear()
        assert reaper.statistics().pending == 1 and listener.sent == []
        assert reaper.flush()
        assert listener.sent == [[cid]] and listener.killed() == [cid]
        stats = reaper.statistics()
        assert (stats.killed, stats.pending, stats.commands) == (1, 0, 1)
        assert not alive(opener, cid)
    finally:
        reaper.close()
        client.close()
