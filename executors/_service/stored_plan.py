"""The ``missed`` policy of stored schedules: planning a claim and announcing a miss.

The store loop (`executors._service.stored`) hands its `LoopPlanner` to the store's claim,
which owns what it decides until the loop takes it: it applies the ``missed`` policy with
the same pure function as memory schedules (`wallclock.decide`), inside the claim's
conditional update, so it is applied once however many processes serve the store.
A fire time still unclaimed `UNWATCHED_AFTER` after it came due passed unwatched (reason
``"stopped"``), as in memory after a restart with ``since``: ``"skip"`` runs none of them. A
group of missed fire times is announced once by the process that meets it (``"all"`` walks it
over several claims).

The planner sits beside the stores, not above them: a store's claim calls it, so this module
imports only the stores' data model (`executors.stores._records`), never a store or the
contract that names them, and reads a declared job through `PlannedJob`, not the job's
class (which names the store contract). The store's call into it climbs no floor.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, final

from executors import _search_budget
from executors.stores._records import Plan
from executors.triggers import AllOf, trigger_from_data

from .stored_failing import FailingTable, Named
from .wallclock import announce_missed as announce
from .wallclock import decide

if TYPE_CHECKING:
    from executors.stores._records import ScheduleDefinition, ScheduleRecord

    from .context import ServiceContext
    from .wallclock import Missed, TriggerLike, WallState

__all__ = ("PLAN_BUDGET", "UNWATCHED_AFTER", "Decision", "LoopPlanner", "PassPlans", "PlanLoop",
           "PlannedJob")

logger = logging.getLogger("executors.service")

#: A fire time still unclaimed this long (seconds, store clock) after it came due passed with
#: no process serving it: every process claims a due record within `POLL`, so only a stop of
#: them all, or a run holding the schedule past it, leaves one waiting longer.
UNWATCHED_AFTER = 5.0
#: The longest a plan may search its trigger, and all the plans of one pass of the store
#: loop between them (seconds of real time; checked at each round of an `executors.AllOf`,
#: the search that can be long by construction).
PLAN_BUDGET = 1.0
#: The most triggers the loop keeps decoded (one per stored schedule is what it needs).
_TRIGGERS_KEPT = 100_000

#: A miss to announce: (missed, ran, first, last missed, reason, policy, truncated).
Decision = tuple[int, int, dt.datetime, dt.datetime, str, str, bool]


def _searches(trigger: TriggerLike) -> bool:
    """Whether `trigger` holds an `executors.AllOf` (the search that can be long)."""
    stack: list[object] = [trigger]
    while stack:  # a stack of its own: nesting read from a store is not bounded here
        item = stack.pop()
        if isinstance(item, AllOf):
            return True
        stack.extend(getattr(item, "triggers", ()))
    return False


@dataclasses.dataclass(slots=True)
class PassPlans:
    """What the plans of one pass of the loop decided, keyed by (name, version after the
    claim): the misses to announce, the next fire times, and the records planned with this
    process's declaration, unchanged (their claims run as declared: `stored_trust.admit`
    says the same of them). The loop reads it after its claim; the next pass makes another."""

    decisions: dict[tuple[str, int], Decision] = dataclasses.field(default_factory=dict)
    planned: dict[tuple[str, int], dt.datetime | None] = dataclasses.field(
        default_factory=dict)
    trusted: set[tuple[str, int]] = dataclasses.field(default_factory=set)


class _Declaration(Protocol):
    @property
    def definition(self) -> ScheduleDefinition: ...


class PlannedJob(Protocol):
    """What a planner reads of a job its loop declares (`executors._service.job.Job`): its
    link to the store (None once it is served otherwise) and its wall-clock state."""

    @property
    def _stored(self) -> _Declaration | None: ...

    @property
    def _wall(self) -> WallState | None: ...


class PlanLoop(Protocol):
    """What a planner reads of its store loop: its name, lock and store (the failing plans'
    log), the jobs it declares (their declarations win over the record's) and its service."""

    name: str
    lock: threading.Lock

    @property
    def store(self) -> Named: ...

    @property
    def jobs(self) -> Mapping[str, PlannedJob]: ...

    @property
    def scheduler(self) -> ServiceContext: ...


@final
class LoopPlanner:
    """A store loop's planner (the claims' `Planner`): the ``missed`` policy on each due
    record, and what the pass's plans decided (`plans`, read by the loop after its claim),
    the groups announced (`announced`), the plans failing (`failing`), the decoded triggers
    and the pass's search time. A store that
    plans outside its write lock (SQLite) tells `lost` of each plan whose conditional write
    lost to another writer: its miss, if it runs nothing, is the winner's to announce
    (announced once)."""

    __slots__ = ("announced", "failing", "loop", "plans", "searched", "triggers")

    def __init__(self, loop: PlanLoop) -> None:
        self.loop = loop
        self.failing = FailingTable(loop, "plan")
        self.searched = 0.0  # seconds the pass's plans searched (the pass's budget)
        self.plans = PassPlans()
        # name -> (the latest fire time of a group announced, the wall time up to which that
        # group passed unwatched, or None): each later claim of an "all" walk keeps that verdict.
        self.announced: dict[str, tuple[dt.datetime, float | None]] = {}
        # Record digest -> its decoded trigger (a claim plans with it; parsing a cron
        # expression costs more than the rest of a claim).
        self.triggers: dict[str, TriggerLike] = {}

    def __call__(self, record: ScheduleRecord, now: dt.datetime) -> Plan | None:
        """The ``missed`` policy on a due record, at the store's `now` (`wallclock.decide`), with
        the trigger and policies of this process's declaration (the record's only for a record
        written elsewhere that ``serve=`` admits).

        None leaves the record as it is (not claimed, not moved, nothing counted): its trigger
        search outlasted `PLAN_BUDGET` (logged, listed in `StoreStatus.plans_failing`, tried
        again on its own backoff), it is waiting out that backoff, or the pass's plans have
        searched for `PLAN_BUDGET` in all (it is planned at the next pass).

        Missed fire times are counted with one definition everywhere (`wallclock.Decision`): run
        late or not run. The record's ``missed`` counter adds what each claim handles, so a group
        walked over several claims (``"all"``) adds up to what was announced for it.
        """
        name = record.name
        # This process's declaration, read here rather than through `stored_trust`: the
        # planner holds the jobs, and a record planned as declared needs no trust check
        # after its claim (`trusted`).
        job = self.loop.jobs.get(name)
        link: _Declaration | None = None
        wall: WallState | None = None
        if job is not None and job._stored is not None and job._wall is not None:
            link, wall = job._stored, job._wall
        options = (record.definition if link is None else link.definition).options
        first = record.next_fire
        assert first is not None
        failing = self.failing.get(name)
        if failing is not None and failing.retry_at > self.loop.scheduler.clock.monotonic():
            return None
        began = time.monotonic()
        try:
            trigger = self.trigger_for(record) if wall is None else wall.trigger
            if self.searched >= PLAN_BUDGET and _searches(trigger):
                # The pass's plans have searched for PLAN_BUDGET already (slow plans of other
                # schedules): the rest that may search long wait for the next pass, unmoved and
                # not failed, so no pass stalls the loop; the others are planned as usual.
                return None
            # Searching a trigger (an AllOf whose members rarely agree) can take long; in a
            # claim it may hold the store's lock: over budget, it is this schedule's failure.
            with _search_budget.budget(PLAN_BUDGET):
                policy: Missed = options.get("missed", "latest")  # type: ignore[assignment]
                # Fire times left unclaimed past UNWATCHED_AFTER passed unwatched, up to now, as
                # in memory after a restart with `since`: "skip" runs none of them (the store
                # cannot see a stop, only that nobody claimed them in time).
                at = now.timestamp()
                announced = self.announced.get(name)
                walked = announced is not None and first <= announced[0]
                if walked:
                    # A later claim of an "all" walk: the group was judged when it was announced
                    # (its latest fire time may be within UNWATCHED_AFTER of now by this claim).
                    assert announced is not None
                    unwatched = None if announced[1] is None else ("stopped", announced[1])
                elif at - first.timestamp() > UNWATCHED_AFTER:
                    unwatched = ("stopped", at)
                else:
                    unwatched = None
                d = decide(trigger, first, trigger.next_after(first), at, policy,
                           int(options.get("max_missed", 100)),  # type: ignore[call-overload]
                           options.get("grace"), unwatched)  # type: ignore[arg-type]
        except _search_budget.SearchTimeout as exc:
            self.failing.failed(name, exc, self.loop.scheduler.clock.monotonic())
            return None
        except Exception:
            logger.exception("%s: the trigger of stored schedule %r failed; it stops (no "
                             "next fire time)", self.loop.name, name)
            return Plan(None, None, 0)
        finally:
            self.searched += time.monotonic() - began
        if failing is not None:
            self.failing.succeeded(name)
        key = (name, record.version + 1)
        plans = self.plans
        if policy == "all" and len(d.runs) > 1:
            # One fire time per claim: the next claim takes the next one (a group of due
            # fire times is walked once, here, and the rest stay due in the record). This
            # claim counts the ones it drops and the one it runs (late: a later one is due).
            plan = Plan(d.runs[0], d.runs[1], d.count - len(d.runs) + 1, True)
        else:
            # The fire time run is one of the missed (run late) when any missed one runs.
            plan = Plan(d.runs[-1] if d.runs else None, d.next_fire, d.missed,
                        bool(d.runs) and d.ran > 0)
        plans.planned[key] = plan.next_fire
        if link is not None and record.definition == link.definition:
            plans.trusted.add(key)
        if d.missed and not walked:
            # Once a group: "all" walks it one claim at a time, and each later claim of the
            # walk sees the rest of the group this process has announced already.
            self.announced[name] = (d.last, None if unwatched is None else unwatched[1])
            plans.decisions[key] = (
                d.missed, d.ran, first, d.last_missed, d.reason, policy, d.truncated)
        return plan

    def new_pass(self) -> None:
        """A pass of the loop begins: its plans share one budget of search time, and what
        they decide is gathered anew (the last pass's loop has read its own, or it is void:
        a claim that failed wrote none of its plans)."""
        self.searched = 0.0
        self.plans = PassPlans()

    def lost(self, name: str, version: int) -> None:
        """The plan of `name` that would have written `version` was not written."""
        self.plans.decisions.pop((name, version), None)

    def forget(self) -> None:
        """The pass's plans are void (its claim was abandoned, or this is a forked child)."""
        self.plans = PassPlans()

    def trigger_for(self, record: ScheduleRecord) -> TriggerLike:
        """`record`'s stored trigger, decoded once per trigger data (keyed by the data itself:
        the record's digest field is only what its writer says)."""
        key = json.dumps(record.definition.trigger, sort_keys=True)
        triggers = self.triggers
        known = triggers.get(key)
        if known is not None:
            return known
        # Decoded here, not through `schedule_data.trigger_of` (a module that names the
        # store contract): this is the planner's own cache.
        trigger: TriggerLike = trigger_from_data(  # type: ignore[assignment]
            record.definition.trigger)
        if len(triggers) >= _TRIGGERS_KEPT:
            triggers.clear()
        triggers[key] = trigger
        return trigger

    def announce(self, name: str, decision: Decision) -> None:
        """Announce a miss the loop's claims (or plans that ran nothing) decided."""
        job = self.loop.jobs.get(name)
        missed, ran, first, last, reason, policy, truncated = decision
        announce(self.loop.scheduler.events, "schedule", name,
                 None if job is None else job._wall,
                 missed, ran, first, last, reason, policy, truncated)

    def __repr__(self) -> str:
        return (f"<LoopPlanner pending={len(self.plans.decisions)} failing={len(self.failing)} "
                f"triggers={len(self.triggers)}>")

