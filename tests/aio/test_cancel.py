"""The caller's cancellation state after a task group or a combinator raises its children's
errors: exactly what Python 3.13's asyncio.TaskGroup leaves, on every supported version."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from helpers.aio_groups import EAGER, Boom, run

from executors.aio import TaskGroup, join, merge, race, race_ok, try_join


async def _fails_in_cleanup() -> None:
    # The scenario of the bug: a child cancelled by the timeout fails during its cleanup.
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        raise Boom from None


async def _in_task_group() -> None:
    async with TaskGroup() as tg:
        tg.create_task(_fails_in_cleanup())
        await asyncio.sleep(10)


async def _source() -> AsyncIterator[int]:
    await _fails_in_cleanup()
    yield 1


async def _in_merge() -> None:
    async with merge(_source()) as items:
        async for _ in items:
            pass


def _combinator(fn: Callable[..., Awaitable[object]]) -> Callable[[], Awaitable[object]]:
    return lambda: fn(_fails_in_cleanup(), asyncio.sleep(10))


SHAPES: dict[str, Callable[[], Awaitable[object]]] = {
    "TaskGroup": _in_task_group,
    "join": _combinator(join),
    "try_join": _combinator(try_join),
    "race": _combinator(race),
    "race_ok": _combinator(race_ok),
    "merge": _in_merge,
}


@pytest.mark.parametrize("eager", EAGER)
@pytest.mark.parametrize("shape", SHAPES)
def test_timeout_consumed_cancellation_is_not_redelivered(shape: str, eager: bool) -> None:
    """issue 16 bug 1: asyncio.timeout() fires around the group while a child fails in its
    cleanup. The ExceptionGroup comes out, the timeout withdraws its own cancellation, and the
    caller is left with cancelling() == 0 and nothing pending: its next await is not cancelled
    (3.11/3.12 used to re-deliver the cancellation the timeout had consumed)."""

    async def main() -> list[object]:
        task = asyncio.current_task()
        assert task is not None
        seen: list[object] = []
        try:
            async with asyncio.timeout(0.05):
                await SHAPES[shape]()
        except* Boom as group:
            seen.append([type(e).__name__ for e in group.exceptions])
        seen.append(task.cancelling())
        await asyncio.sleep(0)  # a stray cancellation would hit here
        await asyncio.sleep(0.01)  # or here, on a real wait
        seen.append("carried on")
        return seen

    assert run(main(), eager=eager) == [["Boom"], 0, "carried on"]


@pytest.mark.parametrize("shape", SHAPES)
def test_outside_cancellation_still_reaches_next_await(shape: str) -> None:
    """The other half of the rule: a cancellation nobody withdrew (Task.cancel() from outside
    while a child fails in its cleanup) survives the ExceptionGroup and reaches the caller's
    next await, with cancelling() == 1 (3.13's test_error_and_cancel)."""
    log: list[object] = []

    async def worker(started: asyncio.Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            started.set()
            await SHAPES[shape]()
        except* Boom:
            log.append(task.cancelling())
        await asyncio.sleep(10)
        log.append("not cancelled")

    async def main() -> None:
        started = asyncio.Event()
        t = asyncio.create_task(worker(started))
        await started.wait()
        await asyncio.sleep(0.01)  # the children are parked
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    run(main())
    assert log == [1]


def test_cancellation_withdrawn_before_the_next_await_is_not_delivered() -> None:
    """As on 3.13, where uncancel() to zero withdraws a pending cancellation (gh-116720): a
    caller that itself withdraws the re-delivered cancellation, with uncancel() before its
    next await, is not cancelled there."""

    async def worker(started: asyncio.Event) -> str:
        task = asyncio.current_task()
        assert task is not None
        try:
            started.set()
            await _in_task_group()
        except* Boom:
            assert task.uncancel() == 0
        await asyncio.sleep(0.01)
        return "carried on"

    async def main() -> str:
        started = asyncio.Event()
        t = asyncio.create_task(worker(started))
        await started.wait()
        await asyncio.sleep(0.01)
        t.cancel()
        return await t

    assert run(main()) == "carried on"
