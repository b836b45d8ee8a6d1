"""The service's events: typed, frozen records, delivered in order on one dispatcher thread.

A subscriber (`BackgroundService.subscribe`) is called on the service's **dispatcher thread**,
never on the scheduler or a worker: emitting an event is a ``SimpleQueue.put`` (and the event
is only built when some subscriber wants its kind), so a slow or raising subscriber never
delays a run. Events are delivered in the order they were emitted, one at a time, to each
subscriber that asked for their kind, in the order the subscribers subscribed.

Bounds, stated: the queue in front of the dispatcher holds at most `BACKLOG` events; an event
emitted while it is full is dropped and counted in the ``dropped`` statistics of every
subscriber that wanted it (a subscriber that blocks for good costs memory up to that bound,
never a run). A subscriber that raises is logged on ``executors.service`` with its traceback
and counted (``failed``); it stays subscribed.

The dispatcher starts with the first event emitted while someone listens (through
`executors._threads`, like every thread of the library), also when that event comes after
`close()` from a thread of the service still running, and stops when the service closes:
it first waits for the service's scheduler and pool threads to end, so the events of runs that
finish during a shutdown are delivered too, then delivers what is queued and exits.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Literal, final

from executors import _threads

__all__ = (
    "BACKLOG",
    "ClockChanged",
    "EVENT_TYPES",
    "Events",
    "LeaseLost",
    "RunFailed",
    "RunFinished",
    "RunMissed",
    "RunStarted",
    "ScheduleAdded",
    "ScheduleChanged",
    "SchedulePaused",
    "ScheduleRemoved",
    "ScheduleResumed",
    "ServiceEvent",
    "Subscription",
    "SubscriptionStatistics",
)

logger = logging.getLogger("executors.service")

#: The most events waiting for the dispatcher; past it new events are dropped (and counted).
BACKLOG = 10_000

_STOP = object()

MissedReason = Literal["stopped", "suspended", "clock_jump", "behind", "grace"]


class ServiceEvent:
    """The base of every service event (pass it as ``kinds`` to get them all)."""

    __slots__ = ()


@dataclasses.dataclass(frozen=True, slots=True)
class RunStarted(ServiceEvent):
    """A job's run is about to call its function."""

    #: The job's name.
    name: str
    #: The instant the run is due for, aware UTC (see `executors.RunInfo.fire_time`).
    fire_time: datetime.datetime
    #: How late the run starts after `fire_time`, in seconds (0.0 if on time).
    lateness: float


@dataclasses.dataclass(frozen=True, slots=True)
class RunFinished(ServiceEvent):
    """A job's run returned."""

    #: The job's name.
    name: str
    #: The fire time the run was due for, aware UTC.
    fire_time: datetime.datetime
    #: How long the run took, in seconds of the service's clock.
    duration: float


@dataclasses.dataclass(frozen=True, slots=True)
class RunFailed(ServiceEvent):
    """A job's run raised (it is logged and counted too; the job's ``on_error`` applies)."""

    #: The job's name.
    name: str
    #: The fire time the run was due for, aware UTC.
    fire_time: datetime.datetime
    #: ``"ExceptionType: message"`` of what the run raised.
    error: str


@dataclasses.dataclass(frozen=True, slots=True)
class RunMissed(ServiceEvent):
    """Fire times of a wall-clock schedule were missed (see `executors.BackgroundService.schedule`).

    One event per handling: the fire times ``first`` to ``last`` that the scheduler found due
    together, ``count`` of which were missed and ``ran`` of those still run, late, by the
    schedule's ``missed`` policy; the others were not run.
    """

    #: The job's name.
    name: str
    #: How many fire times were missed (a lower bound when `truncated`).
    count: int
    #: How many of the missed fire times were run anyway, late (``missed="latest"``/``"all"``).
    ran: int
    #: The earliest missed fire time, aware UTC.
    first: datetime.datetime
    #: The latest missed fire time, aware UTC.
    last: datetime.datetime
    #: Why: ``"stopped"`` (passed before the schedule was added, after its ``since``),
    #: ``"suspended"`` (passed during a suspend), ``"clock_jump"`` (skipped by a forward step of
    #: the wall clock), ``"behind"`` (the next fire time was already due too: a run overran,
    #: or the pool was busy) or ``"grace"`` (later than the schedule's ``grace``).
    reason: str
    #: The schedule's policy: ``"latest"``, ``"all"`` or ``"skip"``.
    policy: str
    #: True if the fire times were too many to walk (more than the service's bound): `count`
    #: is then a lower bound, and the schedule resumed at the first fire time after now.
    truncated: bool


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleAdded(ServiceEvent):
    """A job was added (`every`, `schedule` or `cron`)."""

    #: The job's name.
    name: str
    #: The schedule as people read it (``"30 2 * * * Europe/Berlin"``, ``"every 60s"``).
    trigger: str


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleChanged(ServiceEvent):
    """A job's schedule changed (`Job.reschedule`, `Job.update_interval`)."""

    #: The job's name.
    name: str
    #: The new schedule as people read it.
    trigger: str


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleRemoved(ServiceEvent):
    """A job will run no more: cancelled, or its trigger is exhausted."""

    #: The job's name.
    name: str
    #: ``"cancelled"`` (`Job.cancel`) or ``"finished"`` (the trigger has no fire time left;
    #: the job stays listed, in state ``"finished"``).
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulePaused(ServiceEvent):
    """`Job.pause` was called."""

    #: The job's name.
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class ScheduleResumed(ServiceEvent):
    """`Job.resume` was called on a paused job."""

    #: The job's name.
    name: str
    #: Fire times of a wall-clock schedule that passed while it was paused: skipped by intent,
    #: not run (0 for an ``every()`` job).
    skipped: int


@dataclasses.dataclass(frozen=True, slots=True)
class ClockChanged(ServiceEvent):
    """The scheduler saw the wall clock move apart from the monotonic clock.

    Wall-clock deadlines were recomputed and fire times that passed meanwhile are handled by
    each schedule's ``missed`` policy.
    """

    #: ``"suspend"`` (the machine slept: boot time moved, the monotonic clock did not) or
    #: ``"step"`` (the wall clock was set: NTP, an administrator).
    kind: str
    #: How far the wall clock moved apart from the monotonic clock, in seconds (negative: back).
    seconds: float


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseLost(ServiceEvent):
    """A run of a schedule kept in a store lost its lease: this process stalled (or the store
    was out of reach) past the lease, another claim moved the record on, and this run's
    renewal or completion was refused (the record no longer holds this run's claim: a pause
    or any other change made during the run does not do that). The run's result is
    not recorded; under ``on_crash="rerun"`` another process may have run it again."""

    #: The schedule's name.
    name: str
    #: The fire time of the run whose lease was lost (aware UTC).
    fire_time: datetime.datetime
    #: The attempt number of that run.
    attempt: int
    #: ``"renew"`` or ``"complete"``: the write that was refused.
    refused: str


#: Every kind of event, in the order of the docs.
EVENT_TYPES: tuple[type[ServiceEvent], ...] = (
    RunStarted, RunFinished, RunFailed, RunMissed, ScheduleAdded, ScheduleChanged,
    ScheduleRemoved, SchedulePaused, ScheduleResumed, ClockChanged, LeaseLost)


@dataclasses.dataclass(frozen=True)
class SubscriptionStatistics:
    """Counters of one subscriber (see `Subscription.statistics`)."""

    #: Events handed to the callback that returned.
    delivered: int
    #: Events handed to the callback that raised (logged on ``executors.service``).
    failed: int
    #: Events of the kinds it wants that were dropped because the dispatcher's queue was full
    #: (`BACKLOG` events waiting) or the service had stopped its dispatcher.
    dropped: int
    #: ``"ExceptionType: message"`` of the latest call that raised, or None.
    last_error: str | None
    #: False once `Subscription.cancel` was called.
    active: bool


def _kinds(kinds: object) -> frozenset[type[ServiceEvent]]:
    """`kinds` as a set of event classes; TypeError/ValueError naming `kinds`."""
    if kinds is None:
        return frozenset(EVENT_TYPES)
    items: Iterable[object]
    if isinstance(kinds, type):
        items = (kinds,)
    elif isinstance(kinds, Iterable) and not isinstance(kinds, str | bytes):
        items = kinds
    else:
        raise TypeError("kinds must be None, an event class (executors.RunStarted, ...) or an "
                        f"iterable of them, got {type(kinds).__name__}")
    found: set[type[ServiceEvent]] = set()
    for kind in items:
        if kind is ServiceEvent:
            found.update(EVENT_TYPES)
        elif isinstance(kind, type) and kind in EVENT_TYPES:
            found.add(kind)
        else:
            raise TypeError("kinds must hold event classes (executors.RunStarted, ..., or "
                            f"executors.ServiceEvent for all), got {kind!r}")
    if not found:
        raise ValueError("kinds must name at least one event class (None: all of them)")
    return frozenset(found)


@final
class Subscription:
    """A subscriber of a service's events: made by `BackgroundService.subscribe`.

    `cancel()` stops deliveries (an event being delivered finishes); it is idempotent.
    """

    __slots__ = ("_active", "_callback", "_delivered", "_dropped", "_events", "_failed",
                 "_last_error", "kinds")

    def __init__(self, events: Events, callback: Callable[[ServiceEvent], object],
                 kinds: frozenset[type[ServiceEvent]]) -> None:
        self._events = events
        self._callback = callback
        self.kinds = kinds
        self._active = True
        self._delivered = 0
        self._failed = 0
        self._dropped = 0
        self._last_error: str | None = None

    def cancel(self) -> None:
        """Stop deliveries to this subscriber."""
        self._active = False
        self._events.unsubscribe(self)

    def statistics(self) -> SubscriptionStatistics:
        """A snapshot of the subscriber's counters (read without a lock)."""
        return SubscriptionStatistics(self._delivered, self._failed, self._dropped,
                                      self._last_error, self._active)

    def _deliver(self, event: ServiceEvent) -> None:
        try:
            self._callback(event)
        except Exception as exc:
            self._failed += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
            logger.exception("event subscriber %r raised on %r", self._callback, event)
            exc.__traceback__ = None  # our reference only: the frames stay collectable
            del exc
        else:
            self._delivered += 1

    def __repr__(self) -> str:
        state = "active" if self._active else "cancelled"
        return (f"<Subscription {self._callback!r} {state} delivered={self._delivered}"
                f" failed={self._failed} dropped={self._dropped}>")


@final
class Events:
    """One service's subscribers, its event queue and its dispatcher thread."""

    def __init__(self, name: str, producers: Callable[[], list[threading.Thread]]) -> None:
        self.name = name
        self._producers = producers
        self._lock = threading.Lock()
        self.subscriptions: tuple[Subscription, ...] = ()
        #: The event classes some subscriber wants: emitters test it before building an event.
        self.wanted: frozenset[type[ServiceEvent]] = frozenset()
        self.reset()

    def reset(self) -> None:
        """New queue and no thread (at creation, and after fork: never unlocked)."""
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self._closing = False
        self._stopped = False

    def subscribe(self, callback: object, kinds: object) -> Subscription:
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        sub = Subscription(self, callback, _kinds(kinds))
        with self._lock:
            self.subscriptions = (*self.subscriptions, sub)
            self.wanted = self.wanted | sub.kinds
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self.subscriptions = tuple(s for s in self.subscriptions if s is not sub)
            self.wanted = frozenset().union(*(s.kinds for s in self.subscriptions))

    def emit(self, event: ServiceEvent) -> None:
        """Queue `event` for the dispatcher (or count it dropped). From any thread; no lock
        unless the dispatcher must be started."""
        if self._stopped or self._queue.qsize() >= BACKLOG:
            self._count_dropped(event)
            return
        self._queue.put(event)
        if self.thread is None:
            self._start()

    def _start(self) -> None:
        with self._lock:
            if self.thread is not None:
                return
            if self._closing and not any(
                    _threads.alive(t) for t in self._producers()):
                # Closed, and none of the service's threads runs (closed before any event was
                # emitted; a forked child that stays closed): nothing will deliver this one.
                # While one runs (a run finishing during the shutdown, the store thread's
                # last pass), the dispatcher starts: it meets the stop mark first, waits for
                # those threads, then delivers what is queued.
                self._stopped = True
            else:
                thread = _threads.new_thread(self._run, f"{self.name}-events")
                self.thread = thread
        if self._stopped:
            self._drop_queued()
            return
        try:
            _threads.start(thread)
        except RuntimeError:
            # "can't create new thread at interpreter shutdown": the events stay undelivered,
            # and are counted as dropped.
            self._stopped = True
            self._drop_queued()

    def close(self) -> None:
        """Stop the dispatcher once the producers have ended and the queue is delivered.

        Lock-free (a put), so `BackgroundService.close` stays destructor-safe.
        """
        self._closing = True
        self._queue.put(_STOP)

    def _run(self) -> None:
        get = self._queue.get
        while True:
            event = get()
            if event is _STOP:
                break
            self._dispatch(event)  # type: ignore[arg-type]
        # Closing: runs still executing emit their events; wait for them, then deliver all.
        # The caller of shutdown() waits for them too: one joiner at a time (_threads.join).
        for thread in self._producers():
            _threads.join(thread)
        try:
            while True:
                event = self._queue.get_nowait()
                if event is not _STOP:
                    self._dispatch(event)  # type: ignore[arg-type]
        except queue.Empty:
            pass
        self._stopped = True
        self._drop_queued()  # an emit that raced with the last get

    def _dispatch(self, event: ServiceEvent) -> None:
        kind = type(event)
        for sub in self.subscriptions:
            if sub._active and kind in sub.kinds:
                sub._deliver(event)

    def _drop_queued(self) -> None:
        try:
            while True:
                event = self._queue.get_nowait()
                if event is not _STOP:
                    self._count_dropped(event)  # type: ignore[arg-type]
        except queue.Empty:
            pass

    def _count_dropped(self, event: ServiceEvent) -> None:
        kind = type(event)
        for sub in self.subscriptions:
            if kind in sub.kinds:
                sub._dropped += 1

    def __repr__(self) -> str:
        return (f"<Events {self.name!r} subscribers={len(self.subscriptions)}"
                f" queued={self._queue.qsize()}>")
