"""The application ``executors demo`` runs: threaded pymongo on the executors' machinery.

Worker threads serve simulated requests against a MongoDB server (an embedded nx-27017 on a free
loopback port unless a URI is given). Each request pages through a raw command cursor; some stop
mid-iteration and drop the request object that owns the cursor, and a `CursorReaper` kills those
server-side cursors from a weakref callback, confirmed by the server's killCursors replies. A
fair semaphore, shared through the bridge, caps concurrent database work for the threads and for
an asyncio task together; a channel hands every result to an asyncio consumer; a
`BackgroundService` runs the periodic jobs, among them a server monitor that holds its owner only
weakly. The run ends after a fixed time or on Ctrl-C, and a report says what happened, leaks
first. Only the command (`executors._cli.demo`) imports this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO, final

import pymongo
from pymongo import monitoring, uri_parser
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from executors import BackgroundService, CancelToken, ThreadGroup, _validate, registry
from executors.aio import Channel, Semaphore
from executors.errors import ChannelClosed
from integrations.bridge import Portal
from integrations.mongo import CursorReaper

__all__ = ("DemoConfig", "DemoReport", "EmbeddedServer", "check_uri", "run_demo")

DATABASE = "executors_demo"
COLLECTION = "items"


@final
@dataclasses.dataclass(frozen=True)
class DemoConfig:
    """What the demo runs: for how long, against which server, with how much concurrency."""

    seconds: float = 20.0
    uri: str | None = None
    workers: int = 8
    db_slots: int = 4
    abandon_rate: float = 0.3
    documents: int = 2_000
    batch_size: int = 10
    seed: int | None = None

    def __post_init__(self) -> None:
        _validate.seconds(self.seconds, "seconds", allow_zero=False)
        for name in ("workers", "db_slots", "documents", "batch_size"):
            _validate.count(getattr(self, name), name)
        if not 0 <= self.abandon_rate <= 1:  # NaN fails both comparisons: refused too
            raise ValueError(f"abandon_rate must be within [0, 1], got {self.abandon_rate!r}")


#: Columns of the report: it wraps there, continuation lines indented under their entry.
REPORT_WIDTH = 92


@final
@dataclasses.dataclass(frozen=True)
class DemoReport:
    """What happened during a run. `leaks` must be 0."""

    server: str
    seconds: float
    interrupted: bool
    requests: int
    documents_read: int
    results_consumed: int
    cursors_opened: int
    cursors_abandoned: int
    cursors_killed: int
    cursors_not_found: int
    kill_commands: int
    leaked_cursors: int
    leaked_threads: tuple[str, ...]
    db_acquisitions_threads: int
    db_acquisitions_tasks: int
    db_waits: int
    db_slots: int
    db_peak: int
    db_wait_p50_ms: float
    db_wait_p99_ms: float
    executors: int
    executor_runs: int
    executor_wakeups: int
    monitor_checks: int
    service_jobs: int
    shutdown_seconds: float
    errors: tuple[str, ...]
    #: The names of the executor threads counted in `executors`, `executor_runs` and
    #: `executor_wakeups`.
    executor_names: tuple[str, ...] = ()

    @property
    def leaks(self) -> int:
        """Cursors never confirmed killed, plus threads left running after shutdown."""
        return self.leaked_cursors + len(self.leaked_threads)

    def render(self) -> str:
        """The report as the command prints it: each entry says what its numbers count.

        A newcomer asked what "leaks 0" counted, why fewer killCursors replies than killed
        cursors and why fewer wake-ups than runs (issue 17): the entries answer in words.
        """
        polling = 2.0 * self.executors * self.seconds  # PyMongo's executors wake every 0.5 s
        rate = self.requests / self.seconds if self.seconds else 0.0
        leaked = ""
        if self.leaks:
            threads = ", ".join(self.leaked_threads) or "none"
            leaked = f" ({self.leaked_cursors} cursor(s); threads: {threads})"
        names = f" ({', '.join(self.executor_names)})" if self.executor_names else ""
        entries = [
            ("leaks", (f"{self.leaks}{leaked}. Abandoned cursors the server never confirmed "
             "killed, plus threads still running after shutdown; anything but 0 is a bug "
             "and makes the command exit with status 1.")),
            ("requests", (f"{self.requests:,} served ({rate:,.0f} a second) by the worker "
             f"threads, reading {self.documents_read:,} documents; the asyncio task received "
             f"{self.results_consumed:,} results through the channel.")),
            ("cursors", (f"{self.cursors_opened:,} opened on the server; "
             f"{self.cursors_abandoned:,} abandoned mid-iteration (the request was dropped "
             f"with its cursor still open) and {self.cursors_killed:,} of them killed by the "
             "CursorReaper, each kill confirmed in the server's reply; "
             f"{self.cursors_not_found:,} were already gone when their kill arrived. That "
             f"took {self.kill_commands:,} killCursors commands: one command kills every "
             "cursor queued at that moment.")),
            ("database slots", (f"a fair semaphore lets {self.db_slots} database operations "
             "run at once, the worker threads and the asyncio task waiting in one first-come, "
             f"first-served line. Taken {self.db_acquisitions_threads:,} times by threads and "
             f"{self.db_acquisitions_tasks:,} times by the task, at most {self.db_peak} in "
             f"use at once; {self.db_waits:,} times a thread found every slot busy and "
             f"queued. A thread's wait for a slot: median {self.db_wait_p50_ms:.2f} ms, "
             f"99th percentile {self.db_wait_p99_ms:.2f} ms.")),
            ("executor threads", (f"{self.executors}{names} ran {self.executor_runs:,} times "
             f"and woke {self.executor_wakeups:,} times: they sleep until a run is due or "
             "work wakes them, so none of these wake-ups was idle, and a run that follows "
             "straight on from the previous one (work arrived while it ran) needs no "
             "wake-up. Executors that poll, like PyMongo's, also wake twice a second each "
             f"with nothing to do: about {polling:,.0f} more in this run.")),
            ("background service", (f"{self.service_jobs} periodic job(s); the server "
             f"monitor, a job that holds its owner only weakly, pinged the server "
             f"{self.monitor_checks} time(s).")),
            ("shutdown", (f"{self.shutdown_seconds * 1000:.0f} ms to stop everything after "
             "the run: workers, consumer task, cursor reaper, service and event loop.")),
        ]
        if self.errors:
            entries.append(("errors", f"{len(self.errors)}; the first: {self.errors[0]}"))
        lines = [(f"executors demo: {'interrupted' if self.interrupted else 'finished'} "
                  f"after {self.seconds:.1f} s against {self.server}")]
        for label, text in entries:
            lines += textwrap.wrap(f"{label}: {text}", REPORT_WIDTH, initial_indent="  ",
                                   subsequent_indent="    ", break_long_words=False,
                                   break_on_hyphens=False)
        return "\n".join(lines)


# -- checking a given server ---------------------------------------------------------------

#: How long the reachability check waits for a server given with ``--uri``. Only the check:
#: the run itself keeps pymongo's defaults.
PING_TIMEOUT = 5.0


def check_uri(uri: str, timeout: float = PING_TIMEOUT) -> None:
    """Check that *uri* is a MongoDB URI and that its deployment answers a ping in *timeout*.

    Raises:
        ValueError: *uri* is not a MongoDB connection string (the message says why).
        ConnectionError: no server answered within *timeout* seconds, or it refused the demo
            (authentication); the message names the servers tried and what each said.
    """
    try:
        uri_parser.parse_uri(uri, connect_timeout=timeout)
    except (PyMongoError, ValueError) as exc:  # pymongo raises ValueError for a bad port
        raise ValueError(f"not a MongoDB URI: {exc}") from None
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        uri, serverSelectionTimeoutMS=int(timeout * 1000), connectTimeoutMS=int(timeout * 1000))
    try:
        client.admin.command("ping")
    except ConnectionFailure:
        tried = [f"{host}:{port}: {_short(server.error)}" for (host, port), server
                 in client.topology_description.server_descriptions().items()]
        raise ConnectionError(f"no server answered within {timeout:g} s "
                              f"({'; '.join(tried) or 'no server found'})") from None
    except OperationFailure as exc:
        reason = (exc.details or {}).get("errmsg") or str(exc)
        raise ConnectionError(f"the server refused the demo: {reason}") from None
    finally:
        client.close()


def _short(error: Exception | None) -> str:
    """pymongo's error for one server, without the timeouts it appends to every message."""
    text = str(error) if error is not None else "no reply"
    text = re.sub(r"\s*\(configured timeouts:[^)]*\)", "", text)
    return re.sub(r"^[^\s]+:\d+: ", "", text)  # the address is already in front of it


# -- the embedded server ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@final
class EmbeddedServer:
    """nx-27017 (a MongoDB wire-protocol server over SQLite) on a free loopback port.

    A context manager: entering starts the server and waits until it accepts connections,
    leaving stops it (SIGTERM, then SIGKILL after a grace period).

    Raises:
        RuntimeError: nx-27017 is not installed or did not start within *timeout* seconds.
    """

    def __init__(self, timeout: float = 20.0) -> None:
        self._timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def _executable(self) -> str:
        beside = Path(sys.executable).parent / "nx-27017"
        found = str(beside) if beside.exists() else shutil.which("nx-27017")
        if not found:
            raise RuntimeError("the embedded server nx-27017 is not installed; install the "
                               "demo extra: pip install 'executors[demo]' (or pass --uri "
                               "mongodb://... to use a running server)")
        return found

    def __enter__(self) -> EmbeddedServer:
        executable = self._executable()
        self._dir = tempfile.TemporaryDirectory(prefix="executors-demo-")
        self.port = _free_port()
        log = Path(self._dir.name) / "nx-27017.log"
        self._proc = subprocess.Popen(
            [executable, "--db", "memory", "-p", str(self.port), "--log-file", str(log),
             "--pid-file", str(Path(self._dir.name) / "nx-27017.pid")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches the demo, which stops it
        )
        deadline = time.monotonic() + self._timeout
        while True:
            if self._proc.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"nx-27017 exited at start-up (code {self._proc.returncode})")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError as exc:
                if time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(
                        f"nx-27017 did not listen within {self._timeout} s") from exc
                time.sleep(0.05)  # polling a port that has not opened yet: nothing to wait on

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


# -- observing the server's replies ------------------------------------------------------------


class _KillCursorsListener(monitoring.CommandListener):
    """Counts what killCursors replies confirm: the ids killed and not found, by the server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.killed: set[int] = set()
        self.not_found: set[int] = set()
        self.commands = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name != "killCursors":
            return
        reply = event.reply
        with self._lock:
            self.commands += 1
            self.killed.update(int(c) for c in reply.get("cursorsKilled", ()))
            self.not_found.update(int(c) for c in reply.get("cursorsNotFound", ()))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


# -- the application -------------------------------------------------------------------------


class _Request:
    """A simulated request. It owns the server-side cursor it pages through."""

    __slots__ = ("__weakref__", "cursor_id", "worker")

    def __init__(self, worker: int, cursor_id: int) -> None:
        self.worker = worker
        self.cursor_id = cursor_id


class _ServerMonitor:
    """Pings the server while it exists: a service job that holds its owner only weakly.

    The owner-weakref pattern: the job's function reaches the monitor through a weakref whose
    callback cancels the job, and that weakref lives in the function's closure (which the
    service keeps reachable), so dropping the monitor ends the job at once, even if the
    monitor died in a reference cycle.
    """

    def __init__(self, service: BackgroundService,
                 client: pymongo.MongoClient[dict[str, Any]]) -> None:
        self._client = client
        self.checks = 0
        self.rtt_ms = 0.0
        # The cell is filled before the job can run, and refilled with the weakref whose
        # callback cancels the job once the job exists.
        cell: list[weakref.ref[_ServerMonitor]] = [weakref.ref(self)]

        def check() -> None:
            monitor = cell[0]()
            if monitor is not None:
                monitor.check()

        # Blocking network I/O: a dedicated job (its own PeriodicExecutor), not a pool thread.
        self.job = service.every(1.0, check, name="server-monitor", min_interval=0.5,
                                 dedicated=True)
        cell[0] = weakref.ref(self, self.job.cancel)

    def check(self) -> None:
        started = time.perf_counter()
        self._client.admin.command("ping")
        self.rtt_ms = (time.perf_counter() - started) * 1000
        self.checks += 1


@dataclasses.dataclass
class _Counters:
    """Shared counters (each field is updated by one thread, or under `lock`)."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    requests: int = 0
    documents: int = 0
    consumed: int = 0
    opened: int = 0
    abandoned: set[int] = dataclasses.field(default_factory=set)
    waits_ms: list[float] = dataclasses.field(default_factory=list)
    queued: int = 0
    thread_acquisitions: int = 0
    task_acquisitions: int = 0
    # Database work in progress, threads and the task together: the fair semaphore's cap must
    # hold for both sides, so the report shows the peak beside the number of slots.
    in_use: int = 0
    peak: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)


def _enter_slot(counters: _Counters) -> None:
    with counters.lock:
        counters.in_use += 1
        counters.peak = max(counters.peak, counters.in_use)


def _leave_slot(counters: _Counters) -> None:
    with counters.lock:
        counters.in_use -= 1


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@final
class _Demo:
    def __init__(self, config: DemoConfig, uri: str, server: str) -> None:
        self.config = config
        self.uri = uri
        self.server = server
        self.stop = threading.Event()
        self.counters = _Counters()
        self.listener = _KillCursorsListener()
        self.rng = random.Random(config.seed)
        self.slots_waiting = 0

    # the worker threads ---------------------------------------------------------------------

    def worker(self, index: int, db_slots: Any, results: Any,
               coll: pymongo.collection.Collection[dict[str, Any]]) -> None:
        rng = random.Random(self.rng.random())
        counters = self.counters
        db = coll.database
        size = self.config.batch_size
        token = CancelToken.current()
        assert token is not None  # started by the demo's ThreadGroup
        while not token.cancelled:
            try:
                start = rng.randrange(max(1, self.config.documents - 3 * size))
                abandon = rng.random() < self.config.abandon_rate
                asked = time.perf_counter()
                if not db_slots.acquire(blocking=False):
                    with counters.lock:
                        counters.queued += 1
                    db_slots.acquire()
                waited = (time.perf_counter() - asked) * 1000
                _enter_slot(counters)
                try:
                    reply = db.command("find", COLLECTION, batchSize=size,
                                       filter={"i": {"$gte": start, "$lt": start + 3 * size}})
                    cursor = reply["cursor"]
                    cursor_id, read = int(cursor["id"]), len(cursor["firstBatch"])
                    if cursor_id:
                        with counters.lock:
                            counters.opened += 1
                    request = _Request(index, cursor_id)
                    if cursor_id and abandon:
                        # The request stops mid-iteration and is dropped: its cursor stays open on
                        # the server until the reaper kills it from the weakref callback.
                        self.reaper.track(request, cursor_id, cursor["ns"])
                        with counters.lock:
                            counters.abandoned.add(cursor_id)
                    else:
                        while request.cursor_id:
                            more = db.command("getMore", request.cursor_id,
                                              collection=COLLECTION, batchSize=size)
                            request.cursor_id = int(more["cursor"]["id"])
                            read += len(more["cursor"]["nextBatch"])
                    del request
                finally:
                    _leave_slot(counters)
                    db_slots.release()
                with counters.lock:
                    counters.waits_ms.append(waited)
                    counters.thread_acquisitions += 1
                results.send((index, read, waited))
                with counters.lock:  # served: the result reached the channel
                    counters.requests += 1
                    counters.documents += read
            except ChannelClosed:
                return
            except Exception as exc:  # a demo keeps serving, and reports what went wrong
                with counters.lock:
                    counters.errors.append(f"worker {index}: {type(exc).__name__}: {exc}")
                if token.wait(0.1):
                    return

    # the asyncio side -----------------------------------------------------------------------

    async def consume(self, results: Channel[tuple[int, int, float]], db_slots: Semaphore,
                      audit: pymongo.AsyncMongoClient[dict[str, Any]]) -> None:
        """Read every result; every 50, write a summary while holding a db slot (fairly)."""
        counters = self.counters
        stats = audit[DATABASE]["summaries"]
        async for worker, read, _waited in results:
            counters.consumed += 1
            if counters.consumed % 50 == 0:
                async with db_slots:
                    counters.task_acquisitions += 1
                    _enter_slot(counters)  # a brief lock shared with the threads: no await
                    try:
                        await stats.insert_one({"consumed": counters.consumed,
                                                "worker": worker, "read": read})
                    finally:
                        _leave_slot(counters)

    # the run --------------------------------------------------------------------------------

    def run(self, out: TextIO, live: bool) -> DemoReport:
        config = self.config
        before = {t.ident for t in threading.enumerate()}
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            self.uri, event_listeners=[self.listener])
        cleanup = contextlib.ExitStack()  # closes what was opened if the set-up fails
        cleanup.callback(client.close)
        with cleanup:
            coll = client[DATABASE][COLLECTION]
            coll.drop()
            coll.insert_many([{"i": i, "payload": "x" * 64} for i in range(config.documents)])
            coll.create_index("i")

            self.reaper = CursorReaper(client)
            cleanup.callback(self.reaper.close)
            service = BackgroundService("demo", workers=2)
            service.start()
            cleanup.callback(service.shutdown, 5)
            monitor = _ServerMonitor(service, client)
            portal = Portal(name="demo-loop").open()
            cleanup.callback(portal.join, 5)
            cleanup.callback(portal.close)
            db_slots = Semaphore(config.db_slots)
            results: Channel[tuple[int, int, float]] = Channel(config.workers)
            audit = portal.call(self._async_client)
            consumer = portal.start_task_soon(self.consume, results, db_slots, audit)
            slots_view = portal.semaphore(db_slots)
            results_view = portal.channel(results)

            async def slots_waiting() -> int:
                return db_slots.statistics().waiting

            def snapshot() -> None:  # a light job: runs on the service's scheduler and pool
                self.slots_waiting = portal.call(slots_waiting)

            service.every(0.5, snapshot, name="snapshot")
            cleanup.pop_all()  # from here on, the shutdown below closes everything, in order

        interrupted = False
        with ThreadGroup(name="demo-worker") as group:
            started = time.monotonic()
            for i in range(config.workers):
                group.start(self.worker, i, slots_view, results_view, coll)
            try:
                self._watch(out, live, started, monitor)
            except KeyboardInterrupt:
                interrupted = True
            elapsed = time.monotonic() - started
            stopping = time.monotonic()
            live_executors = registry.live_executors()
            stats = [e.statistics() for e in live_executors]
            names = tuple(sorted(e.name for e in live_executors))
            group.cancel("the demo is over")
            results_view.close()  # a worker blocked in send() gets ChannelClosed
        # Leaving the block joined every worker thread.

        # -- the rest of the shutdown, in dependency order; timed ------------------------------
        self.stop.set()
        consumer.result(10)  # the consumer drains the channel, then ends
        portal.call(audit.close)
        checks = monitor.checks
        jobs = len(service.status().jobs)
        monitor_job = monitor.job
        del monitor  # the owner goes: its job is cancelled from the weakref callback
        gc.collect()  # requests caught in reference cycles are abandoned too: collect them now
        self.reaper.flush(timeout=10)
        self.reaper.close()
        service.shutdown(5)
        portal.close()
        portal.join(5)
        if self.config.uri:  # a real deployment: leave nothing of the demo's data behind
            client.drop_database(DATABASE)
        client.close()
        shutdown = time.monotonic() - stopping
        if monitor_job.statistics().state != "cancelled":
            self.counters.errors.append("the server monitor's job outlived its owner")

        leaked_threads = self._leaked_threads(before)
        counters = self.counters
        with self.listener._lock:
            killed = counters.abandoned & self.listener.killed
            not_found = counters.abandoned & self.listener.not_found
            commands = self.listener.commands
        return DemoReport(
            server=self.server,
            seconds=elapsed,
            interrupted=interrupted,
            requests=counters.requests,
            documents_read=counters.documents,
            results_consumed=counters.consumed,
            cursors_opened=counters.opened,
            cursors_abandoned=len(counters.abandoned),
            cursors_killed=len(killed),
            cursors_not_found=len(not_found),
            kill_commands=commands,
            leaked_cursors=len(counters.abandoned - killed - not_found),
            leaked_threads=leaked_threads,
            db_acquisitions_threads=counters.thread_acquisitions,
            db_acquisitions_tasks=counters.task_acquisitions,
            db_waits=counters.queued,
            db_slots=config.db_slots,
            db_peak=counters.peak,
            db_wait_p50_ms=statistics.median(counters.waits_ms) if counters.waits_ms else 0.0,
            db_wait_p99_ms=_percentile(counters.waits_ms, 0.99),
            executors=len(stats),
            executor_runs=sum(s.runs for s in stats),
            executor_wakeups=sum(s.wakeups for s in stats),
            executor_names=names,
            monitor_checks=checks,
            service_jobs=jobs,
            shutdown_seconds=shutdown,
            errors=tuple(counters.errors),
        )

    async def _async_client(self) -> pymongo.AsyncMongoClient[dict[str, Any]]:
        # Created on the portal's loop: the async client's tasks live there.
        return pymongo.AsyncMongoClient(self.uri)

    def _watch(self, out: TextIO, live: bool, started: float, monitor: _ServerMonitor) -> None:
        """Show progress until the time is up (or Ctrl-C, which propagates)."""
        deadline = started + self.config.seconds
        period = 0.25 if live else 2.0
        drawn = 0
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            self.stop.wait(min(period, deadline - now))
            lines = self._status_lines(time.monotonic() - started, monitor)
            if live:
                if drawn:
                    out.write(f"\x1b[{drawn}F")
                out.write("".join(f"\x1b[2K{line}\n" for line in lines))
                drawn = len(lines)
            else:
                out.write(lines[0] + " | " + " | ".join(x.strip() for x in lines[1:]) + "\n")
            out.flush()

    def _status_lines(self, elapsed: float, monitor: _ServerMonitor) -> list[str]:
        c = self.counters
        total = self.config.seconds
        width = 30
        filled = min(width, int(width * elapsed / total))
        reaper = self.reaper.statistics()
        with c.lock:
            requests, abandoned, queued = c.requests, len(c.abandoned), c.queued
            p99 = _percentile(c.waits_ms[-2000:], 0.99)
        killed = len(self.listener.killed)
        return [
            f"executors demo [{'#' * filled}{'-' * (width - filled)}] {elapsed:4.1f}/{total:.0f} s",
            (f"  requests {requests:,} ({requests / max(elapsed, 1e-9):,.0f}/s), consumed "
            f"{c.consumed:,}"),
            f"  cursors abandoned {abandoned:,}, killed {killed:,}, pending {reaper.pending}",
            (f"  db slots {self.config.db_slots}: {self.slots_waiting} waiting now, {queued:,} "
             f"queued so far, wait p99 {p99:.2f} ms"),
            f"  monitor {monitor.checks} checks, rtt {monitor.rtt_ms:.1f} ms",
        ]

    def _leaked_threads(self, before: set[int | None]) -> tuple[str, ...]:
        # pymongo's own monitor threads exit within its 0.5 s poll after close(); ours at once.
        deadline = time.monotonic() + 3.0
        while True:
            alive = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
            if not alive or time.monotonic() > deadline:
                return tuple(sorted(t.name for t in alive))
            time.sleep(0.05)


@contextlib.contextmanager
def _server(config: DemoConfig) -> Iterator[tuple[str, str]]:
    if config.uri:
        yield config.uri, config.uri.split("@")[-1]
        return
    with EmbeddedServer() as server:
        yield server.uri, f"nx-27017 (embedded) on 127.0.0.1:{server.port}"


def run_demo(config: DemoConfig, out: TextIO | None = None, *,
             live: bool | None = None) -> DemoReport:
    """Run the demo and return its report (the caller prints it and picks the exit code)."""
    stream = out if out is not None else sys.stdout
    show_live = stream.isatty() if live is None else live
    with _server(config) as (uri, label):
        print(f"executors demo: {config.workers} worker threads, {config.db_slots} db slots, "
              f"{config.seconds:g} s against {label}", file=stream, flush=True)
        return _Demo(config, uri, label).run(stream, show_live)

