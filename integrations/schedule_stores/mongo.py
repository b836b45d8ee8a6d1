"""The MongoDB schedule store (pymongo): many processes on many machines, one collection.

Time is the server's: every claim first reads the server's ``localTime`` (the ``hello``
command), and "due" and "lease expired" are decided with it. A batch of claims is one
``bulk_write`` of updates, each conditional on its record's version and stamped with this
batch's token; one ``find`` of that token then says which of them this process won. A process
that lost a race to another simply finds its update matched nothing. The token stays in the
record while the run lasts (``claim_token``): it, not the version, fences the run's renewal
and completion. A control operation sets only the fields it changes (and the version), so it
never writes back a lease that a renewal moved meanwhile.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import random
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any, final

import pymongo
from pymongo import UpdateOne
from pymongo.errors import InvalidURI, PyMongoError

from executors.stores import (
    FORMAT_VERSION,
    Claim,
    Claimable,
    Declared,
    OnCrash,
    Planner,
    ScheduleDefinition,
    ScheduleRecord,
    Step,
    StoreFormatError,
    Unreadable,
    changing,
    check_format,
    declaration,
    finishing,
    from_epoch,
    giving_back,
    no_store,
    record_fields,
    record_from_fields,
    redact_url,
    rewrite,
    scrub_url,
    settle_claim,
    to_epoch,
)

from .mongo_owners import OwnerBeats

__all__ = ("MongoScheduleStore",)

_COLLECTION = "executors_schedules"
# MongoDB has no SKIP LOCKED: processes claiming side by side read the same earliest due
# records, and all but one lose each of them (a wasted round of reads and updates: with 4
# claimers on nx-27017, half the batches). So a claim reads a window of `window` times the
# records it means to take and takes a random sample of them; a claim that lost most of its
# batch doubles its window (up to _WIDEST), one that won it all halves it. Alone, a claimer
# keeps a window of 1: exactly the earliest due records, as before.
_WIDEST = 8
# The fields a claim never changes (settle_claim keeps them): left out of its update.
_NOT_CLAIMED = ("_id", "definition", "digest", "paused")
# The fields of a run in progress: a changed declaration keeps them as they are stored.
_RUN = ("owner", "lease_until", "running_fire", "attempt", "claim_token")
# What a run's end writes (`finish_record`).
_FINISHED = ("version", *_RUN, "counters", "last_fire", "last_result", "last_owner")
_GIVEN_BACK = ("version", *_RUN, "next_fire", "counters")
_META = "executors_meta"
#: See `MongoScheduleStore.__init__`.
_SOCKET_TIMEOUT_MS = 30_000


def _to_doc(record: ScheduleRecord) -> dict[str, Any]:
    fields = record_fields(record)
    return {"_id": fields.pop("name"), **fields}


def _from_doc(doc: Mapping[str, Any]) -> ScheduleRecord:
    fields = {k: v for k, v in doc.items() if k != "_id"}
    # Before tokens fenced runs, every claimed record kept its batch's token: only a run in
    # progress holds one.
    if fields.get("running_fire") is None:
        fields["claim_token"] = None
    return record_from_fields({"name": doc.get("_id"), **fields})


@final
class MongoScheduleStore:
    """Schedules in a MongoDB collection (a real ``mongod`` or nx-27017).

    Args:
        url: a ``mongodb://`` URL; its path names the database (default ``executors``).
        connect_timeout: seconds to find the server at start.
        create: False: the database must already hold a store, and opening writes nothing
            (no format document, no index; a database without the store is refused).

    Raises:
        ValueError: pymongo cannot read the URL (naming it, secrets hidden).
        ConnectionError: the server cannot be reached (naming the URL, secrets hidden).
        StoreFormatError: the collection was written by a newer format, or records a format
            that is not a number; or, with `create` False, the database holds no store.
    """

    def __init__(self, url: str, *, connect_timeout: float = 10.0, create: bool = True) -> None:
        self.display_url = redact_url(url)
        self._window = 1  # see _WIDEST
        # The latest `Claimable` given, its names as a list and its allowlist as a regex.
        self._only: tuple[Claimable, list[str], str] | None = None
        self._unreadable = Unreadable()
        ms = int(connect_timeout * 1000)
        # A socket timeout (the URL's own wins): an operation here takes milliseconds, a whole
        # read of 100,000 records seconds; a server that has not answered for a lease (30 s by
        # default) has held up the loop past its renewals, and the operation fails, reported
        # and retried, instead of waiting for ever (pymongo's default).
        timeouts: dict[str, Any] = {"serverSelectionTimeoutMS": ms, "connectTimeoutMS": ms}
        if "sockettimeoutms" not in url.lower():
            timeouts["socketTimeoutMS"] = _SOCKET_TIMEOUT_MS
        failure: Exception | None = None
        try:
            self._client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
                url, **timeouts)
        except (InvalidURI, ValueError, TypeError) as exc:
            # pymongo could not read the URL (InvalidURI, or an option's value it refuses):
            # its message may quote a part of it.
            failure = ValueError(f"schedule store {self.display_url}: {scrub_url(str(exc), url)}")
        except PyMongoError as exc:  # ConfigurationError: an SRV record not found, ...
            failure = self._unreachable(exc, url)
        if failure is not None:
            # Raised out of the handler: the driver's error, which holds its message as it
            # was, is neither the cause nor the context of this one.
            raise failure
        try:
            db = self._client.get_default_database("executors")
            self._records = db[_COLLECTION]
            meta = db[_META]
            if create:
                meta.update_one({"_id": "format"},
                                {"$setOnInsert": {"value": FORMAT_VERSION}}, upsert=True)
            stored = meta.find_one({"_id": "format"})
        except PyMongoError as exc:
            failure = self._unreachable(exc, url)
        if failure is None and stored is None:  # every store's opening writes one
            failure = no_store(self.display_url, "no format in executors_meta")
        if failure is None:
            try:
                check_format((stored or {}).get("value"), self.display_url)
            except StoreFormatError as exc:
                failure = exc
        if failure is not None:
            self._client.close()
            raise failure
        # What a claim and next_due read, each a range of an index (not a scan of the
        # collection): records by next fire time, runs in progress by lease end (a record
        # with no run in progress has a null lease, which a numeric range never matches).
        if create:
            self._records.create_index([("next_fire", pymongo.ASCENDING)])
            self._records.create_index([("lease_until", pymongo.ASCENDING)])
        self._owners = OwnerBeats(db["executors_owners"], self._records, self.now)

    def _unreachable(self, exc: PyMongoError, url: str) -> ConnectionError:
        reason = scrub_url(" ".join(str(exc).split()), url)
        return ConnectionError(f"cannot reach the schedule store {self.display_url}: {reason}")

    def __repr__(self) -> str:
        return f"<MongoScheduleStore {self.display_url!r}>"

    def now(self) -> dt.datetime:
        local: dt.datetime = self._client.admin.command("hello")["localTime"]
        # pymongo decodes BSON dates as naive UTC (tz_aware=False by default).
        return local.replace(tzinfo=dt.UTC) if local.tzinfo is None else local

    def declare(self, definition: ScheduleDefinition,
                first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        digest = definition.digest()
        with self._unreadable.writing(definition.name):
            return self._declare(definition, digest, first_fire)

    def _declare(self, definition: ScheduleDefinition, digest: str,
                 first_fire: Callable[[dt.datetime], dt.datetime | None]) -> Declared:
        while True:
            doc = self._records.find_one({"_id": definition.name})
            try:
                old, unreadable = (None if doc is None else _from_doc(doc)), ""
            except StoreFormatError as exc:
                old, unreadable = None, str(exc)
            declared = declaration(definition, old, lambda: first_fire(self.now()),
                                   digest=digest, unreadable=unreadable,
                                   stored_version=None if doc is None else doc.get("version"))
            if declared.outcome == "unchanged":
                return declared
            if declared.outcome == "replaced":
                assert doc is not None
                # Over the document as read (its version, or its lack of one): a change made
                # meanwhile by another process is read again.
                if self._records.replace_one({"_id": definition.name,
                                              "version": doc.get("version")},
                                             _to_doc(declared.record)).matched_count == 1:
                    return declared
            elif old is None:
                try:
                    self._records.insert_one(_to_doc(declared.record))
                except pymongo.errors.DuplicateKeyError:
                    continue  # another process declared it first: read theirs
                return declared
            # The run in progress is left as stored (a renewal may have moved its lease).
            elif self._replace(declared.record, old.version, skip=_RUN):
                return declared

    def _replace(self, record: ScheduleRecord, version: int, *, skip: tuple[str, ...] = (),
                 only: tuple[str, ...] | None = None) -> bool:
        """Write `record`'s fields (`only` those, or all but `skip`) if its stored version is
        still `version`."""
        doc = _to_doc(record)
        doc.pop("_id")
        fields = {k: v for k, v in doc.items()
                  if k not in skip and (only is None or k in only)}
        result = self._records.update_one({"_id": record.name, "version": version},
                                          {"$set": fields})
        return result.matched_count == 1

    def claim(self, owner: str, *, lease: float, limit: int, planner: Planner,
              on_crash: Callable[[ScheduleRecord], OnCrash],
              only: Claimable | None = None) -> list[Claim]:
        now = self.now()
        at = to_epoch(now)
        self._owners.hold(owner, at)  # before this claim writes its name
        self._owners.end_gone_leases(at)  # then settled as expired, below
        mark = self._unreadable.mark()
        admitted = self._admitted(only)
        # Two queries, not one ``$or``: nx-27017 (the tests' server) answers ``$or`` with
        # nothing. Expired leases are rare, and both queries use the store's `at`.
        docs = self._find({"running_fire": {"$ne": None}, "lease_until": {"$lt": at}},
                          admitted, "lease_until", limit)
        wanted = limit - len(docs)
        due = self._find({"paused": False, "running_fire": None, "next_fire": {"$lte": at}},
                         admitted, "next_fire", wanted * self._window)
        docs += random.sample(due, wanted) if len(due) > wanted > 0 else due
        token = uuid.uuid4().hex
        updates: list[UpdateOne] = []
        pending: dict[str, Claim] = {}
        for doc in docs:
            try:
                record = _from_doc(doc)
            except StoreFormatError:
                # Reported by corrupt(); the others still run, and it is left out a while.
                self._unreadable.add(str(doc["_id"]), mark)
                continue
            settled = settle_claim(record, owner, now, lease, planner, on_crash, token)
            if settled is None:
                continue
            new_doc = _to_doc(settled[0])
            for unchanged_field in _NOT_CLAIMED:  # a smaller update (and oplog entry) each
                new_doc.pop(unchanged_field)
            updates.append(UpdateOne({"_id": record.name, "version": record.version},
                                     {"$set": new_doc}))
            if settled[1] is not None:
                pending[record.name] = settled[1]
        if not updates:
            return []
        self._records.bulk_write(updates, ordered=False)
        if not pending:
            return []
        # Which conditional updates matched is what the token says: those are ours.
        won = {d["_id"] for d in self._records.find(
            {"claim_token": token, "_id": {"$in": list(pending)}}, {"_id": 1})}
        lost = len(pending) - len(won)
        if 2 * lost > len(pending):
            self._window = min(_WIDEST, 2 * self._window)
        elif not lost:
            self._window = max(1, self._window // 2)
        return [claim for name, claim in pending.items() if name in won]

    def _admitted(self, only: Claimable | None) -> list[dict[str, Any]]:
        """The conditions, one query each, of the records a claim given `only` may read
        (every record for None), less those found unreadable (`Unreadable`): the declared
        names (``$in``: a real server looks each row's name up in a set), and with an
        allowlist, the admitted targets (one anchored regex; separate queries because
        nx-27017 answers an ``$or`` beside other conditions with nothing)."""
        names = self._unreadable.names()
        skip = {"$nin": names} if names else {}
        if only is None:
            return [{"_id": skip}] if skip else [{}]
        if self._only is None or self._only[0] is not only:
            exact = [re.escape(t) + "$" for t in sorted(only.targets)]
            modules = [re.escape(m) + ":" for m in sorted(only.modules)]
            self._only = (only, list(only.names), "^(?:" + "|".join(exact + modules) + ")")
        _, declared, allowed = self._only
        conditions: list[dict[str, Any]] = [{"_id": {"$in": declared, **skip}}]
        if only.serves_others:
            conditions.append({"definition.target": {"$regex": allowed},
                               **({"_id": skip} if skip else {})})
        return conditions

    def _find(self, query: dict[str, Any], admitted: list[dict[str, Any]], key: str,
              limit: int) -> list[dict[str, Any]]:
        """Up to `limit` records matching `query` and one of `admitted`, by `key`."""
        if limit <= 0:
            return []
        found: list[dict[str, Any]] = []
        for condition in admitted:
            found += self._records.find({**query, **condition}).sort(
                key, pymongo.ASCENDING).limit(limit)
        if len(admitted) == 1:
            return found
        merged = {doc["_id"]: doc for doc in sorted(found, key=lambda d: d[key])}
        return list(merged.values())[:limit]

    def next_due(self, only: Claimable | None = None
                 ) -> tuple[dt.datetime, dt.datetime | None]:
        now = self.now()
        found: list[float] = []
        # A numeric range ("any number"), not ``$ne: None``: a range walks the index from its
        # least number (nx-27017 answers ``$ne`` by scanning the collection).
        for condition in self._admitted(only):
            for query, key in (({"paused": False, "running_fire": None}, "next_fire"),
                               ({"running_fire": {"$ne": None}}, "lease_until")):
                found.extend(float(doc[key]) for doc in self._records.find(
                    {**query, key: {"$gt": -math.inf}, **condition}, {key: 1},
                ).sort(key, pymongo.ASCENDING).limit(1))
        return now, from_epoch(min(found)) if found else None

    def renew(self, claim: Claim, lease: float) -> bool:
        until = to_epoch(self.now()) + lease
        # Fenced by the claim's token (`holds`), not the version a control operation moves.
        result = self._records.update_one(
            {"_id": claim.name, "claim_token": claim.token, "running_fire": {"$ne": None}},
            {"$set": {"lease_until": until}})
        return result.matched_count == 1

    # Each writes only the fields its step changes: a control operation's pause, next fire
    # time or definition written meanwhile stays (its version bump makes the write lose, and
    # `rewrite` read again); a run in progress keeps its lease and token.
    def complete(self, claim: Claim, result: str) -> bool:
        return self._rewrite(claim.name, finishing(claim, result), _FINISHED, claim.token)

    def give_back(self, claim: Claim) -> bool:
        return self._rewrite(claim.name, giving_back(claim, self.now()), _GIVEN_BACK,
                             claim.token)

    def set_paused(self, name: str, paused: bool) -> bool:
        return self._rewrite(name, changing(paused=paused), ("version", "paused"))

    def set_next_fire(self, name: str, next_fire: dt.datetime | None) -> bool:
        return self._rewrite(name, changing(next_fire=next_fire), ("version", "next_fire"))

    def _rewrite(self, name: str, step: Step, fields: tuple[str, ...],
                 token: str | None = None) -> bool:
        """`rewrite` with a conditional update of `fields` (the version read must still be
        stored); `token`: read only the record that holds that claim."""
        query = {"_id": name} if token is None else {"_id": name, "claim_token": token}

        def read() -> ScheduleRecord | None:
            doc = self._records.find_one(query)
            return None if doc is None else _from_doc(doc)

        return rewrite(read, step, lambda old, new: self._replace(new, old.version,
                                                                  only=fields))

    def remove(self, name: str) -> bool:
        with self._unreadable.writing(name):
            return self._records.delete_one({"_id": name}).deleted_count == 1

    def get(self, name: str) -> ScheduleRecord | None:
        doc = self._records.find_one({"_id": name})
        return None if doc is None else _from_doc(doc)

    def _decoded(self) -> list[tuple[str, ScheduleRecord | str]]:
        out: list[tuple[str, ScheduleRecord | str]] = []
        for doc in self._records.find().sort("_id", pymongo.ASCENDING):
            try:
                out.append((str(doc["_id"]), _from_doc(doc)))
            except StoreFormatError as exc:
                out.append((str(doc["_id"]), str(exc)))
        return out

    def records(self) -> list[ScheduleRecord]:
        return [r for _, r in self._decoded() if isinstance(r, ScheduleRecord)]

    def corrupt(self) -> list[tuple[str, str]]:
        return [(name, r) for name, r in self._decoded() if isinstance(r, str)]

    def watch(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call `callback` (on the heartbeat's thread) when an owner that holds a run is
        found gone (`OwnerBeats`): the serving loop then claims, and settles the run, at
        once. (Other changes are seen by polling: change streams are not used.) Returns the
        function that stops it."""
        return self._owners.watch(callback)

    def interrupt(self) -> None:
        """Make the operations in progress fail (within half a second: pymongo checks for a
        cancellation that often while it waits for a reply) and close the client. From any
        thread. The interruption is pymongo's own, the one its monitor uses when a server
        stops answering its heartbeats (interruptInUseConnections of the CMAP spec); it has
        no public entry, so it is reached through the client's topology, and closing the
        client is what remains if that changes."""
        topology = getattr(self._client, "_topology", None)
        for server in list(getattr(topology, "_servers", {}).values()):
            with contextlib.suppress(Exception):
                server.pool.reset(interrupt_connections=True)
        self._client.close()

    def close(self) -> None:
        self._owners.release()
        self._client.close()

