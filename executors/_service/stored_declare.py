"""Declaring a process's stored schedules, each on its own: one the store refuses is that
schedule's failure alone, never a stop of the others.

The store loop (`executors._service.stored`) declares a schedule when it is added (or at
start) and, if that fails, at its passes: each failing declaration waits its own backoff
(`executors._service.stored_failing`), is logged as an ERROR when its error changes, counted
(`StoreStatus.declaration_errors`) and listed with its error (`StoreStatus.declarations_failing`)
until the store takes it. A failure is not the store's (`DeclareLoop.failed`): the pass goes on
to its completions and claims, and the other schedules of the process keep being served. When
the store comes back after an outage (which fails every declaration) the backoffs start again
(`retry_all`). The first fire time is searched within the plans' time budget
(`stored_plan.PLAN_BUDGET`): a trigger that outlasts it fails its declaration alone.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from executors import _search_budget, stores

from . import stored_plan
from .events import ScheduleAdded, ScheduleChanged
from .schedule_data import check_target, trigger_of
from .stored_failing import DECLARE_BACKOFF_FIRST
from .stored_status import SnapshotLoop, Snapshots, refresh_job

if TYPE_CHECKING:
    from executors.stores import Declared, ScheduleDefinition
    from executors.triggers import Trigger

    from .job import Job
    from .store_calls import WatchedStore
    from .stored_failing import FailingTable

__all__ = ("DECLARE_BATCH", "DeclareLoop", "declare_many", "declare_now", "retry_all",
           "serve_declarations")

logger = logging.getLogger("executors.service")

#: The most schedules one ``declare_many`` call of a store declares (`SupportsDeclareMany`):
#: an unchanged batch is one statement on PostgreSQL whatever its size, and a batch is one
#: store call in progress (`store_calls`: shown blocked after seconds), so not all at once.
DECLARE_BATCH = 500

#: A failed plan whose retry is this late (seconds) was not retried: its record is not due
#: here any more (every pass claims the due records, at least every POLL).
_STALE = 5.0


class DeclareLoop(SnapshotLoop, Protocol):
    """What declaring reads of the store loop (`executors._service.stored`): its snapshots
    (a declared record is shown at once) and its failing declarations."""

    snapshots: Snapshots
    declaring: FailingTable
    watched: WatchedStore  # the store itself, to ask what it offers


def _prepared(definition: ScheduleDefinition, job: Job
              ) -> tuple[Trigger, Callable[[dt.datetime], dt.datetime | None]]:
    """`definition`'s trigger and the function of its first fire time (raises what makes
    the declaration fail before the store is asked)."""
    # Checked where it is written: while a decorator runs, its name is not bound yet.
    check_target(definition.target, job.fn)
    trigger = trigger_of(definition.trigger)

    def first_fire(now: dt.datetime) -> dt.datetime | None:
        # The plans' budget: a search over it fails this declaration, not the loop.
        with _search_budget.budget(stored_plan.PLAN_BUDGET):
            return trigger.next_after(now)

    return trigger, first_fire


def declare_now(loop: DeclareLoop, definition: ScheduleDefinition, job: Job) -> None:
    """Declare `definition` in the store (raises what the store raises)."""
    trigger, first_fire = _prepared(definition, job)
    _declared(loop, definition, job, trigger, loop.store.declare(definition, first_fire))


def declare_many(loop: DeclareLoop, pending: Sequence[tuple[ScheduleDefinition, Job]]
                 ) -> list[Exception | None]:
    """Declare each of `pending`: the failure of each (None: declared), in order.

    A store that offers `SupportsDeclareMany` declares them in batches of `DECLARE_BATCH`
    (10,000 schedules at start-up: 20 batches, not 10,000 transactions); a batch whose call
    failed as a whole is declared again one schedule at a time, so that one bad declaration
    fails only itself. Another store declares each alone."""
    many = stores.offered(loop.watched.inner, stores.SupportsDeclareMany, loop.store)
    if many is None or len(pending) < 2:
        return [_alone(loop, definition, job) for definition, job in pending]
    failures: list[Exception | None] = []
    for start in range(0, len(pending), DECLARE_BATCH):
        batch = pending[start:start + DECLARE_BATCH]
        errors: list[Exception | None] = [None] * len(batch)
        ready: list[tuple[int, Trigger, Callable[[dt.datetime], dt.datetime | None]]] = []
        for i, (definition, job) in enumerate(batch):
            try:
                ready.append((i, *_prepared(definition, job)))
            except Exception as exc:
                errors[i] = exc
        try:
            results = many.declare_many([(batch[i][0], first_fire)
                                         for i, _, first_fire in ready])
        except Exception:
            # Refused as a whole (one record the store would not take may be the cause):
            # each alone, its failure its own.
            for i, _, _ in ready:
                errors[i] = _alone(loop, *batch[i])
            failures += errors
            continue
        for (i, trigger, _), result in zip(ready, results, strict=True):
            if isinstance(result, Exception):
                errors[i] = result
            else:
                _declared(loop, batch[i][0], batch[i][1], trigger, result)
        failures += errors
    return failures


def _alone(loop: DeclareLoop, definition: ScheduleDefinition, job: Job) -> Exception | None:
    try:
        declare_now(loop, definition, job)
    except Exception as exc:
        return exc
    return None


def _declared(loop: DeclareLoop, definition: ScheduleDefinition, job: Job, trigger: Trigger,
              result: Declared) -> None:
    """Show what the store did with `definition`: on its job, in the status copy, in the
    log and as an event."""
    with loop.lock:
        loop.snapshots.touch(definition.name)
        refresh_job(job, result.record)
    loop.snapshots.changed(definition.name)  # declared here now (its row may not have changed)
    events = loop.scheduler.events
    if result.outcome == "replaced":
        # Not "changed": nothing of the stored state could be kept.
        logger.error("%s: stored schedule %r could not be read (%s) and is replaced by "
                     "this declaration in %s: %s -> %s (its state starts again)",
                     loop.name, definition.name, result.unreadable,
                     loop.store.display_url, trigger.describe(), definition.target)
        if ScheduleChanged in events.wanted:
            events.emit(ScheduleChanged(definition.name, trigger.describe()))
    elif result.outcome == "changed":
        logger.warning("%s: schedule %r changed in %s: now %s -> %s (its state is kept)",
                       loop.name, definition.name, loop.store.display_url,
                       trigger.describe(), definition.target)
        if ScheduleChanged in events.wanted:
            events.emit(ScheduleChanged(definition.name, trigger.describe()))
    elif result.outcome == "added" and ScheduleAdded in events.wanted:
        events.emit(ScheduleAdded(definition.name, trigger.describe()))


def serve_declarations(loop: DeclareLoop, now: float) -> None:
    """The pass's declarations: those whose backoff has passed, each on its own.

    Also forgets a failed plan not tried again long after its backoff: its record is no
    longer due here (another process planned it, it was paused or removed), and a failure
    nobody retries must not keep the service unhealthy."""
    planner = loop.planner
    planner.new_pass()
    with loop.lock:
        plans_failing = planner.failing
        for name in [n for n, f in plans_failing.items() if f.retry_at < now - _STALE]:
            del plans_failing[name]
        failing = loop.declaring
        pending = [(d, job) for name, (d, job) in loop.to_declare.items()
                   if name not in failing or failing[name].retry_at <= now]
    for (definition, _), error in zip(pending, declare_many(loop, pending), strict=True):
        name = definition.name
        if error is not None:
            loop.declaring.failed(name, error, now)
            continue
        with loop.lock:
            # Declared again meanwhile (a reschedule): that one is still to do.
            if loop.to_declare.get(name, (None,))[0] is definition:
                del loop.to_declare[name]
        loop.declaring.succeeded(name)


def retry_all(loop: DeclareLoop, now: float) -> None:
    """The store answers again after an outage, which failed every declaration: try them all
    at the next pass, not after their backoffs."""
    with loop.lock:
        for item in loop.declaring.values():
            item.retry_at = now
            item.backoff = DECLARE_BACKOFF_FIRST / 2
