"""A SIGKILLed owner's schedule runs on within seconds, not a lease later, on every store.

Two worker processes (``python -m helpers.stored_jobs``) serve one schedule due every second
whose runs last 3 s and append ``start``/``end`` lines (fire time, attempt, pid, wall time) to
one log with O_APPEND; the lease is the default 30 s. The owner of a run is SIGKILLed as soon
as its run starts; the other process must start the next run within 2 s, and no fire time may
run twice (each attempt once under ``on_crash="rerun"``). Before owners' liveness, the
schedule stood still for the whole 30 s lease.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from executors._service.store import open_store
from executors.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]
#: The target: the next run starts this soon after its owner's SIGKILL (wall clock).
WITHIN = 2.0


class Workers:
    """Worker processes serving one per-second schedule on one store."""

    def __init__(self, url: str, log: Path, on_crash: str, hold: float = 3.0) -> None:
        self.url, self.log, self.on_crash, self.hold = url, log, on_crash, hold
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
        errors = open(self.log.with_suffix(f".{len(self.procs)}.err"), "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "helpers.stored_jobs", self.url, str(self.log),
             self.on_crash, "1", str(self.hold), "30", "all"],
            env=env, stdout=subprocess.DEVNULL, stderr=errors, cwd=ROOT)
        errors.close()
        self.procs.append(proc)
        return proc

    def lines(self, event: str | None = None) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line]
        return [x for x in lines if event is None or x["event"] == event]

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def workers_factory() -> Iterator[list[Workers]]:
    made: list[Workers] = []
    yield made
    for workers in made:
        workers.kill_all()


def _kill_owner_mid_run(workers: Workers) -> tuple[dict[str, object], float]:
    """Start two workers, wait until both serve and one runs, SIGKILL that one: its start
    line and the wall time of the kill."""
    for _ in range(2):
        workers.spawn()
    wait_until(lambda: len(workers.lines("up")) == 2, 60)
    seen = len(workers.lines("start"))
    wait_until(lambda: len(workers.lines("start")) > seen, 30)
    started = workers.lines("start")[seen]
    (victim,) = [p for p in workers.procs if p.pid == started["pid"]]
    killed_at = time.time()
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    return started, killed_at


@pytest.mark.timeout(90)
@pytest.mark.parametrize("on_crash", ["drop", "rerun"])
@pytest.mark.parametrize("shared_store_url", ["sqlite", "postgresql", "mongodb"],
                         indirect=True)
def test_a_sigkilled_owner_s_per_second_schedule_runs_again_within_2_s_and_once(
        shared_store_url: str, on_crash: str, tmp_path: Path,
        workers_factory: list[Workers]) -> None:
    """The owner of a per-second schedule's run is SIGKILLed mid-run (lease 30 s): the other
    process starts the next run within 2 s of the kill (its owner is known gone: SQLite's
    file lock, PostgreSQL's advisory lock, MongoDB's heartbeat), not a lease later. Under
    "rerun" that run is the killed fire time again (attempt 2), once; under "drop" it is a
    later fire time, and the killed one is counted lost once. No fire time runs twice."""
    workers = Workers(shared_store_url, tmp_path / "runs.log", on_crash)
    workers_factory.append(workers)
    killed, killed_at = _kill_owner_mid_run(workers)
    wait_until(lambda: any(float(str(x["at"])) > killed_at for x in workers.lines("start")),
               40)
    after = [x for x in workers.lines("start") if float(str(x["at"])) > killed_at]
    took = float(str(after[0]["at"])) - killed_at
    report = f"next run {took:.2f} s after the kill: {after[0]}"
    print(report)
    assert took <= WITHIN, report
    assert after[0]["pid"] != killed["pid"], report
    if on_crash == "rerun":
        assert (after[0]["fire"], after[0]["attempt"]) == (killed["fire"], 2), report
    else:
        assert after[0]["fire"] > killed["fire"] and after[0]["attempt"] == 1, report  # type: ignore[operator]
    store = open_store(shared_store_url)
    try:
        record = store.get("tick")
    finally:
        store.close()
    assert record is not None
    assert record.counters["lost"] == (1 if on_crash == "drop" else 0), record.counters
    runs = [(x["fire"], x["attempt"]) for x in workers.lines("start")]
    assert len(runs) == len(set(runs)), runs
    if on_crash == "drop":
        fires = [fire for fire, _ in runs]
        assert len(fires) == len(set(fires)), runs


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shared_store_url", ["sqlite", "postgresql"], indirect=True)
def test_a_sigstopped_owner_is_not_taken_for_gone_on_sqlite_and_postgresql(
        shared_store_url: str, tmp_path: Path, workers_factory: list[Workers]) -> None:
    """A SIGSTOPped owner still holds its SQLite file lock or its PostgreSQL session: for 3 s
    (longer than a killed owner takes to be settled) nobody settles its run nor runs the
    schedule; it is waited for by its lease, as a live owner that stalls always was."""
    workers = Workers(shared_store_url, tmp_path / "runs.log", "rerun", hold=2.0)
    workers_factory.append(workers)
    for _ in range(2):
        workers.spawn()
    wait_until(lambda: len(workers.lines("up")) == 2, 60)
    wait_until(lambda: len(workers.lines("start")) >= 1, 30)
    (started,) = workers.lines("start")[:1]
    (stopped,) = [p for p in workers.procs if p.pid == started["pid"]]
    stopped.send_signal(signal.SIGSTOP)
    try:
        threading.Event().wait(3.0)  # a window in which nothing must happen
        others = [x for x in workers.lines("start") if x["pid"] != started["pid"]]
    finally:
        stopped.send_signal(signal.SIGCONT)
    assert others == []
    store = open_store(shared_store_url)
    try:
        record = store.get("tick")
    finally:
        store.close()
    assert record is not None and record.counters["lost"] == 0
