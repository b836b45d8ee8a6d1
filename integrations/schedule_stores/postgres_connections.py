"""Connections of the PostgreSQL schedule store: each opened with the store's TCP and session
bounds, cut from under a hung call, and the ``LISTEN`` connection behind ``watch``."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any, final

import psycopg

from executors import library_threads

__all__ = ("Listener", "connect", "cut")

logger = logging.getLogger("executors.service")

#: The first and the longest wait before a lost listener connects again (seconds).
_LISTEN_BACKOFF_FIRST = 0.1
_LISTEN_BACKOFF_MAX = 5.0
#: How long a listener waits without a notification before it checks its connection (seconds).
_LISTEN_CHECK_EVERY = 10.0

#: The server-side bounds of every session of this store (milliseconds), sent as libpq
#: ``options``; a URL's own ``options`` (or ``PGOPTIONS``) come after them and win.
_SESSION = {
    # A statement here takes milliseconds, a whole read of 100,000 records a few seconds;
    # one still running after a lease (30 s by default) has held up the loop past its
    # renewals: cancelled, reported, retried.
    "statement_timeout": 30_000,
    # A claim skips locked rows; a declaration, completion or control operation waits for
    # one row another transaction of a store holds for milliseconds. Held 10 s (the renewal
    # period), its holder is stuck: give up and retry rather than queue behind it.
    "lock_timeout": 10_000,
    # A transaction here waits on its client only while a claim plans (bounded); one idle a
    # lease long is a client stopped or cut off with rows locked: the server ends it.
    "idle_in_transaction_session_timeout": 30_000,
}
#: TCP bounds (libpq parameters; a URL's own win): a dead host or a cut network is noticed
#: within 25 s of silence (keepalives after 10 s idle, every 5 s, 3 unanswered) and data left
#: unacknowledged for 20 s ends the connection: both under the lease. A server process that
#: is stopped but whose host answers (SIGSTOP) is not caught by these (its kernel acknowledges
#: the traffic); the service reports such a hung call and interrupts it at shutdown.
_TCP = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
        "keepalives_count": 3, "tcp_user_timeout": 20_000}


def connect(url: str, connect_timeout: int, **extra: Any) -> psycopg.Connection[Any]:
    """A connection to `url` with this store's TCP and session bounds (`_TCP`, `_SESSION`)."""
    given = psycopg.conninfo.conninfo_to_dict(url)
    params: dict[str, Any] = {k: v for k, v in _TCP.items() if k not in given
                              and (k != "tcp_user_timeout" or psycopg.pq.version() >= 120000)}
    ours = " ".join(f"-c {k}={v}" for k, v in _SESSION.items())
    theirs = given.get("options") or os.environ.get("PGOPTIONS")
    params["options"] = f"{ours} {theirs}" if theirs else ours
    return psycopg.connect(url, connect_timeout=connect_timeout, **params, **extra)


def cut(conn: psycopg.Connection[Any]) -> None:
    """Shut down `conn`'s socket (a duplicate of its descriptor: the same socket)."""
    try:
        fd = os.dup(conn.fileno())
    except (OSError, psycopg.Error):
        return  # closed already
    with socket.socket(fileno=fd) as sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


@final
class Listener:
    """One ``LISTEN`` connection and the daemon thread that waits on it (see ``watch``)."""

    def __init__(self, url: str, channel: str, callback: Callable[[], object],
                 connect_timeout: int) -> None:
        self._url = url
        self._channel = channel
        self._callback = callback
        self._connect_timeout = connect_timeout
        self._stop = threading.Event()
        # close() writes to one end to wake the thread out of select().
        self._wake_r, self._wake_w = socket.socketpair()
        self._pid = os.getpid()
        self.thread = threading.Thread(target=self._run, name=f"{channel}-listener",
                                       daemon=True)
        self.conn: psycopg.Connection[Any] | None = None  # the one in use (for `interrupt`)

    def start(self) -> None:
        self.thread.start()

    def __call__(self) -> None:
        self.close()

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if os.getpid() != self._pid:
            return  # a forked child: the thread and its connection are the parent's
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # its end is closed: nothing to wake
        # The service's shutdown waits for this thread too: one joiner at a time.
        library_threads.join(self.thread, 1.0)
        if not library_threads.alive(self.thread):
            self._wake_r.close()
            self._wake_w.close()

    def _run(self) -> None:
        backoff = _LISTEN_BACKOFF_FIRST
        lost = False
        while not self._stop.is_set():
            try:
                # Named, so that an operator sees what the extra connection is.
                conn = connect(self._url, self._connect_timeout, autocommit=True,
                                application_name="executors schedule listener")
            except psycopg.Error:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _LISTEN_BACKOFF_MAX)
                continue
            if self._stop.is_set():  # closed while connecting: no call after close()
                conn.close()
                return
            self.conn = conn
            try:
                with conn:
                    conn.execute(f'LISTEN "{self._channel}"')
                    if lost:
                        logger.info("listening to %s again", self._channel)
                        lost = False
                    backoff = _LISTEN_BACKOFF_FIRST
                    self._call()  # changes may have been made while nobody listened
                    self._listen(conn)
            except psycopg.Error as exc:
                if not self._stop.is_set() and not lost:
                    lost = True
                    logger.warning("the listener of %s lost its connection (%s): changes are "
                                   "seen by polling until it is back", self._channel,
                                   " ".join(str(exc).split()))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _LISTEN_BACKOFF_MAX)

    def _listen(self, conn: psycopg.Connection[Any]) -> None:
        fd, wake = conn.fileno(), self._wake_r.fileno()
        while not self._stop.is_set():
            ready, _, _ = select.select([fd, wake], [], [], _LISTEN_CHECK_EVERY)
            if wake in ready:
                return
            if not ready:
                conn.execute("SELECT 1")  # a silent loss of the server raises here
                continue
            if any(True for _ in conn.notifies(timeout=0)):
                self._call()

    def _call(self) -> None:
        try:
            self._callback()
        except Exception:
            logger.exception("the callback of the listener of %s failed", self._channel)
