"""The store protocol of `executors.aio.traversal` and the values it exchanges.

What a `Store` must provide (`Store.begin`, the reads of a `Transaction`), what it returns
(`Entry`, `Kind`), what a visitor receives (`Visit`), the unit of a resumable cursor
(`CursorEntry`) and a traversal's counters (`TraversalStatistics`); also the types `Mode` and
`Visitor` of the engine's signatures (not exported). The engine that drives a store
(`Traversal`) is in `executors.aio.traversal`, which re-exports the names of `__all__`: import
them from there or from `executors.aio`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol, runtime_checkable

__all__ = (
    "Kind",
    "Entry",
    "Transaction",
    "Store",
    "Visit",
    "CursorEntry",
    "TraversalStatistics",
)

#: The order a traversal visits in (see `executors.aio.traversal.Traversal`).
Mode = Literal["strict", "relaxed", "any"]


class Kind(enum.Enum):
    """What a node is: a file (a leaf) or a directory (has children)."""

    FILE = "file"
    DIR = "dir"


@dataclasses.dataclass(frozen=True, slots=True)
class Entry:
    """A node as read in one transaction: its name in its parent, its store key and kind.

    `key` is the store's identity of the node (an inode number, a key prefix); it is only
    meaningful inside the transaction that read it: a node may move or vanish in between.
    """

    #: The node's name in its parent directory ("" for the root).
    name: str
    #: The store's identity of the node, valid only inside the transaction that read it.
    key: object
    #: `Kind.FILE` (a leaf) or `Kind.DIR` (a directory, which has children).
    kind: Kind


@runtime_checkable
class Transaction(Protocol):
    """One time-bounded transaction of a `Store`: everything read in it is one snapshot.

    Reads may be issued concurrently (the engine does), and complete in any order. A store
    that cannot serve a read any more (the transaction expired, a conflict, a lost
    connection) raises `executors.errors.TransactionRetry` (or `TransactionExpired`), and the
    engine retries from its last committed cursor; any other exception ends the traversal.
    """

    async def root(self) -> Entry:
        """Read the root directory (its name is ``""``)."""
        ...

    async def lookup(self, parent: object, name: str) -> Entry | None:
        """Read the child `name` of directory `parent` (a key), or None if there is none."""
        ...

    async def list(self, parent: object, kind: Kind, after: str | None,
                   limit: int) -> Sequence[Entry]:
        """Read at most `limit` children of `parent` of `kind` with name > `after`, by name."""
        ...

    async def commit(self) -> None:
        """Make the transaction's writes durable; raise TransactionRetry if that failed."""
        ...

    async def rollback(self) -> None:
        """Abandon the transaction; never raises for a transaction that already failed."""
        ...


@runtime_checkable
class Store(Protocol):
    """Something that begins `Transaction`s; `budget` is the transaction's time budget (s)."""

    async def begin(self, *, budget: float) -> Transaction:
        """Begin a transaction that the store may expire after `budget` seconds."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class Visit:
    """What the visitor is called with: a path, the node there (None: nothing there now), and
    the transaction in which the path's every ancestor was read (write through it to make the
    visit's effects commit with the traversal's cursor)."""

    #: The names from the root down to the node (``()`` for the root itself).
    path: tuple[str, ...]
    #: The node at `path` as read in `transaction`, or None if nothing is there now (a
    #: pending directory that vanished between transactions, in mode "any").
    node: Entry | None
    #: The transaction that read `path` and every ancestor; writes through it commit together
    #: with the traversal's cursor, or are rolled back with it.
    transaction: Transaction


@dataclasses.dataclass(frozen=True, slots=True)
class CursorEntry:
    """One pending piece of work: list `phase` children of the directory at `path` after
    `after`; `entered` says whether the directory itself was visited already."""

    #: The directory's path: the names from the root down to it (``()`` for the root).
    path: tuple[str, ...]
    #: Which of its children are listed next: `Kind.FILE` (its files) or `Kind.DIR` (its
    #: subdirectories).
    phase: Kind
    #: List only children whose name sorts after this one (the last one done); None: from
    #: the first.
    after: str | None
    #: True if the directory itself has been visited already.
    entered: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TraversalStatistics:
    """Counters of a `Traversal` (committed work and the overheads of batching).

    `redo_ratio` is (reads issued - reads whose results were committed) / reads committed:
    the reads spent re-establishing the cursor in a new transaction, prefetched but not used
    before a commit, or lost with a failed transaction, per useful read.
    """

    #: The visiting order: "strict", "relaxed" or "any" (see `Traversal`).
    mode: str
    #: True once the committed cursor is empty: every node was visited in a committed
    #: transaction.
    done: bool
    #: Transactions begun, committed or not.
    transactions: int
    #: Transactions committed (each moved the cursor forward).
    commits: int
    #: Transactions that failed with `TransactionRetry` (expired ones included); each was
    #: rolled back and retried from the last committed cursor, except a last one re-raised.
    retries: int
    #: Of `retries`, the transactions that expired (`TransactionExpired`).
    expirations: int
    #: Visitor calls in committed transactions (each node counts once).
    visits: int
    #: Visitor calls in transactions that failed and were rolled back: their nodes are
    #: visited again by a later transaction.
    redone_visits: int
    #: Store reads issued, in every transaction, committed or not.
    reads: int
    #: Reads in committed transactions whose results were processed (listings the batch used).
    useful_reads: int
    #: Reads in committed transactions spent re-reading the cursor's paths from the root
    #: (the root and one lookup per path step) at the start of a transaction.
    resume_reads: int
    #: Reads in committed transactions that were neither useful nor resume reads: read
    #: ahead, but not used before the commit.
    wasted_reads: int
    #: The most store reads that were running at the same time.
    max_in_flight: int
    #: Entries in the committed cursor now (the work left; 0 when done).
    cursor_size: int
    #: The largest number of entries the committed cursor held so far.
    max_cursor_size: int
    #: Wall-clock seconds spent in `Traversal.run`, summed over its calls (retry back-offs
    #: included).
    elapsed: float

    @property
    def redo_ratio(self) -> float:
        return (self.reads - self.useful_reads) / self.useful_reads if self.useful_reads else 0.0


#: What a traversal calls per node: a function of a `Visit`, sync or async.
Visitor = Callable[[Visit], "Awaitable[None] | None"]
