"""Quiet for the tests that measure the machine, in a parallel run (pytest-xdist).

A test marked ``serial`` (timing ratios, signal storms, anything that compares a duration with
a bound) runs while no other test of the run runs: each xdist worker takes `QuietLock` around
every test it runs, shared for an ordinary test and exclusive for a ``serial`` one. Without
xdist the tests run one at a time anyway and nothing is locked.

The lock is a readers-writer lock between the worker processes, made of two ``flock`` files in
the run's base temporary directory (each worker's basetemp is a directory of it). A writer holds
the turnstile while it waits for the readers in the room to leave, so a stream of ordinary tests
on the other worker cannot starve a ``serial`` test.

`run_wide` gives the workers one directory for what a run builds once (the docs site): a
session fixture per worker would build it once per worker, and xdist's ``loadgroup``, which
would keep a module's tests on one worker, does not group on pytest 9.2 (pytest-xdist#1386).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; the serial tests then run beside the others.
    fcntl = None  # type: ignore[assignment]

__all__ = ("QuietLock", "run_lock", "run_wide")


class QuietLock:
    """A readers-writer lock between processes: `shared` for many, `exclusive` for one."""

    def __init__(self, directory: Path) -> None:
        self._turnstile = directory / "quiet-turnstile.lock"
        self._room = directory / "quiet-room.lock"

    def shared(self) -> contextlib.AbstractContextManager[None]:
        """Held by many processes at once; waits while one holds `exclusive`."""
        return self._hold(fcntl.LOCK_SH)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Held by one process, while no other holds `shared` or `exclusive`."""
        return self._hold(fcntl.LOCK_EX)

    @contextlib.contextmanager
    def _hold(self, mode: int) -> Iterator[None]:
        # Closing a file releases its flock: leaving the block, however, unlocks both.
        with self._turnstile.open("a") as turnstile, self._room.open("a") as room:
            fcntl.flock(turnstile, fcntl.LOCK_EX)
            fcntl.flock(room, mode)
            if mode == fcntl.LOCK_SH:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            yield


def run_lock(basetemp: Path) -> QuietLock | None:
    """The `QuietLock` of this xdist run (`basetemp` is this worker's), or None outside xdist."""
    if fcntl is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return QuietLock(basetemp.parent)


@contextlib.contextmanager
def run_wide(basetemp: Path, name: str) -> Iterator[Path]:
    """A directory `name` that every xdist worker of this run shares (`basetemp` is this
    worker's; without xdist, a directory of it), held by one process at a time while the block
    runs: the first to enter builds what it holds, the others find it built."""
    root = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    path = root / name
    path.mkdir(exist_ok=True)
    if fcntl is None:
        yield path
        return
    with (root / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path
