"""One managed child of the coordinator: spawn, exit detection by pidfd/waitid, signals, pipes."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO, Literal

from ._output import LineBuffer
from ._spec import Outcome, ProcessResult, ProcessSpec, signal_name
from ._sys import group_alive, spawn

__all__ = ("Child", "Stream")

_TAIL_LINES = 20


class Stream:
    """One output pipe of a child: the read end, its line buffer and its raw log file."""

    __slots__ = ("buffer", "child", "fd", "is_stderr", "log")

    def __init__(self, child: Child, fd: int, is_stderr: bool, log: BinaryIO | None) -> None:
        self.child = child
        self.fd = fd
        self.is_stderr = is_stderr
        self.buffer = LineBuffer()
        self.log = log


class Child:
    """State of one managed process, from `starting` to `exited`, for the coordinator's loop.

    Exit is detected with `waitid` on the pid (woken by its pidfd), never from pipe EOF: a
    grandchild that keeps stdout open must not make a dead process look alive (honcho's
    measured behaviour). The process under test is only peeked at (`WNOWAIT`) until the end of
    the run, so its pid stays reserved while profilers still refer to it.
    """

    def __init__(
        self,
        spec: ProcessSpec,
        role: Literal["put", "support"],
        stop_signal: signal.Signals,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.role: Literal["put", "support"] = role
        self.stop_signal = stop_signal
        self.grace = spec.grace
        self.argv: tuple[str, ...] = spec.argv
        self.pid: int | None = None
        self.pidfd: int | None = None
        self.started_at: float | None = None
        self.exited_at: float | None = None
        self.returncode: int | None = None
        self.reaped = False
        self.ready_at: float | None = None
        self.signals: list[tuple[str, float]] = []
        self.stop_sent_at: float | None = None
        self.deadline: float | None = None
        self.kill_sent_at: float | None = None
        self.killed_after_grace = False
        self.forced = False
        self.finished = False
        self.group_checked_at = float("-inf")
        self.skipped: str | None = None
        self.error: str | None = None
        self.streams: dict[int, Stream] = {}
        self.tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)

    def __repr__(self) -> str:
        if self.pid is None:
            state = "skipped" if self.skipped else "failed" if self.error else "not-started"
        elif self.returncode is not None:
            state = f"exited rc={self.returncode}"
        elif self.stop_sent_at is not None:
            state = f"stopping sent={','.join(s for s, _ in self.signals)}"
        else:
            state = "running"
        return f"<Child {self.name!r} {self.role} pid={self.pid} {state}>"

    @property
    def started(self) -> bool:
        return self.pid is not None

    @property
    def exited(self) -> bool:
        return self.returncode is not None

    def start(self, argv: list[str], env: Mapping[str, str], log_dir: Path | None,
              now: float) -> None:
        """Spawn the process; FileNotFoundError/PermissionError if it cannot be executed."""
        self.argv = tuple(argv)
        fds: list[tuple[int, int, bool]] = []
        try:
            for is_stderr in (False, True):
                r, w = os.pipe()
                fds.append((r, w, is_stderr))
            self.pid = spawn(argv, env, stdout=fds[0][1], stderr=fds[1][1])
        except BaseException:
            for r, w, _ in fds:
                os.close(r)
                os.close(w)
            raise
        self.started_at = now
        for r, w, is_stderr in fds:
            os.close(w)
            os.set_blocking(r, False)
            log = None
            if log_dir is not None:
                log = open(log_dir / f"{self.name}.{'err' if is_stderr else 'out'}", "wb")  # noqa: SIM115
            self.streams[r] = Stream(self, r, is_stderr, log)
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            # Linux < 5.3: exits are then noticed on SIGCHLD or the loop's tick (waitid below).
            self.pidfd = None

    def peek(self, now: float, *, reap: bool) -> bool:
        """Record the exit status if the process has exited; reap it only when *reap*."""
        if self.pid is None or self.returncode is not None:
            return self.returncode is not None
        flags = os.WEXITED | os.WNOHANG | (0 if reap else os.WNOWAIT)
        try:
            info = os.waitid(os.P_PID, self.pid, flags)
        except ChildProcessError:
            # Someone else reaped it (a blanket waitpid(-1) elsewhere in the program): the
            # status is lost. Say so rather than invent an exit code 0 (CPython's Popen does).
            self.returncode = -signal.SIGKILL if self.kill_sent_at else 255
            self.error = "reaped elsewhere; exit status unknown"
            self.exited_at, self.reaped = now, True
            return True
        if info is None:
            return False
        if info.si_code == os.CLD_EXITED:
            self.returncode = info.si_status
        else:  # CLD_KILLED or CLD_DUMPED
            self.returncode = -info.si_status
        self.exited_at = now
        self.reaped = reap
        return True

    def reap(self) -> None:
        """Reap the (exited) process so its pid may be reused."""
        if self.pid is not None and not self.reaped:
            with contextlib.suppress(ChildProcessError):
                os.waitid(os.P_PID, self.pid, os.WEXITED)
            self.reaped = True

    def send(self, sig: int, now: float) -> None:
        """Send *sig* to the process group (or only the process without group kill).

        The group is safe to signal while its leader is unreaped or members remain: Linux does
        not reuse a pid still in use as a group id. The single process is signalled through its
        pidfd, which cannot hit a recycled pid (bpo-38630).
        """
        if self.pid is None:
            return
        self.signals.append((signal_name(sig), now))
        try:
            if self.spec.group_kill:
                os.killpg(self.pid, sig)
            elif not self.reaped:
                if self.pidfd is not None:
                    signal.pidfd_send_signal(self.pidfd, sig)
                else:
                    os.kill(self.pid, sig)
        except ProcessLookupError:
            pass  # already gone: its exit is recorded from waitid, as supervisord does

    def group_done(self) -> bool:
        """Whether the process has exited and (with group kill) its group has no live member."""
        if not self.exited:
            return False
        if not self.spec.group_kill or self.pid is None:
            return True
        return not group_alive(self.pid)

    def close_streams(self) -> None:
        for stream in self.streams.values():
            with contextlib.suppress(OSError):
                os.close(stream.fd)
            if stream.log is not None:
                stream.log.close()
        self.streams.clear()

    def close(self) -> None:
        self.close_streams()
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None

    def result(self, t0: float) -> ProcessResult:
        """The frozen summary row of this process."""
        outcome: Outcome
        if self.pid is None:
            outcome = "skipped" if self.skipped is not None else "failed-to-start"
        elif self.returncode is None:
            outcome = "still-running"
        elif self.killed_after_grace and self.returncode == -signal.SIGKILL:
            outcome = "killed-after-grace"
        elif self.forced and self.returncode == -signal.SIGKILL:
            outcome = "killed"
        elif self.returncode < 0:
            outcome = "terminated"
        else:
            outcome = "exited"
        on_its_own = self.exited_at is not None and (
            self.stop_sent_at is None or self.exited_at < self.stop_sent_at
        )
        clean = self.returncode == 0 or (
            self.returncode == -self.stop_signal and self.stop_sent_at is not None
            and not on_its_own
        )
        start = None if self.started_at is None else self.started_at - t0
        duration = None
        if self.started_at is not None and self.exited_at is not None:
            duration = self.exited_at - self.started_at
        return ProcessResult(
            name=self.name,
            role=self.role,
            argv=self.argv,
            pid=self.pid,
            outcome=outcome,
            start=start,
            duration=duration,
            returncode=self.returncode,
            signals=tuple((s, t - t0) for s, t in self.signals),
            stop_signal=self.stop_signal.name,
            grace=self.grace,
            clean_stop=clean,
            on_its_own=on_its_own,
            ready_after=None if self.ready_at is None or self.started_at is None
            else self.ready_at - self.started_at,
            error=self.skipped or self.error,
            stderr_tail=tuple(self.tail),
        )
