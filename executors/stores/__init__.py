"""Schedule stores: a schedule as plain data, and the one contract every store keeps.

This package is public: the service uses it, and so does whoever writes a store. It holds, in
reading order, the data model (`ScheduleDefinition`, `ScheduleRecord`, `Claim`, `Plan`,
`Declared`) and the `ScheduleStore` protocol with its optional capabilities
(`SupportsWatch`, ...), the pure record transitions a store applies (`settle_claim`,
`finish_record`, `given_back`, ...), what a store shares with the others (`Claimable`,
`Unreadable`, `ThreadConnections`, `check_format`, `redact_url`), the memory and SQLite stores,
and `open_store`, which finds a store by its URL (`BACKENDS`). The MongoDB and PostgreSQL stores
(`integrations.schedule_stores`) are built from these names only.

A store holds one record per schedule: its *definition* (what code declares: the trigger's
data, the target as ``"module:qualname"``, JSON arguments, policies) and its *state* (paused,
the next fire time, a version, the lease of a run in progress, counters). Nothing is pickled.

The contract, the same for memory, SQLite, MongoDB and PostgreSQL (one test suite runs it
against each, ``tests/test_schedule_stores.py``):

- **The store decides who runs a fire time.** `claim` moves a due record's next fire time
  forward in one conditional update (matching its version and next fire time, not paused, no
  live lease), increments the version and records the owner and a lease. Of any number of
  processes racing for one fire time, exactly one update matches.
- **Time is the store's.** "Due" and "lease expired" are decided with the store's clock
  (PostgreSQL's ``now()``, the MongoDB server's time), never with a caller's: process clocks
  may be skewed by minutes without a double run. SQLite's ``julianday('now')`` is the clock of
  the process running the statement: processes on one machine share the kernel's, and one
  with a faked clock runs early and may see a live lease as expired (the Schedules page).
- **Completion is fenced by the claim itself.** A claim stores a token of its own in the
  record (`ScheduleRecord.claim_token`); `complete` and `renew` match that token, not the
  record's version. A control operation made while the run is in flight (pause, resume, run
  now, a changed declaration) moves the version but leaves the run's owner, lease and token
  alone, so the run still renews and completes, and its completion writes only the run's
  fields (the pause, next fire time and definition the control operation wrote stay). A
  stale owner (its lease expired and the run was handed out again or settled as lost: either
  replaces or clears the token) is refused and told so.
- **A crashed run is settled once.** A record whose lease expired with a run in progress is
  settled by the next `claim` that sees it: ``on_crash="drop"`` counts the run as lost,
  ``"rerun"`` hands the same fire time out again with ``attempt + 1``.
- **A dead owner is not waited for.** A store that can tell that a run's owner is gone ends
  that run's lease at once (the lease's end moves to the store's now, nothing else changes),
  just before it looks for claimable records; the run is then settled as above by whichever
  claim sees it, so a schedule stands still for about a second after its owner is
  SIGKILLed, not for a lease. Each store asks what it knows of its clients, never a
  process's clock: SQLite, an exclusive ``flock`` the owner holds on a file of its own beside
  the database (``<file>-owners/``: the kernel lets it go when the process dies, however it
  dies); PostgreSQL, a session-level advisory lock held by the owner's claiming connection
  (the server lets it go when the backend ends) with a row in ``executors_owners`` naming the
  owner and when it took the lock (after the server's start: a restarted server holds no
  lock, and owners are not taken for gone until they took theirs again); MongoDB, a heartbeat
  document per owner in ``executors_owners``, written every `OWNER_BEAT` seconds with the
  server's time, gone when older than `OWNER_STALE`. Each store looks at most every
  `LIVENESS_EVERY` seconds. An owner the store knows nothing of (a process of an older
  version, an owner on another machine for SQLite) is waited for by its lease, as before. A
  false "gone" cannot run a fire time twice under ``on_crash="drop"``: the live owner's
  renewal and completion are refused by the claim's token once the run is settled (a lost
  lease, reported); under ``"rerun"`` it runs the fire time again, as a lease that expired
  on a live owner always could. "Gone" means "cannot reach the store": a SIGSTOPped process
  keeps its SQLite file lock and its PostgreSQL session (so it is waited for by its lease)
  but stops beating on MongoDB (gone after `OWNER_STALE`); a process cut off from
  PostgreSQL loses its session and is gone too.

**What a claim may take is the caller's too.** `claim` and `next_due` take a `Claimable`:
the names of the schedules the caller's code declares, and
an allowlist of targets for records written elsewhere (``BackgroundService(serve=...)``). A
record it does not admit is not even read as a candidate: claiming it would move its state
(its next fire time, a lease) for a process that will not run it. The store holds state and a
readable copy of each definition; what runs is the caller's declaration
(``BackgroundService``'s).

What is decided by the caller is what the next fire time is: `claim` takes a `Planner` that,
given a due record and the store's now, returns the fire time to run (or none), the next fire
time and how many fire times were missed. The service's planner applies the ``missed`` policy;
because the plan is written by the same conditional update that claims, it is applied exactly
once however many processes serve the store.
"""

from __future__ import annotations

from ._backends import BACKENDS as BACKENDS
from ._backends import Backend as Backend
from ._backends import open_store as open_store
from ._claimable import Claimable as Claimable
from ._liveness import LIVENESS_EVERY as LIVENESS_EVERY
from ._liveness import OWNER_BEAT as OWNER_BEAT
from ._liveness import OWNER_STALE as OWNER_STALE
from ._memory import MemoryStore as MemoryStore
from ._protocol import Changes as Changes
from ._protocol import ScheduleStore as ScheduleStore
from ._protocol import SupportsChangedSince as SupportsChangedSince
from ._protocol import SupportsCompleteAndClaim as SupportsCompleteAndClaim
from ._protocol import SupportsCompleteMany as SupportsCompleteMany
from ._protocol import SupportsDeclareMany as SupportsDeclareMany
from ._protocol import SupportsInterrupt as SupportsInterrupt
from ._protocol import SupportsLost as SupportsLost
from ._protocol import SupportsWatch as SupportsWatch
from ._protocol import WatchingThread as WatchingThread
from ._protocol import offered as offered
from ._protocol import watch_thread as watch_thread
from ._records import FORMAT_VERSION as FORMAT_VERSION
from ._records import UTC as UTC
from ._records import Claim as Claim
from ._records import Declared as Declared
from ._records import OnCrash as OnCrash
from ._records import Plan as Plan
from ._records import Planner as Planner
from ._records import ScheduleDefinition as ScheduleDefinition
from ._records import ScheduleRecord as ScheduleRecord
from ._records import StoreFormatError as StoreFormatError
from ._records import from_epoch as from_epoch
from ._records import record_fields as record_fields
from ._records import record_from_fields as record_from_fields
from ._records import to_epoch as to_epoch
from ._shared import DefinitionCache as DefinitionCache
from ._shared import Step as Step
from ._shared import ThreadConnections as ThreadConnections
from ._shared import changing as changing
from ._shared import check_format as check_format
from ._shared import declaration as declaration
from ._shared import declare_each as declare_each
from ._shared import finishing as finishing
from ._shared import giving_back as giving_back
from ._shared import no_store as no_store
from ._shared import redact_url as redact_url
from ._shared import rewrite as rewrite
from ._shared import scrub_url as scrub_url
from ._sqlite import SQLiteScheduleStore as SQLiteScheduleStore
from ._sqlite_files import sqlite_path as sqlite_path
from ._transitions import earliest_due as earliest_due
from ._transitions import finish_claim as finish_claim
from ._transitions import finish_record as finish_record
from ._transitions import given_back as given_back
from ._transitions import holds as holds
from ._transitions import new_record as new_record
from ._transitions import redeclared as redeclared
from ._transitions import replacing as replacing
from ._transitions import settle_claim as settle_claim
from ._transitions import unchanged as unchanged
from ._unreadable import UNREADABLE_RECHECK as UNREADABLE_RECHECK
from ._unreadable import Unreadable as Unreadable

__all__ = (
    "ScheduleDefinition",
    "ScheduleRecord",
    "Claim",
    "Plan",
    "Planner",
    "Declared",
    "ScheduleStore",
    "SupportsWatch",
    "SupportsDeclareMany",
    "SupportsCompleteMany",
    "SupportsCompleteAndClaim",
    "SupportsChangedSince",
    "SupportsInterrupt",
    "SupportsLost",
    "WatchingThread",
    "watch_thread",
    "Changes",
    "offered",
    "FORMAT_VERSION",
    "StoreFormatError",
    "OnCrash",
    "UTC",
    "to_epoch",
    "from_epoch",
    "record_fields",
    "record_from_fields",
    "LIVENESS_EVERY",
    "OWNER_BEAT",
    "OWNER_STALE",
    "new_record",
    "replacing",
    "redeclared",
    "unchanged",
    "settle_claim",
    "finish_claim",
    "finish_record",
    "given_back",
    "holds",
    "earliest_due",
    "Claimable",
    "UNREADABLE_RECHECK",
    "Unreadable",
    "redact_url",
    "scrub_url",
    "check_format",
    "no_store",
    "ThreadConnections",
    "Step",
    "finishing",
    "giving_back",
    "changing",
    "rewrite",
    "declaration",
    "declare_each",
    "DefinitionCache",
    "MemoryStore",
    "SQLiteScheduleStore",
    "sqlite_path",
    "BACKENDS",
    "Backend",
    "open_store",
)
