"""What the store loop runs: its own declarations, and records written elsewhere only when
``serve=`` admits their target (the rule is `executors.stores`'s).

The loop (`executors._service.stored`) gives every claim its `Claimable` (the names this
process declares, and the allowlist), so the store reads nothing else. What comes back is
checked again here before it runs: a declared schedule runs the code's function, arguments,
trigger and policies whatever its record says, and a record that differs from the declaration
(rewritten in the store, or a deploy in progress) is written back, once per stored definition
in `REPAIR_AGAIN`, logged and announced (``ScheduleChanged``, by the declaration). Records of
other targets are never imported; with an allowlist, those it refuses are logged once each and
counted (`StoreStatus.refused`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal, Protocol

from executors.stores import Claimable

if TYPE_CHECKING:
    from executors.stores import Claim, ScheduleDefinition, ScheduleRecord, ScheduleStore

    from .context import ServiceContext
    from .job import Job
    from .wallclock import TriggerLike

__all__ = ("REPAIR_AGAIN", "Trust", "TrustLoop", "admit", "claimable", "declaration",
           "give_back", "note_refused", "on_crash_of")

logger = logging.getLogger("executors.service")

#: The most (name, stored definition) pairs remembered as repaired or refused: past it the
#: memory starts again (a pair met again is then logged once more).
_REMEMBERED = 10_000
#: Seconds before a stored definition written back once is written back again if met again:
#: two deploys serving one store each write theirs back once, not on every claim, and the one
#: still running after the other stopped restores its own within this bound.
REPAIR_AGAIN = 600.0


class TrustLoop(Protocol):
    """What the trust checks read and call of their store loop (`executors._service.stored`)."""

    name: str
    lock: threading.Lock
    store: ScheduleStore
    jobs: dict[str, Job]
    trust: Trust
    to_declare: dict[str, tuple[ScheduleDefinition, Job]]

    @property
    def scheduler(self) -> ServiceContext: ...

    def nudge(self) -> None: ...

    def failed(self, what: str, exc: Exception) -> None: ...


@dataclasses.dataclass(slots=True)
class Trust:
    """A store loop's state of this rule."""

    #: What the loop's claims may take (read by the pool's threads too).
    claimable: Claimable
    #: The loop's declared names changed since `claimable` was made (set under its lock).
    renamed: bool = True
    #: ``(name, stored digest)`` of the records written back (`_repair`), and when
    #: (monotonic).
    repaired: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    #: ``(name, target)`` of the records the allowlist refused, and how many.
    refused_seen: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    refused: int = 0


def claimable(loop: TrustLoop) -> Claimable:
    """The `Claimable` of the loop's next claim: a new one only when the declared names
    changed (a store keeps what it derives from one while it is given the same object)."""
    trust = loop.trust
    if trust.renamed:
        with loop.lock:
            trust.renamed = False
            names = frozenset(loop.jobs)
        old = trust.claimable
        trust.claimable = Claimable(names, old.targets, old.modules)
    return trust.claimable


def declaration(jobs: Mapping[str, Job], name: str
                ) -> tuple[ScheduleDefinition, TriggerLike] | None:
    """This process's declaration of `name` and its trigger, or None if it declares none
    (`jobs`: the store loop's, those this process declares)."""
    job = jobs.get(name)
    link = None if job is None else job._stored
    if job is None or link is None or job._wall is None:
        return None
    return link.definition, job._wall.trigger


def on_crash_of(loop: TrustLoop, record: ScheduleRecord) -> Literal["drop", "rerun"]:
    """`record`'s ``on_crash`` policy: the declaration's when this process declares it."""
    declared = declaration(loop.jobs, record.name)
    options = record.definition.options if declared is None else declared[0].options
    return "rerun" if options.get("on_crash") == "rerun" else "drop"


def admit(loop: TrustLoop, claim: Claim) -> bool:
    """Whether to run `claim`, just made (the loop): declared here (its record repaired if it
    differs from the declaration), or admitted by the allowlist. A claim of neither (its
    schedule was removed here since the claim's names were taken) is given back unrun."""
    job = loop.jobs.get(claim.name)
    link = None if job is None else job._stored
    if job is not None and link is not None:
        if claim.definition != link.definition:
            _repair(loop, claim.definition, link.definition, job)
        return True
    if loop.trust.claimable.admits_target(claim.definition.target):
        return True
    give_back(loop, claim)
    return False


def _differences(stored: ScheduleDefinition, declared: ScheduleDefinition) -> str:
    parts = [part for part in ("trigger", "args", "kwargs", "options")
             if getattr(stored, part) != getattr(declared, part)]
    if stored.target != declared.target:
        parts.insert(0, f"target {stored.target!r} instead of {declared.target!r}")
    return ", ".join(parts) or "types of values"


def _repair(loop: TrustLoop, stored: ScheduleDefinition, declared: ScheduleDefinition,
            job: Job) -> None:
    """Log once per stored definition (per `REPAIR_AGAIN`), and declare `declared` again (the
    loop's next pass)."""
    try:
        key = (stored.name, stored.digest())
    except ValueError:  # not JSON (written by hand)
        key = (stored.name, repr(stored.as_data()))
    repaired = loop.trust.repaired
    now = loop.scheduler.clock.monotonic()
    if now - repaired.get(key, -REPAIR_AGAIN) < REPAIR_AGAIN:
        return
    if len(repaired) >= _REMEMBERED:
        repaired.clear()
    repaired[key] = now
    logger.warning("%s: the stored definition of schedule %r differs from this process's "
                   "declaration (%s): the record was rewritten in %s, or a deploy is in "
                   "progress. This process runs its own declaration and writes it back",
                   loop.name, stored.name, _differences(stored, declared),
                   loop.store.display_url)
    with loop.lock:
        loop.to_declare[stored.name] = (declared, job)
    loop.nudge()


def give_back(loop: TrustLoop, claim: Claim) -> None:
    """Give `claim` back unrun (due again at once for a process that runs it); if the store
    refuses, its lease expires and ``on_crash`` settles it."""
    try:
        loop.store.give_back(claim)
    except Exception as exc:
        loop.failed("give back", exc)


def note_refused(loop: TrustLoop, records: Iterable[ScheduleRecord]) -> None:
    """With an allowlist, log (once per record and target) and count each record of
    `records` (not declared here) whose target it refuses."""
    trust = loop.trust
    only = trust.claimable
    if not only.serves_others:
        return  # nothing outside code is served: undeclared records are others' to run
    for record in records:
        target = record.definition.target
        key = (record.name, target)
        if only.admits_target(target) or key in trust.refused_seen:
            continue
        if len(trust.refused_seen) >= _REMEMBERED:
            trust.refused_seen.clear()
        trust.refused_seen.add(key)
        trust.refused += 1
        logger.warning("%s: stored schedule %r is not declared here and its target %r is "
                       "not in serve=: it is not run by this process", loop.name,
                       record.name, target)
