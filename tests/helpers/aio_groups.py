"""Shared harness of the task-group tests: run a coroutine (optionally with eager tasks)."""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest
from helpers import loops

__all__ = ("EAGER", "Boom", "MyBaseExc", "finishes_within", "raise_after", "run",
           "run_never_awaited_free",
           "spawn_failing_sibling",
           "until_cancelled")

#: The task-factory variants to run a test under: lazy always, eager where it exists (3.12+).
EAGER = [False, *([True] if sys.version_info >= (3, 12) else [])]


def run(coro: Coroutine[Any, Any, Any], *, eager: bool = False) -> Any:
    """asyncio.run, optionally with the 3.12+ eager task factory installed.

    On a loop that cannot run asyncio's eager task factory (uvloop 0.23 on 3.13.0 raises
    TypeError from ``create_task`` before any of our code runs), the eager variant is skipped.
    """

    if eager and (why := loops.eager_task_factory_unsupported()) is not None:
        coro.close()
        pytest.skip(why)

    async def main() -> Any:
        if eager:
            factory = asyncio.eager_task_factory  # type: ignore[attr-defined]
            asyncio.get_running_loop().set_task_factory(factory)
        return await coro

    return asyncio.run(main())


def run_never_awaited_free(coro: Coroutine[Any, Any, Any], *, eager: bool = False) -> Any:
    """`run`, then collect garbage, and assert no "coroutine ... was never awaited" warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(coro, eager=eager)
        gc.collect()
    assert [w for w in caught if "never awaited" in str(w.message)] == []
    return result


async def until_cancelled(record: list[bool]) -> None:
    """Sleep until cancelled (ten seconds at most), noting the cancellation in `record`."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        record.append(True)
        raise


async def spawn_failing_sibling(
    create_task: Callable[[Coroutine[Any, Any, None]], object], exc: type[BaseException]
) -> None:
    """Create a sibling that raises `exc` at once (under the eager factory: inside this call),
    then wait forever: the scenario of CPython gh-128550."""
    create_task(_raise(exc))
    await asyncio.sleep(3600)


async def _raise(exc: type[BaseException]) -> None:
    raise exc()  # before any await: an eager task is already done when create_task returns


async def raise_after(delay: float, exc: type[BaseException]) -> None:
    await asyncio.sleep(delay)
    raise exc()


class Boom(Exception):
    pass


class MyBaseExc(BaseException):
    pass


async def finishes_within(
    aw: Awaitable[Any], seconds: float, stuck: list[asyncio.Task[Any]]
) -> Any:
    """Await `aw` as a task; if it is not done within `seconds`, cancel the tasks in `stuck`
    (which the code under test should have cancelled itself) so it can end, and fail."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        for t in stuck:
            t.cancel()
        await asyncio.wait({task})
        pytest.fail(f"did not finish within {seconds}s (hung until its stuck tasks were cancelled)")
    return task.result()
