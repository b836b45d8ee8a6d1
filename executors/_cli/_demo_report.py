"""The report of ``executors demo``: what a run of the demo application (`_demo_app`) did.

A value the application returns and the command prints (`DemoReport.render`); each entry says in
words what its numbers count, leaks first.
"""

from __future__ import annotations

import dataclasses
import textwrap
from typing import final

from ._words import plural

__all__ = ("DemoReport", "REPORT_WIDTH")


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
    #: Cursors opened by requests still in flight when the run ended, whose results were never
    #: served: `cursors_opened` is the requests served (those that opened one) plus these.
    cursors_in_flight: int = 0
    #: Runs of the service's cron schedule (one of `service_jobs`).
    cron_runs: int = 0

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
            leaked = f" ({plural(self.leaked_cursors, 'cursor')}; threads: {threads})"
        names = f" ({', '.join(self.executor_names)})" if self.executor_names else ""
        in_flight = opened_by = ""
        if self.cursors_in_flight:  # why more cursors were opened than requests served
            in_flight = (f" {plural(self.cursors_in_flight, 'more request')} in flight when "
                         "the run ended went unserved.")
            opened_by = (f", {self.cursors_opened - self.cursors_in_flight:,} by requests "
                         f"served and {self.cursors_in_flight:,} by the requests stopped in "
                         "flight")
        entries = [
            ("leaks", (f"{self.leaks}{leaked}. Abandoned cursors the server never confirmed "
             "killed, plus threads still running after shutdown; anything but 0 is a bug "
             "and makes the command exit with status 1.")),
            ("requests", (f"{self.requests:,} served ({rate:,.0f} a second) by the worker "
             f"threads, reading {self.documents_read:,} documents; the asyncio task received "
             f"{self.results_consumed:,} results through the channel.{in_flight}")),
            ("cursors", (f"{self.cursors_opened:,} opened on the server{opened_by}; "
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
            ("background service", (f"{plural(self.service_jobs, 'job')}: "
             f"{plural(max(0, self.service_jobs - 1), 'periodic job')} and a cron schedule "
             f"(every 5 s of UTC) that ran {plural(self.cron_runs, 'time')}. The server "
             "monitor, a periodic job that holds its owner only weakly, pinged the server "
             f"{plural(self.monitor_checks, 'time')}.")),
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
