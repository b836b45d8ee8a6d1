"""The SQLite store's checkpoints, on a thread of their own instead of inside a commit.

In WAL mode, SQLite's auto-checkpoint copies the log back into the database file inside the
commit that takes the log past its threshold (1,000 pages): that write, a claim of fifty due
runs say, waits for the copy and its fsync. Measured on the scheduler benchmark's denser
SQLite scenario (3,000 schedules due each minute): p99 lateness about 20 ms with it, about
10 ms with no checkpoint in the commit. So the store's connections turn it off; a commit that
finds the log file past `LOG_LIMIT` wakes a thread that runs a passive checkpoint (it never
waits for a reader or a writer, and sqlite3 lets go of the GIL meanwhile).

A passive checkpoint copies what the log held when it began, and the log restarts from its
start only when a write begins with all of it copied: writers that never pause (a tight loop
of commits) keep that from happening. So a commit that finds the file past twice the limit
checkpoints itself, as SQLite would have: it waits for the copy, so the copy catches up with
it. SQLite truncates the file to the limit when the log restarts (``journal_size_limit``),
so its size is the measure: the log stays bounded under any load, and a commit pays for a
checkpoint only when the thread cannot keep up.

The thread starts with the first checkpoint asked for (in a forked child too: the parent's
does not survive the fork) and ends with the store's `close`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable

__all__ = ("LOG_LIMIT", "Checkpoints")

#: The log's size that asks the thread for a checkpoint (SQLite's own threshold is 1,000
#: pages, about as much), and what SQLite truncates the file to when the log restarts. Past
#: twice this, a commit checkpoints itself.
LOG_LIMIT = 4 * 2**20


class Checkpoints:
    """Checkpoints of one database file: on a thread of their own through the connection
    `connect` gives it, in the commit once the log at `log` outgrows them."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], name: str, log: str) -> None:
        self._connect = connect
        self._name = name
        self._log = log
        self._cond = threading.Condition(threading.Lock())
        self._wanted = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        #: Checkpoints run by the thread, and by commits (for tests).
        self.by_thread = 0
        self.by_commits = 0

    def committed(self, conn: sqlite3.Connection) -> None:
        """`conn` committed a write: ask for a checkpoint if the log has grown, or run one
        through `conn` if it has outgrown the thread's."""
        try:
            size = os.stat(self._log).st_size
        except OSError:  # no log (not in WAL mode, or removed): nothing to copy
            return
        if size <= LOG_LIMIT:
            return
        if size > 2 * LOG_LIMIT:
            if self._checkpoint(conn):
                self.by_commits += 1
            return
        with self._cond:
            if self._closed:
                return
            self._wanted = True
            thread = self._thread
            if thread is None or self._pid != os.getpid():
                self._pid = os.getpid()
                self._thread = thread = threading.Thread(
                    target=self._run, name=f"{self._name}-checkpoint", daemon=True)
                thread.start()
            self._cond.notify()

    @staticmethod
    def _checkpoint(conn: sqlite3.Connection) -> bool:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:  # interrupted, or the file went: the next one tries again
            return False
        return True

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                with self._cond:
                    while not self._wanted and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    self._wanted = False
                if conn is None:
                    conn = self._connect()
                if self._checkpoint(conn):
                    self.by_thread += 1
        finally:
            if conn is not None:
                conn.close()

    def close(self, timeout: float = 5.0) -> None:
        """End the thread (a checkpoint in progress ends first, within `timeout`)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread() and \
                self._pid == os.getpid():
            thread.join(timeout)
