"""Integration fixtures: a real nx-27017 server on loopback (or MONGODB_URI), a TCP proxy."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pymongo
import pytest

from executors.testing import free_port, wait_until


@dataclasses.dataclass(frozen=True)
class MongoServer:
    """Where the test server is. `external` when MONGODB_URI pointed at a real deployment."""

    uri: str
    host: str
    port: int
    external: bool
    log_file: Path | None = None

    def client(self, **kwargs: object) -> pymongo.MongoClient:  # type: ignore[type-arg]
        """A new client to this server (fast server selection; close it when done)."""
        kwargs.setdefault("serverSelectionTimeoutMS", 5000)
        return pymongo.MongoClient(self.uri, **kwargs)


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.2).close()
    except OSError:
        return False
    return True


@pytest.fixture(scope="session")
def mongo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MongoServer]:
    """A MongoDB wire-protocol server for the session: nx-27017 on a free loopback port.

    With MONGODB_URI set, that server is used instead and nothing is started.
    """
    uri = os.environ.get("MONGODB_URI")
    if uri:
        parsed = pymongo.uri_parser.parse_uri(uri)
        host, port = parsed["nodelist"][0]
        yield MongoServer(uri=uri, host=host, port=port, external=True)
        return
    exe = Path(sys.executable).with_name("nx-27017")
    if not exe.exists():
        pytest.skip("nx-27017 is not installed in this environment (pip install nx-27017)")
    workdir = tmp_path_factory.mktemp("nx27017")
    port = free_port()
    log_file = workdir / "server.log"
    proc = subprocess.Popen(
        [str(exe), "--db", "memory", "-p", str(port), "--log-file", str(log_file),
         "--pid-file", str(workdir / "server.pid")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _accepts("127.0.0.1", port):
            if proc.poll() is not None:
                pytest.fail(f"nx-27017 exited with {proc.returncode}; log:\n"
                            + (log_file.read_text()[-3000:] if log_file.exists() else ""))
            if time.monotonic() > deadline:
                pytest.fail("nx-27017 did not accept connections within 30 s")
            time.sleep(0.02)  # waiting for an external process to bind: nothing to wait on
        yield MongoServer(uri=f"mongodb://127.0.0.1:{port}/", host="127.0.0.1", port=port,
                          external=False, log_file=log_file)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class TcpProxy:
    """A loopback TCP relay to a server that a test can take down and bring back.

    Down: the listening socket and every relayed connection are closed, so clients see a dead
    server (connection refused, reset sockets). Up: it listens again on the same port.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.accepted = 0

    def up(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        with self._lock:
            self._listener = listener
        self._spawn(self._accept, listener)

    def down(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def close(self) -> None:
        self.down()
        for t in self._threads:
            t.join(5)

    def _spawn(self, fn: object, *args: object) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True, name="test-proxy")  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
                self.accepted += 1
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def tcp_proxy(mongo_server: MongoServer) -> Iterator[TcpProxy]:
    """A `TcpProxy` in front of the test server, up."""
    proxy = TcpProxy((mongo_server.host, mongo_server.port))
    proxy.up()
    wait_until(lambda: _accepts("127.0.0.1", proxy.port), 5)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A throwaway PostgreSQL server on a free loopback port, from the installed binaries."""
    from helpers.postgres import temporary_server, unavailable

    try:
        with temporary_server() as dsn:
            yield dsn
    except FileNotFoundError as exc:
        unavailable(exc)


@pytest.fixture(params=["sqlite", "mongodb", "postgresql"])
def shared_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL of an empty store of each kind that several processes can share."""
    from helpers.store_urls import empty_store_url

    return empty_store_url(request.param, request, tmp_path)
