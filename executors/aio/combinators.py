"""Structured combinators: race, join, try_join, race_ok and merge (futures-concurrency's table)."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections import deque
from collections.abc import AsyncIterable, Awaitable, Callable
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypeVar, final

from executors._fatal import is_fatal

from ._cancel import redeliver_cancel

__all__ = ("race", "join", "try_join", "race_ok", "merge", "Merge")

T = TypeVar("T")

_Mode = Literal["join", "try_join", "race", "race_ok"]


def _start(aws: tuple[Awaitable[T], ...], fn: str) -> list[asyncio.Future[T]]:
    if not aws:
        raise ValueError(f"{fn}() needs at least one awaitable")
    checked: tuple[object, ...] = aws
    for i, aw in enumerate(checked):
        if not inspect.isawaitable(aw):
            for other in aws:  # close what we were handed: no "never awaited" warnings
                if inspect.iscoroutine(other):
                    other.close()
            raise TypeError(f"{fn}() argument {i} is not awaitable: {type(aw).__name__}")
    loop = asyncio.get_running_loop()
    return [asyncio.ensure_future(aw, loop=loop) for aw in aws]


def _redeliver_cancel_if_pending() -> None:
    # Errors beat cancellation, as in TaskGroup: the caller's cancellation that arrived while we
    # gathered the children's errors still reaches its next await.
    task = asyncio.current_task()
    if task is not None:
        redeliver_cancel(task)


def _drop_future(fn: Callable[[int], None], index: int, _future: object) -> None:
    fn(index)


@final
class _Arrivals:
    """The children of a `_supervise` call that finished, in order, and the caller's wake-up.

    `waiter` is the future the caller awaits while nothing has arrived (None otherwise).
    """

    __slots__ = ("finished", "waiter")

    def __init__(self) -> None:
        self.finished: deque[int] = deque()
        self.waiter: asyncio.Future[None] | None = None

    def on_done(self, index: int) -> None:
        self.finished.append(index)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)


async def _supervise(children: list[asyncio.Future[Any]], mode: _Mode) -> Any:
    """Run `children` to the end under `mode`'s rules; the one engine behind four combinators.

    Ordering property: it returns or raises only once every child is done (so every child
    finished its cleanup). Cancellation property: a cancellation of the caller cancels every
    child, waits for them, and propagates; it never calls ``uncancel()`` on the caller.
    Error property: every error a child raised reaches the caller, except the failed attempts
    `race_ok` exists to skip.
    """
    loop = asyncio.get_running_loop()
    n = len(children)
    arrivals = _Arrivals()
    finished = arrivals.finished
    for i, child in enumerate(children):
        child.add_done_callback(functools.partial(_drop_future, arrivals.on_done, i))

    pending = n
    stopping = False  # set once the outcome is decided: the rest are being cancelled
    caller_cancel: asyncio.CancelledError | None = None
    # Errors, with the child's index, for the input-order ExceptionGroups.
    errors: list[tuple[int, BaseException]] = []
    attempts: list[tuple[int, BaseException]] = []  # race_ok's skipped failures
    fatal: BaseException | None = None
    outcome_set = False
    outcome: Any = None

    # Children we cancelled once the outcome was decided: an error they raise is a failure of
    # their cleanup, always reported. A child that finished by itself after the decision just
    # lost (race, race_ok) or is one more failure (try_join).
    cancelled_by_us: set[int] = set()

    def stop() -> None:
        nonlocal stopping
        stopping = True
        for i, child in enumerate(children):
            # Once per child: a second cancel() would interrupt the cleanup the first one
            # started (the ordering property: cleanup completes before we return).
            if i not in cancelled_by_us and not child.done():
                child.cancel()
                cancelled_by_us.add(i)

    try:
        while pending:
            while not finished:
                w = arrivals.waiter = loop.create_future()
                try:
                    await w
                except asyncio.CancelledError as exc:
                    # The caller is being cancelled: cancel the subtree, but keep waiting.
                    if caller_cancel is None:
                        caller_cancel = exc
                    stop()
                finally:
                    arrivals.waiter = None
            index = finished.popleft()
            pending -= 1
            child = children[index]
            if child.cancelled():
                if not stopping:
                    # Cancelled by someone else (an awaitable handed in was a future, say): a
                    # failure, since it has no value; race_ok/race skip it as an attempt.
                    try:
                        child.result()
                    except asyncio.CancelledError as exc:
                        (errors if mode in ("join", "try_join") else attempts).append((index, exc))
                    if mode == "try_join":
                        stop()
                continue
            error = child.exception()
            if error is None:
                # join/try_join collect results at the end, in input order.
                if not stopping and mode in ("race", "race_ok"):
                    outcome, outcome_set = child.result(), True
                    stop()
                continue
            if is_fatal(error) or not isinstance(error, Exception):
                if fatal is None and is_fatal(error):
                    fatal = error
                errors.append((index, error))
                stop()
                continue
            if index in cancelled_by_us:
                errors.append((index, error))  # raised during its cancellation: reported
            elif stopping and mode in ("race", "race_ok"):
                pass  # finished after the winner: it lost
            elif mode == "race_ok":
                attempts.append((index, error))
            elif mode == "join":
                errors.append((index, error))
            else:  # race (the first completion is an error) and try_join
                errors.append((index, error))
                stop()
    finally:
        if pending:  # only when something above raised unexpectedly: never leave children
            stop()
        arrivals.waiter = None

    if fatal is not None:
        raise fatal
    if caller_cancel is not None and not errors:
        raise caller_cancel
    if errors:
        if caller_cancel is not None:
            _redeliver_cancel_if_pending()
        ordered = [e for _, e in sorted(errors, key=lambda pair: pair[0])]
        if mode == "race" and not outcome_set:
            # The winner's error first, then whatever losers raised while being cancelled.
            winner = errors[0][1]
            ordered = [winner, *(e for e in ordered if e is not winner)]
        try:
            raise BaseExceptionGroup(f"{mode}(): {len(ordered)} of {n} failed", ordered)
        finally:
            ordered = []
            errors = []
    if mode in ("race", "race_ok"):
        if outcome_set:
            return outcome
        ordered = [e for _, e in sorted(attempts, key=lambda pair: pair[0])]
        try:
            raise BaseExceptionGroup(f"{mode}(): all {n} failed", ordered)
        finally:
            ordered = []
            attempts = []
    return [child.result() for child in children]


async def join(*aws: Awaitable[T]) -> list[T]:
    """Wait for every awaitable; return their results in input order.

    Failures do not stop the others: once all have finished, an `ExceptionGroup` of every
    error (in input order) is raised instead. If the caller is cancelled, every child is
    cancelled and awaited before `asyncio.CancelledError` propagates; no child outlives the
    call.

    Raises:
        ValueError: no awaitable given. TypeError: an argument is not awaitable.
        ExceptionGroup: one or more children failed (`BaseExceptionGroup` if one raised a
            non-Exception). KeyboardInterrupt/SystemExit from a child come out bare.

    Example:
        >>> asyncio.run(join(asyncio.sleep(0.02, "slow"), asyncio.sleep(0, "fast")))
        ['slow', 'fast']
    """
    return await _supervise(_start(aws, "join"), "join")  # type: ignore[no-any-return]


async def try_join(*aws: Awaitable[T]) -> list[T]:
    """Like `join`, but the first failure cancels the rest (partial results are dropped).

    Raises:
        ValueError: no awaitable given. TypeError: an argument is not awaitable.
        ExceptionGroup: the first error, plus any error a sibling raised while it was being
            cancelled.

    Example:
        >>> asyncio.run(try_join(asyncio.sleep(0, 1), asyncio.sleep(0, 2)))
        [1, 2]
    """
    return await _supervise(_start(aws, "try_join"), "try_join")  # type: ignore[no-any-return]


async def race(*aws: Awaitable[T]) -> T:
    """Return the outcome of the first awaitable to complete, success or error.

    The losers are cancelled and awaited (their cleanup completes) before the call returns.

    Raises:
        ValueError: no awaitable given. TypeError: an argument is not awaitable.
        ExceptionGroup: the first to complete failed (its error first, then any error a loser
            raised while being cancelled), or a loser raised while being cancelled.

    Example:
        >>> asyncio.run(race(asyncio.sleep(10, "slow"), asyncio.sleep(0, "fast")))
        'fast'
    """
    return await _supervise(_start(aws, "race"), "race")  # type: ignore[no-any-return]


async def race_ok(*aws: Awaitable[T]) -> T:
    """Return the result of the first awaitable to *succeed*; failures are skipped.

    The others are cancelled and awaited once one succeeds.

    Raises:
        ValueError: no awaitable given. TypeError: an argument is not awaitable.
        ExceptionGroup: every awaitable failed (errors in input order), or a loser raised
            while being cancelled.

    Example:
        >>> async def fails() -> str:
        ...     raise OSError("mirror down")
        >>> asyncio.run(race_ok(fails(), asyncio.sleep(0.01, "mirror 2")))
        'mirror 2'
    """
    return await _supervise(_start(aws, "race_ok"), "race_ok")  # type: ignore[no-any-return]


# -- merge ----------------------------------------------------------------------------------

_DONE: Any = object()


@final
class Merge(Generic[T]):
    """The items of several async iterables, as they arrive; made by `merge`.

    Use it as ``async with merge(a, b) as items: async for item in items: ...``. Each source is
    pulled by its own task, one item ahead at most (a source waits until its item is taken), so
    a source that is always ready cannot starve the others: items are delivered in the order
    they became ready, and each source's own order is kept. Leaving the block (``break``, an
    error, a cancellation) cancels every pulling task, waits for it, and closes the sources
    that have ``aclose()``; no task outlives the block.

    It is not an async generator that yields inside a task group: closing such a generator
    raises ``BaseExceptionGroup([GeneratorExit])`` (gh-135736). Used without ``async with``, it
    starts on the first ``__anext__`` and must be closed with `aclose()` (or
    `contextlib.aclosing`) if not iterated to the end.
    """

    __slots__ = ("_closed", "_error", "_live", "_loop", "_pullers", "_ready", "_sources",
                 "_started", "_waiter")

    def __init__(self, sources: tuple[AsyncIterable[T], ...]) -> None:
        self._sources = sources
        self._pullers: list[asyncio.Task[None]] = []
        # Items ready to be taken, in arrival order, each with the future its puller waits on.
        self._ready: deque[tuple[Any, asyncio.Future[None] | None]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._started = False
        self._closed = False
        self._live = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._started else "new")
        return (f"<Merge {state} sources={len(self._sources)} live={self._live} "
                f"ready={len(self._ready)}>")

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._live = len(self._sources)
        for i, source in enumerate(self._sources):
            self._pullers.append(
                self._loop.create_task(self._pull(source), name=f"merge-source-{i}")
            )

    def _nudge(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _pull(self, source: AsyncIterable[T]) -> None:
        assert self._loop is not None
        iterator = aiter(source)
        try:
            while True:
                item = await anext(iterator, _DONE)
                if item is _DONE:
                    return
                taken = self._loop.create_future()
                self._ready.append((item, taken))
                self._nudge()
                await taken  # backpressure: one item ahead per source
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if self._error is None:
                self._error = exc
            raise
        finally:
            self._live -= 1
            self._nudge()
            aclose = getattr(iterator, "aclose", None)
            if aclose is not None:
                await aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        if self._closed:
            raise StopAsyncIteration
        self._start()
        loop = self._loop
        assert loop is not None
        while True:
            if self._error is not None:
                await self.aclose()  # raises the error, grouped
            if self._ready:
                item, taken = self._ready.popleft()
                if taken is not None and not taken.done():
                    taken.set_result(None)
                return item  # type: ignore[no-any-return]
            if self._live == 0:
                await self.aclose()
                raise StopAsyncIteration
            self._waiter = loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def aclose(self) -> None:
        """Cancel the pulling tasks, wait for them (their sources are closed), and stop.

        Idempotent. If the caller is cancelled while it waits, it keeps waiting for the pulling
        tasks, then propagates the cancellation.

        Raises:
            ExceptionGroup: a source raised (with any error raised while closing the others).
        """
        self._closed = True
        self._ready.clear()
        for puller in self._pullers:
            puller.cancel()
        cancelled: asyncio.CancelledError | None = None
        errors: list[BaseException] = []
        pullers, self._pullers = self._pullers, []
        for puller in pullers:
            while not puller.done():
                try:
                    await asyncio.wait([puller])
                except asyncio.CancelledError as exc:
                    cancelled = cancelled or exc
            if not puller.cancelled() and puller.exception() is not None:
                errors.append(puller.exception())  # type: ignore[arg-type]
        error, self._error = self._error, None
        if error is not None and error not in errors:
            errors.insert(0, error)
        fatal = next((e for e in errors if is_fatal(e)), None)
        try:
            if fatal is not None:
                raise fatal
            if cancelled is not None and not errors:
                raise cancelled
            if errors:
                if cancelled is not None:
                    _redeliver_cancel_if_pending()
                raise BaseExceptionGroup(f"merge(): {len(errors)} source(s) failed", errors)
        finally:
            errors = []
            error = fatal = None

    async def __aenter__(self) -> Self:
        self._start()
        return self

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        except BaseExceptionGroup:
            if isinstance(exc, asyncio.CancelledError):
                # The block was cancelled (in __anext__, say) and a source failed: the errors
                # win, and the cancellation, which they replace, must still reach the caller's
                # next await (as aclose() does for a cancellation that arrives while it waits).
                _redeliver_cancel_if_pending()
            raise
        finally:
            exc = None


def merge(*sources: AsyncIterable[T]) -> Merge[T]:
    """Merge async iterables into one stream of items, delivered as they arrive.

    Returns a `Merge`: ``async with merge(a, b) as items: async for item in items: ...``.
    Every item is delivered exactly once; each source's order is kept; no source starves the
    others; leaving the block cancels and closes every source.

    Raises:
        ValueError: no source given. TypeError: a source is not an async iterable.

    Example:
        >>> async def count(prefix, n):
        ...     for i in range(n):
        ...         yield f"{prefix}{i}"
        ...         await asyncio.sleep(0)
        >>> async def main() -> list[str]:
        ...     async with merge(count("a", 2), count("b", 2)) as items:
        ...         return sorted([item async for item in items])
        >>> asyncio.run(main())
        ['a0', 'a1', 'b0', 'b1']
    """
    if not sources:
        raise ValueError("merge() needs at least one async iterable")
    for i, source in enumerate(sources):
        if not hasattr(source, "__aiter__"):
            raise TypeError(f"merge() argument {i} is not an async iterable: "
                            f"{type(source).__name__}")
    return Merge(sources)
