"""The store loop when its store stops answering, and when it closes.

**Its own runs first.** A store that did not answer for a lease leaves this process's own
runs with expired leases: a run still running, or one that ended and whose completion is not
written yet. The loop's claim would settle them as crashes (run again under
``on_crash="rerun"``, counted lost under ``"drop"``) though they ran here; `on_crash` abandons
such a claim instead (`OwnRunsFirst`, nothing written), and the next pass writes those
completions and renews those leases before it claims, and so before it settles other
processes' expired leases.

**Closing.** The store thread ends with `finish`: it stops the store's listener, waits for the
pool's runs to end, writes their completions, gives back the claims no thread took, stops the
snapshot thread and closes the store (if the service opened it). A store that stopped answering (a
PostgreSQL server stopped, a SQLite file whose write lock another process holds) would keep
those threads in their calls for as long as it does not answer; ``shutdown()`` therefore
interrupts the calls still in progress `INTERRUPT_BEFORE` its deadline (`interrupt_blocked`),
every later call is refused, and the threads end by the deadline.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from executors import _threads

from .stored_trust import TrustLoop, on_crash_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from executors.stores import Claim, ScheduleRecord

    from .store_calls import WatchedStore
    from .stored_run import StoreHost
    from .stored_status import Snapshots

__all__ = ("INTERRUPT_BEFORE", "FaultLoop", "Flight", "OwnRunsFirst", "finish", "helper_threads",
           "interrupt_blocked", "on_crash")

logger = logging.getLogger("executors.service")

#: How long before `shutdown()`'s deadline the store calls still in progress are interrupted
#: (seconds; half the timeout when that is shorter): the time the threads get to see the
#: interruption and end (a MongoDB operation notices it within half a second).
INTERRUPT_BEFORE = 1.0
#: A call in progress for less than this at the interruption is not taken for a hung one
#: (seconds): a store that answers keeps the completions written after the deadline.
_HUNG = 0.25


class Flight(Protocol):
    """What the crash policy and closing read of a claim in flight
    (`executors._service.stored.InFlight`)."""

    claim: Claim
    renew_at: float
    started: bool


_F = TypeVar("_F", bound=Flight)


class FaultLoop(TrustLoop, Protocol[_F]):
    """What the crash policy and closing read and call of the store loop
    (`executors._service.stored`): its claims and completions, its helper threads."""

    owner: str
    in_flight: dict[tuple[str, int], _F]
    completing: set[tuple[str, str]]
    finished: list[tuple[Claim, str]]
    retry_completions: list[tuple[Claim, str]]
    unwatch: Callable[[], None] | None
    listener: threading.Thread | None
    watched: WatchedStore
    snapshots: Snapshots

    @property
    def scheduler(self) -> StoreHost: ...

    def write_finished(self) -> object: ...

    def write_retries(self) -> None: ...

    def release(self) -> None: ...


class OwnRunsFirst(Exception):
    """A claim met an expired lease of a run still in this process (see `on_crash`)."""


def on_crash(loop: FaultLoop[_F], record: ScheduleRecord) -> Literal["drop", "rerun"]:
    """The claims' ``on_crash``: the schedule's policy for a run whose lease expired, but for
    a run of this process still here, `OwnRunsFirst` (see the module docstring)."""
    token = record.claim_token
    if record.owner == loop.owner and token is not None:
        key = (record.name, token)
        with loop.lock:
            flights = [f for f in loop.in_flight.values()
                       if (f.claim.name, f.claim.token) == key]
            for flight in flights:
                flight.renew_at = -math.inf  # renewed at the next pass
            ours = bool(flights) or key in loop.completing or any(
                (c.name, c.token) == key for c, _ in (*loop.finished, *loop.retry_completions))
        if ours:
            raise OwnRunsFirst(record.name)
    return on_crash_of(loop, record)  # the declaration's policy (the code's, not the store's)


def finish(loop: FaultLoop[_F]) -> None:
    """Closing (the store thread): wait for the runs in progress to record their end, then
    let go."""
    if loop.unwatch is not None:
        loop.unwatch()
        loop.unwatch = None
    pool = loop.scheduler.pool
    # The caller of shutdown() and the dispatcher wait for them too: one joiner at a time.
    for thread in list(pool.threads):
        _threads.join(thread)
    try:
        loop.write_finished()
        loop.write_retries()
    except Exception as exc:
        logger.error("%s: %d completion(s) not recorded at shutdown (%s): their lease "
                     "expires and on_crash settles them", loop.name,
                     len(loop.retry_completions), exc)
    _give_back_unstarted(loop)
    if loop.snapshots.stop():
        loop.release()


def _give_back_unstarted(loop: FaultLoop[_F]) -> None:
    """Closing, the pool's threads ended: a claim no thread took (made as the service
    closed, queued behind the pool's stop) goes back to the store, due again at once for
    any owner, instead of holding its schedule for a lease and ending as a crash."""
    with loop.lock:
        unstarted = [f.claim for f in loop.in_flight.values() if not f.started]
    for claim in unstarted:
        try:
            loop.store.give_back(claim)
        except Exception as exc:
            logger.error("%s: the run of %r at %s, claimed as the service closed, could "
                         "not be given back (%s): its lease expires and on_crash settles "
                         "it", loop.name, claim.name, claim.fire_time.isoformat(), exc)
            continue
        with loop.lock:
            loop.in_flight.pop((claim.name, claim.version), None)
        logger.info("%s: the run of %r at %s, claimed as the service closed, was given "
                    "back to the store", loop.name, claim.name, claim.fire_time.isoformat())


def helper_threads(loop: FaultLoop[_F]) -> list[threading.Thread]:
    """The loop's threads besides the store thread: the snapshot thread and the store's
    listener (`shutdown()` waits for them and counts them in its report)."""
    return [t for t in (loop.snapshots.reader, loop.listener) if t is not None]


def interrupt_blocked(loop: FaultLoop[_F]) -> bool:
    """At the shutdown's interruption point: if a store call has been in progress for a
    while, interrupt every call and refuse the later ones (logged). True if it did."""
    blocked = loop.watched.blocked()
    # A listener asked to stop (`finish` has passed it) and still alive waits on the store
    # too (its own connection, outside the watched calls).
    listener = loop.listener
    stuck = listener is not None and loop.unwatch is None and _threads.alive(listener)
    if (blocked is None or blocked[1] < _HUNG) and not stuck:
        return False
    what = "its listener" if blocked is None or blocked[1] < _HUNG else \
        f"a call for {blocked[1]:.1f} s ({blocked[0]} on {blocked[2]})"
    logger.error("%s: the schedule store %s has not answered %s: interrupted at the "
                 "shutdown deadline; completions not yet written are not recorded (their "
                 "lease expires and on_crash settles them)", loop.name,
                 loop.store.display_url, what)
    loop.watched.interrupt()
    return True
