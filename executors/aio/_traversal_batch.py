"""One transaction's work in `executors.aio.traversal`: its reads, its processing, its cursor.

`Traversal` (in `executors.aio.traversal`) drives a traversal across transactions: it begins
one, hands it to a `Batch`, commits or rolls back, retries, and adapts the budget. A `Batch`
lives for one transaction and knows nothing of retries: it issues reads ahead of the visitor,
processes the pages in the mode's order and returns the cursor to commit. What it needs of the
traversal comes in a `BatchSettings`, and the traversal-wide read counters it updates as reads
happen are a `ReadCounters` the traversal owns, so neither writes the other's private fields.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, final

from ._traversal_store import CursorEntry, Entry, Kind, Mode, Transaction, Visit, Visitor
from .locks import Semaphore

__all__ = ("Batch", "BatchSettings", "ReadCounters", "Stop")

_R = TypeVar("_R")


class Stop(Exception):
    """Internal: the transaction stops issuing reads (time budget or batch size)."""


@final
@dataclasses.dataclass(frozen=True, slots=True)
class BatchSettings:
    """What every batch of one traversal is configured with (see `Traversal`'s arguments)."""

    mode: Mode
    visitor: Visitor
    page_size: int
    window: int
    limiter: Semaphore
    max_batch: int | None
    #: True: the batch runs on the loop's clock and may wait for an issued read while the
    #: commit still fits; False: a caller's clock, which the loop's timeouts do not follow.
    loop_clock: bool


@final
@dataclasses.dataclass(slots=True)
class ReadCounters:
    """The traversal-wide read counters, updated by each batch as its reads happen (whether
    or not the transaction commits)."""

    reads: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    #: A smoothed mean of one read's time, in clock seconds.
    read_time: float = 0.0


@dataclasses.dataclass(slots=True, eq=False)
class _Task:
    entry: CursorEntry
    key: object = None  # resolved in the current transaction (None: not yet)
    fetch: asyncio.Future[Sequence[Entry] | None] | None = None
    # The work this task's page leads to (top last), derived as soon as the page arrives, so
    # that their reads are issued before the visitor gets here; None: not derived yet.
    successors: list[_Task] | None = None


_Listing = asyncio.Future[Sequence[Entry] | None]


@final
class Batch:
    """The work of one transaction of a `Traversal`: what it reads, processes and counts.

    Made by `Traversal._transaction` for one transaction and dropped after it. Reads go out
    ahead of the visitor (`start_fetches`), each through `read`, which holds a permit of the
    traversal's limiter and stops issuing once the budget (or ``max_batch``) says so; `process`
    handles the pages in the mode's order and returns the cursor to commit; `end` cancels the
    reads still running. Counters of the traversal as a whole (`ReadCounters`) are updated as
    reads happen; this transaction's own counts are added to the traversal's by the caller only
    if it commits.
    """

    __slots__ = ("active", "clock", "counters", "in_flight", "issuing", "progressed", "reads",
                 "resolved", "resume_reads", "settings", "stack", "stop_issuing_at", "txn",
                 "useful_reads", "visits")

    def __init__(self, settings: BatchSettings, counters: ReadCounters, txn: Transaction,
                 cursor: Sequence[CursorEntry], clock: Callable[[], float],
                 stop_issuing_at: float) -> None:
        self.settings = settings
        self.counters = counters
        self.txn = txn
        self.clock = clock
        self.stop_issuing_at = stop_issuing_at
        #: The work left, top (next in strict order) last.
        self.stack = [_Task(e) for e in cursor]
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
        max_batch = self.settings.max_batch
        if self.issuing and self.progressed and (
                self.clock() >= self.stop_issuing_at
                or (max_batch is not None and self.visits >= max_batch)):
            self.issuing = False
        return self.issuing

    async def read(self, fn: Callable[[], Awaitable[_R]], resume: bool = False) -> _R:
        if not self.may_issue():
            raise Stop
        c = self.counters
        async with self.settings.limiter:
            if not self.may_issue():
                raise Stop
            self.reads += 1
            self.resume_reads += resume
            c.reads += 1
            c.in_flight += 1
            c.max_in_flight = max(c.max_in_flight, c.in_flight)
            began = self.clock()
            try:
                return await fn()
            finally:
                c.in_flight -= 1
                # A smoothed mean: a read's time includes its wait in the store's own queue,
                # so one slow read must not end every later batch early.
                c.read_time += 0.2 * (self.clock() - began - c.read_time)

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
        page = self.settings.page_size
        return await self.read(lambda: self.txn.list(key, e.phase, e.after, page))

    def arrived(self, fut: _Listing) -> None:
        self.in_flight.discard(fut)
        if not fut.cancelled():
            fut.exception()  # retrieved here: a read cut short (Stop) is no error to log
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
        left = self.settings.window if self.progressed else 1
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

    def end(self) -> list[asyncio.Future[object]]:
        """End the transaction's reads: cancel those still running; return them (to wait for
        their unwinding before a commit)."""
        self.active = False
        # Reads of the finished transaction are no longer wanted; collect their outcomes so
        # that no "exception was never retrieved" is logged for a read cut short. (A finished
        # listing read's outcome was retrieved when it arrived.)
        futures: list[asyncio.Future[Sequence[Entry] | None] | asyncio.Future[Entry | None]]
        futures = list(self.in_flight)
        futures.extend(self.resolved.values())
        out: list[asyncio.Future[object]] = []
        for fut in futures:
            if not fut.done():
                fut.cancel()
                out.append(fut)  # type: ignore[arg-type]
            fut.add_done_callback(_consume)
        return out

    # -- processing -------------------------------------------------------------------------

    def successors(self, task: _Task, page: Sequence[Entry]) -> list[_Task]:
        """The work a listing leads to, in stack order (the next piece last)."""
        e = task.entry
        full = len(page) >= self.settings.page_size
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

    async def visit(self, visit: Visit) -> None:
        result = self.settings.visitor(visit)
        if result is not None and inspect.isawaitable(result):
            await result
        self.visits += 1

    async def visit_page(self, task: _Task, page: Sequence[Entry] | None) -> list[_Task]:
        """Visit what `task`'s page holds; return the work it leads to."""
        txn = self.txn
        e = task.entry
        if page is None:  # the directory is gone (or is no directory) now
            if not e.entered and self.settings.mode == "any":
                await self.visit(Visit(e.path, None, txn))
            return []
        self.useful_reads += 1
        if not e.entered:
            node = Entry(e.path[-1] if e.path else "", task.key, Kind.DIR)
            await self.visit(Visit(e.path, node, txn))
        if e.phase is Kind.FILE:
            visitor = self.settings.visitor
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

    async def process(self, finish_by: float) -> tuple[CursorEntry, ...]:
        """Process work in the mode's order until it runs out, the budget ends (processing
        must stop by `finish_by`, on the batch's clock, for the commit to fit), or a read was
        not issued in time; return the cursor (the work left) to commit."""
        settings = self.settings
        stack = self.stack
        clock = self.clock
        while stack:
            if clock() >= finish_by and self.progressed:
                break
            self.start_fetches()
            if settings.mode == "strict":
                task = stack[-1]
                if task.fetch is None:
                    break  # not issued: stop at the gap
                if not self.issuing and not task.fetch.done():
                    # Out of budget: a read already issued is waited for while the commit
                    # still fits (on the loop's clock); one never issued ends the batch.
                    left = finish_by - clock()
                    if not settings.loop_clock or left <= 0:
                        break
                    await asyncio.wait([task.fetch], timeout=left)
                    if not task.fetch.done():
                        break
                try:
                    page = await task.fetch
                except Stop:
                    break
                index = len(stack) - 1
            else:
                pending = [w.fetch for w in stack[-1:-settings.window - 1:-1]
                           if w.fetch is not None]
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
                except Stop:
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
