"""Which owners of a MongoDB store are alive: a heartbeat document each keeps fresh.

MongoDB tells nothing of its clients' sessions that a client may read, so each owner (a
serving process's store loop) that claims keeps a document ``{_id: owner, beat: t}`` in
``executors_owners``: a thread of its own (a `PeriodicExecutor`) writes the server's time
into it every `OWNER_BEAT` seconds. An owner whose beat is older than `OWNER_STALE` on the
server's clock is gone: a claim ends the leases of its runs, and they are settled as expired
(``on_crash``). The same thread looks for gone owners that hold a run and wakes the serving
loop (``watch``), so the run is settled within a beat of the owner being judged gone rather
than at the loop's next poll.

A live owner whose beats stop for `OWNER_STALE` (a SIGSTOP, a stall of the whole process, a
network cut) is taken for gone: under ``on_crash="drop"`` its run is counted lost and its
completion refused (the claim's token), so no fire time runs twice; under ``"rerun"`` the
fire time runs again, as after an expired lease. An owner with no document (an older
version) is waited for by its lease.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, final

import pymongo
from pymongo import UpdateOne
from pymongo.collection import Collection
from pymongo.errors import PyMongoError

from executors import PeriodicExecutor
from executors.stores import LIVENESS_EVERY, OWNER_BEAT, OWNER_STALE, to_epoch

__all__ = ("OwnerBeats",)

logger = logging.getLogger("executors.service")

_COLLECTION = "executors_owners"


@final
class OwnerBeats:
    """The heartbeats of one store object's owners (see the module docstring)."""

    def __init__(self, owners: Collection[dict[str, Any]], records: Collection[dict[str, Any]],
                 now: Callable[[], dt.datetime]) -> None:
        self._owners = owners
        self._records = records
        self._now = now
        self._lock = threading.Lock()
        self._held: set[str] = set()
        self._pid = os.getpid()
        self._beat: PeriodicExecutor | None = None
        self._seen = -float("inf")  # when `end_gone_leases` looked last (monotonic)
        self._callbacks: list[Callable[[], object]] = []
        self._failing = False

    def __repr__(self) -> str:
        state = "beating" if self._beat is not None else "idle"
        return f"<OwnerBeats {state} owners={sorted(self._held)!r} failing={self._failing}>"

    def hold(self, owner: str, at: float) -> None:
        """Write `owner`'s first beat (at `at`, the server's epoch seconds) and keep it
        beating, once (before its first claim writes its name)."""
        if os.getpid() != self._pid:  # a forked child: the parent's owners and thread
            self._held, self._beat, self._pid = set(), None, os.getpid()
            self._lock = threading.Lock()
        if owner in self._held:
            return
        self._owners.update_one({"_id": owner}, {"$set": {"beat": at}}, upsert=True)
        with self._lock:
            self._held.add(owner)
            if self._beat is None:
                self._beat = PeriodicExecutor(OWNER_BEAT, 0.0, self._tick,
                                              name="executors-owner-beat", fork_policy="stop")
                self._beat.open()

    def watch(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback` when a beat finds a gone owner holding a run; the function
        returned stops that."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks \
            else None

    def _tick(self) -> bool:
        try:
            # Each call bounded (a server that is away fails the beat, not the thread: a
            # close joins it within a second).
            with pymongo.timeout(4 * OWNER_BEAT):
                at = to_epoch(self._now())
                with self._lock:
                    held = sorted(self._held)
                # Upserted: an owner stopped long enough to be swept as gone (with no run)
                # is known again when it beats again.
                if held:
                    self._owners.bulk_write([UpdateOne({"_id": owner}, {"$set": {"beat": at}},
                                                       upsert=True) for owner in held])
                if self._callbacks and self._gone_with_runs(at):
                    for callback in list(self._callbacks):
                        callback()
        except PyMongoError as exc:
            if not self._failing:  # once per outage: the serving loop reports the store
                logger.info("owner heartbeat not written (%s): retried every %s s",
                            " ".join(str(exc).split()), OWNER_BEAT)
            self._failing = True
        else:
            self._failing = False
        return True

    def _gone(self, at: float) -> list[str]:
        return [d["_id"] for d in self._owners.find(
            {"beat": {"$lt": at - OWNER_STALE}}, {"_id": 1}) if d["_id"] not in self._held]

    def _gone_with_runs(self, at: float) -> bool:
        gone = self._gone(at)
        if not gone:
            return False
        busy = {d["owner"] for d in self._records.find(
            {"owner": {"$in": gone}, "running_fire": {"$ne": None}}, {"owner": 1})}
        idle = [owner for owner in gone if owner not in busy]
        if idle:  # nothing is judged by them any more
            self._owners.delete_many({"_id": {"$in": idle}, "beat": {"$lt": at - OWNER_STALE}})
        return bool(self._records.find_one(
            {"owner": {"$in": sorted(busy)}, "running_fire": {"$ne": None},
             "lease_until": {"$gte": at}}, {"_id": 1})) if busy else False

    def end_gone_leases(self, at: float) -> None:
        """End the leases of the gone owners' runs (`at`: the claim's server time), before
        the claim looks for work: it then settles them as expired. At most every
        `LIVENESS_EVERY` seconds."""
        now = time.monotonic()
        if now < self._seen + LIVENESS_EVERY:
            return
        self._seen = now
        gone = self._gone(at)
        if gone:
            self._records.update_many(
                {"owner": {"$in": gone}, "running_fire": {"$ne": None},
                 "lease_until": {"$gte": at}}, {"$set": {"lease_until": at - 1e-6}})

    def release(self) -> None:
        """Stop beating and remove this object's owners' documents (a clean close: a run
        left in flight waits for its lease)."""
        with self._lock:
            beat, self._beat = self._beat, None
            held, self._held = sorted(self._held), set()
        self._callbacks.clear()
        if beat is not None:
            beat.close()
            beat.join(1.0)
        if held and os.getpid() == self._pid:
            # Bounded: a close never waits for a server that is away (the documents of an
            # owner that closed with no run are swept by the others).
            with contextlib.suppress(PyMongoError), pymongo.timeout(1.0):
                self._owners.delete_many({"_id": {"$in": held}})
