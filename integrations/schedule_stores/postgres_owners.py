"""Which owners of a PostgreSQL store are alive: a session-level advisory lock each holds.

An owner (a serving process's store loop) takes, on the connection it claims with, the
session-level advisory lock ``(OWNERS_LOCK_SPACE, hashtext(owner))`` and writes a row in
``executors_owners`` naming itself and when it took the lock (the server's clock). The server
lets the lock go when that backend ends: when the process dies (its socket closes), when the
connection is lost, when the server restarts. So an owner with a row and no lock is gone.

Two guards keep a live owner from being taken for gone:

- A row older than the server's start (``pg_postmaster_start_time()``) says nothing: after a
  restart every lock is gone, and an owner is judged again only once it took its lock again
  (its next claim, on a new connection, writes a new time).
- A lock is taken before the row is committed, and claims write an owner's name only after
  both: a committed row always had its lock.

An owner whose lock another owner's name collides with (``hashtext`` is 32 bits) writes no
row and is waited for by its lease, as are owners of older versions (no row at all).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, final

import psycopg

from executors.stores import LIVENESS_EVERY

__all__ = ("OWNERS_LOCK_SPACE", "OwnerLocks")

#: The first key of the owners' advisory locks (two-key locks: never one of the single-key
#: locks the store takes to declare, nor most applications' own).
OWNERS_LOCK_SPACE = 0x65786563  # "exec"

_TABLE = """
CREATE TABLE IF NOT EXISTS executors_owners (
    owner TEXT PRIMARY KEY,
    since DOUBLE PRECISION NOT NULL
)"""
_NOW = "round(extract(epoch from now())::numeric, 6)::double precision"
# The owners whose lock is free, judged after the server started (see the module docstring).
_GONE = (
    "SELECT o.owner FROM executors_owners AS o "
    "WHERE o.since > extract(epoch from pg_postmaster_start_time()) AND o.owner <> %s "
    "AND NOT EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' "
    "  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    f"  AND l.classid = {OWNERS_LOCK_SPACE} AND l.objid = hashtext(o.owner)::oid "
    "  AND l.objsubid = 2 AND l.granted)")
# The leases of the gone owners' runs end now (rows another claim holds are left to it).
_END_LEASES = (
    f"UPDATE executors_schedules SET lease_until = {_NOW} - 0.000001 WHERE name IN ("
    "SELECT name FROM executors_schedules WHERE running_fire IS NOT NULL "
    f"AND lease_until >= {_NOW} AND owner IN ({_GONE}) FOR UPDATE SKIP LOCKED)")
# Rows of gone owners, and rows older than the server's start (a live one writes its row
# again on its next claim), that hold no run: nothing is judged by them any more.
_SWEEP = (f"DELETE FROM executors_owners WHERE (owner IN ({_GONE}) "
          "OR since <= extract(epoch from pg_postmaster_start_time())) AND NOT EXISTS ("
          "SELECT 1 FROM executors_schedules AS s WHERE s.owner = executors_owners.owner "
          "AND s.running_fire IS NOT NULL)")


@final
class OwnerLocks:
    """The owners' locks and rows of one store object (see the module docstring)."""

    def __init__(self) -> None:
        # Per thread: (owner, connection) whose lock is held on that connection.
        self._local = threading.local()
        self._seen = -float("inf")  # when `end_gone_leases` looked last (monotonic)
        self._owners: set[str] = set()

    def __repr__(self) -> str:
        return f"<OwnerLocks owners={sorted(self._owners)!r}>"

    def hold(self, conn: psycopg.Connection[Any], owner: str) -> None:
        """Take `owner`'s lock on `conn` and write its row, once per connection (a new
        connection, after a lost one, takes it again and writes a new time)."""
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == owner and held[1] is conn:
            return
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SELECT to_regclass('executors_owners') IS NOT NULL")
            row = cur.fetchone()
            if not (row and row[0]):
                cur.execute("SELECT pg_advisory_xact_lock(727274)")  # one schema maker
                cur.execute(_TABLE)
            # True too if this session holds it already (it is never unlocked: it goes with
            # the session).
            cur.execute(f"SELECT pg_try_advisory_lock({OWNERS_LOCK_SPACE}, hashtext(%s))",
                        (owner,))
            row = cur.fetchone()
            if row and row[0]:
                cur.execute(_SWEEP, (owner,))  # an owner's start: the others' leftovers go
                cur.execute(f"INSERT INTO executors_owners VALUES (%s, {_NOW}) "
                            "ON CONFLICT (owner) DO UPDATE SET since = EXCLUDED.since",
                            (owner,))
                self._owners.add(owner)
            # Else another session holds the key: this owner of another connection of this
            # process (its row stands), or a collision (no row: waited for by its lease).
        self._local.held = (owner, conn)

    def end_gone_leases(self, cur: psycopg.Cursor[Any], owner: str) -> None:
        """End the leases of the gone owners' runs, in the claim's transaction before it
        looks for work (it then settles them as expired). At most every `LIVENESS_EVERY`."""
        at = time.monotonic()
        if at < self._seen + LIVENESS_EVERY:
            return
        self._seen = at
        cur.execute(_END_LEASES, (owner,))
        if cur.rowcount:
            cur.execute(_SWEEP, (owner,))

    def release(self) -> None:
        """Remove the rows of this object's owners (a clean close: a run left in flight
        waits for its lease), on the calling thread's locked connection if it has one (the
        serving loop closes its store from the thread that claims); the locks go with the
        connections."""
        owners, self._owners = sorted(self._owners), set()
        held = getattr(self._local, "held", None)
        conn = None if held is None else held[1]
        if conn is None or conn.closed or not owners:
            return
        with contextlib.suppress(psycopg.Error), conn.transaction(), conn.cursor() as cur:
            cur.execute("DELETE FROM executors_owners WHERE owner = ANY(%s)", (owners,))
