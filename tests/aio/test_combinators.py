"""race, join, try_join, race_ok, merge: the three tree properties (hypothesis) and semantics.

The tree properties (research §4.2), checked after every generated scenario:

- ordering: when the call returns or raises, none of its child tasks is alive, and every child
  that saw a cancellation finished its (asynchronous) cleanup first;
- cancellation: cancelling the caller mid-flight cancels every unfinished child, the caller
  sees CancelledError (or the children's errors, with the cancellation re-delivered), and its
  ``cancelling()`` count is exactly the one outside request;
- errors: child errors reach the caller, following futures-concurrency's table.

Time is counted in event-loop iterations (``await asyncio.sleep(0)``), so scenarios are
deterministic and fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from helpers.aio_groups import until_cancelled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executors.aio import join, merge, race, race_ok, try_join


class Boom(Exception):
    """A child's failure; carries the child's index."""


class CleanupError(Exception):
    """Raised by a child while it handles its cancellation."""


@dataclasses.dataclass(frozen=True)
class Spec:
    steps: int  # loop iterations before the outcome
    ok: bool
    cleanup_steps: int  # loop iterations of async cleanup when cancelled
    cleanup_fails: bool = False


@dataclasses.dataclass
class Log:
    started: set[int] = dataclasses.field(default_factory=set)
    cancelled: set[int] = dataclasses.field(default_factory=set)
    cleaned: set[int] = dataclasses.field(default_factory=set)


async def child(i: int, spec: Spec, log: Log) -> int:
    log.started.add(i)
    try:
        for _ in range(spec.steps):
            await asyncio.sleep(0)
    except asyncio.CancelledError:
        log.cancelled.add(i)
        for _ in range(spec.cleanup_steps):
            await asyncio.sleep(0)
        log.cleaned.add(i)
        if spec.cleanup_fails:
            raise CleanupError(i) from None
        raise
    if not spec.ok:
        raise Boom(i)
    return i


COMBINATORS: dict[str, Callable[..., Awaitable[Any]]] = {
    "join": join, "try_join": try_join, "race": race, "race_ok": race_ok,
}

specs = st.lists(
    st.builds(Spec, steps=st.integers(0, 5), ok=st.booleans(), cleanup_steps=st.integers(0, 3)),
    min_size=1, max_size=6,
)
specs_with_cleanup_errors = st.lists(
    st.builds(Spec, steps=st.integers(0, 5), ok=st.booleans(), cleanup_steps=st.integers(0, 3),
              cleanup_fails=st.booleans()),
    min_size=1, max_size=6,
)

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@dataclasses.dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    cancelling_at_catch: int = 0
    redelivered: bool = False
    leftover_children: int = 0


def run_in_caller(body: Callable[[], Awaitable[Any]], cancel_after: int | None) -> Outcome:
    """Run `body` in a caller task and record how it ended; optionally cancel the caller after
    N loop iterations. Records the caller's cancelling() when it caught an error, whether
    children outlived the call, and whether a cancellation hidden behind an exception group was
    re-delivered at the caller's next await."""
    outcome = Outcome()

    async def caller() -> None:
        before = asyncio.all_tasks()
        try:
            outcome.value = await body()
        except BaseException as exc:  # recorded for the assertions
            outcome.error = exc
            outcome.cancelling_at_catch = asyncio.current_task().cancelling()  # type: ignore[union-attr]
        # Ordering: no child of ours is alive once the call is over.
        outcome.leftover_children = len(asyncio.all_tasks() - before)
        if isinstance(outcome.error, BaseExceptionGroup) and outcome.cancelling_at_catch:
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                outcome.redelivered = True

    async def main() -> None:
        task = asyncio.create_task(caller())
        if cancel_after is not None:
            for _ in range(cancel_after):
                await asyncio.sleep(0)
            if not task.done():
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # cancelled before its first step
            await task

    asyncio.run(main())
    return outcome


def run_scenario(name: str, plan: list[Spec], cancel_after: int | None) -> tuple[Outcome, Log]:
    """Run the combinator in a caller task; optionally cancel the caller after N iterations."""
    log = Log()

    def call() -> Awaitable[Any]:
        return COMBINATORS[name](*(child(i, s, log) for i, s in enumerate(plan)))

    return run_in_caller(call, cancel_after), log


def check_tree_properties(outcome: Outcome, log: Log) -> None:
    assert outcome.leftover_children == 0, "a child outlived the call"
    assert log.cancelled <= log.cleaned, "returned before a cancelled child finished its cleanup"


def first_completion(plan: list[Spec], candidates: list[int]) -> int:
    return min(candidates, key=lambda i: (plan[i].steps, i))


def members(error: BaseException | None) -> list[BaseException]:
    assert isinstance(error, BaseExceptionGroup), f"expected an exception group, got {error!r}"
    return list(error.exceptions)


@pytest.mark.parametrize("name", sorted(COMBINATORS))
@SETTINGS
@given(plan=specs)
def test_semantics_and_ordering_without_cancellation(name: str, plan: list[Spec]) -> None:
    """Results and errors follow the table (join: input order, EG after all; try_join: first
    error cancels the rest; race: first completion, error or not; race_ok: first success, or
    an EG of every error in input order) and no child outlives the call."""
    outcome, log = run_scenario(name, plan, cancel_after=None)
    check_tree_properties(outcome, log)
    failing = [i for i, s in enumerate(plan) if not s.ok]
    succeeding = [i for i, s in enumerate(plan) if s.ok]
    if name == "join":
        assert log.cancelled == set()
        if failing:
            assert [e.args[0] for e in members(outcome.error)] == failing
        else:
            assert outcome.value == list(range(len(plan)))
    elif name == "try_join":
        if failing:
            first = first_completion(plan, failing)
            got = [e.args[0] for e in members(outcome.error)]
            assert first in got and set(got) <= set(failing)
            # Nobody that finished no later than the first error is cancelled; everybody still
            # running a few iterations later (the reaction: a done-callback, then a wake-up) is.
            at = plan[first].steps
            assert {i for i, s in enumerate(plan) if s.steps <= at}.isdisjoint(log.cancelled)
            assert {i for i, s in enumerate(plan) if s.steps > at + 2} <= log.cancelled
        else:
            assert outcome.value == list(range(len(plan)))
    elif name == "race":
        winner = first_completion(plan, list(range(len(plan))))
        if plan[winner].ok:
            assert outcome.error is None and outcome.value == winner
        else:
            assert members(outcome.error)[0].args[0] == winner
    else:  # race_ok
        if succeeding:
            assert outcome.error is None
            assert outcome.value == first_completion(plan, succeeding)
        else:
            assert isinstance(outcome.error, ExceptionGroup)
            assert [e.args[0] for e in members(outcome.error)] == failing


@pytest.mark.parametrize("name", sorted(COMBINATORS))
@SETTINGS
@given(plan=specs, cancel_after=st.integers(0, 7))
def test_caller_cancellation_reaches_every_child(name: str, plan: list[Spec],
                                                 cancel_after: int) -> None:
    """Cancelling the caller cancels every unfinished child, waits for its cleanup, and
    propagates CancelledError with cancelling() == 1 (the one outside request); if children
    failed meanwhile, their errors win and the cancellation is re-delivered."""
    outcome, log = run_scenario(name, plan, cancel_after=cancel_after)
    check_tree_properties(outcome, log)
    if isinstance(outcome.error, asyncio.CancelledError):
        assert outcome.cancelling_at_catch == 1
        assert log.started <= log.cancelled | finished_by_themselves(plan, log)
    elif isinstance(outcome.error, BaseExceptionGroup):
        assert outcome.cancelling_at_catch in (0, 1)
        assert outcome.redelivered == (outcome.cancelling_at_catch == 1)
    else:
        assert outcome.error is None
        assert outcome.cancelling_at_catch == 0


def finished_by_themselves(plan: list[Spec], log: Log) -> set[int]:
    return {i for i in log.started if i not in log.cancelled}


@pytest.mark.parametrize("name", sorted(COMBINATORS))
@SETTINGS
@given(plan=specs_with_cleanup_errors, cancel_after=st.one_of(st.none(), st.integers(0, 7)))
def test_cleanup_errors_reach_the_caller(name: str, plan: list[Spec],
                                         cancel_after: int | None) -> None:
    """An error a child raises while being cancelled is never lost: the call raises a group
    containing it (or a group with the decisive error first)."""
    outcome, log = run_scenario(name, plan, cancel_after=cancel_after)
    check_tree_properties(outcome, log)
    cleanup_failed = {i for i in log.cancelled if plan[i].cleanup_fails}
    if cleanup_failed:
        got = {e.args[0] for e in members(outcome.error) if isinstance(e, CleanupError)}
        assert got == cleanup_failed


# -- plain examples ---------------------------------------------------------------------------


def test_empty_and_bad_arguments() -> None:
    """No awaitable is a ValueError; a non-awaitable a TypeError naming its position, and the
    coroutines already handed over are closed (no "never awaited" warning)."""

    async def main() -> None:
        for fn in COMBINATORS.values():
            with pytest.raises(ValueError, match="at least one"):
                await fn()
            with pytest.raises(TypeError, match="argument 1"):
                await fn(asyncio.sleep(0), 42)
        with pytest.raises(ValueError, match="at least one"):
            merge()
        with pytest.raises(TypeError, match="argument 0"):
            merge([1, 2])  # type: ignore[arg-type]

    asyncio.run(main())


def test_join_accepts_futures_and_keeps_input_order() -> None:
    """join takes any awaitable (tasks, futures) and returns results in input order."""

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[str] = loop.create_future()
        loop.call_later(0.01, fut.set_result, "future")
        return await join(asyncio.sleep(0.02, "slow"), fut, asyncio.sleep(0, "fast"))

    assert asyncio.run(main()) == ["slow", "future", "fast"]


def test_base_exceptions_come_out_bare() -> None:
    """KeyboardInterrupt/SystemExit from a child are raised bare after the rest is cancelled."""
    cancelled: list[bool] = []

    async def stop() -> None:
        raise SystemExit(3)

    async def main() -> None:
        await join(until_cancelled(cancelled), _after_a_step(stop()))

    with pytest.raises(SystemExit):
        asyncio.run(main())
    assert cancelled == [True]


async def _after_a_step(aw: Awaitable[None]) -> None:
    await asyncio.sleep(0)
    await aw


# -- merge ------------------------------------------------------------------------------------


async def source(name: str, n: int, log: list[str], *, delay: int = 0,
                 fail_at: int | None = None) -> AsyncIterator[str]:
    try:
        for i in range(n):
            for _ in range(delay):
                await asyncio.sleep(0)
            if i == fail_at:
                raise Boom(name)
            yield f"{name}{i}"
    finally:
        log.append(f"closed {name}")


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3)), min_size=1, max_size=5),
       take=st.one_of(st.none(), st.integers(0, 20)))
def test_merge_delivers_each_item_once_in_source_order(sizes: list[tuple[int, int]],
                                                        take: int | None) -> None:
    """Every item exactly once, each source's order kept; stopping early (break) cancels and
    closes every source and leaves no task behind."""
    log: list[str] = []

    async def main() -> tuple[list[str], int]:
        before = asyncio.all_tasks()
        got: list[str] = []
        sources = [source(chr(97 + k), n, log, delay=d) for k, (n, d) in enumerate(sizes)]
        async with merge(*sources) as items:
            async for item in items:
                if take is not None and len(got) == take:
                    break
                got.append(item)
        return got, len(asyncio.all_tasks() - before)

    got, leftover = asyncio.run(main())
    assert leftover == 0
    total = sum(n for n, _ in sizes)
    if take is None or take >= total:
        assert len(got) == total
    for k, (n, _) in enumerate(sizes):
        mine = [x for x in got if x[0] == chr(97 + k)]
        assert mine == [f"{chr(97 + k)}{i}" for i in range(len(mine))]
        assert len(mine) <= n
    # Every source's finally ran before the block was left.
    assert sorted(log) == sorted(f"closed {chr(97 + k)}" for k in range(len(sizes)))


def test_merge_is_fair() -> None:
    """A source that is always ready does not starve a slower one."""

    async def fast() -> AsyncIterator[str]:
        while True:
            yield "f"

    async def slow() -> AsyncIterator[str]:
        for _ in range(3):
            await asyncio.sleep(0)
            yield "s"

    async def main() -> list[str]:
        got: list[str] = []
        async with merge(fast(), slow()) as items:
            async for item in items:
                got.append(item)
                if got.count("s") == 3:
                    break
        return got

    got = asyncio.run(main())
    assert got.count("s") == 3 and len(got) < 20


def test_merge_source_error_cancels_others_and_raises_group() -> None:
    """A failing source: the others are cancelled and closed, and the consumer gets an
    ExceptionGroup with the error."""
    log: list[str] = []

    async def main() -> list[str]:
        got: list[str] = []
        with pytest.raises(ExceptionGroup) as info:
            async with merge(source("a", 100, log, delay=1),
                             source("b", 5, log, fail_at=2)) as items:
                async for item in items:
                    # Not a comprehension: the items before the error must survive it.
                    got.append(item)  # noqa: PERF401
        assert [type(e) for e in info.value.exceptions] == [Boom]
        return got

    got = asyncio.run(main())
    assert "b0" in got and "b1" in got and "b2" not in got
    assert sorted(log) == ["closed a", "closed b"]


def test_merge_consumer_cancelled_cleans_up() -> None:
    """Cancelling the consumer cancels and closes every source before CancelledError leaves
    the block; the consumer's cancelling() is the one request."""
    log: list[str] = []
    seen: list[int] = []

    async def consumer(started: asyncio.Event) -> None:
        try:
            async with merge(source("a", 10**6, log, delay=1),
                             source("b", 10**6, log, delay=2)) as items:
                async for _ in items:
                    started.set()
        except asyncio.CancelledError:
            seen.append(asyncio.current_task().cancelling())  # type: ignore[union-attr]
            raise

    async def main() -> None:
        started = asyncio.Event()
        t = asyncio.create_task(consumer(started))
        await started.wait()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    assert seen == [1]
    assert sorted(log) == ["closed a", "closed b"]


def test_merge_cancelled_consumer_and_failing_source_redelivers_the_cancellation() -> None:
    """The consumer is cancelled while it waits for an item, and a source fails while being
    closed: the block raises the source's error (errors win) and the cancellation still
    reaches the consumer at its next await, with cancelling() at the one request."""
    log: list[str] = []

    async def fails_when_cancelled() -> AsyncIterator[int]:
        try:
            await asyncio.sleep(10)
            yield 1
        except asyncio.CancelledError:
            raise Boom("cleanup") from None

    async def consumer(waiting: asyncio.Event) -> None:
        try:
            async with merge(fails_when_cancelled()) as items:
                waiting.set()
                async for _ in items:
                    pass
        except* Boom:
            log.append(f"group, cancelling={asyncio.current_task().cancelling()}")  # type: ignore[union-attr]
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            log.append("cancellation re-delivered")
            raise
        log.append("cancellation lost")

    async def main() -> None:
        waiting = asyncio.Event()
        t = asyncio.create_task(consumer(waiting))
        await waiting.wait()
        await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    asyncio.run(main())
    assert log == ["group, cancelling=1", "cancellation re-delivered"]


def test_merge_without_context_manager_and_aclose() -> None:
    """Used as a plain async iterator it runs to exhaustion; aclose() after an early stop
    closes the sources; iterating after aclose() ends at once."""
    log: list[str] = []

    async def main() -> tuple[list[str], list[str]]:
        full = [x async for x in merge(source("a", 2, log), source("b", 2, log))]
        it = merge(source("c", 5, log), source("d", 5, log))
        first = [await anext(it)]
        await it.aclose()
        await it.aclose()  # idempotent
        rest = [x async for x in it]
        assert rest == [] and "closed" in repr(it)
        return sorted(full), first

    full, first = asyncio.run(main())
    assert full == ["a0", "a1", "b0", "b1"]
    assert first[0] in ("c0", "d0")
    assert sorted(log) == ["closed a", "closed b", "closed c", "closed d"]


def test_merge_generator_yield_inside_group_is_not_our_shape() -> None:
    """Merge's aclose() raises nothing after an early break (gh-135736 broke the naive
    async-generator-inside-a-TaskGroup shape with BaseExceptionGroup([GeneratorExit]))."""

    async def main() -> None:
        it = merge(source("a", 10, []), source("b", 10, []))
        async for _ in it:
            break
        await it.aclose()

    asyncio.run(main())


# -- merge: the three tree properties, as properties ------------------------------------------


@dataclasses.dataclass(frozen=True)
class SourceSpec:
    items: int
    delay: int  # loop iterations before each item
    fail_at: int | None  # raise Boom instead of yielding this item
    cleanup_steps: int  # loop iterations of async cleanup in the source's finally


@dataclasses.dataclass
class MergeLog:
    started: set[int] = dataclasses.field(default_factory=set)
    cleaned: set[int] = dataclasses.field(default_factory=set)
    raised: set[int] = dataclasses.field(default_factory=set)


async def spec_source(k: int, spec: SourceSpec, log: MergeLog) -> AsyncIterator[tuple[int, int]]:
    """Yields (k, i); on cancellation or close (GeneratorExit at a ``yield``), runs
    `cleanup_steps` iterations of async cleanup. `log.cleaned` records that it ended: by itself,
    by its failure, or after its whole cancellation cleanup."""
    log.started.add(k)
    try:
        for i in range(spec.items):
            for _ in range(spec.delay):
                await asyncio.sleep(0)
            if i == spec.fail_at:
                log.raised.add(k)
                log.cleaned.add(k)
                raise Boom(k)
            yield k, i
    except (asyncio.CancelledError, GeneratorExit):
        for _ in range(spec.cleanup_steps):
            await asyncio.sleep(0)
        log.cleaned.add(k)
        raise
    log.cleaned.add(k)


source_specs = st.lists(
    st.builds(SourceSpec, items=st.integers(0, 6), delay=st.integers(0, 2),
              fail_at=st.one_of(st.none(), st.integers(0, 6)), cleanup_steps=st.integers(0, 2)),
    min_size=1, max_size=4,
)


@SETTINGS
@given(plan=source_specs, take=st.one_of(st.none(), st.integers(0, 12)),
       cancel_after=st.one_of(st.none(), st.integers(0, 12)))
def test_merge_tree_properties(plan: list[SourceSpec], take: int | None,
                               cancel_after: int | None) -> None:
    """merge's three properties over generated sources (items, delays, a failure, async
    cleanup), a consumer that may stop early, and a consumer that may be cancelled:

    - ordering: once the block is left, no pulling task is alive and every source that started
      finished its (async) cleanup;
    - cancellation: a cancelled consumer sees CancelledError with cancelling() == 1 (or the
      sources' errors, with the cancellation re-delivered at its next await);
    - errors: every error a source raised reaches the consumer, in one exception group, and
      nothing else does; each source's own order is kept and no item is delivered twice.
    """
    log = MergeLog()
    got: list[tuple[int, int]] = []

    async def consume() -> None:
        async with merge(*(spec_source(k, s, log) for k, s in enumerate(plan))) as items:
            async for item in items:
                if take is not None and len(got) == take:
                    break
                got.append(item)

    outcome = run_in_caller(consume, cancel_after)
    assert outcome.leftover_children == 0, "a pulling task outlived the block"
    assert log.started <= log.cleaned, "left the block before a source finished its cleanup"
    error = outcome.error
    if log.raised:
        assert isinstance(error, ExceptionGroup), error
        assert sorted(e.args[0] for e in error.exceptions) == sorted(log.raised)
        assert outcome.redelivered == (outcome.cancelling_at_catch == 1)
    elif isinstance(error, asyncio.CancelledError):
        assert cancel_after is not None and outcome.cancelling_at_catch == 1
    else:
        assert error is None, error
    assert len(set(got)) == len(got)
    for k in range(len(plan)):
        mine = [i for src, i in got if src == k]
        assert mine == list(range(len(mine)))
