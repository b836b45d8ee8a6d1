"""The application ``executors demo`` runs: threaded pymongo on the executors' machinery.

Worker threads serve simulated requests against a MongoDB server (an embedded nx-27017 on a free
loopback port unless a URI is given). Each request pages through a raw command cursor; some stop
mid-iteration and drop the request object that owns the cursor, and a `CursorReaper` kills those
server-side cursors from a weakref callback, confirmed by the server's killCursors replies. A
fair semaphore, shared through the bridge, caps concurrent database work for the threads and for
an asyncio task together; a channel hands every result to an asyncio consumer; a
`BackgroundService` runs the periodic jobs, among them a server monitor that holds its owner only
weakly. The run ends after a fixed time or on Ctrl-C, and a report says what happened, leaks
first (`_demo_report`). The server, given or embedded, comes from `_demo_server`. Only the
command (`executors._cli.demo`) imports this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gc
import random
import statistics
import sys
import threading
import time
import weakref
from typing import Any, TextIO, final

import pymongo
from pymongo import monitoring

from executors import (
    BackgroundService,
    CancelToken,
    PeriodicExecutor,
    ThreadGroup,
    _validate,
    current_run,
    registry,
)
from executors.aio import Channel, Semaphore
from executors.errors import ChannelClosed
from integrations.bridge import Portal
from integrations.mongo import CursorReaper

from ._demo_report import DemoReport
from ._demo_server import check_uri, server
from ._words import plural

# `DemoReport` and `check_uri` are re-exported: the command reaches the demo through this module.
__all__ = ("DemoConfig", "DemoReport", "check_uri", "run_demo")

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
    # Cursors opened by requests the end of the run stopped before their result was served.
    in_flight: int = 0
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
            opened = False  # this request opened a cursor and its result is not served yet
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
                        opened = True
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
                opened = False
                with counters.lock:  # served: the result reached the channel
                    counters.requests += 1
                    counters.documents += read
            except ChannelClosed:  # the run is over: this request's result is not served
                self._stopped_in_flight(opened)
                return
            except Exception as exc:  # a demo keeps serving, and reports what went wrong
                self._stopped_in_flight(opened)
                with counters.lock:
                    counters.errors.append(f"worker {index}: {type(exc).__name__}: {exc}")
                if token.wait(0.1):
                    return

    def _stopped_in_flight(self, opened: bool) -> None:
        # The report counts the cursors such requests opened, so that the cursors opened add
        # up to the requests served plus these.
        if opened:
            with self.counters.lock:
                self.counters.in_flight += 1

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
            # A wall-clock schedule beside the periodic ones: every 5 s of UTC, on the second
            # (a 6-field cron expression: its first field is the seconds).
            self.cron_runs = 0
            self.cron_last: dt.datetime | None = None
            self.cron = service.cron("*/5 * * * * *", self._cron_tick, tz="UTC", name="tick")
            cleanup.pop_all()  # from here on, the shutdown below closes everything, in order

        interrupted = False
        with ThreadGroup(name="demo-worker") as group:
            started = time.monotonic()
            for i in range(config.workers):
                group.start(self.worker, i, slots_view, results_view, coll)
            try:
                drawn = self._watch(out, live, started, monitor)
            except KeyboardInterrupt:
                drawn = 0  # the terminal shows ^C after the last frame: draw below it
                interrupted = True
            elapsed = time.monotonic() - started
            stopping = time.monotonic()
            live_executors = [e for e in registry.live_executors()
                              if isinstance(e, PeriodicExecutor)]
            stats = [e.statistics() for e in live_executors]
            names = tuple(sorted(e.name for e in live_executors))
            group.cancel("the demo is over")
            results_view.close()  # a worker blocked in send() gets ChannelClosed
        # Leaving the block joined every worker thread.

        # -- the rest of the shutdown, in dependency order; timed ------------------------------
        self.stop.set()
        consumer.result(10)  # the consumer drains the channel, then ends
        portal.call(audit.close)
        checks, rtt_ms = monitor.checks, monitor.rtt_ms
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
        # The live view's last frame shows the final numbers, the same as the report's: the
        # requests in flight at the deadline finished (or stopped) after the previous frame.
        self.slots_waiting = 0  # every worker has ended: nobody waits for a slot now
        self._draw(out, live, self._status_lines(elapsed, checks, rtt_ms, final=True), drawn)
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
            cursors_in_flight=counters.in_flight,
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
            cron_runs=self.cron_runs,
            shutdown_seconds=shutdown,
            errors=tuple(counters.errors),
        )

    def _cron_tick(self) -> None:
        run = current_run()
        self.cron_last = None if run is None else run.fire_time
        self.cron_runs += 1

    async def _async_client(self) -> pymongo.AsyncMongoClient[dict[str, Any]]:
        # Created on the portal's loop: the async client's tasks live there.
        return pymongo.AsyncMongoClient(self.uri)

    def _watch(self, out: TextIO, live: bool, started: float, monitor: _ServerMonitor) -> int:
        """Show progress until the time is up (or Ctrl-C, which propagates); return the number
        of lines the live view's last frame has on screen."""
        deadline = started + self.config.seconds
        period = 0.25 if live else 2.0
        drawn = 0
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            self.stop.wait(min(period, deadline - now))
            lines = self._status_lines(time.monotonic() - started, monitor.checks,
                                       monitor.rtt_ms)
            drawn = self._draw(out, live, lines, drawn)
        return drawn

    @staticmethod
    def _draw(out: TextIO, live: bool, lines: list[str], drawn: int) -> int:
        """Draw a frame over the *drawn* lines of the previous one (live) or as one plain line;
        return the lines now on screen."""
        if live:
            if drawn:
                out.write(f"\x1b[{drawn}F")
            out.write("".join(f"\x1b[2K{line}\n" for line in lines))
        else:
            out.write(lines[0] + " | " + " | ".join(x.strip() for x in lines[1:]) + "\n")
        out.flush()
        return len(lines) if live else 0

    def _status_lines(self, elapsed: float, checks: int, rtt_ms: float, *,
                      final: bool = False) -> list[str]:
        c = self.counters
        total = self.config.seconds
        width = 30
        filled = min(width, int(width * elapsed / total))
        reaper = self.reaper.statistics()
        with c.lock:
            requests, abandoned, queued = c.requests, set(c.abandoned), c.queued
            # The recent waits while running (sorting them all each frame would grow with the
            # run); the last frame's figure is the whole run's, as in the report.
            p99 = _percentile(c.waits_ms if final else c.waits_ms[-2000:], 0.99)
        with self.listener._lock:  # counted as the report counts them: abandoned, then killed
            killed = len(abandoned & self.listener.killed)
        fire, last = self.cron.next_fire, self.cron_last
        # After shutdown the schedule has no next fire time: show the last one that ran.
        when = (f"next {fire:%H:%M:%S %Z}" if fire is not None
                else f"last {last:%H:%M:%S %Z}, stopped" if last is not None else "stopped")
        return [
            f"executors demo [{'#' * filled}{'-' * (width - filled)}] {elapsed:4.1f}/{total:.0f} s",
            (f"  requests {requests:,} ({requests / max(elapsed, 1e-9):,.0f}/s), consumed "
            f"{c.consumed:,}"),
            f"  cursors abandoned {len(abandoned):,}, killed {killed:,}, pending {reaper.pending}",
            (f"  db slots {self.config.db_slots}: {self.slots_waiting} waiting now, {queued:,} "
             f"queued so far, wait p99 {p99:.2f} ms"),
            f"  monitor {checks} checks, rtt {rtt_ms:.1f} ms",
            (f"  cron every 5 s ('*/5 * * * * *': 6 fields, the first is seconds), UTC: "
             f"{plural(self.cron_runs, 'run')}, {when}"),
        ]

    def _leaked_threads(self, before: set[int | None]) -> tuple[str, ...]:
        # pymongo's own monitor threads exit within its 0.5 s poll after close(); ours at once.
        deadline = time.monotonic() + 3.0
        while True:
            alive = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
            if not alive or time.monotonic() > deadline:
                return tuple(sorted(t.name for t in alive))
            time.sleep(0.05)


def run_demo(config: DemoConfig, out: TextIO | None = None, *,
             live: bool | None = None) -> DemoReport:
    """Run the demo and return its report (the caller prints it and picks the exit code)."""
    stream = out if out is not None else sys.stdout
    show_live = stream.isatty() if live is None else live
    with server(config.uri) as (uri, label):
        print(f"executors demo: {config.workers} worker threads, {config.db_slots} db slots, "
              f"{config.seconds:g} s against {label}", file=stream, flush=True)
        return _Demo(config, uri, label).run(stream, show_live)

