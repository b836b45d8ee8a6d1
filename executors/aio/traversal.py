"""Batched transactional traversal of a hierarchy in time-bounded transactions, with prefetch."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, Protocol, TypeVar, final, runtime_checkable

from executors import _validate
from executors.errors import TransactionExpired, TransactionRetry

from .locks import Semaphore

__all__ = (
    "Kind",
    "Entry",
    "Transaction",
    "Store",
    "Visit",
    "CursorEntry",
    "Traversal",
    "TraversalStatistics",
    "traverse",
    "traversal_limiter",
    "TRAVERSAL_LIMIT",
    "default_limiter",
    "DEFAULT_LIMIT",
)

Mode = Literal["strict", "relaxed", "any"]
_R = TypeVar("_R")
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


#: The former name of `TRAVERSAL_LIMIT`, kept working (it collided in meaning with the
#: bridge's per-loop ``default_limiter``).
DEFAULT_LIMIT = TRAVERSAL_LIMIT

#: The former name of `traversal_limiter`, kept working (same object).
default_limiter = traversal_limiter


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

    name: str
    key: object
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

    path: tuple[str, ...]
    node: Entry | None
    transaction: Transaction


@dataclasses.dataclass(frozen=True, slots=True)
class CursorEntry:
    """One pending piece of work: list `phase` children of the directory at `path` after
    `after`; `entered` says whether the directory itself was visited already."""

    path: tuple[str, ...]
    phase: Kind
    after: str | None
    entered: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TraversalStatistics:
    """Counters of a `Traversal` (committed work and the overheads of batching).

    `redo_ratio` is (reads issued - reads whose results were committed) / reads committed:
    the reads spent re-establishing the cursor in a new transaction, prefetched but not used
    before a commit, or lost with a failed transaction, per useful read.
    """

    mode: str
    done: bool
    transactions: int
    commits: int
    retries: int
    expirations: int
    visits: int
    redone_visits: int
    reads: int
    useful_reads: int
    resume_reads: int
    wasted_reads: int
    max_in_flight: int
    cursor_size: int
    max_cursor_size: int
    elapsed: float

    @property
    def redo_ratio(self) -> float:
        return (self.reads - self.useful_reads) / self.useful_reads if self.useful_reads else 0.0


class _Stop(Exception):
    """Internal: the transaction stops issuing reads (time budget or batch size)."""


@dataclasses.dataclass(slots=True, eq=False)
class _Task:
    entry: CursorEntry
    key: object = None  # resolved in the current transaction (None: not yet)
    fetch: asyncio.Future[Sequence[Entry] | None] | None = None
    # The work this task's page leads to (top last), derived as soon as the page arrives, so
    # that their reads are issued before the visitor gets here; None: not derived yet.
    successors: list[_Task] | None = None


Visitor = Callable[[Visit], "Awaitable[None] | None"]


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
        self._visitor = visitor
        self._mode: Mode = mode
        self._budget = float(budget)
        self._effective_budget = float(budget)
        self._read_time = self._commit_time = 0.0  # in clock seconds
        self._reserve = float(reserve)
        self._page = page_size
        self._window = window
        self._limiter = limiter if limiter is not None else _TRAVERSAL_LIMITER
        self._max_batch = max_batch
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
        self._reads = self._useful = self._resume = self._wasted = 0
        self._in_flight = self._max_in_flight = 0
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
            visits=self._visits, redone_visits=self._redone, reads=self._reads,
            useful_reads=self._useful, resume_reads=self._resume, wasted_reads=self._wasted,
            max_in_flight=self._max_in_flight, cursor_size=len(self._cursor),
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
                           - self._read_time - self._commit_time)
        async with self._limiter:  # begin and commit are store operations too
            txn = await self._store.begin(budget=self._budget)
        batch = _Batch(self, txn, clock, stop_issuing_at)
        try:
            cursor = await batch.process(deadline)
            batch.active = False
            # Reads still running are not wanted: let them unwind before the commit.
            await self._settle(self._cleanup(batch.in_flight, batch.resolved))
            began = clock()
            try:
                async with self._limiter:
                    await txn.commit()
            finally:
                self._commit_time = max(self._commit_time * 0.9, clock() - began)
        except BaseException as exc:
            batch.active = False
            self._cleanup(batch.in_flight, batch.resolved)
            self._redone += batch.visits
            try:
                await txn.rollback()
            except Exception:
                pass  # the transaction already failed; the first error is the one to see
            if isinstance(exc, _Stop):  # pragma: no cover - _Stop never escapes a fetch
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

    @staticmethod
    async def _settle(futures: list[asyncio.Future[object]]) -> None:
        pending = [f for f in futures if not f.done()]
        if pending:
            await asyncio.wait(pending)

    @staticmethod
    def _cleanup(in_flight: set[_Listing],
                 resolved: dict[tuple[str, ...], asyncio.Future[Entry | None]],
                 ) -> list[asyncio.Future[object]]:
        # Reads of the finished transaction are no longer wanted; collect their outcomes so
        # that no "exception was never retrieved" is logged for a read cut short. (A finished
        # listing read's outcome was retrieved when it arrived.)
        futures: list[asyncio.Future[Sequence[Entry] | None] | asyncio.Future[Entry | None]]
        futures = list(in_flight)
        futures.extend(resolved.values())
        out: list[asyncio.Future[object]] = []
        for fut in futures:
            if not fut.done():
                fut.cancel()
                out.append(fut)  # type: ignore[arg-type]
            fut.add_done_callback(_consume)
        return out

    async def _visit(self, visit: Visit) -> None:
        result = self._visitor(visit)
        if result is not None and inspect.isawaitable(result):
            await result


_Listing = asyncio.Future[Sequence[Entry] | None]


@final
class _Batch:
    """The work of one transaction of a `Traversal`: what it reads, processes and counts.

    Made by `Traversal._transaction` for one transaction and dropped after it. Reads go out
    ahead of the visitor (`start_fetches`), each through `read`, which holds a permit of the
    traversal's limiter and stops issuing once the budget (or ``max_batch``) says so; `process`
    handles the pages in the mode's order and returns the cursor to commit. Counters of the
    traversal as a whole (reads, in flight, the read time) are updated as reads happen; this
    transaction's own counts are added to them by the caller only if it commits.
    """

    __slots__ = ("active", "clock", "in_flight", "issuing", "progressed", "reads",
                 "resolved", "resume_reads", "stack", "stop_issuing_at", "traversal", "txn",
                 "useful_reads", "visits")

    def __init__(self, traversal: Traversal, txn: Transaction, clock: Callable[[], float],
                 stop_issuing_at: float) -> None:
        self.traversal = traversal
        self.txn = txn
        self.clock = clock
        self.stop_issuing_at = stop_issuing_at
        #: The work left, top (next in strict order) last.
        self.stack = [_Task(e) for e in traversal.cursor]
        #: Paths resolved in this transaction: each ancestor is read once per transaction.
        self.resolved: dict[tuple[str, ...], asyncio.Future[Entry | None]] = {}
        #: Every listing read of this transaction not yet finished (to cancel at its end).
        self.in_flight: set[_Listing] = set()
        #: Reads issued; listings whose pages were processed; lookups re-reading the cursor.
        self.reads = self.useful_reads = self.resume_reads = 0
        self.visits = 0
        #: False once the budget or ``max_batch`` ended the issuing of reads.
        self.issuing = True
        #: True once a piece of work was processed: a transaction always makes progress.
        self.progressed = False
        #: False once the transaction ended: an arriving read starts no more reads.
        self.active = True

    # -- reads ------------------------------------------------------------------------------

    def may_issue(self) -> bool:
        t = self.traversal
        if self.issuing and self.progressed and (
                self.clock() >= self.stop_issuing_at
                or (t._max_batch is not None and self.visits >= t._max_batch)):
            self.issuing = False
        return self.issuing

    async def read(self, fn: Callable[[], Awaitable[_R]], resume: bool = False) -> _R:
        if not self.may_issue():
            raise _Stop
        t = self.traversal
        async with t._limiter:
            if not self.may_issue():
                raise _Stop
            self.reads += 1
            self.resume_reads += resume
            t._reads += 1
            t._in_flight += 1
            t._max_in_flight = max(t._max_in_flight, t._in_flight)
            began = self.clock()
            try:
                return await fn()
            finally:
                t._in_flight -= 1
                # A smoothed mean: a read's time includes its wait in the store's own queue,
                # so one slow read must not end every later batch early.
                t._read_time += 0.2 * (self.clock() - began - t._read_time)

    async def resolve(self, path: tuple[str, ...]) -> Entry | None:
        fut = self.resolved.get(path)
        if fut is None:
            fut = asyncio.ensure_future(self._resolve(path))
            self.resolved[path] = fut
        return await asyncio.shield(fut)

    async def _resolve(self, path: tuple[str, ...]) -> Entry | None:
        txn = self.txn
        if not path:
            return await self.read(txn.root, resume=True)
        parent = await self.resolve(path[:-1])
        if parent is None or parent.kind is not Kind.DIR:
            return None
        return await self.read(lambda: txn.lookup(parent.key, path[-1]), resume=True)

    async def fetch(self, task: _Task) -> Sequence[Entry] | None:
        e = task.entry
        if task.key is None:
            node = await self.resolve(e.path)
            if node is None or node.kind is not Kind.DIR:
                return None
            task.key = node.key
        key = task.key
        page = self.traversal._page
        return await self.read(lambda: self.txn.list(key, e.phase, e.after, page))

    def arrived(self, fut: _Listing) -> None:
        self.in_flight.discard(fut)
        if not fut.cancelled():
            fut.exception()  # retrieved here: a read cut short (_Stop) is no error to log
        if self.active:
            self.start_fetches()  # a page that arrived names work whose reads can go out now

    def start_fetches(self) -> None:
        # Prefetch: the next `window` pieces of work in traversal order get their reads. The
        # order is the stack's, top first, where a piece whose page has arrived but is not
        # processed yet is followed by the work that page leads to: its successors' reads (the
        # next page of files, the subdirectories' listings) are issued as soon as the page
        # arrives, not when the visitor reaches it. Every piece counted is a listing read
        # ahead of the visitor, so at most `window` of them exist at a time.
        if not self.issuing:
            return
        # Until the first piece of work is done, read for it alone: a transaction always
        # makes progress if one piece fits its budget, even a budget shrunk by expiries.
        left = self.traversal._window if self.progressed else 1
        walk = self.stack[-left:]  # deeper entries cannot be among the next `left`
        while walk and left:
            task = walk.pop()
            left -= 1
            fut = task.fetch
            if fut is None:
                fut = task.fetch = asyncio.ensure_future(self.fetch(task))
                self.in_flight.add(fut)
                fut.add_done_callback(self.arrived)
                continue
            if task.successors is None:
                if not fut.done() or fut.cancelled() or fut.exception() is not None:
                    continue
                page = fut.result()
                if page is None:
                    continue
                task.successors = self.successors(task, page)
            walk.extend(task.successors[-left:] if left else ())

    # -- processing -------------------------------------------------------------------------

    def successors(self, task: _Task, page: Sequence[Entry]) -> list[_Task]:
        """The work a listing leads to, in stack order (the next piece last)."""
        e = task.entry
        full = len(page) >= self.traversal._page
        last = page[-1].name if page else None
        if e.phase is Kind.FILE:
            out = [_Task(CursorEntry(e.path, Kind.DIR, None, True), task.key)] \
                if e.after is None else []
            if full:
                out.append(_Task(CursorEntry(e.path, Kind.FILE, last, True), task.key))
            return out
        out = [_Task(CursorEntry(e.path, Kind.DIR, last, True), task.key)] if full else []
        out.extend(_Task(CursorEntry((*e.path, c.name), Kind.FILE, None, False), c.key)
                   for c in reversed(page) if c.kind is Kind.DIR)
        return out

    async def visit_page(self, task: _Task, page: Sequence[Entry] | None) -> list[_Task]:
        """Visit what `task`'s page holds; return the work it leads to."""
        t = self.traversal
        txn = self.txn
        e = task.entry
        if page is None:  # the directory is gone (or is no directory) now
            if not e.entered and t._mode == "any":
                await t._visit(Visit(e.path, None, txn))
                self.visits += 1
            return []
        self.useful_reads += 1
        if not e.entered:
            node = Entry(e.path[-1] if e.path else "", task.key, Kind.DIR)
            await t._visit(Visit(e.path, node, txn))
            self.visits += 1
        if e.phase is Kind.FILE:
            visitor = t._visitor
            for child in page:
                if child.kind is Kind.FILE:
                    # The hot loop: a sync visitor returning None costs one call.
                    result = visitor(Visit((*e.path, child.name), child, txn))
                    if result is not None and inspect.isawaitable(result):
                        await result
                    self.visits += 1
        if task.successors is None:
            task.successors = self.successors(task, page)
        return task.successors

    async def process(self, deadline: float) -> tuple[CursorEntry, ...]:
        """Process work in the mode's order until it runs out, the budget ends, or a read
        was not issued in time; return the cursor (the work left) to commit."""
        t = self.traversal
        stack = self.stack
        clock = self.clock
        while stack:
            if clock() >= deadline - t._commit_time and self.progressed:
                break
            self.start_fetches()
            if t._mode == "strict":
                task = stack[-1]
                if task.fetch is None:
                    break  # not issued: stop at the gap
                if not self.issuing and not task.fetch.done():
                    # Out of budget: a read already issued is waited for while the commit
                    # still fits (on the loop's clock); one never issued ends the batch.
                    left = deadline - t._commit_time - clock()
                    if t._clock is not None or left <= 0:
                        break
                    await asyncio.wait([task.fetch], timeout=left)
                    if not task.fetch.done():
                        break
                try:
                    page = await task.fetch
                except _Stop:
                    break
                index = len(stack) - 1
            else:
                pending = [w.fetch for w in stack[-1:-t._window - 1:-1] if w.fetch is not None]
                if not pending:
                    break
                ready = [f for f in pending if f.done()]
                if not ready:
                    if not self.issuing:
                        break
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    ready = [f for f in pending if f.done()]
                fut = ready[0]
                index = next(i for i in range(len(stack) - 1, -1, -1)
                             if stack[i].fetch is fut)
                task = stack[index]
                try:
                    page = fut.result()
                except _Stop:
                    # Not issued in time: it stays pending; drop it from this round.
                    task.fetch = None
                    self.issuing = False
                    if not any(w.fetch is not None and w.fetch.done() for w in stack):
                        break
                    continue
            stack[index:index + 1] = await self.visit_page(task, page)
            self.progressed = True
        return tuple(w.entry for w in stack)


def _consume(fut: asyncio.Future[_R]) -> None:
    if not fut.cancelled():
        fut.exception()


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

