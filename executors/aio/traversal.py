"""Batched transactional traversal of a hierarchy in time-bounded transactions, with prefetch.

The public engine, `Traversal` (and `traverse`), drives transactions: begin, process, commit or
roll back, retry, adapt the budget. Two private modules hold its parts: `_traversal_store` the
protocol a store implements and the values it exchanges (re-exported here), `_traversal_batch`
the work of one transaction (the reads ahead of the visitor, the processing in the mode's order).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import final

from executors import _validate
from executors.errors import TransactionExpired, TransactionRetry

from ._traversal_batch import Batch, BatchSettings, ReadCounters, Stop
from ._traversal_store import (
    CursorEntry,
    Entry,
    Kind,
    Mode,
    Store,
    Transaction,
    TraversalStatistics,
    Visit,
    Visitor,
)
from .locks import Semaphore

__all__ = (
    "traverse",
    "Traversal",
    "TraversalStatistics",
    "Kind",
    "Entry",
    "Transaction",
    "Store",
    "Visit",
    "CursorEntry",
    "traversal_limiter",
    "TRAVERSAL_LIMIT",
    "default_limiter",
    "DEFAULT_LIMIT",
)

_MODES = ("strict", "relaxed", "any")

#: The number of concurrent store reads all traversals of a process share by default
#: (`traversal_limiter`). Not the bridge's ``default_limiter`` (40 threads per event loop).
TRAVERSAL_LIMIT = 32

# One fair semaphore per process. A loop-only Semaphore is bound to an event loop only while
# tasks wait on it, so one object serves traversals on successive loops; traversals on several
# loops at once (threads) contending for it get its "bound to a different event loop" error:
# give each loop its own `limiter=`.
_TRAVERSAL_LIMITER = Semaphore(TRAVERSAL_LIMIT)


def traversal_limiter() -> Semaphore:
    """The process-wide fair semaphore (`TRAVERSAL_LIMIT` permits) that traversals share.

    Every store read of every `Traversal` created without ``limiter=`` holds one permit, so
    one large traversal cannot starve the others or the store: the semaphore is FIFO, so
    traversals that contend take turns read by read. It is an `executors.aio.Semaphore`:
    traversals running on several event loops at the same time need a ``limiter=`` each.

    Example:
        >>> traversal_limiter().statistics().value
        32
    """
    return _TRAVERSAL_LIMITER


#: The former name of `TRAVERSAL_LIMIT`: the same value.
DEFAULT_LIMIT = TRAVERSAL_LIMIT

#: The former name of `traversal_limiter`: the same function.
default_limiter = traversal_limiter


@final
class Traversal:
    """A resumable traversal of a `Store`'s hierarchy in batches of time-bounded transactions.

    Guarantees (see docs/content/traversal.md for the table and the effects of concurrent
    changes):

    - Path consistency: every node is visited in the same transaction in which every ancestor
      on its path was read: a transaction resumes by reading the cursor's paths from the root.
    - Order by `mode`: ``"strict"`` visits a directory, then its files by name, then its
      subdirectories by name (pre-order) across transactions; ``"relaxed"`` visits the files
      of one directory in order and a directory before anything in it, but directories in the
      order their reads complete; ``"any"`` visits each path once in any order and reports a
      pending directory that vanished between transactions as ``Visit(path, None, ...)``.
    - Batches: reads are issued concurrently ahead of the visitor (up to `window` listings),
      but only a gap-free prefix of the work (strict) or whole pieces of work (the others)
      are processed and committed with the cursor. Reads stop while `reserve` of the budget
      is left to process what has arrived and commit; the next transaction resumes from the
      cursor. A failed or expired transaction is retried from the last cursor: nothing is
      skipped, and the visits it made are made again (their effects through the transaction
      were rolled back). After a failure the budget planned with is halved (it grows
      back after commits).
    - Bounded concurrency: every read, begin and commit holds a permit of `limiter` (default:
      the process-wide `traversal_limiter()`), a fair semaphore shared by all traversals.
    - Bounded cursor: the cursor holds at most (depth + 1) * (page_size + 2) entries, each a
      path, a phase and a name.

    Args:
        store: the `Store` to traverse.
        visitor: called with a `Visit` per node, sync or async; its exceptions end the
            traversal (after a rollback).
        mode: ``"strict"``, ``"relaxed"`` or ``"any"``.
        budget: the time budget of one transaction in seconds (FoundationDB's is 5 s).
        reserve: the fraction of the budget kept to process arrived reads and commit.
        page_size: children per listing read.
        window: listings read ahead concurrently (and, in relaxed/any, processable).
        limiter: the semaphore bounding concurrent reads.
        max_batch: at most this many visits per transaction (None: no limit).
        max_retries: consecutive failed transactions before the last error is raised.
        retry_delay: first back-off after a failure (doubles, capped at 1 s).
        clock: seconds, monotonic (default: the running loop's time).
        start: a cursor to resume from (`cursor` of an earlier traversal).
        on_commit: called with the statistics after each commit (for progress bars).

    Raises:
        TypeError / ValueError: naming the bad argument.

    Example (a one-snapshot store of a root with two files; the SQLite and PostgreSQL stores
    are in ``integrations``):
        >>> class Tiny:
        ...     async def begin(self, *, budget):
        ...         return self
        ...     async def root(self):
        ...         return Entry("", 0, Kind.DIR)
        ...     async def lookup(self, parent, name):
        ...         return None
        ...     async def list(self, parent, kind, after, limit):
        ...         names = ["a", "b"] if kind is Kind.FILE else []
        ...         return [Entry(n, n, kind) for n in names if after is None or n > after]
        ...     async def commit(self):
        ...         pass
        ...     async def rollback(self):
        ...         pass
        >>> seen = []
        >>> t = Traversal(Tiny(), lambda v: seen.append("/" + "/".join(v.path)))
        >>> stats = asyncio.run(t.run())
        >>> seen, stats.visits, t.done
        (['/', '/a', '/b'], 3, True)
    """

    def __init__(self, store: Store, visitor: Visitor, *, mode: Mode = "strict",
                 budget: float = 5.0, reserve: float = 0.2, page_size: int = 64,
                 window: int = 16, limiter: Semaphore | None = None,
                 max_batch: int | None = None, max_retries: int = 10,
                 retry_delay: float = 0.01, clock: Callable[[], float] | None = None,
                 start: Sequence[CursorEntry] | None = None,
                 on_commit: Callable[[TraversalStatistics], None] | None = None) -> None:
        if not callable(getattr(store, "begin", None)):
            raise TypeError(f"store must have an async begin(budget=...), got {store!r}")
        if not callable(visitor):
            raise TypeError(f"visitor must be callable, got {visitor!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, got {mode!r}")
        budget = _validate.seconds(budget, "budget", allow_zero=False)
        if (isinstance(reserve, bool) or not isinstance(reserve, (int, float))
                or not 0 <= reserve < 1):  # a fraction, not a duration (NaN fails the range)
            raise ValueError(f"reserve must be a fraction in [0, 1), got {reserve!r}")
        for name, value in (("page_size", page_size), ("window", window),
                            ("max_retries", max_retries)):
            _validate.count(value, name)
        if max_batch is not None:
            _validate.count(max_batch, "max_batch")
        retry_delay = _validate.seconds(retry_delay, "retry_delay")
        if limiter is not None and not isinstance(limiter, Semaphore):
            raise TypeError(f"limiter must be an executors.aio.Semaphore, got {limiter!r}")
        self._store = store
        self._mode: Mode = mode
        self._budget = float(budget)
        self._effective_budget = float(budget)
        self._commit_time = 0.0  # in clock seconds
        self._reserve = float(reserve)
        self._limiter = limiter if limiter is not None else _TRAVERSAL_LIMITER
        self._settings = BatchSettings(mode=mode, visitor=visitor, page_size=page_size,
                                       window=window, limiter=self._limiter,
                                       max_batch=max_batch, loop_clock=clock is None)
        self._max_retries = max_retries
        self._retry_delay = float(retry_delay)
        self._clock = clock
        self._on_commit = on_commit
        self._cursor: tuple[CursorEntry, ...] = (
            tuple(start) if start is not None else (CursorEntry((), Kind.FILE, None, False),))
        self._running = False
        # Counters (see TraversalStatistics).
        self._transactions = self._commits = self._retries = self._expirations = 0
        self._visits = self._redone = 0
        self._useful = self._resume = self._wasted = 0
        self._read_counters = ReadCounters()  # updated by each batch as its reads happen
        self._max_cursor = len(self._cursor)
        self._elapsed = 0.0

    # -- public surface -------------------------------------------------------------------

    @property
    def cursor(self) -> tuple[CursorEntry, ...]:
        """The committed cursor: the work left, top (next in strict order) last."""
        return self._cursor

    @property
    def done(self) -> bool:
        return not self._cursor

    def statistics(self) -> TraversalStatistics:
        return TraversalStatistics(
            mode=self._mode, done=self.done, transactions=self._transactions,
            commits=self._commits, retries=self._retries, expirations=self._expirations,
            visits=self._visits, redone_visits=self._redone, reads=self._read_counters.reads,
            useful_reads=self._useful, resume_reads=self._resume, wasted_reads=self._wasted,
            max_in_flight=self._read_counters.max_in_flight, cursor_size=len(self._cursor),
            max_cursor_size=self._max_cursor, elapsed=self._elapsed)

    def __repr__(self) -> str:
        state = "done" if self.done else ("running" if self._running else "pending")
        return (f"<Traversal {self._mode} {state} visits={self._visits} "
                f"commits={self._commits} retries={self._retries} cursor={len(self._cursor)}>")

    async def run(self) -> TraversalStatistics:
        """Traverse until the cursor is empty; return the statistics.

        Raises:
            RuntimeError: the traversal is already running.
            TransactionRetry: `max_retries` transactions in a row failed (the last error).
            Exception: whatever the visitor or the store raised otherwise.
        """
        if self._running:
            raise RuntimeError("this Traversal is already running")
        self._running = True
        loop = asyncio.get_running_loop()
        clock = self._clock or loop.time
        started = time.perf_counter()
        failures = 0
        try:
            while self._cursor:
                try:
                    await self._transaction(clock)
                except TransactionRetry as exc:
                    failures += 1
                    self._retries += 1
                    if isinstance(exc, TransactionExpired):
                        self._expirations += 1
                    # The work took longer than estimated, or a conflict or fault hit a
                    # transaction: plan the next one with half the budget (fewer reads, a
                    # smaller conflict window). It still makes progress on one piece of work.
                    self._effective_budget = max(self._effective_budget / 2,
                                                 self._budget / 1024)
                    if failures >= self._max_retries:
                        raise
                    if self._retry_delay:
                        await asyncio.sleep(min(self._retry_delay * 2 ** (failures - 1), 1.0))
                else:
                    failures = 0
                    self._effective_budget = min(self._budget, self._effective_budget * 1.25)
        finally:
            self._running = False
            self._elapsed += time.perf_counter() - started
        return self.statistics()

    # -- one transaction ------------------------------------------------------------------

    async def _transaction(self, clock: Callable[[], float]) -> None:
        self._transactions += 1
        start = clock()
        # The store's limit is the full budget; the engine plans with the effective one (smaller
        # after an expiry), keeping `reserve` of it, and the time one read and the commit took
        # so far, to process what has arrived and commit in time.
        deadline = start + self._budget
        stop_issuing_at = (start + self._effective_budget * (1 - self._reserve)
                           - self._read_counters.read_time - self._commit_time)
        async with self._limiter:  # begin and commit are store operations too
            txn = await self._store.begin(budget=self._budget)
        batch = Batch(self._settings, self._read_counters, txn, self._cursor, clock,
                      stop_issuing_at)
        try:
            cursor = await batch.process(deadline - self._commit_time)
            # Reads still running are not wanted: let them unwind before the commit.
            pending = [f for f in batch.end() if not f.done()]
            if pending:
                await asyncio.wait(pending)
            began = clock()
            try:
                async with self._limiter:
                    await txn.commit()
            finally:
                self._commit_time = max(self._commit_time * 0.9, clock() - began)
        except BaseException as exc:
            batch.end()
            self._redone += batch.visits
            try:
                await txn.rollback()
            except Exception:
                pass  # the transaction already failed; the first error is the one to see
            if isinstance(exc, Stop):  # pragma: no cover - Stop never escapes a fetch
                raise RuntimeError("internal: a read stopped outside a fetch") from exc
            raise
        self._commits += 1
        self._visits += batch.visits
        self._useful += batch.useful_reads
        self._resume += batch.resume_reads
        self._wasted += batch.reads - batch.useful_reads - batch.resume_reads
        self._cursor = cursor
        self._max_cursor = max(self._max_cursor, len(cursor))
        if self._on_commit is not None:
            self._on_commit(self.statistics())

async def traverse(store: Store, visitor: Visitor, *, mode: Mode = "strict",
                   budget: float = 5.0, page_size: int = 64, window: int = 16,
                   limiter: Semaphore | None = None, max_batch: int | None = None,
                   on_commit: Callable[[TraversalStatistics], None] | None = None,
                   ) -> TraversalStatistics:
    """Traverse `store` with `visitor` in `mode`; return the statistics (see `Traversal`).

    Example: ``stats = await traverse(store, print, mode="any")`` (see `Traversal`).
    """
    return await Traversal(store, visitor, mode=mode, budget=budget, page_size=page_size,
                           window=window, limiter=limiter, max_batch=max_batch,
                           on_commit=on_commit).run()

