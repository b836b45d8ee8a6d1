"""The PostgreSQL store's `changed_since`: the rows written since a reader's last look, found
by the transaction that wrote each row (its ``xmin``), with no column for writers to keep.

A look's mark is the oldest transaction still running when it read (its snapshot's
``xmin``): every transaction before it had ended, so every row they wrote was in that look.
The next look reads the rows whose writer is that one or later, compared as PostgreSQL
compares transaction ids (modulo 2^32: a distance under 2^31 is "later"). It may read a few
rows again (written by transactions that were running at the mark, and seen then or not);
it never misses one. A long-open transaction elsewhere holds the mark back, so more is read
again, nothing lost.

A removal leaves no row to find: `remove` writes the ``removed`` key of ``executors_meta`` in
its transaction, and a look that finds that key written since its mark is whole. A row
written by other means (an older version of this library, an edit by hand) is found by
whole looks (the reader asks for one every so often, `mark=None`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

__all__ = ("read_changes",)

T = TypeVar("T")
#: Rows fetched and decoded at a time.
_BATCH = 500

# Whether the transaction that wrote a row (``{xmin}``) is the mark's (``%s``) or later.
_LATER = ("mod(mod(({xmin})::text::bigint - %s, 4294967296) + 4294967296, 4294967296) "
          "< 2147483648")
# The mark of this statement's snapshot, as a 32-bit transaction id.
_MARK = "mod(txid_snapshot_xmin(txid_current_snapshot()), 4294967296)"
# The look's mark and whether a removal was written since `%s`.
_HEAD = (f"SELECT {_MARK}, COALESCE((SELECT {_LATER.format(xmin='xmin')} "
         "FROM executors_meta WHERE key = 'removed'), FALSE)")
#: What `remove` writes in its transaction.
REMOVED = ("INSERT INTO executors_meta VALUES ('removed', '') "
           "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
# The rows of ``{columns}`` written since the mark ``%s``.
_CHANGED = ("SELECT {columns} FROM executors_schedules WHERE "
           + _LATER.format(xmin="xmin") + " ORDER BY name")
_WHOLE = "SELECT {columns} FROM executors_schedules ORDER BY name"


def read_changes(conn: psycopg.Connection[Any], columns: str, mark: int | None,
                 decode: Callable[[list[tuple[Any, ...]]], list[T]]) -> tuple[int, bool, list[T]]:
    """``(mark, whole, decoded)``: the rows written since `mark` (all of them, `whole`, when
    `mark` is None or a schedule was removed since), read in one snapshot (``REPEATABLE
    READ``: the mark and the rows agree), each batch of `_BATCH` rows decoded by `decode`
    as it arrives (a server-side cursor): a whole read of a large store never holds all its
    rows and all their records at once."""
    out: list[T] = []
    with conn.transaction():
        with conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cur.execute(_HEAD, (-1 if mark is None else mark,))
            head = cur.fetchone()
        assert head is not None
        whole = mark is None or bool(head[1])
        with conn.cursor(name="executors_changes") as rows:
            if whole:
                rows.execute(_WHOLE.format(columns=columns))
            else:
                rows.execute(_CHANGED.format(columns=columns), (mark,))
            while batch := rows.fetchmany(_BATCH):
                out += decode(batch)
    return int(head[0]), whole, out
