"""Task groups: spawn and complete 10,000 trivial tasks; ours and every peer, one run.

Metrics, each measured interleaved round by round (the harness's rule: ratios, never lone
absolute times):

- structured group: our `TaskGroup` against `asyncio.TaskGroup`, anyio's task group (asyncio
  backend) and ``asyncio.gather`` over ``create_task``;
- persistent group: our `PersistentTaskGroup` against ``aiotools.PersistentTaskGroup``, with
  ``asyncio.TaskGroup`` measured beside them as the floor (not a peer: it is not persistent);
- the same two on Python 3.12+ with ``asyncio.eager_task_factory`` installed (a trivial task
  then completes inside ``create_task``; anyio starts its tasks lazily whatever the factory).

A sample is the best of 5 repetitions of "spawn N no-op tasks into a fresh group and wait for
them" (timeit's rule: on a shared machine the minimum is the least disturbed measurement; the
harness then takes the median over rounds), after one warm-up, each contender on its own fresh
event loop, with the garbage collector run before and kept out of each timed repetition.
The targets of issue 5: ours within 10% of ``asyncio.TaskGroup``; persistent at least 2x
faster than aiotools'.

Run: ``python -m benchmarks.taskgroups [--quick]`` or ``executors bench taskgroups``.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import warnings
from collections.abc import Awaitable, Callable

import aiotools
import anyio

from benchmarks._harness import OURS, Metric, run_area
from executors.aio import PersistentTaskGroup, TaskGroup

__all__ = ("main", "metrics")

HAS_EAGER = sys.version_info >= (3, 12)
REPS = 5


async def noop() -> None:
    pass


Spawner = Callable[[int], Awaitable[None]]


async def _asyncio_tg(n: int) -> None:
    async with asyncio.TaskGroup() as tg:
        for _ in range(n):
            tg.create_task(noop())


async def _ours_tg(n: int) -> None:
    async with TaskGroup() as tg:
        for _ in range(n):
            tg.create_task(noop())


async def _ours_ptg(n: int) -> None:
    async with PersistentTaskGroup() as group:
        for _ in range(n):
            group.create_task(noop())


async def _aiotools_ptg(n: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # deprecated in aiotools 2.0
        group = aiotools.PersistentTaskGroup()
    async with group:
        for _ in range(n):
            group.create_task(noop())


async def _anyio_tg(n: int) -> None:
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(noop)


async def _gather(n: int) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.gather(*[loop.create_task(noop()) for _ in range(n)])


def sample(spawner: Spawner, n: int, *, eager: bool) -> Callable[[], float]:
    """One round: ms for `n` tasks (best of REPS after a warm-up) on a fresh loop."""

    async def body() -> float:
        if eager:
            asyncio.get_running_loop().set_task_factory(
                asyncio.eager_task_factory  # type: ignore[attr-defined]
            )
        await spawner(min(n, 1000))  # warm-up
        times = []
        for _ in range(REPS):
            # As timeit does: collect first and keep the collector out of the timed part, so a
            # contender never pays for the garbage of the one measured before it.
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                await spawner(n)
                times.append((time.perf_counter() - t0) * 1000)
            finally:
                gc.enable()
        return min(times)

    def one_round() -> float:
        return asyncio.run(body())

    return one_round


def metrics(quick: bool) -> list[Metric]:
    n = 1_000 if quick else 10_000
    result = []
    for eager in (False, True):
        if eager and not HAS_EAGER:
            continue
        suffix = " eager_task_factory" if eager else ""
        result.append(Metric(
            name=f"spawn+complete {n:,} tasks, structured group{suffix}",
            unit="ms", better="lower",
            contenders={
                OURS: sample(_ours_tg, n, eager=eager),
                "asyncio.TaskGroup": sample(_asyncio_tg, n, eager=eager),
                "anyio task group": sample(_anyio_tg, n, eager=eager),
                "asyncio.gather": sample(_gather, n, eager=eager),
            },
            note=f"Python {sys.version.split()[0]}; target: within 10% of asyncio.TaskGroup",
        ))
        result.append(Metric(
            name=f"spawn+complete {n:,} tasks, persistent group{suffix}",
            unit="ms", better="lower",
            contenders={
                OURS: sample(_ours_ptg, n, eager=eager),
                "aiotools.PersistentTaskGroup": sample(_aiotools_ptg, n, eager=eager),
                # Not a peer: the cost of a group of real tasks with a done-callback each, the
                # floor a persistent group that returns real tasks can reach.
                "asyncio.TaskGroup": sample(_asyncio_tg, n, eager=eager),
            },
            floor="asyncio.TaskGroup",
            note=f"Python {sys.version.split()[0]}; target: at least 2x faster than aiotools; "
                 "asyncio.TaskGroup is shown as the floor, not compared",
        ))
    return result


def main() -> None:
    run_area("taskgroups", metrics, default_rounds=9, quick_rounds=1)


if __name__ == "__main__":
    main()
