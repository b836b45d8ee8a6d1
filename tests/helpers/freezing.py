"""Stores that stop answering, for the frozen-store tests: a server stopped by SIGSTOP (its
kernel still acknowledges its TCP traffic, so the client just waits), and a SQLite file whose
write lock another process holds (``BEGIN IMMEDIATE`` in a real child process)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

__all__ = ("frozen", "holding_write_lock", "postmaster_pid")


@contextlib.contextmanager
def frozen(pid: int, *, children: bool = False) -> Iterator[None]:
    """Stop `pid` (SIGSTOP) for the block and, with `children`, every process it started
    (listed once it is stopped: it starts no other meanwhile; one that exits on the way is
    skipped). SIGCONT every one stopped on the way out, whatever happened (a failed test
    never leaves a stopped server)."""
    stopped: list[int] = []
    try:
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)
        for child in _children(pid) if children else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGSTOP)
                stopped.append(child)
        yield
    finally:
        for stopped_pid in reversed(stopped):
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped_pid, signal.SIGCONT)


def postmaster_pid(dsn: str) -> int:
    """The postmaster of the PostgreSQL server at `dsn` (on this machine), from the
    ``postmaster.pid`` of its data directory."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    with open(os.path.join(str(row[0]), "postmaster.pid")) as f:
        return int(f.readline())


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # "pid (comm) state ppid ...": comm may hold spaces, so split after its ')'.
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent:
            found.append(int(entry))
    return found


_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@contextlib.contextmanager
def holding_write_lock(path: str) -> Iterator[subprocess.Popen[str]]:
    """A child process holds the write lock of the SQLite file at `path` (``BEGIN
    IMMEDIATE``) for the block; it lets go (and exits) on the way out."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, path], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
