"""A stored schedule whose declaration or plan fails: its error, its count, its own backoff.

The store loop keeps two `FailingTable` of `Failing` entries, ``StoreLoop.declaring``
(declarations the store refused, `executors._service.stored_declare`) and
``LoopPlanner.failing`` (plans over their time budget, `executors._service.stored_plan`);
each table owns its entries and its count of errors. Each entry is that schedule's
failure alone: logged as an ERROR when its error changes, counted, listed by `status()`, and
tried again after its own backoff, while the other schedules are served as usual.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Protocol, final

__all__ = ("DECLARE_BACKOFF_FIRST", "DECLARE_BACKOFF_MAX", "Failing", "FailingLoop",
           "FailingTable", "Named")

logger = logging.getLogger("executors.service")

#: The first wait before a failing declaration (or plan) is tried again (seconds), and the
#: longest: an error that a retry will not mend should not cost a write every pass.
DECLARE_BACKOFF_FIRST = 0.1
DECLARE_BACKOFF_MAX = 60.0


@dataclasses.dataclass(slots=True)
class Failing:
    """A schedule whose declaration (or plan) fails: its error and its own backoff."""

    error: str
    backoff: float
    retry_at: float  # monotonic
    attempts: int = 1


class Named(Protocol):
    """What the log reads of a store (not the store contract: the planner, which keeps a
    table, sits below the stores)."""

    @property
    def display_url(self) -> str: ...


class FailingLoop(Protocol):
    """What a table reads of its store loop: its name and store (for the log) and its lock
    (new after a fork: read at each use)."""

    name: str
    lock: threading.Lock

    @property
    def store(self) -> Named: ...


@final
class FailingTable(dict[str, Failing]):
    """One kind of failure (`what`: "declaration" or "plan"), per schedule, and how many there
    were (`errors`, for `status()`). Written under the loop's lock; read there too."""

    __slots__ = ("errors", "loop", "what")

    def __init__(self, loop: FailingLoop, what: str) -> None:
        super().__init__()
        self.loop = loop
        self.what = what
        self.errors = 0

    def failed(self, name: str, exc: Exception, now: float) -> None:
        """`name`'s `what` failed with `exc`: log it when its error changes, count it, and
        set its next try after its own backoff."""
        loop = self.loop
        what = self.what
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
        with loop.lock:
            old = self.get(name)
            backoff = DECLARE_BACKOFF_FIRST if old is None else min(
                old.backoff * 2, DECLARE_BACKOFF_MAX)
            self[name] = Failing(error, backoff, now + backoff,
                                 1 if old is None else old.attempts + 1)
            self.errors += 1
        if old is None or old.error != error:
            logger.error("%s: the %s of stored schedule %r failed in %s: %s; the other "
                         "schedules go on, this one is tried again in %.1f s (doubling to "
                         "%.0f s)", loop.name, what, name, loop.store.display_url, error,
                         backoff, DECLARE_BACKOFF_MAX)
        else:
            logger.debug("%s: the %s of stored schedule %r failed again (%d times): %s",
                         loop.name, what, name, old.attempts + 1, error)

    def succeeded(self, name: str) -> None:
        """`name`'s `what` went through: it is failing no more."""
        with self.loop.lock:
            old = self.pop(name, None)
        if old is not None:
            logger.warning("%s: the %s of stored schedule %r went through after %d failure(s)",
                           self.loop.name, self.what, name, old.attempts)

    def __repr__(self) -> str:
        return f"<FailingTable {self.what} failing={len(self)} errors={self.errors}>"
