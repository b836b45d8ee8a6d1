"""A throwaway PostgreSQL server for the store tests and the traversal benchmark.

Test tooling, not part of the library: it runs the installed server binaries (``initdb`` as
the ``postgres`` user when run as root). The tests import it as ``helpers.postgres``; the
benchmarks, run from a checkout's root, as ``tests.helpers.postgres``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import NoReturn

from executors.testing import free_port

__all__ = ("PostgresServer", "restartable_server", "temporary_server", "unavailable")


def _binaries() -> str | None:
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(os.path.realpath(found))
    # Debian installs the server outside PATH, one directory per major version.
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(candidates[-1]) if candidates else None


def unavailable(exc: Exception) -> NoReturn:
    """No server here (`exc` says why): skip the test, or fail it where CI installed Debian's
    postgresql and set EXECUTORS_REQUIRE_POSTGRES (a skip there would hide a store that was
    never tested)."""
    import pytest

    if os.environ.get("EXECUTORS_REQUIRE_POSTGRES"):
        pytest.fail(f"no PostgreSQL server here: {exc}, and EXECUTORS_REQUIRE_POSTGRES is set")
    pytest.skip(f"no PostgreSQL server here: {exc}")


@dataclasses.dataclass
class PostgresServer:
    """A throwaway server that a test may stop and start again on the same data directory
    and port (the store lost and restored); made by `restartable_server`."""

    dsn: str
    _ctl: list[str]
    _start: list[str]
    _log: str

    def stop(self) -> None:
        """Stop the server at once (``-m immediate``: as a crash would)."""
        subprocess.run([*self._ctl, "-m", "immediate", "-w", "stop"], capture_output=True)

    def start(self) -> None:
        """Start the server on its data directory and port.

        Raises:
            RuntimeError: it did not start (its log is in the message).
        """
        proc = subprocess.run([*self._ctl, *self._start], capture_output=True, text=True)
        if proc.returncode != 0:
            with open(self._log) as f:
                raise RuntimeError(f"PostgreSQL did not start: {proc.stderr}\n{f.read()}")


@contextlib.contextmanager
def temporary_server() -> Iterator[str]:
    """Start a throwaway PostgreSQL server from the installed binaries; yield its DSN
    (see `restartable_server`)."""
    with restartable_server() as server:
        yield server.dsn


@contextlib.contextmanager
def restartable_server() -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL server from the installed binaries; yield it.

    The cluster lives in a temporary directory (initdb, trust authentication, fsync off) and
    listens on a free loopback port; it is stopped and deleted on exit. As root, the server
    runs as the ``postgres`` user (PostgreSQL refuses to run as root).

    Raises:
        FileNotFoundError: no PostgreSQL server binaries (install Debian's ``postgresql``),
            or running as root with no ``postgres`` user.
        RuntimeError: the server did not start (its log is in the message).
    """
    bindir = _binaries()
    if bindir is None:
        raise FileNotFoundError("no PostgreSQL server binaries (initdb) found; "
                                "install them with `apt-get install -y postgresql`")
    prefix: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            runuser = None
        if runuser is None:
            raise FileNotFoundError("running as root, and no `postgres` user (or runuser) to "
                                    "run the server as")
        prefix = [runuser, "-u", "postgres", "--"]
    tmp = tempfile.mkdtemp(prefix="executors-pg-")
    os.chmod(tmp, 0o777)
    data, log, port = os.path.join(tmp, "data"), os.path.join(tmp, "log"), free_port()
    try:
        subprocess.run([*prefix, f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True)
        opts = f"-p {port} -h 127.0.0.1 -k {tmp} -F -c max_connections=200"
        server = PostgresServer(f"postgresql://postgres@127.0.0.1:{port}/postgres",
                                [*prefix, f"{bindir}/pg_ctl", "-D", data],
                                ["-o", opts, "-l", log, "-w", "-t", "60", "start"], log)
        server.start()
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
