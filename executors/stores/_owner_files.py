"""Which owners of a SQLite store are alive: a lock each holds on a file of its own.

An owner (a serving process's store loop) that claims from ``jobs.db`` first creates
``jobs.db-owners/<owner>.lock`` and holds an exclusive ``flock`` on it for as long as it
lives. The kernel lets the lock go when the process ends, however it ends (SIGKILL, OOM
killer, a crash in C): another process that can take the lock knows the owner is gone, at
once, with no heartbeat and no clock. A process that cannot take it (the owner holds it) or
finds no file (an owner of an older version, one on another machine, one that closed) knows
nothing and waits for the lease, as before.

Why ``flock`` and not the owner's process id: a pid is reused, and a pid says nothing across
PID namespaces (containers sharing a volume). Why not POSIX ``fcntl`` locks: closing any
descriptor of a file drops all the process's locks on it, so a check made by one service
would drop the lock of another service of the same process. ``flock`` locks belong to an open
file description: a check opens its own and never disturbs the owner's. Descriptors are
opened ``O_CLOEXEC`` (a program the owner execs does not keep it alive) and a forked child
closes its copies (it is another owner; the parent's lock stays the parent's).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import weakref
from collections.abc import Iterable
from typing import final
from urllib.parse import quote, unquote

__all__ = ("OwnerFiles",)

try:
    import fcntl
except ImportError:  # Windows: no flock; owners are waited for by their lease
    fcntl = None  # type: ignore[assignment]

_SUFFIX = ".lock"
_ALL: weakref.WeakSet[OwnerFiles] = weakref.WeakSet()


@final
class OwnerFiles:
    """The lock files of the owners of one SQLite database (see the module docstring).

    Thread-safe. `hold` and `gone` never raise: a folder that cannot be made or read leaves
    liveness unknown (every owner waited for by its lease).
    """

    def __init__(self, database: str) -> None:
        self._usable = fcntl is not None and database not in ("", ":memory:") \
            and not database.startswith("file:")
        # Absolute: a process that changes its working folder later still finds the files.
        self.folder = f"{os.path.abspath(database) if self._usable else database}-owners"
        self._held: dict[str, int] = {}  # owner -> the descriptor holding its lock
        self._lock = threading.Lock()
        self._host = socket.gethostname()
        _ALL.add(self)

    def __repr__(self) -> str:
        held = sum(fd >= 0 for fd in self._held.values())
        return f"<OwnerFiles {self.folder!r} held={held} usable={self._usable}>"

    def _path(self, owner: str) -> str:
        return os.path.join(self.folder, quote(owner, safe="") + _SUFFIX)

    def hold(self, owner: str) -> None:
        """Make and lock `owner`'s file, once (before its first claim writes its name)."""
        if not self._usable or owner in self._held:
            return
        with self._lock:
            if owner in self._held:
                return
            try:
                os.makedirs(self.folder, mode=0o700, exist_ok=True)
                fd = os.open(self._path(owner), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError:
                self._held[owner] = -1  # not again at every claim: this owner is not known
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)  # another owner of that very name: this one stays unknown
                self._held[owner] = -1
                return
            self._held[owner] = fd

    def gone(self, owners: Iterable[str]) -> frozenset[str]:
        """Those of `owners` whose lock file exists and whose lock nobody holds."""
        if not self._usable:
            return frozenset()
        dead = set()
        for owner in owners:
            # An owner of another machine (a file on a shared folder): its lock says nothing
            # here. StoreLoop's owners are "host:pid:random".
            if owner in self._held or (owner.count(":") >= 2
                                       and owner.split(":", 1)[0] != self._host):
                continue
            if self._unlocked(self._path(owner)):
                dead.add(owner)
        return frozenset(dead)

    @staticmethod
    def _unlocked(path: str) -> bool:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return False  # no file (or not ours to open): nothing known
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: the owner lives (or the lock cannot be asked: unknown)
        finally:
            os.close(fd)  # lets go of the lock it may have taken
        return True

    def sweep(self, busy: Iterable[str]) -> None:
        """Remove the files of gone owners that hold no run (`busy`: owners that do)."""
        if not self._usable:
            return
        keep = set(busy) | set(self._held)
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            if not name.endswith(_SUFFIX) or unquote(name[:-len(_SUFFIX)]) in keep:
                continue
            path = os.path.join(self.folder, name)
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
                try:
                    # Removed while locked here: an owner never opens its file again.
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    os.unlink(path)
                finally:
                    os.close(fd)

    def release(self) -> None:
        """Remove and unlock the files of the owners this object holds (a clean close: their
        runs, if any are left, wait for their leases)."""
        with self._lock:
            held, self._held = self._held, {}
        for owner, fd in held.items():
            if fd < 0:
                continue
            with contextlib.suppress(OSError):
                os.unlink(self._path(owner))
            os.close(fd)

    def _after_fork(self) -> None:
        # The child is another owner: its copies of the parent's descriptors go (the lock is
        # the parent's open file description, which the parent still holds).
        held, self._held = self._held, {}
        self._lock = threading.Lock()
        for fd in held.values():
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _after_fork_in_child() -> None:
    for files in list(_ALL):
        files._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
