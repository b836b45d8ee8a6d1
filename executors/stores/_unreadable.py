"""The records a schedule store found due but could not read, left out for a while.

See `Unreadable`: without it, one corrupt record due at once keeps the store thread spinning.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator

__all__ = ("UNREADABLE_RECHECK", "Unreadable")

#: Seconds a store leaves a record it could not read out of its claims and `next_due` before
#: reading it again (see `Unreadable`).
UNREADABLE_RECHECK = 30.0


class Unreadable:
    """The names of the records a claim found due but could not read, left out of the
    store's claims and of ``ScheduleStore.next_due`` for `recheck` seconds.

    Why: a corrupt record keeps its next fire time, so it would stay the earliest due
    record for ever. Every pass of the serving loop would find work due at once and claim
    nothing (a loop spinning on the store, starving the schedules that can run), and enough
    such records would fill every claim's batch. Read again after `recheck`, a record
    repaired by hand or by another process is served again; one that this process declares
    again, or removes, is read again at once (`writing`).

    A declaration runs on the caller's thread while the serving loop claims: a claim that
    read the old record before the declaration wrote over it must not leave the new record
    out. So a claim takes a `mark` before it reads, and `add` ignores a name written since.
    The store's threads share it: each operation is one dict operation or one step of a
    counter, atomic under the GIL, and `names` works on a copy.
    """

    def __init__(self, recheck: float = UNREADABLE_RECHECK) -> None:
        self.recheck = recheck
        self._until: dict[str, float] = {}
        self._ticks = itertools.count()
        self._written: dict[str, int] = {}  # name -> the tick of its latest write here

    def mark(self) -> int:
        """Taken before a claim reads the records it may find unreadable."""
        return next(self._ticks)

    def reading(self) -> tuple[int, list[str]]:
        """``(mark(), names())``: what a claim takes before it reads, in one call."""
        return next(self._ticks), self.names()

    def add(self, name: str, mark: int) -> None:
        """`name` could not be read by a read begun at `mark`: leave it out until `recheck`
        seconds from now, unless this process has written it since."""
        if self._written.get(name, -1) < mark:
            self._until[name] = time.monotonic() + self.recheck

    def written(self, name: str) -> None:
        """`name` was written or removed here (called once the write is committed): read
        it again from now on."""
        self._written[name] = next(self._ticks)
        self._until.pop(name, None)

    @contextlib.contextmanager
    def writing(self, name: str) -> Iterator[None]:
        """Around a write of `name` and its commit (entered before the transaction):
        `written` when it ends, whether or not anything was written."""
        try:
            yield
        finally:
            self.written(name)

    def names(self) -> list[str]:
        """The names to leave out now (an empty list, the usual case, costs one test)."""
        if not self._until:
            return []
        now = time.monotonic()
        for name, until in list(self._until.items()):
            if until <= now:
                self._until.pop(name, None)
        return list(self._until)
