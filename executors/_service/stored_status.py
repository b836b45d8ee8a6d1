"""The copy of a store's records behind `status()`, kept by the store loop's snapshot thread.

The store loop (`executors._service.stored`) never reads the whole store itself: reading
100,000 records takes seconds, and claims and lease renewals must not wait for it. When
`status()` is being asked for (or a change was reported), the loop asks this module's
**snapshot thread** (one per service, started at the first read) to bring the copy up to date:
at most every `SNAPSHOT_EVERY`, and at most 5 % of the time (the next read waits 20 times the
last one's duration). A store that can say what changed since a mark (the SQLite store's
`changed_since`) is read for the changes only, and whole every `WHOLE_EVERY`; any other store
is read whole each time.

A job's state shown from the copy (next fire time, pause) never overwrites fresher state the
loop wrote meanwhile: the loop counts its own refreshes of each job (`Snapshots.touch`), and a
copy read before one leaves that job alone.

`Snapshots` owns all of it (the copy, its schedule, the snapshot thread, the touch counts); it
reads of the store loop only what `SnapshotLoop` names, and shares the loop's lock.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import sys
import threading
from typing import TYPE_CHECKING, Protocol, final

from executors import _threads, stores
from executors._clock import SYSTEM_CLOCK

from .schedule_data import StoredSchedule
from .stored_trust import TrustLoop, note_refused

if TYPE_CHECKING:
    from executors.stores import ScheduleRecord

    from .job import Job
    from .store_calls import WatchedStore
    from .stored_plan import LoopPlanner

__all__ = ("SNAPSHOT_EVERY", "WHOLE_EVERY", "SnapshotLoop", "Snapshots", "refresh_job")

logger = logging.getLogger("executors.service")

#: How often the loop refreshes its copy of the records for `status()` (seconds).
SNAPSHOT_EVERY = 5.0
#: How often a store that reports its changes is read whole all the same (seconds): it finds
#: what was written without the change mark (an older version of this library, a hand edit).
WHOLE_EVERY = 300.0
#: How long closing waits for a read in progress before leaving the store to the snapshot
#: thread to close when the read ends (seconds), when the shutdown has no deadline (with one,
#: until the deadline: a hung read is interrupted shortly before it).
_SNAPSHOT_JOIN = 1.0


class SnapshotLoop(TrustLoop, Protocol):
    """What the snapshot reads and calls of its store loop (`executors._service.stored`)."""

    planner: LoopPlanner
    #: the store unwrapped (its capabilities are asked of it, not of the watching wrapper).
    watched: WatchedStore
    #: shutdown()'s deadline (real monotonic), once it is set.
    deadline: float | None

    def release(self) -> None: ...


@final
class Snapshots:
    """The copy of the store's records behind `status()`, and the thread that reads it.

    Its fields are written under the loop's lock (``loop.lock``: new after a fork), except
    `wanted` (a flag: the loop reads it lock-free) and the snapshot thread's own."""

    __slots__ = ("at", "broken", "copy", "corrupt", "floor", "listed", "loop", "mark",
                 "read_now", "reader", "reader_done", "reader_releases", "reader_stop",
                 "reading", "relist", "touched", "touches", "wanted", "whole_at")

    def __init__(self, loop: SnapshotLoop) -> None:
        self.loop = loop
        self.copy: tuple[StoredSchedule, ...] | None = ()  # None: made by `rows`
        self.corrupt: tuple[tuple[str, str], ...] = ()
        # When the next refresh may start (monotonic; +inf while one is being read), and the
        # earliest one the 5 % bound allows (see `refresh_soon`).
        self.at = -math.inf
        self.floor = -math.inf
        # Per owned job, the `touches` count at the loop's latest refresh of it (a claim's next
        # fire time): a copy read before then does not overwrite it.
        self.touches = 0
        self.touched: dict[str, int] = {}
        self.wanted = True  # status() was asked since the last refresh (or none was made)
        # The copy behind `copy`: name -> (the digest of the record's definition, the row);
        # `mark` is the store's change mark of the copy, None for a whole read. Not the
        # record itself: ten thousand decoded records weigh some 30 MB, their rows a few.
        self.listed: dict[str, tuple[str, StoredSchedule]] = {}
        self.broken: dict[str, str] = {}
        self.relist: set[str] = set()  # declared or undeclared since the last refresh
        self.mark: int | None = None
        self.whole_at = -math.inf
        self.after_fork()

    def after_fork(self) -> None:
        """The snapshot thread: none yet (in a forked child, the parent's is not here and a
        read it was making is lost: read again)."""
        # `reader` waits on `read_now` for the loop's request.
        self.reader: threading.Thread | None = None
        self.read_now = threading.Event()
        self.reader_stop = False
        self.reading = False  # a read was asked and has not ended (under the lock)
        self.reader_done = False  # the snapshot thread has ended (under the lock)
        self.reader_releases = False  # it closes the store when its read ends (under the lock)
        self.at = -math.inf
        self.wanted = True

    def refresh_soon(self, *, bounded: bool = False) -> None:
        """Refresh the copy at the loop's next pass (`bounded`: once the 5 % bound allows).

        Asked while a read is in progress, it is kept for after that read (which may have
        read the store before the change)."""
        with self.loop.lock:
            self.at = self.floor if bounded else -math.inf

    def changed(self, name: str | None = None) -> None:
        """The store changed here (a declaration, a control, a removal): refresh the copy at
        the loop's next pass, listing `name` again (its row may look the same)."""
        self.refresh_soon()
        self.wanted = True
        if name is not None:
            self.relist.add(name)

    def serve(self, now: float, *, refusals: bool) -> None:
        """The loop's pass: ask for a refresh if one is wanted and due (`refusals`: the copy
        is what finds the records an allowlist refuses, so it is always wanted)."""
        if refusals:
            self.wanted = True
        if self.wanted and now >= self.at and not self.reading:
            self.ask()

    def put_off(self, now: float) -> float:
        """How long the 5 % bound puts off a wanted refresh (+inf: none waits)."""
        if self.wanted and not self.reading and self.at > now:
            return self.at - now
        return math.inf

    def touch(self, name: str) -> None:
        """The loop refreshed job `name` (caller holds the lock): copies read before stay off.

        Only a read in progress (`reading`) can hold such a copy: the loop asks for each read
        itself, so one that starts later reads the store after the loop's write (a claim
        skips the call when none is reading)."""
        self.touches += 1
        self.touched[name] = self.touches

    def forget(self, name: str) -> None:
        """`name` was removed here (caller holds the lock): listed again, untouched."""
        self.relist.add(name)
        self.touched.pop(name, None)

    def rows(self) -> tuple[StoredSchedule, ...]:
        """The copy's rows, sorted (caller holds the lock)."""
        copy = self.copy
        if copy is None:
            # Sorted here, when asked, not at every refresh (10,000 names cost more
            # than the refresh of a few changes).
            listed = self.listed
            copy = self.copy = tuple(listed[name][1] for name in sorted(listed))
        return copy

    def ask(self) -> None:
        """Have the snapshot thread refresh the copy (the loop; one read at a time)."""
        loop = self.loop
        with loop.lock:
            self.wanted = False
            self.reading = True
            self.at = math.inf  # until the read ends (see `_read`)
        if self.reader is None:
            self.reader = _threads.start_thread(self._read, f"{loop.name}-store-snapshot")
        self.read_now.set()

    def _read(self) -> None:
        """The snapshot thread: one read of the store per request, until the loop ends.

        A read that fails is reported as a store error (the service goes on); the next one
        is asked `SNAPSHOT_EVERY` later. The store is thread-safe (each store gives each
        thread its own connection, or its client is thread-safe)."""
        loop = self.loop
        monotonic = loop.scheduler.clock.monotonic
        try:
            while True:
                self.read_now.wait()
                self.read_now.clear()
                if self.reader_stop:
                    return
                began = monotonic()
                try:
                    self.take()
                except Exception as exc:
                    loop.failed("snapshot", exc)  # the service goes on; the next read as usual
                # At most 5 % of the time on it, however many records the store holds.
                took = monotonic() - began
                end = monotonic()
                with loop.lock:
                    self.reading = False
                    self.floor = end + 20 * took
                    if self.at == math.inf:  # not asked again during the read
                        self.at = end + max(SNAPSHOT_EVERY, 20 * took)
                    elif self.at != -math.inf:  # a change was reported (`changed`)
                        self.at = self.floor
                    again = self.wanted
                if again and not self.reader_stop:
                    loop.nudge()  # the loop's wake-up did not count on the next refresh
        finally:
            with loop.lock:
                self.reader_done = True
                release = self.reader_releases
            if release:
                loop.release()

    def stop(self) -> bool:
        """Stop the snapshot thread (the loop, closing): True if it has ended; False if it
        is still reading after `_SNAPSHOT_JOIN` or at the shutdown's deadline (it then closes
        the store itself)."""
        reader = self.reader
        if reader is None:
            return True
        self.reader_stop = True
        self.read_now.set()
        # Until the shutdown's deadline if it has one (a hung read is interrupted before it).
        deadline = self.loop.deadline
        _threads.join(reader, _SNAPSHOT_JOIN if deadline is None
                      else max(0.0, deadline - SYSTEM_CLOCK.monotonic()))
        with self.loop.lock:
            self.reader_releases = not self.reader_done
            return self.reader_done

    def take(self) -> None:
        """Bring the copy of the store's records behind `status()` up to date (the snapshot
        thread)."""
        loop = self.loop
        with loop.lock:
            touches = self.touches  # job refreshes after this are fresher than this read
        tracking = stores.offered(loop.watched.inner, stores.SupportsChangedSince, loop.store)
        now = loop.scheduler.clock.monotonic()
        if tracking is None or self.mark is None or now >= self.whole_at:
            self.mark = None
        corrupt: list[tuple[str, str]] | None = None
        if tracking is not None:
            changes = tracking.changed_since(self.mark)
            whole, records, corrupt = changes.whole, changes.records, changes.corrupt
            self.mark = changes.mark
        else:
            whole, records = True, loop.store.records()
        if whole:
            self.whole_at = now + WHOLE_EVERY
        with loop.lock:
            jobs = dict(loop.jobs)
            relist, self.relist = self.relist, set()
        rows = [(r, jobs.get(r.name)) for r in records]
        note_refused(loop, [r for r, job in rows if job is None])
        # One text per instant for the read: schedules spread over a minute share sixty fire
        # times, and 10,000 rows held 20,000 copies of them.
        texts: dict[tuple[dt.datetime, object], str] = {}
        made = [(r.name, (r.digest, self._row(r, job is not None, texts))) for r, job in rows]
        if not whole:  # declared or undeclared here since: listed again, as they are
            read = {r.name for r in records}
            made += [(name, (self.listed[name][0], dataclasses.replace(
                self.listed[name][1], declared=name in jobs))) for name in relist - read
                if name in self.listed]
        owned = [(r, job) for r, job in rows if job is not None]
        for start in range(0, len(owned), 1000):  # the lock in short holds: the loop takes it
            with loop.lock:
                touched = self.touched
                for record, job in owned[start:start + 1000]:
                    if touched.get(record.name, -1) <= touches:
                        refresh_job(job, record)
        broken = {} if whole else dict(self.broken)
        for record in records:
            broken.pop(record.name, None)
        del rows, owned, records  # the decoded records go before the next read of the store
        if corrupt is None:
            corrupt = loop.store.corrupt()
        for name, reason in corrupt:
            if self.broken.get(name) != reason:
                logger.error("%s: stored schedule %r cannot be read and is skipped: %s",
                             loop.name, name, reason)
            broken[name] = reason
        with loop.lock:  # status() sorts `listed` under it
            listed = {} if whole else self.listed
            listed.update(made)
            for name in broken:
                listed.pop(name, None)
            if made or whole or corrupt:
                self.copy = None
            self.listed = listed
            self.broken = broken
        self.corrupt = tuple(sorted(broken.items()))

    def _row(self, record: ScheduleRecord, declared: bool,
             texts: dict[tuple[dt.datetime, object], str]) -> StoredSchedule:
        """`record` as `status()` lists it (the row kept while it shows the same); `texts`,
        the ISO texts of the instants this read wrote, shared."""
        old = self.listed.get(record.name)
        next_fire = _text(texts, record.next_fire)
        lease_until, last_fire = _text(texts, record.lease_until), _text(texts, record.last_fire)
        if old is not None and old[0] == record.digest:
            row = old[1]
            if (row.declared == declared and row.paused == record.paused
                    and row.next_fire == next_fire and row.owner == record.owner
                    and row.lease_until == lease_until and row.last_fire == last_fire
                    and row.last_result == record.last_result
                    and row.counters == record.counters):
                return row
            trigger = row.trigger  # the same definition reads the same (a run moved on)
        else:
            try:
                # Interned: thousands of schedules of a few triggers share their text.
                trigger = sys.intern(self.loop.planner.trigger_for(record).describe())
            except Exception as exc:  # a trigger this version cannot read
                trigger = f"<unreadable: {exc}>"
        return StoredSchedule(
            record.name, trigger, record.definition.target, declared, record.paused,
            next_fire, record.owner, lease_until, dict(record.counters), last_fire,
            record.last_result)

    def __repr__(self) -> str:
        return (f"<Snapshots listed={len(self.listed)} broken={len(self.broken)} "
                f"reading={self.reading}>")


def _text(texts: dict[tuple[dt.datetime, object], str], instant: dt.datetime | None
          ) -> str | None:
    """`instant`'s ISO text, the one `texts` holds for it if any (kept there)."""
    if instant is None:
        return None
    key = (instant, instant.tzinfo)  # equal instants in two zones read differently
    found = texts.get(key)
    if found is None:
        found = texts[key] = instant.isoformat()
    return found


def refresh_job(job: Job, record: ScheduleRecord) -> None:
    """Show `record`'s state on `job` (caller holds `lock`)."""
    wall = job._wall
    if wall is not None:
        wall.set_fire(record.next_fire)
        wall.last_fire = record.last_fire
    job._set_flags(paused=record.paused)
