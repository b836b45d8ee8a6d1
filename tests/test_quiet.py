"""The lock that gives `serial` tests a quiet machine in a parallel run (helpers/quiet)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.quiet import QuietLock, run_lock, run_wide

pytest.importorskip("fcntl", reason="the quiet lock is made of flock files")


def _hold(enter: Callable[[], contextlib.AbstractContextManager[None]],
          entered: threading.Event, release: threading.Event) -> threading.Thread:
    def body() -> None:
        with enter():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=body, name="quiet-holder")
    thread.start()
    return thread


@contextlib.contextmanager
def _holding(enter: Callable[[], contextlib.AbstractContextManager[None]]
             ) -> Iterator[threading.Event]:
    entered, release = threading.Event(), threading.Event()
    thread = _hold(enter, entered, release)
    try:
        yield entered
    finally:
        release.set()
        thread.join(10)


def test_shared_holders_do_not_wait_for_each_other(tmp_path: Path) -> None:
    """Ordinary tests on two workers run side by side: two `shared` holders at once."""
    lock = QuietLock(tmp_path)
    with _holding(lock.shared) as first:
        assert first.wait(5)
        with _holding(lock.shared) as second:
            assert second.wait(5)


def test_exclusive_waits_until_the_shared_holders_leave(tmp_path: Path) -> None:
    """A `serial` test starts only once the test running on another worker has ended."""
    lock = QuietLock(tmp_path)
    entered, release = threading.Event(), threading.Event()
    reader = _hold(lock.shared, entered, release)
    assert entered.wait(5)
    with _holding(lock.exclusive) as writer:
        assert not writer.wait(0.2)
        release.set()
        reader.join(10)
        assert writer.wait(5)


def test_a_waiting_exclusive_holds_back_new_shared_holders(tmp_path: Path) -> None:
    """While a `serial` test waits for quiet, the other worker starts no new test (a stream of
    ordinary tests cannot starve it); that test starts once the `serial` one has run."""
    lock = QuietLock(tmp_path)
    entered, release = threading.Event(), threading.Event()
    reader = _hold(lock.shared, entered, release)
    assert entered.wait(5)
    writer_in, writer_release = threading.Event(), threading.Event()
    writer = _hold(lock.exclusive, writer_in, writer_release)
    try:
        assert not writer_in.wait(0.2)
        with _holding(lock.shared) as late_reader:
            assert not late_reader.wait(0.2)
            release.set()
            assert writer_in.wait(5)
            assert not late_reader.is_set()
            writer_release.set()
            assert late_reader.wait(5)
    finally:
        release.set()
        writer_release.set()
        reader.join(10)
        writer.join(10)


def test_no_lock_outside_a_parallel_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without xdist every test runs alone anyway: no lock files, no waiting."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert run_lock(tmp_path / "popen-gw0") is None
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    lock = run_lock(tmp_path / "popen-gw0")
    assert isinstance(lock, QuietLock)
    with lock.exclusive():
        assert (tmp_path / "quiet-room.lock").exists()


def test_run_wide_is_one_directory_for_every_worker_built_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers of a run share `run_wide`'s directory (in the run's base temporary directory),
    one at a time: what the first built there, the next finds."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    with run_wide(tmp_path / "popen-gw0", "site") as first:
        (first / "index.html").write_text("built")
        entered = threading.Event()
        other = threading.Thread(target=lambda: _enter_run_wide(tmp_path / "popen-gw1", entered))
        other.start()
        assert not entered.wait(0.2)
    other.join(10)
    assert entered.is_set() and first == tmp_path / "site"
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    (tmp_path / "alone").mkdir()
    with run_wide(tmp_path / "alone", "site") as own:
        assert own == tmp_path / "alone" / "site" and not (own / "index.html").exists()


def _enter_run_wide(basetemp: Path, entered: threading.Event) -> None:
    with run_wide(basetemp, "site") as path:
        assert (path / "index.html").read_text() == "built"
        entered.set()
