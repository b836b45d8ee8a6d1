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
from typing import TYPE_CHECKING, Protocol

from executors import _search_budget

from . import stored_plan
from .events import ScheduleAdded, ScheduleChanged
from .schedule_data import check_target, trigger_of
from .stored_failing import DECLARE_BACKOFF_FIRST
from .stored_status import SnapshotLoop, Snapshots, refresh_job

if TYPE_CHECKING:
    from executors.stores import ScheduleDefinition

    from .job import Job
    from .stored_failing import FailingTable

__all__ = ("DeclareLoop", "declare_now", "retry_all", "serve_declarations")

logger = logging.getLogger("executors.service")

#: A failed plan whose retry is this late (seconds) was not retried: its record is not due
#: here any more (every pass claims the due records, at least every POLL).
_STALE = 5.0


class DeclareLoop(SnapshotLoop, Protocol):
    """What declaring reads of the store loop (`executors._service.stored`): its snapshots
    (a declared record is shown at once) and its failing declarations."""

    snapshots: Snapshots
    declaring: FailingTable


def declare_now(loop: DeclareLoop, definition: ScheduleDefinition, job: Job) -> None:
    """Declare `definition` in the store (raises what the store raises)."""
    # Checked where it is written: while a decorator runs, its name is not bound yet.
    check_target(definition.target, job.fn)
    trigger = trigger_of(definition.trigger)

    def first_fire(now: dt.datetime) -> dt.datetime | None:
        # The plans' budget: a search over it fails this declaration, not the loop.
        with _search_budget.budget(stored_plan.PLAN_BUDGET):
            return trigger.next_after(now)

    result = loop.store.declare(definition, first_fire)
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
    for definition, job in pending:
        name = definition.name
        try:
            declare_now(loop, definition, job)
        except Exception as exc:
            loop.declaring.failed(name, exc, now)
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
