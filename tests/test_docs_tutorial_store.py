"""The tutorial's store chapter as a reader runs it: its ``billing.py`` and ``serve.py``, taken
from the page verbatim, served by two real processes on one SQLite file.

The page's ```python blocks run in tests/test_docs_examples.py; these two files are shown as
files (```py title=...), because they are a module and an entry point, not one script: this
test writes them into a folder, starts ``serve.py`` twice, stops both with SIGTERM, and checks
what the chapter says: each fire time ran in one process only, and both exit cleanly.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from executors.testing import wait_until

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "content" / "tutorial.md"
FILE_BLOCK = re.compile(r'^```py title="([\w.]+)"\n(.*?)^```', re.MULTILINE | re.DOTALL)
LINE = re.compile(r"^process (\d+): reminders of (\d\d:\d\d:\d\d)$")


def _files() -> dict[str, str]:
    return dict(FILE_BLOCK.findall(PAGE.read_text()))


def test_the_chapter_shows_both_files() -> None:
    """The chapter has the two files the test runs (a renamed or dropped block fails here,
    not as a confusing process error)."""
    assert set(_files()) == {"billing.py", "serve.py"}


class _Reader(threading.Thread):
    """Collects a child's stdout lines as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.lines: list[str] = []

    def run(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))


def _serve(folder: Path, count: int, **env: str
           ) -> tuple[list[subprocess.Popen[str]], list[_Reader]]:
    """`count` processes running ``serve.py`` in `folder` (this checkout's library first on
    their path, `env` added), each with a reader of its output, started."""
    environ = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    procs = [subprocess.Popen([sys.executable, "serve.py"], cwd=folder, env=environ,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(count)]
    readers = [_Reader(proc) for proc in procs]
    for reader in readers:
        reader.start()
    return procs, readers


@pytest.mark.timeout(60)
def test_two_processes_run_each_fire_time_once(tmp_path: Path) -> None:
    """Two ``serve.py`` processes on one ``billing.db`` share the schedule: at least three fire
    times ran, none of them twice; SIGTERM stops each within its shutdown (exit 0, nothing
    on stderr)."""
    for name, code in _files().items():
        (tmp_path / name).write_text(code)
    procs, readers = _serve(tmp_path, 2)
    try:
        wait_until(lambda: sum(len(r.lines) for r in readers) >= 3
                   or any(p.poll() is not None for p in procs), 30)
        assert all(p.poll() is None for p in procs), "a serve.py process ended early"
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        results = [proc.communicate(timeout=20) for proc in procs]
    for reader in readers:
        reader.join(5)
    for proc, (_, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stderr[-3000:]
        assert stderr == "", stderr[-3000:]
    fire_times: list[str] = []
    for proc, reader in zip(procs, readers, strict=True):
        for line in reader.lines:
            match = LINE.match(line)
            assert match, f"unexpected output {line!r}"
            assert int(match.group(1)) == proc.pid
            fire_times.append(match.group(2))
    assert len(fire_times) >= 3, fire_times
    assert len(set(fire_times)) == len(fire_times), f"a fire time ran twice: {fire_times}"
    # Every 2 s of UTC: each fire time is on an even second.
    assert all(int(t[-2:]) % 2 == 0 for t in fire_times), fire_times


SCHEDULES = ROOT / "docs" / "content" / "schedules.md"


@pytest.mark.timeout(60)
def test_the_schedules_page_application_declares_serves_and_stops(tmp_path: Path) -> None:
    """The Schedules page's whole application (its ``billing.py``, with the decorator form on
    a store, and ``serve.py``), verbatim: two processes on one store both start, the
    schedule is declared once in the store (a weekday 09:00 New York cron: nothing is due
    during the test), and SIGTERM stops each cleanly (exit 0, nothing on stderr)."""
    from executors.stores import SQLiteScheduleStore, StoreFormatError

    files = dict(FILE_BLOCK.findall(SCHEDULES.read_text()))
    assert {"billing.py", "serve.py"} <= set(files), sorted(files)
    for name in ("billing.py", "serve.py"):
        (tmp_path / name).write_text(files[name])
    db = tmp_path / "jobs.db"
    procs, readers = _serve(tmp_path, 2, JOBS_STORE=f"sqlite:///{db}")
    try:
        def declared() -> list[str]:
            try:  # the file may not be there yet, or be made but hold no store yet
                store = SQLiteScheduleStore(str(db), read_only=True)
            except (ConnectionError, StoreFormatError):
                return []
            try:
                return [r.name for r in store.records()]
            finally:
                store.close()

        # Both serving (their SIGTERM handler set), and the schedule declared.
        wait_until(lambda: (declared() == ["send-reminders"] and all(r.lines for r in readers))
                   or any(p.poll() is not None for p in procs), 30)
        assert all(p.poll() is None for p in procs), "a serve.py process ended early"
        names = declared()
        assert names == ["send-reminders"], names
        assert all(r.lines == ["serving until SIGTERM"] for r in readers)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        results = [proc.communicate(timeout=20) for proc in procs]
    for proc, (_, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0 and stderr == "", stderr[-3000:]
