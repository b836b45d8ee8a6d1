"""Linux process plumbing for the coordinator: spawning, subreaper, process groups, orphans."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
from collections.abc import Iterable, Mapping, Sequence

__all__ = (
    "PR_SET_CHILD_SUBREAPER",
    "children_of_self",
    "get_subreaper",
    "group_alive",
    "proc_state",
    "set_subreaper",
    "spawn",
)

PR_SET_CHILD_SUBREAPER = 36  # Linux >= 3.4, <linux/prctl.h>
PR_GET_CHILD_SUBREAPER = 37

# Every signal a child could have inherited as ignored or caught is reset to its default action
# at spawn. A coordinator started from `nohup` or a non-interactive shell's `cmd &` runs with
# SIGINT/SIGQUIT ignored, and SIG_IGN survives exec: py-spy would then never see our SIGINT
# (tini's `restore_signals` exists for the same reason). SIGKILL/SIGSTOP cannot be changed.
_RESET_SIGNALS = tuple(
    sorted(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))
)


def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    stdout: int,
    stderr: int,
) -> int:
    """Start *argv* (PATH lookup) in a new process group with a clean signal state; return its pid.

    The child gets stdin from /dev/null, *stdout*/*stderr* as its fds 1/2, an empty blocked-signal
    mask and every signal at its default disposition, whatever the caller's state was. It uses
    `posix_spawnp` (no `preexec_fn`, which is unsafe in threaded programs), and glibc reports an
    exec failure to the caller: raises FileNotFoundError (not found) or PermissionError (not
    executable) and nothing is left running.
    """
    file_actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, stdout, 1),
        (os.POSIX_SPAWN_DUP2, stderr, 2),
    ]
    return os.posix_spawnp(
        argv[0],
        list(argv),
        dict(env),
        file_actions=file_actions,
        setpgroup=0,
        setsigmask=(),
        setsigdef=_RESET_SIGNALS,
    )


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def get_subreaper() -> bool:
    """Whether this process is a child subreaper (`PR_GET_CHILD_SUBREAPER`); False if unknown."""
    value = ctypes.c_int(0)
    if _libc().prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
        return False
    return bool(value.value)


def set_subreaper(on: bool) -> bool:
    """Make this process a child subreaper (or stop being one); return whether it worked.

    Orphaned descendants are then reparented to us instead of to init, so they can be reaped
    (and stopped) by the run that created them.
    """
    return bool(_libc().prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0)


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return data[data.rindex(b")") + 2 :].split()


def proc_state(pid: int) -> str | None:
    """The one-letter state of *pid* from /proc (`R`, `S`, `Z`, ...), or None if it is gone."""
    fields = _stat_fields(pid)
    return fields[0].decode() if fields else None


def _all_pids() -> Iterable[int]:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            yield int(entry)


def group_alive(pgid: int) -> bool:
    """Whether process group *pgid* has a member that is not a zombie.

    `killpg(pgid, 0)` cannot answer this: it succeeds while an unreaped zombie leader exists,
    and the coordinator keeps the process under test's zombie on purpose.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def children_of_self() -> set[int]:
    """Pids of this process's children (all threads), from /proc."""
    me = os.getpid()
    out: set[int] = set()
    try:
        tids = os.listdir(f"/proc/{me}/task")
        for tid in tids:
            with open(f"/proc/{me}/task/{tid}/children", "rb") as f:
                out.update(int(p) for p in f.read().split())
        return out
    except OSError as exc:  # kernel without CONFIG_PROC_CHILDREN: scan /proc instead
        if exc.errno not in (errno.ENOENT, errno.EACCES):
            raise
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields and int(fields[1]) == me:
            out.add(pid)
    return out
