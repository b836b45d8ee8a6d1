"""Targets for schedules kept in a store (importable as ``helpers.stored_jobs:...``), and a
worker process that serves a store until SIGTERM (``python -m helpers.stored_jobs ...``).

Every run appends one JSON line to a log file opened with ``O_APPEND`` (one ``write`` per line:
lines of concurrent processes never interleave, and a line written survives a SIGKILL).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

import executors

__all__ = ("append", "hold", "record", "seen", "gated", "GATE_ENTERED", "GATE_OPEN", "main")

#: In-process runs of `seen` (for tests that run the service in the test process).
SEEN: list[tuple[str, str, int]] = []
#: What `current_run()` answered in each run of `run_info_twice`, asked twice.
INFOS: list[tuple[executors.RunInfo | None, executors.RunInfo | None]] = []
#: Set by `gated` when a run has begun; the run then waits for `GATE_OPEN`.
GATE_ENTERED = threading.Event()
GATE_OPEN = threading.Event()


def append(path: str, **fields: object) -> None:
    """Append one JSON line to `path` (O_APPEND: atomic for lines this short)."""
    line = (json.dumps(fields, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _run_fields() -> dict[str, object]:
    run = executors.current_run()
    assert run is not None
    return {"name": run.name, "fire": run.fire_time.isoformat(), "attempt": run.attempt,
            "pid": os.getpid()}


def record(path: str) -> None:
    """One line per run: its name, fire time, attempt and pid."""
    append(path, event="run", **_run_fields())


def hold(path: str, seconds: float) -> None:
    """A run that lasts `seconds`: a ``start`` line (with the wall clock's ``at``), the wait,
    an ``end`` line (a process killed mid-run leaves a start without an end)."""
    fields = _run_fields()
    append(path, event="start", at=time.time(), **fields)
    time.sleep(seconds)  # the run's own work: a process may be killed or stopped meanwhile
    append(path, event="end", **fields)


def seen(tag: str) -> None:
    """Remember the run in this process (`SEEN`)."""
    run = executors.current_run()
    assert run is not None
    SEEN.append((tag, run.fire_time.isoformat(), run.attempt))


def gated(tag: str) -> None:
    """Remember the run (`SEEN`), say it began (`GATE_ENTERED`), and last until `GATE_OPEN`
    is set (at most 30 s): a run a test holds in flight while it changes the schedule."""
    seen(tag)
    GATE_ENTERED.set()
    GATE_OPEN.wait(30)


def main(argv: list[str]) -> None:
    """``URL LOG ON_CRASH PERIOD HOLD LEASE [MISSED]``: serve one schedule (every PERIOD
    seconds, each run holding HOLD seconds, ``missed=MISSED``, "all" by default) on the store
    at URL until SIGTERM; lost leases and missed runs are logged."""
    url, log, on_crash, period, held, lease, *rest = argv
    missed = rest[0] if rest else "all"
    svc = executors.BackgroundService("worker", store=url, store_lease=float(lease), workers=4)
    svc.schedule(executors.Interval(float(period)), hold, log, float(held), name="tick",
                 missed=missed, on_crash=on_crash)  # type: ignore[arg-type]
    svc.subscribe(lambda e: append(log, event="lease_lost", name=e.name,  # type: ignore[attr-defined]
                                   fire=e.fire_time.isoformat(),  # type: ignore[attr-defined]
                                   attempt=e.attempt, pid=os.getpid()),  # type: ignore[attr-defined]
                  executors.LeaseLost)
    svc.subscribe(lambda e: append(log, event="missed", name=e.name,  # type: ignore[attr-defined]
                                   count=e.count, ran=e.ran,  # type: ignore[attr-defined]
                                   reason=e.reason, pid=os.getpid()),  # type: ignore[attr-defined]
                  executors.RunMissed)
    # "up" once it serves, its SIGTERM handler set: the service logs that (INFO) first.
    service_log = logging.getLogger("executors.service")
    service_log.setLevel(logging.INFO)
    service_log.addHandler(_Serving(lambda: append(log, event="up", pid=os.getpid())))
    svc.run_until_signal(signal.SIGTERM)


class _Serving(logging.Handler):
    """Calls `then` when the service logs that it serves until a signal."""

    def __init__(self, then: Callable[[], object]) -> None:
        super().__init__()
        self.then = then

    def emit(self, record: logging.LogRecord) -> None:
        if "serving until" in record.getMessage():
            self.then()


if __name__ == "__main__":
    main(sys.argv[1:])


def run_info_twice() -> None:
    """Remember what `current_run()` answers, asked twice in the run (`INFOS`)."""
    INFOS.append((executors.current_run(), executors.current_run()))
