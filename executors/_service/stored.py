"""Schedules kept in a store and served by this process: declare, claim, run, renew, complete.

A `BackgroundService` given a store (``BackgroundService(store="sqlite:///jobs.db")``) keeps its
``schedule()`` and ``cron()`` jobs there as data (`executors.stores`); `every()` and
`submit()` stay in memory. One thread per service, the **store loop**, does all the talking:

- **Declare.** At start (and for a schedule added later) each schedule is declared by name: an
  unchanged declaration keeps the stored state, a changed one replaces the definition (logged,
  `ScheduleChanged`), a new one is added (`ScheduleAdded`); "unchanged" is judged by the stored
  definition's digest, recomputed.
- **Code decides what runs** (`executors._service.stored_trust`): only the records this
  process declares are claimed, run with its code's function, arguments, trigger and policies
  (a record that differs is written back); others are listed, never run, unless ``serve=``.
- **A refused declaration is that schedule's failure alone**, retried on its own backoff
  (`executors._service.stored_declare`); the pass goes on to its claims.
- **Claim.** The loop claims due records in batches of up to `BATCH` with a lease of `LEASE`
  (30 s) on the store's clock; the planner applies the ``missed`` policy inside the claim's
  conditional update (`executors._service.stored_plan`). Each claim runs on the pool with
  `executors.current_run()` = ``(name, fire_time, attempt)``.
- **Renew and complete.** While a run lasts its lease is renewed every `RENEW_EVERY` (10 s).
  Both are fenced by the claim's token (not moved by a pause): a refused one is a lost
  lease (`LeaseLost`, counted in `StoreStatus.lease_lost`). A completion the store could not
  take (unreachable) is retried by the loop.
- **Status.** A copy of the store's records backs `status()`, read on a thread of its own
  while `status()` is being asked for (`executors._service.stored_status`): claims and
  renewals never wait for it. The next fire time a claim gives its schedule is shown on the
  job at once.
- **Sleep.** Between claims the loop sleeps until the store's earliest next fire time
  (`ScheduleStore.next_due`), never longer than `POLL` (1 s), so a change made elsewhere is
  seen within `POLL`; a store that reports changes (``watch``: PostgreSQL's ``LISTEN``, the
  MongoDB store when an owner holding a run is gone) wakes it at once.
- **The store fails, the service does not.** A store error, or a store call hung past the
  renewal period, marks the service unhealthy; the loop retries with a backoff from
  `BACKOFF_FIRST` to `BACKOFF_MAX`, runs already claimed go on, and fencing keeps a fire time
  from running twice under ``on_crash="drop"`` (`executors._service.stored_faults`).

The process clock is never used to decide anything: "due" and "lease expired" are the store's
(SQLite's is read by SQLite in each process: `executors.stores.SQLiteScheduleStore`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import queue
import socket
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, cast, final

from executors import _threads, stores
from executors.stores import Claim, Claimable, ScheduleDefinition, ScheduleRecord, ScheduleStore

from .events import LeaseLost, ScheduleRemoved
from .schedule_data import (
    StoredSchedule,
    StoreStatus,
    check_store,
    resolve_target,
    target_of,
)
from .store_calls import WatchedStore
from .stored_declare import declare_many, retry_all, serve_declarations
from .stored_failing import FailingTable
from .stored_faults import OwnRunsFirst, finish, on_crash
from .stored_plan import UNWATCHED_AFTER, LoopPlanner
from .stored_resume import resume_record
from .stored_run import StoredLink, StoreHost, undeclared_job
from .stored_status import Snapshots
from .stored_trust import Trust, admit, claimable, give_back

if TYPE_CHECKING:
    from .job import Job

__all__ = ("BACKOFF_FIRST", "BACKOFF_MAX", "BATCH", "LEASE", "POLL", "RENEW_EVERY", "UNKNOWN",
           "UNWATCHED_AFTER", "InFlight", "StoreLoop", "StoreStatus", "StoredLink",
           "StoredSchedule", "check_store", "resume_record", "resolve_target", "run_claim",
           "target_of")

logger = logging.getLogger("executors.service")

#: The lease of a claimed run, seconds on the store's clock.
LEASE = 30.0
#: How often a running claim's lease is renewed (seconds).
RENEW_EVERY = 10.0
#: The longest the loop sleeps between two looks at the store (seconds): the bound on how
#: late a change made elsewhere is seen.
POLL = 1.0
#: The most records one claim takes.
BATCH = 100
#: The first and the longest wait before retrying an unreachable store (seconds).
BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0

#: While a plan fails (its record left due), the shortest sleep between passes (seconds).
PLAN_RETRY_PASS = 0.1

_CLOSE = object()
_NUDGE = object()

# -- the loop -------------------------------------------------------------------------------


@final
class StoreLoop:
    """The store thread of one service (see the module docstring)."""

    def __init__(self, name: str, store: ScheduleStore, scheduler: StoreHost, *,
                 owned: bool, lease: float = LEASE,
                 serve: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
                 ) -> None:
        self.name = name
        self.lease = lease
        # Renewed at a third of the lease: two renewals may fail before it expires.
        self.renew_every = min(RENEW_EVERY, lease / 3)
        # Its calls in progress are watched: a hung one shows in status() and is interrupted
        # at the shutdown deadline (`executors._service.store_calls`).
        self.watched = WatchedStore(store)
        self.store = cast(ScheduleStore, self.watched)  # every method, as the store's
        #: A store call in progress longer than this (seconds) makes `status()` unhealthy:
        #: by then a renewal is late. The renewal period (a third of the lease, at most
        #: `RENEW_EVERY`); a test may set it lower.
        self.blocked_after = self.renew_every
        self.owned = owned
        self.scheduler = scheduler
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lock = threading.Lock()
        self.messages: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.jobs: dict[str, Job] = {}  # declared by this process
        self.trust = Trust(Claimable(frozenset(), *serve))  # what a claim may take
        # The claim's planner (the ``missed`` policy, with what it decided and its failing
        # plans: `stored_plan.LoopPlanner`); its crash policy is the `on_crash` method.
        self.planner = LoopPlanner(self)
        self.to_declare: dict[str, tuple[ScheduleDefinition, Job]] = {}
        # Declarations that failed, each with its own backoff (`stored_declare`).
        self.declaring = FailingTable(self, "declaration")
        self.in_flight: dict[tuple[str, int], InFlight] = {}
        self.retry_completions: list[tuple[Claim, str]] = []
        # (name, token) of the completions pool threads are writing now (see `on_crash`).
        self.completing: set[tuple[str, str]] = set()
        # Ended runs waiting for the loop's next batch (stores with ``complete_many``).
        self.finished: list[tuple[Claim, str]] = []
        # Stores that write a batch of completions (with the pass's claims: SQLite) at once.
        many = stores.offered(self.watched.inner, stores.SupportsCompleteMany, self.store)
        both = stores.offered(self.watched.inner, stores.SupportsCompleteAndClaim, self.store)
        self.complete_many = None if many is None else many.complete_many
        self.complete_and_claim = None if both is None else both.complete_and_claim
        self.reported_lost: set[tuple[str, int]] = set()
        # When the loop wakes next, on the store's clock (epoch seconds); +inf while it is
        # awake: a completion nudges it only if its record is due before then.
        self.wake_at = math.inf
        self.healthy = True
        self.last_error: str | None = None
        self.claims = 0
        self.completed = 0
        self.lease_lost = 0
        self.store_errors = 0
        # The copy of the records behind `status()`, its snapshot thread and the jobs'
        # touch counts (`executors._service.stored_status`).
        self.snapshots = Snapshots(self)
        self.unwatch: Callable[[], None] | None = None
        self.listener: threading.Thread | None = None  # the thread of `watch`, if it says
        self.offset = 0.0  # store clock - this process's wall clock, at the latest read
        self.closing = False
        self.deadline: float | None = None  # shutdown()'s (real monotonic), once it is set

    def after_fork(self) -> None:
        """In a forked child: a new owner (another process), fresh lock, queue and no thread;
        the parent's claims stay the parent's (never completed or renewed from here)."""
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.lock = threading.Lock()
        self.messages = queue.SimpleQueue()
        self.thread = None
        self.in_flight = {}
        self.retry_completions = []
        self.completing = set()
        self.deadline = None
        # The parent's calls in progress are not this process's (and their lock may be held).
        self.watched = WatchedStore(self.watched.inner)
        self.store = cast(ScheduleStore, self.watched)
        many = stores.offered(self.watched.inner, stores.SupportsCompleteMany, self.store)
        both = stores.offered(self.watched.inner, stores.SupportsCompleteAndClaim, self.store)
        self.complete_many = None if many is None else many.complete_many
        self.complete_and_claim = None if both is None else both.complete_and_claim
        self.finished = []
        self.planner.forget()
        self.wake_at = math.inf
        self.closing = False
        self.unwatch = None  # the parent's listener (its close is a no-op here)
        self.listener = None
        self.snapshots.after_fork()

    # -- from any thread ----------------------------------------------------------------------

    def post(self, message: object) -> None:
        self.messages.put(message)

    def nudge(self) -> None:
        self.messages.put(_NUDGE)

    def close(self) -> None:
        self.closing = True
        self.messages.put(_CLOSE)

    def changed(self) -> None:
        """A change made elsewhere was reported (by the store's ``watch``): look now."""
        self.snapshots.refresh_soon(bounded=True)
        self.messages.put(_NUDGE)

    def declare(self, definition: ScheduleDefinition, job: Job) -> None:
        """Declare now if the store takes it; else the loop tries it again on its own backoff
        (`executors._service.stored_declare`), the other schedules served meanwhile."""
        self.declare_all([(definition, job)])

    def declare_all(self, declared: list[tuple[ScheduleDefinition, Job]]) -> None:
        """`declare` for each of `declared` (a service's start), in batches where the store
        declares many at once (`stored_declare.declare_many`): each failure its own."""
        with self.lock:
            for definition, job in declared:
                self.jobs[definition.name] = job
            self.trust.renamed = True
        now = self.scheduler.clock.monotonic()
        failed = False
        for (definition, job), error in zip(declared, declare_many(self, declared),
                                            strict=True):
            if error is not None:
                with self.lock:
                    self.to_declare[definition.name] = (definition, job)
                self.declaring.failed(definition.name, error, now)
                failed = True
            else:
                with self.lock:  # this declaration supersedes one still waiting
                    self.to_declare.pop(definition.name, None)
                self.declaring.succeeded(definition.name)
        if failed:
            self.nudge()

    def declare_later(self, definition: ScheduleDefinition, job: Job) -> None:
        """Declare at the loop's next pass (a decorator's name is not bound yet: see
        `schedule_data.check_target`)."""
        with self.lock:
            self.jobs[definition.name] = job
            self.trust.renamed = True
            self.to_declare[definition.name] = (definition, job)
        self.nudge()

    def unschedule(self, name: str) -> bool:
        """Remove `name` from the store (True if it was there)."""
        removed = self.store.remove(name)
        with self.lock:
            job = self.jobs.pop(name, None)
            self.trust.renamed = True
            self.to_declare.pop(name, None)
            self.declaring.pop(name, None)
            self.planner.failing.pop(name, None)
            self.snapshots.forget(name)
        if job is not None:
            job._set_flags(cancelled=True)
            with self.scheduler.lock:
                if self.scheduler.jobs.get(name) is job:
                    del self.scheduler.jobs[name]
        events = self.scheduler.events
        if (removed or job is not None) and ScheduleRemoved in events.wanted:
            events.emit(ScheduleRemoved(name, "removed"))
        self.snapshots.changed()
        self.nudge()
        return removed

    def status(self) -> StoreStatus:
        snapshots = self.snapshots
        snapshots.wanted = True  # the loop refreshes the copy (at most every SNAPSHOT_EVERY)
        with self.lock:
            snapshot = snapshots.rows()
            failing = tuple(sorted((n, f.error) for n, f in self.declaring.items()))
            plans = tuple(sorted((n, f.error) for n, f in self.planner.failing.items()))
        # Read from the calls in progress: the hung thread need not return to be seen.
        blocked = None
        call = self.watched.blocked()
        if call is not None and call[1] >= self.blocked_after:
            blocked = f"store call blocked {call[1]:.0f} s ({call[0]} on {call[2]})"
        # A schedule this process declares and does not serve reads unhealthy too.
        last_error = self.last_error if not self.healthy or not (failing or plans) else \
            f"stored schedule {(failing or plans)[0][0]!r}: {(failing or plans)[0][1]}"
        healthy = self.healthy and blocked is None and not failing and not plans
        return StoreStatus(self.store.display_url, self.owner, healthy, last_error,
                           self.claims, self.completed, self.lease_lost, self.store_errors,
                           len(self.retry_completions), snapshot, snapshots.corrupt, blocked,
                           self.trust.refused, failing, self.declaring.errors, plans,
                           self.planner.failing.errors)

    # -- the thread ---------------------------------------------------------------------------

    def start(self) -> None:
        self.thread = _threads.start_thread(self._run, f"{self.name}-store")

    def _run(self) -> None:
        clock = self.scheduler.clock
        monotonic = clock.monotonic
        backoff = BACKOFF_FIRST
        watching = stores.offered(self.watched.inner, stores.SupportsWatch, self.store)
        if watching is not None:
            self.unwatch = watching.watch(self.changed)
            self.listener = stores.watch_thread(self.unwatch)
        while not self.closing:
            try:
                delay = self._serve(monotonic)
            except OwnRunsFirst:
                # Not a store error: the claim was abandoned (nothing written); the plans it
                # made are void, and the next pass writes or renews this process's own first.
                self.planner.forget()
                delay = 0.0
            except Exception as exc:
                self.failed("serve", exc)
                delay = backoff
                backoff = min(backoff * 2, BACKOFF_MAX)
            else:
                if not self.healthy:
                    logger.warning("%s: the schedule store %s answers again", self.name,
                                   self.store.display_url)
                    retry_all(self, monotonic())
                self.healthy = True
                backoff = BACKOFF_FIRST
            if delay > 0:
                try:
                    message = clock.wait(self.messages, delay)
                except queue.Empty:
                    continue
                self._handle(message)
        finish(self)

    def _handle(self, message: object) -> None:
        while True:
            if type(message) is tuple:
                self._control(*message[1:])
            try:
                message = self.messages.get_nowait()
            except queue.Empty:
                return

    def _control(self, name: str, action: str) -> None:
        store = self.store
        try:
            if action == "pause":
                store.set_paused(name, True)
            elif action == "resume":
                _, skipped = resume_record(store, name)
                job = self.jobs.get(name)
                wall = None if job is None else job._wall
                if skipped and wall is not None:
                    wall.paused_skipped += skipped
            elif action == "run-now":
                store.set_next_fire(name, store.now())
            elif action == "remove":
                self.unschedule(name)
        except Exception as exc:
            self.failed(action, exc)
            self.post(("control", name, action))  # again after the backoff
        else:
            if action == "remove":
                return
            with self.lock:  # a copy read before does not undo it on the job (`touch`)
                self.snapshots.touch(name)
        self.snapshots.changed()

    def _serve(self, monotonic: Callable[[], float]) -> float:
        """One pass: declare, complete, renew, claim, refresh; the delay until the next."""
        self.wake_at = math.inf  # awake: a completion from now on nudges (see `complete`)
        serve_declarations(self, monotonic())  # each on its own: a failure stops no claim
        if self.complete_and_claim is None:
            self.write_finished()
        self.write_retries()
        self._renew(monotonic())
        store = self.store
        only = claimable(self)
        if self.complete_and_claim is None:
            claims = store.claim(self.owner, lease=self.lease, limit=BATCH,
                                 planner=self.planner, on_crash=self.on_crash, only=only)
        else:
            claims = self.write_finished(and_claim=True, only=only)
        # What this pass's plans decided: read, not taken (the next pass gathers anew).
        plans = self.planner.plans
        decisions, planned, trusted = plans.decisions, plans.planned, plans.trusted
        announce_missed = self.planner.announce
        snapshots = self.snapshots
        for claim in claims:
            key = (claim.name, claim.version)
            decision = decisions.pop(key, None)
            if decision is not None:  # most claims miss nothing: no call for them
                announce_missed(claim.name, decision)
            # Planned here with this process's declaration, unchanged: no check left to make.
            if key not in trusted and not admit(self, claim):
                continue
            next_fire: float | None = UNKNOWN
            if key in planned:
                fire = planned[key]
                next_fire = None if fire is None else fire.timestamp()
                owned = self.jobs.get(claim.name)
                wall = None if owned is None else owned._wall
                if wall is not None:
                    with self.lock:
                        # A copy being read does not overwrite it (`Snapshots.touch`); with
                        # none being read (most passes), a later read sees this claim's write.
                        if snapshots.reading:
                            snapshots.touch(claim.name)
                        # `WallState.set_fire`, with the timestamp read above.
                        wall.fire = fire
                        wall.fire_ts = math.inf if next_fire is None else next_fire
            self._start_run(claim, monotonic(), next_fire)
        for (name, _), decision in decisions.items():
            # Plans that run nothing ("skip") are announced too: nothing silent. A plan that
            # runs a fire time and has no claim lost its write to another process, which
            # announces it. (A store whose conditional write can lose a race, MongoDB, may
            # announce a plan that runs nothing twice.)
            if decision[1] == 0:
                announce_missed(name, decision)
        if len(claims) >= BATCH:
            return 0.0  # more may be due
        now = monotonic()
        snapshots.serve(now, refusals=only.serves_others)
        store_now, earliest = store.next_due(only)
        self.offset = store_now.timestamp() - self.scheduler.clock.time()
        delay = POLL if earliest is None else (earliest - store_now).total_seconds()
        if self.in_flight:
            delay = min(delay, min(f.renew_at for f in self.in_flight.values()) - now)
        delay = min(delay, snapshots.put_off(now))
        delay = max(0.0, min(delay, POLL))
        if self.planner.failing:  # a record left due by its failed plan: no spin on it
            delay = max(delay, min(PLAN_RETRY_PASS, POLL))
        self.wake_at = store_now.timestamp() + delay
        return delay

    def on_crash(self, record: ScheduleRecord) -> Literal["drop", "rerun"]:
        """The claims' ``on_crash`` (`stored_faults.on_crash`)."""
        return on_crash(self, record)

    def _start_run(self, claim: Claim, now: float, next_fire: float | None) -> None:
        self.claims += 1
        with self.lock:
            flight = self.in_flight[(claim.name, claim.version)] = InFlight(
                self, claim, now + self.renew_every, next_fire)
        self.scheduler.pool.put(flight)

    def _renew(self, now: float) -> None:
        with self.lock:
            due = [f for f in self.in_flight.values() if f.renew_at <= now and not f.lost]
        for flight in due:
            if self.store.renew(flight.claim, self.lease):
                flight.renew_at = now + self.renew_every
            else:
                flight.lost = True
                self._lease_lost(flight.claim, "renew")

    def _lease_lost(self, claim: Claim, refused: str) -> None:
        key = (claim.name, claim.version)
        with self.lock:
            # Once per claim: its renewal (loop) and completion (pool) may both be refused.
            if key in self.reported_lost:
                return
            self.reported_lost.add(key)
            if len(self.reported_lost) > 10_000:
                self.reported_lost = {key}
        self.lease_lost += 1
        logger.error("%s: schedule %r lost its lease on fire time %s (attempt %d): its %s was "
                     "refused, another claim moved the record on; this run's result is not "
                     "recorded", self.name, claim.name, claim.fire_time.isoformat(),
                     claim.attempt, refused)
        events = self.scheduler.events
        if LeaseLost in events.wanted:
            events.emit(LeaseLost(claim.name, claim.fire_time, claim.attempt, refused))

    def complete(self, claim: Claim, result: str) -> None:
        """A run ended (on a pool thread): record it, fenced; retried by the loop on error.

        A store that completes in batches (``complete_many``: one transaction for many) gets
        the completion from the loop, at its next pass; any other store, from here, now.
        """
        batched = self.complete_many is not None
        with self.lock:
            flight = self.in_flight.pop((claim.name, claim.version), None)
            if batched:
                self.finished.append((claim, result))
            else:
                self.completing.add((claim.name, claim.token))
        if not batched:
            try:
                done = self.store.complete(claim, result)
            except Exception as exc:
                self.failed("complete", exc)
                with self.lock:
                    self.retry_completions.append((claim, result))
                self.nudge()
                return
            finally:
                with self.lock:  # after the retry is queued: never out of both
                    self.completing.discard((claim.name, claim.token))
            self._completed(claim, done)
        # The loop's wake-up was computed without this record (a record with a run in
        # progress is not due): wake it if the record is due before then (a batched
        # completion is written by then: the loop writes completions first). Read after the
        # write: a loop that computed its wake-up before the write has set `wake_at` by now,
        # or still shows +inf (awake).
        # An awake loop (+inf) sleeps at most POLL after its pass: a record due later than
        # that (and a pass's length, and the clocks' offset, as slack) is seen in time.
        next_fire = UNKNOWN if flight is None else flight.next_fire
        horizon = self.scheduler.clock.time() + self.offset + 2 * POLL
        if next_fire is not None and next_fire <= min(self.wake_at, horizon):
            self.nudge()

    def write_finished(self, *, and_claim: bool = False, only: Claimable | None = None
                        ) -> list[Claim]:
        """Write the completions the pool handed over, in one batch (see `complete`); with
        `and_claim`, then the pass's claim, in the same transaction (`complete_and_claim`).
        Returns the claims made."""
        with self.lock:
            pending, self.finished = self.finished, []
        claims: list[Claim] = []
        if not pending and not and_claim:
            return claims
        try:
            if and_claim:
                assert self.complete_and_claim is not None
                written, claims = self.complete_and_claim(
                    pending, self.owner, lease=self.lease, limit=BATCH, planner=self.planner,
                    on_crash=self.on_crash, only=only)
            else:
                assert self.complete_many is not None
                written = self.complete_many(pending)
        except Exception:
            with self.lock:  # retried one at a time, and counted as waiting in status()
                self.retry_completions.extend(pending)
            raise
        for (claim, _), done in zip(pending, written, strict=True):
            self._completed(claim, done)
        return claims

    def _completed(self, claim: Claim, done: bool) -> None:
        if done:
            with self.lock:  # pool threads and the loop count here
                self.completed += 1
        else:
            self._lease_lost(claim, "complete")

    def write_retries(self) -> None:
        with self.lock:
            pending, self.retry_completions = self.retry_completions, []
        for i, (claim, result) in enumerate(pending):
            try:
                done = self.store.complete(claim, result)
            except Exception:
                with self.lock:
                    self.retry_completions[:0] = pending[i:]
                raise
            self._completed(claim, done)

    def failed(self, what: str, exc: Exception) -> None:
        self.store_errors += 1
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:500]
        if self.healthy or error != self.last_error:
            logger.error("%s: the schedule store %s failed (%s): %s; retrying with backoff",
                         self.name, self.store.display_url, what, error)
        self.healthy = False
        self.last_error = error

    def release(self) -> None:
        """Close the store if the service opened it (from its URL)."""
        if self.owned:
            try:
                self.store.close()
            except Exception:
                logger.exception("%s: closing the schedule store failed", self.name)


# -- a claim's run --------------------------------------------------------------------------


#: A claim whose next fire time its planner did not give (a rerun of a crashed owner's run).
UNKNOWN = -math.inf


@dataclasses.dataclass(slots=True)
class InFlight:
    """A claim of this process, from its claim until its completion is written; and the pool's
    work item that runs it (`run`): one object per claim, made once, on the loop's hand-off."""

    loop: StoreLoop = dataclasses.field(repr=False, compare=False)
    claim: Claim
    renew_at: float  # monotonic
    # The record's next fire time after this claim (epoch seconds on the store's clock; None:
    # none; UNKNOWN: not planned here): its completion wakes the loop only if that is
    # before the loop's wake-up.
    next_fire: float | None = UNKNOWN
    lost: bool = False
    started: bool = False  # a pool thread took the run (set before it runs anything)

    def run(self) -> None:
        """Run the claim (on a pool thread) and record its end."""
        run_claim(self.loop, self.claim)


def run_claim(loop: StoreLoop, claim: Claim) -> None:
    """Run one claimed fire time (on a pool thread) and record its end."""
    scheduler = loop.scheduler
    with loop.lock:
        flight = loop.in_flight.get((claim.name, claim.version))
        if flight is not None:
            flight.started = True  # not given back at close: it runs, and completes
        job = loop.jobs.get(claim.name)
    link = job._stored if job is not None else None
    if job is not None and link is not None:
        # Declared here: the code's function and arguments, whatever the record holds.
        fn: Callable[..., object] = job._fn
        definition = link.definition
    else:
        definition = claim.definition
        if not loop.trust.claimable.admits_target(definition.target):
            # Removed here since the loop let it run: never imported, never run.
            with loop.lock:
                loop.in_flight.pop((claim.name, claim.version), None)
            give_back(loop, claim)
            return
        try:
            fn = resolve_target(definition.target)
        except Exception as exc:
            logger.error("%s: stored schedule %r: its target %s does not import here (%s)",
                         loop.name, claim.name, definition.target, exc)
            loop.complete(claim, f"error: {type(exc).__name__}: {exc}"[:500])
            return
        job = undeclared_job(loop, claim.name, fn, definition)
    clock = scheduler.clock
    monotonic = scheduler.monotonic
    start = monotonic()
    # Lateness against the store's clock (the offset measured at the latest read).
    lateness = clock.time() + loop.offset - claim.fire_time.timestamp()
    call = functools.partial(fn, *definition.args, **definition.kwargs)
    wall = job._wall
    if wall is not None:
        wall.last_fire = claim.fire_time
    # The claim marks the run: `current_run()` reads it into a RunInfo if it is asked.
    failed, _ = job._run_once(start, start - max(0.0, lateness), monotonic, claim, call)
    result = "ok" if not failed else f"error: {job._last_error}"[:500]
    loop.complete(claim, result)
    if failed and definition.options.get("on_error") == "stop":
        job._set_flags(stopped=True)
        loop.post(("control", claim.name, "pause"))
