"""Shutdown waits for each of a service's threads through one joiner at a time.

On CPython 3.11 and 3.12 two threads joining one thread at once corrupt its state
(python/cpython#116372): the caller of ``shutdown()``, the event dispatcher and the store
thread all wait for the pool's threads. The race window is a few instructions wide; these
tests widen it (the thread's end-of-life lock is held 10 ms by whoever acquires
it) so that a shutdown that joins a thread from two threads fails nearly every time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import stored_jobs

from executors import BackgroundService, Interval, _threads
from executors.testing import wait_until

pytestmark = pytest.mark.skipif(
    not hasattr(threading.Thread, "_set_tstate_lock"),
    reason="3.13+ joins through a thread handle (python/cpython#116372 fixed): no window")


class _SlowLock:
    """A thread's end-of-life lock that whoever acquires it holds 10 ms, and whose releaser
    goes on 5 ms later: a second joiner acquires it in between, and the first one's
    ``_stop()`` finds it held."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            time.sleep(0.01)  # the widened window: another joiner acquires right after
        return got

    def release(self) -> None:
        self._lock.release()
        time.sleep(0.005)  # and the releaser marks the thread stopped only after a moment

    def locked(self) -> bool:
        return self._lock.locked()


class _WideJoinRace(threading.Thread):
    """A library thread whose join race window is widened (see the module docstring)."""

    def _set_tstate_lock(self) -> None:
        super()._set_tstate_lock()  # type: ignore[misc]
        self._tstate_lock = _SlowLock(self._tstate_lock)  # type: ignore[has-type]


@pytest.fixture(autouse=True)
def _clear_seen() -> Iterator[None]:
    stored_jobs.SEEN.clear()
    yield
    stored_jobs.SEEN.clear()


def test_shutdown_joins_each_thread_once_under_a_widened_race_window(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """10 shutdowns of a service with a store, a run in progress on a pool thread (which the
    caller, the dispatcher and the store thread all wait for) and subscribers, each thread's
    join race widened: every shutdown completes, no thread of the service dies of an
    exception (the suite fails on one) and none outlives the shutdown."""
    monkeypatch.setattr(_threads, "Thread", _WideJoinRace)
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    log = tmp_path / "runs.log"
    for i in range(10):
        log.write_text("")
        svc = BackgroundService(name=f"joins{i}", store=url, workers=3)
        events: list[object] = []
        svc.subscribe(events.append)
        svc.schedule(Interval(0.05), stored_jobs.hold, str(log), 0.2, name="tick")
        with svc:
            wait_until(lambda: '"start"' in log.read_text(), 10)
            report = svc.shutdown(10)
        assert report.completed, report
        left = [t.name for t in threading.enumerate() if t.name.startswith(f"joins{i}-")]
        assert left == []
        assert events  # the dispatcher delivered
