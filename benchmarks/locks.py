"""Fair semaphores: ours, asyncio's, anyio's (both acquire modes), trio's and aiologic's, one run.

Measures, interleaved round by round (the harness's rule: ratios, never lone absolute times):
- uncontended ``async with sem: pass`` on ``Semaphore(1)`` (acquire/release pairs per second);
- contended: 100 tasks through ``Semaphore(10)``, each holding its permit across one
  ``sleep(0)`` (acquisitions per second);
- cancelling N tasks queued on ``Semaphore(0)``, newest first, until all have finished
  (seconds; N = 16,000, or 1,000 in quick mode). asyncio, anyio and aiologic remove a
  cancelled waiter with ``deque.remove`` (O(n) each, O(n^2) in all); ours is O(1) each. The
  floor is the same cancellation of tasks parked on their own futures, with no queue at all.
  Every contender collects garbage just before its timer starts (see `_GC_NOTE`).

anyio runs on plain ``asyncio.run`` (its asyncio backend); trio on ``trio.run``.

Run: ``python -m benchmarks.locks [--quick]`` or ``executors bench locks``.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import aiologic
import anyio
import trio
import trio.lowlevel

from benchmarks._harness import OURS, Metric, run_area
from executors.aio import Semaphore

__all__ = ("main", "metrics")


class _AsyncSem(Protocol):
    async def __aenter__(self) -> object: ...
    async def __aexit__(self, *exc: object) -> object: ...


Factory = Callable[[int], _AsyncSem]

# Contenders that run on asyncio: name -> factory of a semaphore with the given initial value.
ASYNCIO_PEERS: dict[str, Factory] = {
    OURS: Semaphore,
    "asyncio": asyncio.Semaphore,
    "anyio": lambda n: anyio.Semaphore(n),
    "anyio fast_acquire": lambda n: anyio.Semaphore(n, fast_acquire=True),
    "aiologic": lambda n: aiologic.Semaphore(n),
}
TRIO = "trio"


def _on_asyncio(body: Callable[[], Awaitable[float]]) -> float:
    return asyncio.run(body())  # type: ignore[arg-type]


# -- uncontended -----------------------------------------------------------------------------


def uncontended_asyncio(factory: Factory, n: int) -> Callable[[], float]:
    async def body() -> float:
        sem = factory(1)
        start = time.perf_counter()
        for _ in range(n):
            async with sem:
                pass
        return n / (time.perf_counter() - start)

    return lambda: _on_asyncio(body)


def uncontended_trio(n: int) -> Callable[[], float]:
    async def body() -> float:
        sem = trio.Semaphore(1)
        start = time.perf_counter()
        for _ in range(n):
            async with sem:
                pass
        return n / (time.perf_counter() - start)

    return lambda: trio.run(body)


# -- contended -------------------------------------------------------------------------------

TASKS, PERMITS = 100, 10


def contended_asyncio(factory: Factory, iters: int) -> Callable[[], float]:
    async def worker(sem: _AsyncSem) -> None:
        for _ in range(iters):
            async with sem:
                await asyncio.sleep(0)

    async def body() -> float:
        sem = factory(PERMITS)
        start = time.perf_counter()
        await asyncio.gather(*(worker(sem) for _ in range(TASKS)))
        return TASKS * iters / (time.perf_counter() - start)

    return lambda: _on_asyncio(body)


def contended_trio(iters: int) -> Callable[[], float]:
    async def worker(sem: trio.Semaphore) -> None:
        for _ in range(iters):
            async with sem:
                await trio.lowlevel.checkpoint()

    async def body() -> float:
        sem = trio.Semaphore(PERMITS)
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(TASKS):
                nursery.start_soon(worker, sem)
        return TASKS * iters / (time.perf_counter() - start)

    return lambda: trio.run(body)


# -- cancellation of queued waiters ----------------------------------------------------------

_GC_NOTE = """Each cancel contender collects garbage just before its timer starts.

Creating the 16,000 parked tasks (and the previous contender's leftovers) runs up the cyclic
GC's allocation counts; otherwise a full collection over every live task falls inside the
timed window of one contender or another, by the luck of where the counts stand (0.05-0.06 s
of a 0.1 s figure on 3.13), which is no part of cancelling. The collections that cancelling
itself triggers still count.
"""


def cancel_asyncio(factory: Factory, n: int) -> Callable[[], float]:
    async def waiter(sem: _AsyncSem) -> None:
        async with sem:
            raise AssertionError("a Semaphore(0) was acquired")

    async def body() -> float:
        sem = factory(0)
        tasks = [asyncio.create_task(waiter(sem)) for _ in range(n)]
        for _ in range(3):  # let every task reach its wait (anyio checkpoints first)
            await asyncio.sleep(0)
        gc.collect()  # see _GC_NOTE
        start = time.perf_counter()
        for task in reversed(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        elapsed = time.perf_counter() - start
        assert all(t.cancelled() for t in tasks)
        return elapsed

    return lambda: _on_asyncio(body)


def cancel_trio(n: int) -> Callable[[], float]:
    async def waiter(sem: trio.Semaphore, scopes: list[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            async with sem:
                raise AssertionError("a Semaphore(0) was acquired")

    async def body() -> float:
        sem = trio.Semaphore(0)
        scopes: list[trio.CancelScope] = []
        async with trio.open_nursery() as nursery:
            for _ in range(n):
                nursery.start_soon(waiter, sem, scopes)
            for _ in range(3):
                await trio.lowlevel.checkpoint()
            assert sem.statistics().tasks_waiting == n
            gc.collect()  # see _GC_NOTE
            start = time.perf_counter()
            for scope in reversed(scopes):
                scope.cancel()
        # After the nursery: until every task has finished, as for the asyncio contenders
        # (stopping inside the nursery timed the cancel() calls only).
        return time.perf_counter() - start

    return lambda: trio.run(body)


FLOOR = "floor (own future per task)"


def cancel_floor(n: int) -> Callable[[], float]:
    """The same cancellation with no shared queue at all: each task waits on its own future."""

    async def body() -> float:
        loop = asyncio.get_running_loop()

        async def waiter() -> None:
            await loop.create_future()

        tasks = [asyncio.create_task(waiter()) for _ in range(n)]
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()  # see _GC_NOTE
        start = time.perf_counter()
        for task in reversed(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return time.perf_counter() - start

    return lambda: _on_asyncio(body)


def metrics(quick: bool) -> list[Metric]:
    n_uncontended = 20_000 if quick else 200_000
    iters = 20 if quick else 200
    n_cancel = 1_000 if quick else 16_000
    uncontended: dict[str, Callable[[], float] | None] = {
        name: uncontended_asyncio(f, n_uncontended) for name, f in ASYNCIO_PEERS.items()}
    uncontended[TRIO] = uncontended_trio(n_uncontended)
    contended: dict[str, Callable[[], float] | None] = {
        name: contended_asyncio(f, iters) for name, f in ASYNCIO_PEERS.items()}
    contended[TRIO] = contended_trio(iters)
    cancel: dict[str, Callable[[], float] | None] = {
        name: cancel_asyncio(f, n_cancel) for name, f in ASYNCIO_PEERS.items()}
    cancel[TRIO] = cancel_trio(n_cancel)
    cancel[FLOOR] = cancel_floor(n_cancel)
    return [
        Metric("uncontended acquire/release", "ops/s", "higher", uncontended,
               note="`async with sem: pass` on Semaphore(1)"),
        Metric(f"contended, {TASKS} tasks through Semaphore({PERMITS})", "acquisitions/s",
               "higher", contended, note="each holds its permit across one sleep(0)"),
        Metric(f"cancel {n_cancel:,} queued waiters, newest first", "s", "lower", cancel,
               floor=FLOOR,
               note="from the first cancel() until every task has finished; the floor cancels "
                    "tasks parked on their own futures (no queue)"),
    ]


def main(argv: list[str] | None = None) -> None:
    run_area("locks", metrics, argv)


if __name__ == "__main__":
    main()
