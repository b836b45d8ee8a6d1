"""Orphans of a coordinator run: adopt as subreaper (or PID 1), reap by pid, stop at the end."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from collections.abc import Callable

from ._sys import children_of_self, get_subreaper, proc_state, set_subreaper

__all__ = ("OrphanReaper",)


class OrphanReaper:
    """Reaps the children a run did not start itself, and stops the live ones at the end.

    Orphaned descendants are reparented to the nearest subreaper (or PID 1 of the namespace).
    They are reaped one pid at a time, never with `waitpid(-1)`: a blanket reaper would also
    take managed children's statuses (CPython's Popen then reports 0 for a process that exited
    7: research note, "the waitpid(-1) trap"). Children that existed before the run belong to
    the host program and are left alone.
    """

    def __init__(self, say: Callable[[str], None], kill_wait: float) -> None:
        self._say = say
        self._kill_wait = kill_wait
        self.active = False
        self.reaped = 0
        self._initial: set[int] = set()
        self._deadline: float | None = None
        self._killed = False

    def __repr__(self) -> str:
        return f"<OrphanReaper active={self.active} reaped={self.reaped}>"

    def enable(self, subreaper: bool) -> Callable[[], object] | None:
        """Start adopting orphans; return how to undo it (None if nothing to undo)."""
        undo = None
        if os.getpid() == 1:
            self.active = True
        elif subreaper:
            was = get_subreaper()
            self.active = set_subreaper(True)
            if self.active and not was:
                undo = functools.partial(set_subreaper, False)
        self._initial = children_of_self() if self.active else set()
        return undo

    def adopted(self, managed: set[int]) -> set[int]:
        return children_of_self() - managed - self._initial

    def reap(self, managed: set[int]) -> None:
        """Reap every exited adopted child, by pid."""
        if not self.active:
            return
        for pid in self.adopted(managed):
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG)
            except ChildProcessError:
                continue
            if info is not None:
                self.reaped += 1
                self._say(f"reaped orphan pid {pid}")

    def stop(self, managed: set[int], now: float, grace: float) -> bool:
        """Stop live adopted children (SIGTERM, grace, SIGKILL; tini#236); True when none is left.

        Called repeatedly by the coordinator's loop; the adopted children are our own unreaped
        children, so their pids cannot be recycled while we signal them.
        """
        if not self.active:
            return True
        alive = {p for p in self.adopted(managed) if proc_state(p) not in (None, "Z")}
        if not alive:
            # What is left are zombies, some of which may have died after the loop's last
            # reap (a grandchild killed with its group): reap them now, or they would outlive
            # the run as zombie children of the host program.
            self.reap(managed)
            return True
        if self._deadline is None:
            self._say(f"stopping {len(alive)} orphaned process(es): {sorted(alive)}")
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                    os.kill(pid, signal.SIGCONT)
            self._deadline = now + grace
        if now >= self._deadline:
            if self._killed:
                return now >= self._deadline + self._kill_wait
            self._killed = True
            for pid in alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return False
