"""Wall-clock schedules' policy, pure: fire times, clock jumps, missed runs (one announcement).

The scheduler applies it to its wall-clock jobs (`executors._service.wall_slots`), the store
loop to stored schedules (`executors._service.stored_plan`): both share `decide`, the walk,
`ClockWatch` and `announce_missed`; nothing here holds a job or a scheduler.

Two clocks, never mixed. A schedule's fire times are aware UTC instants from its trigger
(`executors.triggers`); the scheduler keeps sleeping on the monotonic clock, on the deadline
``now_mono + (fire - now_wall)`` read at one moment. Then:

- **Clock jumps and suspends.** On each wake-up, while wall-clock schedules exist, the
  scheduler compares ``time() - monotonic()`` and ``boottime() - monotonic()`` with their
  values at the previous wake-up (`ClockWatch`). A change of the first by more than
  `DRIFT_THRESHOLD` (1 s) is a step of the wall clock (NTP, an administrator) or, if the second
  moved too, a suspend (Linux's monotonic clock stops while the machine sleeps; boot time does
  not). Every pending deadline is then recomputed, and fire times the jump or the suspend
  passed over are *missed* (reason ``"clock_jump"`` or ``"suspended"``). Slower drift (NTP
  slewing, at most 500 ppm) is not a jump: a deadline reached early by it is slept again
  until the wall clock reaches the fire time, so nothing runs before its time by more than
  `EARLY` (1 ms).
- **Bound.** While wall-clock schedules exist the scheduler never sleeps longer than
  `MAX_SLEEP` (60 s), so a jump is seen within 60 s (a suspend: within 60 s after the resume).
  With none, it sleeps as before: an idle service costs no wake-up.
- **Missed runs**, one definition: a fire time is missed when it passed while the service was
  not watching it (before the schedule was added, after its ``since``; during a suspend;
  skipped over by a forward step of the clock), or when by the time the scheduler handles it
  the next fire time is also due (a whole period behind: a run overran, or the pool was busy),
  or when ``grace`` is set and it is later than that. The scheduler handles every fire time
  due at a wake-up as one group, and the ``missed`` policy decides what runs: ``"latest"``
  runs the latest of the group once, ``"all"`` runs each (the latest `max_missed` missed
  ones), ``"skip"`` runs none of the missed ones (the latest, when it is not missed itself,
  runs). ``grace`` filters what may run. Each group with a miss is counted in the job's
  statistics, logged at WARNING and announced as one `RunMissed` event: never a silent drop.
- **No double run.** A schedule's next fire time is always computed from the last fire time
  it handled (``next_after(last)``, which is strictly later), never from a wall time read
  after a step back: an NTP step back of an hour runs nothing twice.
- **Counting has a bound:** a group is walked fire time by fire time up to `WALK_BOUND`
  (10,000) fire times; past that its count is a lower bound (``RunMissed.truncated``) and the
  schedule resumes at the first fire time after now.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import math
from typing import TYPE_CHECKING, Literal, Protocol, final

from executors import _validate

from .events import Events, RunMissed

if TYPE_CHECKING:
    import zoneinfo

    from executors._clock import Clock


__all__ = (
    "DRIFT_THRESHOLD",
    "EARLY",
    "MAX_SLEEP",
    "WALK_BOUND",
    "ClockWatch",
    "Decision",
    "Missed",
    "TriggerLike",
    "WallOnError",
    "WallState",
    "announce_missed",
    "check_trigger",
    "decide",
    "utc",
    "wall_state",
)

logger = logging.getLogger("executors.service")

UTC = datetime.UTC

#: A change of ``time() - monotonic()`` between two wake-ups larger than this (seconds) is a
#: clock step or a suspend.
DRIFT_THRESHOLD = 1.0
#: The longest the scheduler sleeps while wall-clock schedules exist (seconds): the bound on
#: how long a clock jump can go unseen.
MAX_SLEEP = 60.0
#: A fire time counts as reached when the wall clock is at most this close before it (seconds).
EARLY = 0.001
#: The most fire times one handling walks (and counts exactly).
WALK_BOUND = 10_000

Missed = Literal["latest", "all", "skip"]
WallOnError = Literal["continue", "stop"]


class TriggerLike(Protocol):
    """What the service needs of a trigger (`executors.triggers.Trigger`)."""

    tz: zoneinfo.ZoneInfo | None

    def next_after(self, instant: datetime.datetime) -> datetime.datetime | None: ...

    def describe(self) -> str: ...

    def to_data(self) -> dict[str, object]: ...


def check_trigger(trigger: object) -> TriggerLike:
    """`trigger` if it is a trigger; TypeError naming `trigger` otherwise."""
    if not (all(callable(getattr(trigger, a, None)) for a in ("next_after", "describe",
                                                               "to_data"))
            and hasattr(trigger, "tz")) or isinstance(trigger, type):
        raise TypeError("trigger must be a trigger (executors.Cron, Date, CalendarInterval, "
                        "Interval, AnyOf, AllOf: next_after(), describe(), to_data() and tz), "
                        f"got {type(trigger).__name__}")
    return trigger  # type: ignore[return-value]


#: No floor: `-math.inf` written once (a float the expression made anew for each job).
_NO_FLOOR = -math.inf


@final
class WallState:
    """A wall-clock job's schedule: its trigger and policy (set by the service) and where it
    stands (written by the scheduler, under its lock, or by the job's run in progress)."""

    __slots__ = ("fire", "fire_ts", "floor", "grace", "handled", "last_fire", "last_reason",
                 "max_missed", "missed", "missed_count", "missed_run", "paused_skipped",
                 "since", "trigger", "unwatched")

    def __init__(self, trigger: TriggerLike, missed: Missed, max_missed: int,
                 grace: float | None, since: datetime.datetime | None) -> None:
        self.trigger = trigger
        self.missed: Missed = missed
        self.max_missed = max_missed
        self.grace = grace
        self.since = since
        self.fire: datetime.datetime | None = None  # the next fire time to handle
        self.fire_ts = math.inf
        self.handled: datetime.datetime | None = None  # the latest fire time handled
        self.floor = _NO_FLOOR  # fire times at or before this (epoch s) never run (reschedule)
        # (reason, wall time): fire times up to that wall time passed unwatched.
        self.unwatched: tuple[str, float] | None = None
        self.last_fire: datetime.datetime | None = None  # the fire time of the latest run
        self.missed_count = 0
        self.missed_run = 0
        self.paused_skipped = 0
        self.last_reason: str | None = None

    def set_fire(self, fire: datetime.datetime | None) -> None:
        self.fire = fire
        self.fire_ts = math.inf if fire is None else fire.timestamp()

    def zone(self) -> datetime.tzinfo:
        tz = self.trigger.tz
        return UTC if tz is None else tz


def wall_state(trigger: object, missed: object, max_missed: object, grace: object,
               since: object) -> WallState:
    """A new job's `WallState` from `schedule()`'s arguments, each checked and named."""
    checked = check_trigger(trigger)
    if missed not in ("latest", "all", "skip"):
        raise ValueError(f"missed must be 'latest', 'all' or 'skip', got {missed!r}")
    count = _validate.count(max_missed, "max_missed")
    seconds = None if grace is None else _validate.seconds(grace, "grace", allow_zero=False)
    if since is not None:
        if not isinstance(since, datetime.datetime):
            raise TypeError(f"since must be an aware datetime or None, got "
                            f"{type(since).__name__}")
        if since.utcoffset() is None:
            raise ValueError(f"since must be an aware datetime (with a tzinfo), got {since!r}")
    return WallState(checked, missed, count, seconds, since)


def utc(ts: float) -> datetime.datetime:
    """The aware UTC datetime of epoch seconds `ts`."""
    return datetime.datetime.fromtimestamp(ts, UTC)


@final
class ClockWatch:
    """Sees wall-clock steps and suspends by comparing three clocks at each wake-up."""

    __slots__ = ("_boot_drift", "_clock", "_wall_drift")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._wall_drift = 0.0
        self._boot_drift = 0.0

    def reset(self, mono: float) -> None:
        """Take the current drifts as the baseline (when the first wall-clock job arrives)."""
        self._wall_drift = self._clock.time() - mono
        self._boot_drift = self._clock.boottime() - mono

    def check(self, mono: float) -> tuple[str, float, float] | None:
        """(kind, seconds, wall time) if the wall clock moved apart since the last check."""
        wall = self._clock.time()
        wall_drift = wall - mono
        boot_drift = self._clock.boottime() - mono
        moved = wall_drift - self._wall_drift
        slept = boot_drift - self._boot_drift
        self._wall_drift = wall_drift
        self._boot_drift = boot_drift
        if abs(moved) <= DRIFT_THRESHOLD:
            return None
        return ("suspend" if slept > DRIFT_THRESHOLD else "step"), moved, wall


def _walk(trigger: TriggerLike, fire: datetime.datetime, wall: float,
          nxt: datetime.datetime | None, keep: int
          ) -> tuple[list[datetime.datetime], int, datetime.datetime | None,
                     datetime.datetime | None, bool]:
    """The group of fire times due at `wall`, from the pending `fire` (whose successor `nxt`
    is known already).

    Returns (the ones the policy may run: the latest `keep`, oldest first; how many are due;
    the one before the latest; the next fire time after the group; truncated).
    """
    first_ts = fire.timestamp()
    kept: collections.deque[datetime.datetime] = collections.deque(maxlen=keep)
    count = 0
    prev: datetime.datetime | None = None
    truncated = False
    while True:
        count += 1
        kept.append(fire)
        if count > 1:
            nxt = trigger.next_after(fire)
        if nxt is None or nxt.timestamp() > wall:
            break
        if nxt <= fire:
            raise ValueError(f"the trigger's next_after({fire.isoformat()}) returned "
                             f"{nxt.isoformat()}, not a later instant")
        if count >= WALK_BOUND:
            truncated = True
            # Too many to walk: find the latest due fire time from a window before now
            # twice as wide as the walked gaps, then go on after it.
            gap = max((fire.timestamp() - first_ts) / max(count - 1, 1), 1e-3)
            walked_last = fire
            kept.clear()
            nxt = trigger.next_after(utc(wall - 2 * gap))
            for _ in range(WALK_BOUND):
                if nxt is None or nxt.timestamp() > wall:
                    break
                prev, fire = fire, nxt
                kept.append(fire)
                nxt = trigger.next_after(fire)
            else:
                nxt = trigger.next_after(utc(wall))
            if not kept:
                kept.append(walked_last)
            break
        prev, fire = fire, nxt
    return list(kept), count, prev, nxt, truncated


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """What the ``missed`` policy makes of one group of due fire times (`decide`)."""

    #: The fire times to run, oldest first (possibly none).
    runs: list[datetime.datetime]
    #: How many fire times were due in the group (a lower bound when `truncated`).
    count: int
    #: Of them, how many are missed (see the module docstring): run late or not run.
    missed: int
    #: Of the missed ones, how many run anyway.
    ran: int
    #: The latest fire time of the group (handled, run or not).
    last: datetime.datetime
    #: The latest missed fire time (for the log and `RunMissed`).
    last_missed: datetime.datetime
    #: The next fire time after the group (None: the trigger is exhausted).
    next_fire: datetime.datetime | None
    #: The group was too large to walk (`WALK_BOUND`): `count` is a lower bound.
    truncated: bool
    #: ``"stopped"``/``"suspended"``/``"clock_jump"`` (passed unwatched), ``"grace"`` or
    #: ``"behind"``.
    reason: str


def decide(trigger: TriggerLike, first: datetime.datetime, nxt: datetime.datetime | None,
           wall: float, policy: Missed, max_missed: int, grace: float | None,
           unwatched: tuple[str, float] | None = None) -> Decision:
    """The ``missed`` policy, pure: the fire times from `first` (whose successor is `nxt`) due
    at wall time `wall`, and what runs of them. One implementation for the service's memory
    schedules and for the planner of schedules kept in a store.

    `unwatched` is ``(reason, wall time)``: fire times up to that wall time passed while
    nobody was watching (they are missed even if they are the latest).

    Raises:
        ValueError: the trigger did not move forward (and whatever the trigger raises).
    """
    if nxt is None or nxt.timestamp() > wall:
        # One fire time due, the common case: what `_decide_walked` decides for a group of
        # one when nothing was missed, without the walk (every run of every job comes here).
        first_ts = first.timestamp()
        if not (grace is not None and wall - first_ts > grace) and not (
                unwatched is not None and first_ts <= unwatched[1]):
            return Decision([first], 1, 0, 0, first, first, nxt, False, "behind")
    return _decide_walked(trigger, first, nxt, wall, policy, max_missed, grace, unwatched)


def _decide_walked(trigger: TriggerLike, first: datetime.datetime,
                   nxt: datetime.datetime | None, wall: float, policy: Missed,
                   max_missed: int, grace: float | None,
                   unwatched: tuple[str, float] | None) -> Decision:
    """`decide` for any group: walk it, then apply the policy."""
    keep = max_missed + 1 if policy == "all" else 1
    runs, count, prev, nxt, truncated = _walk(trigger, first, wall, nxt, keep)
    last = runs[-1]
    last_ts = last.timestamp()
    late = grace is not None and wall - last_ts > grace
    latest_missed = late or (unwatched is not None and last_ts <= unwatched[1])
    missed = count - 1 + latest_missed
    if policy == "skip":
        runs = [] if latest_missed else [last]
    elif policy == "latest" or not latest_missed:
        runs = runs if policy == "all" else [last]
    else:
        runs = runs[-max_missed:]
    if grace is not None:
        runs = [f for f in runs if wall - f.timestamp() <= grace]
    ran = len(runs) - (0 if latest_missed or not runs or runs[-1] is not last else 1)
    if unwatched is not None and first.timestamp() <= unwatched[1]:
        reason = unwatched[0]
    else:
        reason = "grace" if late else "behind"
    return Decision(runs, count, missed, ran if missed else 0, last,
                    last if latest_missed else (prev or last), nxt, truncated, reason)


def announce_missed(events: Events, kind: str, name: str, state: WallState | None,
                    missed: int, ran: int, first: datetime.datetime, last: datetime.datetime,
                    reason: str, policy: str, truncated: bool) -> None:
    """The one missed-run announcement, of memory jobs and stored schedules alike: the job's
    counts (`state`, None for a schedule no job of this service declares), the log line
    (`kind` says "job" or "schedule") and `RunMissed`."""
    if state is not None:
        state.missed_count += missed
        state.missed_run += ran
        state.last_reason = reason
    logger.warning("%s %r missed %s%d fire time(s) from %s to %s (%s); missed=%r ran %d of them",
                   kind, name, "at least " if truncated else "", missed, first.isoformat(),
                   last.isoformat(), reason, policy, ran)
    if RunMissed in events.wanted:
        events.emit(RunMissed(name, missed, ran, first, last, reason, policy, truncated))


