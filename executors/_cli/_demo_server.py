"""The MongoDB server of ``executors demo``: checking a given one, or running one embedded.

`check_uri` checks a server given with ``--uri`` before the run; `EmbeddedServer` runs nx-27017
(a MongoDB wire-protocol server over SQLite) on a free loopback port when none is given;
`server` picks between the two for the demo application (`_demo_app`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, final

import pymongo
from pymongo import uri_parser
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from executors.testing import free_port

__all__ = ("PING_TIMEOUT", "EmbeddedServer", "check_uri", "server")


# -- checking a given server ---------------------------------------------------------------

#: How long the reachability check waits for a server given with ``--uri``. Only the check:
#: the run itself keeps pymongo's defaults.
PING_TIMEOUT = 5.0


def check_uri(uri: str, timeout: float = PING_TIMEOUT) -> None:
    """Check that *uri* is a MongoDB URI and that its deployment answers a ping in *timeout*.

    Raises:
        ValueError: *uri* is not a MongoDB connection string (the message says why).
        ConnectionError: no server answered within *timeout* seconds, or it refused the demo
            (authentication); the message names the servers tried and what each said.
    """
    try:
        uri_parser.parse_uri(uri, connect_timeout=timeout)
    except (PyMongoError, ValueError) as exc:  # pymongo raises ValueError for a bad port
        raise ValueError(f"not a MongoDB URI: {exc}") from None
    client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
        uri, serverSelectionTimeoutMS=int(timeout * 1000), connectTimeoutMS=int(timeout * 1000))
    try:
        client.admin.command("ping")
    except ConnectionFailure:
        tried = [f"{host}:{port}: {_short(server.error)}" for (host, port), server
                 in client.topology_description.server_descriptions().items()]
        raise ConnectionError(f"no server answered within {timeout:g} s "
                              f"({'; '.join(tried) or 'no server found'})") from None
    except OperationFailure as exc:
        reason = (exc.details or {}).get("errmsg") or str(exc)
        raise ConnectionError(f"the server refused the demo: {reason}") from None
    finally:
        client.close()


def _short(error: Exception | None) -> str:
    """pymongo's error for one server, without the timeouts it appends to every message."""
    text = str(error) if error is not None else "no reply"
    text = re.sub(r"\s*\(configured timeouts:[^)]*\)", "", text)
    return re.sub(r"^[^\s]+:\d+: ", "", text)  # the address is already in front of it


# -- the embedded server ---------------------------------------------------------------------


@final
class EmbeddedServer:
    """nx-27017 (a MongoDB wire-protocol server over SQLite) on a free loopback port.

    A context manager: entering starts the server and waits until it accepts connections,
    leaving stops it (SIGTERM, then SIGKILL after a grace period).

    Raises:
        RuntimeError: nx-27017 is not installed or did not start within *timeout* seconds.
    """

    def __init__(self, timeout: float = 20.0) -> None:
        self._timeout = timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def _executable(self) -> str:
        beside = Path(sys.executable).parent / "nx-27017"
        found = str(beside) if beside.exists() else shutil.which("nx-27017")
        if not found:
            raise RuntimeError("the embedded server nx-27017 is not installed; install the "
                               "demo extra: pip install 'executors[demo]' (or pass --uri "
                               "mongodb://... to use a running server)")
        return found

    def __enter__(self) -> EmbeddedServer:
        executable = self._executable()
        self._dir = tempfile.TemporaryDirectory(prefix="executors-demo-")
        self.port = free_port()
        log = Path(self._dir.name) / "nx-27017.log"
        self._proc = subprocess.Popen(
            [executable, "--db", "memory", "-p", str(self.port), "--log-file", str(log),
             "--pid-file", str(Path(self._dir.name) / "nx-27017.pid")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches the demo, which stops it
        )
        deadline = time.monotonic() + self._timeout
        while True:
            if self._proc.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"nx-27017 exited at start-up (code {self._proc.returncode})")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError as exc:
                if time.monotonic() > deadline:
                    self.__exit__(None, None, None)
                    raise RuntimeError(
                        f"nx-27017 did not listen within {self._timeout} s") from exc
                time.sleep(0.05)  # polling a port that has not opened yet: nothing to wait on

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


@contextlib.contextmanager
def server(uri: str | None) -> Iterator[tuple[str, str]]:
    """The server to run against: `uri` if given, else an `EmbeddedServer` while the block
    runs. Yields its URI and a label for the report (without the URI's credentials)."""
    if uri:
        yield uri, uri.split("@")[-1]
        return
    with EmbeddedServer() as embedded:
        yield embedded.uri, f"nx-27017 (embedded) on 127.0.0.1:{embedded.port}"
