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
loop wrote meanwhile: the loop counts its own refreshes of each job (`StoreLoop._touch`), and a
copy read before one leaves that job alone.
"""

from __future__ import annotations

import functools
import logging
import math
from typing import TYPE_CHECKING

from executors import _threads
from executors._clock import SYSTEM_CLOCK

from .schedule_data import StoredSchedule, iso
from .stored_trust import note_refused

if TYPE_CHECKING:
    from .job import Job
    from .store import ScheduleRecord
    from .stored import StoreLoop

__all__ = ("SNAPSHOT_EVERY", "WHOLE_EVERY", "ask_snapshot", "refresh_job", "stop_snapshots",
           "take_snapshot")

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


def ask_snapshot(loop: StoreLoop) -> None:
    """Have the snapshot thread refresh the copy (the loop; one read at a time)."""
    with loop.lock:
        loop.wanted = False
        loop.reading = True
        loop.snapshot_at = math.inf  # until the read ends (see `_read_snapshots`)
    if loop.reader is None:
        loop.reader = _threads.start_thread(functools.partial(_read_snapshots, loop),
                                            f"{loop.name}-store-snapshot")
    loop.read_now.set()

def _read_snapshots(loop: StoreLoop) -> None:
    """The snapshot thread: one read of the store per request, until the loop ends.

    A read that fails is reported as a store error (the service goes on); the next one
    is asked `SNAPSHOT_EVERY` later. The store is thread-safe (each store gives each
    thread its own connection, or its client is thread-safe)."""
    monotonic = loop.scheduler.clock.monotonic
    try:
        while True:
            loop.read_now.wait()
            loop.read_now.clear()
            if loop.reader_stop:
                return
            began = monotonic()
            try:
                take_snapshot(loop)
            except Exception as exc:
                loop.failed("snapshot", exc)  # the service goes on; the next read as usual
            # At most 5 % of the time on it, however many records the store holds.
            took = monotonic() - began
            end = monotonic()
            with loop.lock:
                loop.reading = False
                loop.snapshot_floor = end + 20 * took
                if loop.snapshot_at == math.inf:  # not asked again during the read
                    loop.snapshot_at = end + max(SNAPSHOT_EVERY, 20 * took)
                elif loop.snapshot_at != -math.inf:  # a change was reported (`changed`)
                    loop.snapshot_at = loop.snapshot_floor
                again = loop.wanted
            if again and not loop.reader_stop:
                loop.nudge()  # the loop's wake-up did not count on the next refresh
    finally:
        with loop.lock:
            loop.reader_done = True
            release = loop.reader_releases
        if release:
            loop.release()

def stop_snapshots(loop: StoreLoop) -> bool:
    """Stop the snapshot thread (the loop, closing): True if it has ended; False if it
    is still reading after `_SNAPSHOT_JOIN` or at the shutdown's deadline (it then closes
    the store itself)."""
    reader = loop.reader
    if reader is None:
        return True
    loop.reader_stop = True
    loop.read_now.set()
    # Until the shutdown's deadline if it has one (a hung read is interrupted before it).
    deadline = loop.deadline
    _threads.join(reader, _SNAPSHOT_JOIN if deadline is None
                  else max(0.0, deadline - SYSTEM_CLOCK.monotonic()))
    with loop.lock:
        loop.reader_releases = not loop.reader_done
        return loop.reader_done

def take_snapshot(loop: StoreLoop) -> None:
    """Bring the copy of the store's records behind `status()` up to date (the snapshot
    thread)."""
    with loop.lock:
        touches = loop.touches  # job refreshes after this are fresher than this read
    changed_since = getattr(loop.store, "changed_since", None)
    now = loop.scheduler.clock.monotonic()
    if changed_since is None or loop.mark is None or now >= loop.whole_at:
        loop.mark = None
    if changed_since is not None:
        changes = changed_since(loop.mark)
        whole, records, corrupt = changes.whole, changes.records, changes.corrupt
        loop.mark = changes.mark
    else:
        whole, records, corrupt = True, loop.store.records(), loop.store.corrupt()
    if whole:
        loop.whole_at = now + WHOLE_EVERY
    with loop.lock:
        jobs = dict(loop.jobs)
        relist, loop.relist = loop.relist, set()
    if not whole:  # declared or undeclared here since: listed again, as they are
        records = [*records, *(loop.listed[name][0] for name in relist - {
            r.name for r in records} if name in loop.listed)]
    rows = [(r, jobs.get(r.name)) for r in records]
    note_refused(loop, [r for r, job in rows if job is None])
    made = [(r, job is not None, _row(loop, r, job is not None)) for r, job in rows]
    owned = [(r, job) for r, job in rows if job is not None]
    for start in range(0, len(owned), 1000):  # the lock in short holds: the loop takes it
        with loop.lock:
            touched = loop.touched
            for record, job in owned[start:start + 1000]:
                if touched.get(record.name, -1) <= touches:
                    refresh_job(job, record)
    broken = {} if whole else dict(loop.broken)
    for record in records:
        broken.pop(record.name, None)
    for name, reason in corrupt:
        if loop.broken.get(name) != reason:
            logger.error("%s: stored schedule %r cannot be read and is skipped: %s",
                         loop.name, name, reason)
        broken[name] = reason
    with loop.lock:  # status() sorts `listed` under it
        listed = {} if whole else loop.listed
        for item in made:
            listed[item[0].name] = item
        for name in broken:
            listed.pop(name, None)
        if made or whole or corrupt:
            loop.snapshot = None
        loop.listed = listed
        loop.broken = broken
    loop.corrupt = tuple(sorted(broken.items()))

def _row(loop: StoreLoop, record: ScheduleRecord, declared: bool) -> StoredSchedule:
    """`record` as `status()` lists it (kept while the record is the same)."""
    old = loop.listed.get(record.name)
    if old is not None and old[1] == declared and (old[0] is record or old[0] == record):
        return old[2]
    try:
        trigger = loop.planner.trigger_for(record).describe()
    except Exception as exc:  # a trigger this version cannot read
        trigger = f"<unreadable: {exc}>"
    return StoredSchedule(
        record.name, trigger, record.definition.target, declared, record.paused,
        iso(record.next_fire), record.owner, iso(record.lease_until), dict(record.counters),
        iso(record.last_fire), record.last_result)

def refresh_job(job: Job, record: ScheduleRecord) -> None:
    """Show `record`'s state on `job` (caller holds `lock`)."""
    wall = job._wall
    if wall is not None:
        wall.set_fire(record.next_fire)
        wall.last_fire = record.last_fire
    job._set_flags(paused=record.paused)
