"""The schedule store's protocol, and the optional capabilities a store may add to it.

`ScheduleStore` is what every store implements. The capabilities are named protocols, each
``runtime_checkable``: the service asks ``isinstance(store, SupportsWatch)`` and uses what the
store offers (a faster path, an earlier wake), never needing it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, cast, runtime_checkable

from ._records import (
    Claim,
    Declared,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
)

if TYPE_CHECKING:
    from ._claimable import Claimable

__all__ = (
    "ScheduleStore",
    "Changes",
    "SupportsWatch",
    "SupportsDeclareMany",
    "SupportsCompleteMany",
    "SupportsCompleteAndClaim",
    "SupportsChangedSince",
    "SupportsInterrupt",
    "SupportsLost",
    "WatchingThread",
    "offered",
    "watch_thread",
)

P = TypeVar("P")


class ScheduleStore(Protocol):
    """The contract of a schedule store (the guarantees: `executors.stores`).

    What the service calls on every store. A store may also offer the optional
    capabilities below (`SupportsWatch`, ...); the service checks each with ``isinstance``.
    """

    #: Where the store is, for messages: the URL with any password hidden.
    display_url: str

    def now(self) -> dt.datetime:
        """The store's clock (aware UTC)."""

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        """Add a schedule, or keep its state if unchanged, or replace a changed definition.

        `first_fire(store_now)` gives the next fire time of a new or changed schedule. A
        stored record that cannot be read is replaced by a new one (the code's declaration
        is what the schedule is; the unreadable state cannot be kept).
        """

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None = None) -> list[Claim]:
        """Claim up to `limit` due records for `owner` (see the module docstring): of the
        records `only` admits (None: every record), left out in the store's own query."""

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        """``(store now, earliest)``: the store's clock and the earliest instant a `claim`
        given `only` could find work (the least next fire time of the unpaused records with
        no run in progress, or the least lease end of the runs in progress), None if none.
        One cheap read: a claimer sleeps ``earliest - now`` on its monotonic clock. Records a
        claim found unreadable are left out (`Unreadable`)."""

    def renew(self, claim: Claim, lease: float) -> bool:
        """Extend `claim`'s lease; False if the record no longer holds `claim` (its token):
        the lease was lost. A control operation since the claim does not refuse it."""

    def complete(self, claim: Claim, result: str) -> bool:
        """Record the end of `claim`'s run (its run fields, counters and last run only);
        False (nothing written) if the record no longer holds `claim`: the lease was lost."""

    def give_back(self, claim: Claim) -> bool:
        """Give back `claim`, never started (its owner is closing): see `given_back`. False
        (nothing written) if the record no longer holds `claim`."""

    def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume `name`; False if there is no such schedule."""

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        """Move `name`'s next fire time (reschedule, run now); False if there is no such one."""

    def remove(self, name: str) -> bool:
        """Remove `name`; False if there was no such schedule."""

    def get(self, name: str) -> ScheduleRecord | None:
        """The record of `name`, or None."""

    def records(self) -> list[ScheduleRecord]:
        """Every readable record, by name (corrupt ones are left out; see `corrupt`)."""

    def corrupt(self) -> list[tuple[str, str]]:
        """``(name, reason)`` of every record that could not be read."""

    def close(self) -> None:
        """Release the store's connections."""


@dataclasses.dataclass(frozen=True)
class Changes:
    """What `SupportsChangedSince.changed_since` found."""

    #: The mark to pass next time.
    mark: int
    #: True: `records` and `corrupt` are the whole store (a first look, or one after a removal);
    #: False: only the records written since the mark passed in.
    whole: bool
    #: The readable records among them, by name.
    records: list[ScheduleRecord]
    #: ``(name, reason)`` of the unreadable ones.
    corrupt: list[tuple[str, str]]


@runtime_checkable
class SupportsWatch(Protocol):
    """A store that tells of changes other processes made (PostgreSQL's ``LISTEN``, MongoDB's
    gone owners): the service claims at once instead of at its next poll."""

    def watch(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback` (from a thread of the store's) soon after a change others must
        see; returns the function that stops it, a `WatchingThread` when it names the thread
        that watches."""


@runtime_checkable
class WatchingThread(Protocol):
    """What `SupportsWatch.watch` returns when it watches on a thread of its own: the
    function that stops it, naming that thread (the service waits for it at shutdown and
    shows it in its status)."""

    #: The thread that calls the callback.
    thread: threading.Thread

    def __call__(self) -> None:
        """Stop watching."""


def watch_thread(unwatch: Callable[[], None]) -> threading.Thread | None:
    """The thread a watch runs on, if its stop function names it (`WatchingThread`)."""
    return unwatch.thread if isinstance(unwatch, WatchingThread) else None


@runtime_checkable
class SupportsDeclareMany(Protocol):
    """A store that declares a batch of schedules at once: an unchanged batch costs one read
    (10,000 schedules declared at start-up, one by one, cost 10,000 transactions)."""

    def declare_many(self, declarations: Sequence[tuple[
            ScheduleDefinition, Callable[[dt.datetime], dt.datetime | None]]]
                     ) -> list[Declared | Exception]:
        """`ScheduleStore.declare` for each ``(definition, first_fire)``, in order: each
        answer is what `declare` would have returned, or the exception it would have raised
        for that schedule alone (its definition is not JSON, its `first_fire` raised, or the
        store refused that record): nothing is written for it, and the others are declared.

        Raises:
            Exception: the batch failed as a whole (the store is unreachable, or refused a
                write it cannot tell apart): the caller may declare each schedule alone
                (the service does), so that one bad declaration fails only itself; each
                is judged again then, against whatever of the batch the store holds.
        """


@runtime_checkable
class SupportsCompleteMany(Protocol):
    """A store that records a batch of ended runs in one write (one commit, not one each)."""

    def complete_many(self, finished: list[tuple[Claim, str]]) -> list[bool]:
        """`ScheduleStore.complete` for each ``(claim, result)``, in one transaction; each
        answer as `complete`'s."""


@runtime_checkable
class SupportsCompleteAndClaim(SupportsCompleteMany, Protocol):
    """A store that writes a pass's completions and its claims in one transaction."""

    def complete_and_claim(self, finished: list[tuple[Claim, str]], owner: str, *,
                           lease: float, limit: int, planner: Planner,
                           on_crash: Callable[[ScheduleRecord], OnCrash],
                           only: Claimable | None = None
                           ) -> tuple[list[bool], list[Claim]]:
        """`complete_many(finished)`, then `claim(...)`, both written or neither."""


@runtime_checkable
class SupportsChangedSince(Protocol):
    """A store that reads only the records written since a reader's last look."""

    def changed_since(self, mark: int | None) -> Changes:
        """The records written since `mark` (a `Changes.mark` of an earlier call), or the
        whole store when `mark` is None (or when the store cannot tell)."""


@runtime_checkable
class SupportsInterrupt(Protocol):
    """A store whose calls in progress can be made to fail from another thread (the
    service's shutdown deadline)."""

    def interrupt(self) -> None:
        """Make every call in progress fail soon, from any thread."""


@runtime_checkable
class SupportsLost(Protocol):
    """A planner that wants to know which of its plans were not written (a store whose claim
    writes after it plans tells it of each plan whose conditional write lost a race)."""

    def __call__(self, record: ScheduleRecord, now: dt.datetime, /) -> object:
        """The plan of `record` at the store's `now` (a `Planner`)."""

    def lost(self, name: str, version: int) -> None:
        """The plan of `name` (made at record version `version`) was not written."""


# `capability` is typed as what calling it makes, not as ``type[P]``: mypy refuses a protocol
# class where a ``type[...]`` is asked (its type-abstract check), and a protocol is what it is.
def offered(store: object, capability: Callable[..., P], via: object = None) -> P | None:
    """`via` (by default `store` itself) as a `capability` when `store` offers it, else None:
    how the service asks a store for an optional capability.

    `via` is an object that forwards its calls to `store` (the service's wrapper that notes
    the calls in progress): the check is made on `store` itself, since a runtime protocol
    check sees no attribute a wrapper forwards through ``__getattr__``.

    Raises:
        TypeError: `capability` is not a ``runtime_checkable`` protocol (``isinstance``'s).

    Example:
        >>> from executors.stores import MemoryStore, SupportsWatch, offered
        >>> offered(MemoryStore(), SupportsWatch) is None
        True
    """
    if not isinstance(store, cast(type, capability)):
        return None
    return cast(P, store if via is None else via)
