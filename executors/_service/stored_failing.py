"""A stored schedule whose declaration or plan fails: its error, its count, its own backoff.

The store loop keeps two tables of `Failing` entries, ``StoreLoop.declaring`` (declarations the
store refused, `executors._service.stored_declare`) and ``StoreLoop.plans_failing`` (plans
over their time budget, `executors._service.stored_plan`). Each entry is that schedule's
failure alone: logged as an ERROR when its error changes, counted, listed by `status()`, and
tried again after its own backoff, while the other schedules are served as usual.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stored import StoreLoop

__all__ = ("DECLARE_BACKOFF_FIRST", "DECLARE_BACKOFF_MAX", "Failing", "failed", "succeeded")

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


def failed(loop: StoreLoop, table: dict[str, Failing], what: str, name: str,
           exc: Exception, now: float) -> None:
    """`name`'s `what` ("declaration" or "plan") failed with `exc`: log it when its error
    changes, count it, and set its next try after its own backoff."""
    error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
    with loop.lock:
        old = table.get(name)
        backoff = DECLARE_BACKOFF_FIRST if old is None else min(
            old.backoff * 2, DECLARE_BACKOFF_MAX)
        table[name] = Failing(error, backoff, now + backoff,
                              1 if old is None else old.attempts + 1)
        if what == "declaration":
            loop.declaration_errors += 1
        else:
            loop.plan_errors += 1
    if old is None or old.error != error:
        logger.error("%s: the %s of stored schedule %r failed in %s: %s; the other schedules "
                     "go on, this one is tried again in %.1f s (doubling to %.0f s)",
                     loop.name, what, name, loop.store.display_url, error, backoff,
                     DECLARE_BACKOFF_MAX)
    else:
        logger.debug("%s: the %s of stored schedule %r failed again (%d times): %s",
                     loop.name, what, name, old.attempts + 1, error)


def succeeded(loop: StoreLoop, table: dict[str, Failing], what: str, name: str) -> None:
    """`name`'s `what` went through: it is failing no more."""
    with loop.lock:
        old = table.pop(name, None)
    if old is not None:
        logger.warning("%s: the %s of stored schedule %r went through after %d failure(s)",
                       loop.name, what, name, old.attempts)
