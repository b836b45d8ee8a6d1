"""The tutorial's store chapter as a reader runs it: its ``billing.py`` and ``serve.py``, taken
from the page verbatim, served by two real processes on one SQLite file.

The page's ```python blocks run in tests/test_docs_examples.py; these two files are shown as
files (```py title=...), because they are a module and an entry point, not one script: this
test writes them into a folder, starts ``serve.py`` twice, stops both with SIGTERM, and checks
what the chapter says: each fire time ran in one process only, and both exit cleanly (their
stderr holds the service's INFO lines only: serving, the signal received).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

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
    """Collects a child's stdout and stderr lines as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.lines: list[str] = []
        self.errors: list[str] = []
        self._stderr = threading.Thread(target=self._collect, daemon=True,
                                        args=(proc.stderr, self.errors))

    def _collect(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        with stream:  # closed at the end of the output (the process ended)
            for line in stream:  # one by one: the test reads them while the process runs
                into.append(line.rstrip("\n"))  # noqa: PERF401

    def run(self) -> None:
        self._stderr.start()
        self._collect(self.proc.stdout, self.lines)
        self._stderr.join()

    def serving(self) -> bool:
        """The service logged that it serves: its signal handlers are set."""
        return any(SERVING.search(line) for line in self.errors)

    def check_stopped_cleanly(self) -> None:
        """Exit 0, and nothing on stderr but the service's INFO lines (no warning, no error,
        no traceback), the last saying it was stopped by SIGTERM."""
        self.join(5)
        stderr = "\n".join(self.errors)[-3000:]
        assert self.proc.returncode == 0, stderr
        assert all(line.startswith("INFO executors.service: ") for line in self.errors), stderr
        assert self.errors and self.errors[-1].endswith("SIGTERM received: shutting down"), stderr


SERVING = re.compile(r"^INFO executors\.service: \w+: serving until SIGTERM or SIGINT$")


def _serve(folder: Path, count: int, **env: str
           ) -> tuple[list[subprocess.Popen[str]], list[_Reader]]:
    """`count` processes running ``serve.py`` in `folder` (this checkout's library first on
    their path, `env` added), each with a reader of its stdout and stderr, started."""
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
    times ran, none of them twice; SIGTERM stops each within its shutdown (exit 0, only the
    service's INFO lines on stderr)."""
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
        for proc in procs:
            proc.wait(timeout=20)
    for reader in readers:
        reader.check_stopped_cleanly()
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
    during the test), and SIGTERM stops each cleanly (exit 0, only the service's INFO lines
    on stderr)."""
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
        wait_until(lambda: (declared() == ["send-reminders"]
                            and all(r.serving() for r in readers))
                   or any(p.poll() is not None for p in procs), 30)
        assert all(p.poll() is None for p in procs), "a serve.py process ended early"
        names = declared()
        assert names == ["send-reminders"], names
    finally:
        # At once: a signal sent as soon as a process serves is what hung the page's
        # earlier entry point (a handler setting an Event the main thread waited on).
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=20)
    for reader in readers:
        assert reader.lines == [], reader.lines
        reader.check_stopped_cleanly()
