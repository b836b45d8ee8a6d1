"""A throwaway PostgreSQL server for the store tests and the traversal benchmark.

Test tooling, not part of the library: it runs the installed server binaries (``initdb`` as
the ``postgres`` user when run as root). The tests import it as ``helpers.postgres``; the
benchmarks, run from a checkout's root, as ``tests.helpers.postgres``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

from executors.testing import free_port

__all__ = ("temporary_server",)


def _binaries() -> str | None:
    found = shutil.which("initdb")
    if found:
        return os.path.dirname(os.path.realpath(found))
    # Debian installs the server outside PATH, one directory per major version.
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(candidates[-1]) if candidates else None


@contextlib.contextmanager
def temporary_server() -> Iterator[str]:
    """Start a throwaway PostgreSQL server from the installed binaries; yield its DSN.

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
        proc = subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-o", opts, "-l", log,
                               "-w", "-t", "60", "start"], capture_output=True, text=True)
        if proc.returncode != 0:
            with open(log) as f:
                raise RuntimeError(f"PostgreSQL did not start: {proc.stderr}\n{f.read()}")
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w",
                            "stop"], capture_output=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
