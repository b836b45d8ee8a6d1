"""pymongo: CursorReaper kills abandoned server cursors; install() runs pymongo on our executors."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Mapping
from typing import TypeVar, final

import pymongo
import pymongo.periodic_executor
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, InvalidOperation
from pymongo.server_selectors import writable_server_selector

from executors import PeriodicExecutor, Reaper, validate
from executors.clock import SYSTEM_CLOCK

__all__ = (
    "CursorReaper",
    "CursorReaperStatistics",
    "install",
    "uninstall",
    "installed",
)

_DocumentT = TypeVar("_DocumentT", bound=Mapping[str, object])
Address = tuple[str, int]
# One pending kill: (server address or None for the primary, "db.collection", cursor id).
_Kill = tuple[Address | None, str, int]
_Key = tuple[Address | None, str]
# Server cursor ids are BSON int64 values.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# The deadline of the flush running on this thread, so one killCursors never outlasts it.
# Read on SYSTEM_CLOCK: freezegun does not freeze it, so a frozen test never stalls a flush.
_flush_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "executors_cursor_reaper_flush_deadline", default=None
)


def _check_address(address: object) -> Address | None:
    if address is None:
        return None
    if (not isinstance(address, tuple) or len(address) != 2
            or not isinstance(address[0], str) or isinstance(address[1], bool)
            or not isinstance(address[1], int)):
        raise TypeError(f"address must be a (host, port) tuple or None, got {address!r}")
    return (address[0], address[1])


def _check_kill(cursor_id: object, namespace: object, address: object) -> _Kill:
    if isinstance(cursor_id, bool) or not isinstance(cursor_id, int):
        raise TypeError(f"cursor_id must be an int, got {type(cursor_id).__name__}")
    if cursor_id == 0:
        raise ValueError("cursor_id must not be 0 (0 means the server already closed it)")
    if not _INT64_MIN <= cursor_id <= _INT64_MAX:
        # Refused here, not at send time: BSON cannot encode it, and the OverflowError would
        # fail every other kill of its (server, namespace) batch along with it.
        raise ValueError(f"cursor_id must be a 64-bit signed int, got {cursor_id!r}")
    if not isinstance(namespace, str):
        raise TypeError(f"namespace must be a 'db.collection' str, got {type(namespace).__name__}")
    db, dot, coll = namespace.partition(".")
    if not (db and dot and coll):
        raise ValueError(f"namespace must look like 'db.collection', got {namespace!r}")
    return (_check_address(address), namespace, int(cursor_id))


def _count(reply: Mapping[str, object], field: str) -> int:
    ids = reply.get(field)
    return len(ids) if isinstance(ids, list) else 0


def _batch_key(item: _Kill) -> _Key:
    # One killCursors command per (server, namespace), as PyMongo batches (_CursorAddress).
    return (item[0], item[1])


@dataclasses.dataclass(frozen=True)
class CursorReaperStatistics:
    """A snapshot of a `CursorReaper`; the counts are the server's replies, not our guesses."""

    #: "open", "closing" or "closed".
    state: str
    #: Kills queued or waiting for a retry.
    pending: int
    #: Ids the server reported in ``cursorsKilled``.
    killed: int
    #: Ids the server reported in ``cursorsNotFound`` (already exhausted, timed out or killed).
    not_found: int
    #: Ids the server reported in ``cursorsAlive`` or ``cursorsUnknown`` (it could not kill them).
    alive: int
    #: Ids whose killCursors failed past the retry limit (or on a closed client).
    failed: int
    #: killCursors commands re-sent after a failure.
    retried: int
    #: killCursors commands that got a reply.
    commands: int
    #: Kills the queue refused (`max_pending` reached, or the reaper closed).
    dropped: int
    #: ``"ExceptionType: message"`` of the latest killCursors attempt that raised, or None if
    #: none has (kept after later successes).
    last_error: str | None


@final
class CursorReaper:
    """Kill server-side cursors of a `pymongo.MongoClient` when their owners are collected.

    For code that pages through raw command cursors (``db.command("find", ..., batchSize=n)``,
    ``aggregate`` with ``cursor={}``) and passes cursor ids across requests or threads, and for
    drivers built on pymongo: `track` ties a cursor to an owner object, `kill_soon` is the
    destructor-safe enqueue. A background `executors.Reaper` sends one ``killCursors`` per
    (server, namespace), as PyMongo's kill-cursors thread does, but it is woken as soon as a
    kill is queued (PyMongo's thread looks every 1 s, polling at 0.5 s), a failed command is
    retried with backoff (PyMongo logs and drops it), and the counts come from the server's
    replies.

    Exit: kills still pending when the interpreter exits are sent before the process ends,
    while the client still works: the flush runs from an `atexit` handler registered after
    pymongo's own (``_shutdown_resources``), so it runs first. Register an ``atexit`` hook that
    closes the client *before* making the reaper, or close the reaper first yourself.

    Fork: a forked child starts with no pending kills (the cursors belong to the parent).

    The reaper keeps `client` alive until `close()`. Each command is bounded by `timeout`
    seconds (pymongo's client-side operation timeout, server selection included), and by the
    deadline of a `flush`.

    Args:
        client: the `MongoClient` whose servers hold the cursors.
        timeout: seconds one killCursors command may take (finite, > 0).
        max_retries, retry_backoff, max_backoff, interval, min_interval, wake_threshold,
        max_pending, max_batch, name, close_timeout: as for `executors.Reaper`.

    Raises:
        TypeError: `client` is not a `pymongo.MongoClient`.

    Example:
        >>> from pymongo import MongoClient
        >>> client = MongoClient("localhost:1", connect=False)
        >>> reaper = CursorReaper(client, name="example-reaper")
        >>> reaper
        <CursorReaper 'example-reaper' open pending=0 killed=0>
        >>> reaper.close(timeout=5)
        True
        >>> client.close()
    """

    def __init__(
        self,
        client: MongoClient[_DocumentT],
        *,
        timeout: float = 10.0,
        interval: float = 60.0,
        min_interval: float = 0.0,
        wake_threshold: int | None = 1,
        max_pending: int | None = None,
        max_batch: int | None = 1000,
        max_retries: int = 5,
        retry_backoff: float = 0.5,
        max_backoff: float = 10.0,
        name: str | None = None,
        close_timeout: float = 10.0,
    ) -> None:
        if not isinstance(client, MongoClient):
            raise TypeError(f"client must be a pymongo.MongoClient, got {type(client).__name__}")
        self._timeout = validate.seconds(timeout, "timeout", allow_zero=False)
        self._client: MongoClient[_DocumentT] = client
        self._killed = 0
        self._not_found = 0
        self._alive = 0
        self._commands = 0
        self._reaper: Reaper[_Kill, _Key] = Reaper(
            self._kill_batch,
            batch_key=_batch_key,
            interval=interval,
            min_interval=min_interval,
            wake_threshold=wake_threshold,
            max_pending=max_pending,
            max_batch=max_batch,
            max_retries=max_retries,
            retry_backoff=retry_backoff,
            max_backoff=max_backoff,
            # A closed client raises InvalidOperation: retrying cannot help.
            retryable=lambda exc: not isinstance(exc, InvalidOperation),
            name=name or "executors_cursor_reaper",
            close_timeout=close_timeout,
        )

    # -- enqueue ----------------------------------------------------------------------------

    def kill_soon(self, cursor_id: int, namespace: str, address: Address | None = None) -> bool:
        """Queue a kill of `cursor_id` in `namespace` ("db.collection"). Takes no lock.

        Safe from ``__del__``, weakref callbacks and any thread. `address` is the
        ``(host, port)`` of the server that holds the cursor (``client.address`` at the time,
        or the address pymongo reports); None sends the kill to the primary / the only server.

        Returns:
            False if the kill was dropped (reaper closed, or `max_pending` reached).

        Raises:
            TypeError, ValueError: bad `cursor_id` (not a non-zero 64-bit signed int: checked
                here, so one bad id never fails the other kills of its batch), `namespace` or
                `address`.
        """
        return self._reaper.put(_check_kill(cursor_id, namespace, address))

    def track(self, owner: object, cursor_id: int, namespace: str,
              address: Address | None = None) -> Callable[[], bool]:
        """Kill the cursor when `owner` is garbage-collected; returns a `cancel()` function.

        Call ``cancel()`` once the cursor is exhausted (the server returned id 0) or closed.

        Raises:
            ClosedError: the reaper is closed.
            TypeError, ValueError: bad arguments, or `owner` is not weak-referenceable.
        """
        return self._reaper.track(owner, _check_kill(cursor_id, namespace, address))

    # -- the drainer's work -----------------------------------------------------------------

    def _kill_batch(self, key: _Key, items: list[_Kill]) -> None:
        address, namespace = key
        db, _, coll = namespace.partition(".")
        spec: dict[str, object] = {
            "killCursors": coll, "cursors": [cursor_id for _, _, cursor_id in items]
        }
        budget = self._timeout
        deadline = _flush_deadline.get()
        if deadline is not None:
            budget = max(0.001, min(budget, deadline - SYSTEM_CLOCK.monotonic()))
        with pymongo.timeout(budget):
            reply = self._command(address, db, spec)
        self._commands += 1
        self._killed += _count(reply, "cursorsKilled")
        self._not_found += _count(reply, "cursorsNotFound")
        self._alive += _count(reply, "cursorsAlive") + _count(reply, "cursorsUnknown")

    def _command(self, address: Address | None, db: str, spec: dict[str, object]
                 ) -> Mapping[str, object]:
        # PyMongo's own route for killCursors (MongoClient._kill_cursors): select the server
        # that holds the cursors and run the command without a session. Database.command would
        # attach an implicit session, and the public API cannot target one server.
        client = self._client
        topology = client._get_topology()
        if address is None:
            server = topology.select_server(writable_server_selector, "killCursors")
        else:
            server = topology.select_server_by_address(address, "killCursors")
            if server is None:
                raise AutoReconnect(f"server {address[0]}:{address[1]} no longer available")
        with client._checkout(server, None) as conn:
            reply: Mapping[str, object] = conn.command(db, spec, client=client)
        return reply

    # -- control ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Send every pending kill now, on this thread; True if none is left pending.

        Raises:
            RuntimeError: called from inside the reaper's own thread while it sends a kill.
        """
        seconds = validate.timeout(timeout)  # math.inf means None
        if seconds is None:
            return self._reaper.flush(None)
        token = _flush_deadline.set(SYSTEM_CLOCK.monotonic() + seconds)
        try:
            return self._reaper.flush(seconds)
        finally:
            _flush_deadline.reset(token)

    def close(self, timeout: float | None = None) -> bool:
        """Flush (at most `timeout`, default `close_timeout`) and stop. Idempotent.

        Kills queued afterwards are dropped and counted. Does not close the client.
        """
        if timeout is None:
            return self._reaper.close()
        seconds = validate.seconds(timeout, "timeout")  # a close always has a deadline
        token = _flush_deadline.set(SYSTEM_CLOCK.monotonic() + seconds)
        try:
            return self._reaper.close(timeout=seconds)
        finally:
            _flush_deadline.reset(token)

    def __enter__(self) -> CursorReaper:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._reaper.closed

    @property
    def reaper(self) -> Reaper[_Kill, _Key]:
        """The underlying `executors.Reaper`."""
        return self._reaper

    def statistics(self) -> CursorReaperStatistics:
        """A snapshot read without a lock."""
        r = self._reaper.statistics()
        return CursorReaperStatistics(
            state=r.state,
            pending=r.pending,
            killed=self._killed,
            not_found=self._not_found,
            alive=self._alive,
            failed=r.failed,
            retried=r.retried,
            commands=self._commands,
            dropped=r.dropped,
            last_error=r.last_error,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        name = self._reaper._executor.name
        extra = "".join(f" {f}={v}" for f, v in (("not_found", s.not_found), ("failed", s.failed),
                                                 ("retried", s.retried)) if v)
        return f"<CursorReaper {name!r} {s.state} pending={s.pending} killed={s.killed}{extra}>"


# -- running pymongo's own background threads on our PeriodicExecutor ---------------------

_saved: dict[str, object] = {}


def _pymongo_executor(interval: float, min_interval: float, target: Callable[[], object],
                      name: str | None = None) -> PeriodicExecutor:
    """pymongo.periodic_executor.PeriodicExecutor's constructor, building ours.

    PyMongo lets `min_interval` exceed `interval` (an SRV monitor with a long heartbeat); ours
    refuses it, so it is capped here. A target that raises stops the executor, as in PyMongo.
    After fork PyMongo builds new executors itself, so the old ones stay closed ("stop").
    """
    return PeriodicExecutor(interval, min(min_interval, interval), target, name,
                            on_error="stop", fork_policy="stop")


def install() -> None:
    """Make `MongoClient`\\ s created from now on run their background threads on ours.

    PyMongo's monitors, RTT monitors, kill-cursors and events threads are built through
    ``pymongo.periodic_executor.PeriodicExecutor``; this points that name at
    `executors.PeriodicExecutor` (API compatible). Their threads then sleep until due instead
    of waking every 0.5 s, and exit as soon as the client is closed. Clients made before
    `install()` keep PyMongo's executors. Idempotent; tested with pymongo 4.20.
    """
    module = pymongo.periodic_executor
    if "PeriodicExecutor" in _saved:
        return
    _saved["PeriodicExecutor"] = module.PeriodicExecutor
    vars(module)["PeriodicExecutor"] = _pymongo_executor


def uninstall() -> None:
    """Undo `install()` for clients created afterwards (running clients keep theirs)."""
    original = _saved.pop("PeriodicExecutor", None)
    if original is not None:
        vars(pymongo.periodic_executor)["PeriodicExecutor"] = original


def installed() -> bool:
    """True while `install()` is in effect."""
    return "PeriodicExecutor" in _saved
