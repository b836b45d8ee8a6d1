"""The bridge: thread->loop round trips, thread<->task messaging, thread+task semaphore contention.

Measures, interleaved round by round (the harness's rule: ratios, never lone absolute times).
Where a row compares ours with a floor or with the peers of the same mechanism (the round trips
with ``run_coroutine_threadsafe`` and the floor, the messages, the shared semaphore), each round
measures them together in short blocks in alternation (`benchmarks._harness.paired`): this
machine's speed moves within a second, and a ratio of two contenders measured a second apart
compares two machines.

- round trip of a trivial coroutine from a plain thread to a loop thread and back: ours
  (`Portal.call`), ``asyncio.run_coroutine_threadsafe(...).result()`` **on the same loop** (the
  research addendum's method: against a second loop thread the ratio mostly measures which CPU
  each thread landed on), anyio's ``BlockingPortal.call`` and asgiref's ``async_to_sync`` from a
  plain thread (which starts a loop per call; fewer calls per round);
- beside it, the round trip's floor (`floor_call`): ``loop.call_soon_threadsafe(cb)`` where
  ``cb`` steps the coroutine once and releases a raw lock the thread waits on (no Task, no
  cancellation, no context, no shutdown handling). The round trip's absolute time moves with
  the state of the (virtual) CPUs, for every contender alike, so it is measured in two states,
  each its own metric: after the threads slept (each block starts after a 0.2 s sleep), and
  right after CPU-heavy work (each block starts after both the calling thread and the loop
  thread have computed for 0.1 s);
- messages from a plain thread to a task, and from a task to a plain thread, through bounded
  queues of 64 and 1 (for 64 also per CPU second of the process, the loop's wake-ups and the
  process's thread switches per message: the wall-clock ratio moves with the share of the
  machine each round gets and with the cost of a switch, the CPU cost and the batching do
  not): ours (`SharedChannel`, its ``.blocking`` view for the
  thread), janus (``sync_q``/``async_q``), culsans and aiologic's ``Queue``;
  `integrations.bridge.Queue` against janus;
- the loop-only primitives reached from a thread through a Portal (an `executors.aio.Channel(64)`
  and its `Portal.channel` view; an `executors.aio.Semaphore` and `Portal.semaphore` under the
  contention below), beside the shared equivalent of the same shape (`SharedChannel`,
  `SharedSemaphore`) as the rows' reference column, with no peer: they show what the loop round
  trip costs, which is why a thread that meets tasks often should use the shared primitives;
- thread+task contention (`_bridge_permits`): 4 threads and 4 tasks take turns on one semaphore
  of 2 permits (tasks hold it across one ``sleep(0)``): `SharedSemaphore`, aiologic's
  ``Semaphore`` and a floor; and the loop lag that contention causes, beside culsans.

The loop side of every contender runs on one portal loop thread (anyio: its own portal thread).

Run: ``python -m benchmarks.bridge [--quick]`` or ``executors bench bridge``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

import aiologic
import culsans
import janus
from anyio.from_thread import BlockingPortal, start_blocking_portal
from asgiref.sync import async_to_sync

from benchmarks import _bridge_permits
from benchmarks._harness import (
    OURS,
    Metric,
    paired,
    process_cpu_seconds,
    process_switches,
    run_area,
)
from executors import ThreadGroup
from executors.aio import Channel, Semaphore
from integrations.bridge import Portal, SharedChannel, SharedSemaphore
from integrations.bridge import Queue as BridgeQueue

__all__ = ("floor_call", "main", "metrics")

Sample = Callable[[], float]
T = TypeVar("T")

_resources = contextlib.ExitStack()
_state: dict[str, Any] = {}


def _portal() -> Portal:
    if "portal" not in _state:
        _state["portal"] = _resources.enter_context(Portal(name="bench-portal"))
    portal: Portal = _state["portal"]
    return portal


def _anyio_portal() -> BlockingPortal:
    if "anyio" not in _state:
        _state["anyio"] = _resources.enter_context(start_blocking_portal("asyncio"))
    anyio_portal: BlockingPortal = _state["anyio"]
    return anyio_portal


async def noop() -> None:
    return None


# -- round trip ----------------------------------------------------------------------------------


def floor_call(loop: asyncio.AbstractEventLoop, fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The round trip's floor: ``call_soon_threadsafe(cb)``, where `cb` steps the coroutine
    once and releases a raw lock the calling thread waits on. A callee that suspends is not
    supported (nor cancellation, context, shutdown)."""
    done = threading.Lock()
    done.acquire()
    result: list[T] = []

    def step() -> None:
        try:
            fn().send(None)
        except StopIteration as stop:
            result.append(stop.value)
        done.release()

    loop.call_soon_threadsafe(step)
    done.acquire()
    return result[0]


def _burn(seconds: float) -> int:
    """Compute for `seconds` (pure Python, holding the GIL between switch intervals)."""
    total = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for i in range(1_000):
            total += i * i
    return total


async def _burn_on_loop(seconds: float) -> int:
    return _burn(seconds)


def _prepare(state: str) -> None:
    """Put the threads in `state` before a round: "slept" (both idle 0.2 s) or "hot" (the
    calling thread and the loop thread computed for 0.1 s, together, just before)."""
    if state == "slept":
        time.sleep(0.2)
        return
    busy = _portal().start_task_soon(_burn_on_loop, 0.1)
    _burn(0.1)
    busy.result()


def _round_trip(state: str, n: int, call: Callable[[], object]) -> float:
    _prepare(state)
    start = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - start) / n * 1e6


#: Each round of a round-trip row: ours, run_coroutine_threadsafe and the floor, this many
#: blocks of calls each, in alternation.
ROUND_TRIP_BLOCKS = 30


def round_trips(n: int, state: str) -> dict[str, Sample]:
    """Samples (us per call) for ours, ``run_coroutine_threadsafe`` and the floor, `n` calls
    each per round in `ROUND_TRIP_BLOCKS` blocks, in alternation (`paired`), the threads put in
    `state` before each block: the three are compared in one state of the machine."""
    per = max(n // ROUND_TRIP_BLOCKS, 1)

    def block(call: Callable[[], Callable[[], object]]) -> Callable[[], tuple[float, float]]:
        def one() -> tuple[float, float]:
            fn = call()
            start = time.perf_counter()
            for _ in range(per):
                fn()
            return time.perf_counter() - start, per

        return one

    def rcts() -> Callable[[], object]:
        loop = _portal().loop
        submit = asyncio.run_coroutine_threadsafe
        return lambda: submit(noop(), loop).result()

    return paired(ROUND_TRIP_BLOCKS, lambda seconds, calls: seconds / calls * 1e6, {
        OURS: block(lambda: partial(_portal().call, noop)),
        "run_coroutine_threadsafe": block(rcts),
        ROUND_TRIP_FLOOR: block(lambda: partial(floor_call, _portal().loop, noop)),
    }, before=partial(_prepare, state))


def round_trip_anyio(n: int, state: str = "slept") -> Sample:
    return lambda: _round_trip(state, n, partial(_anyio_portal().call, noop))


def round_trip_asgiref(n: int, state: str = "slept") -> Sample:
    return lambda: _round_trip(state, n, async_to_sync(noop))


# -- messaging -----------------------------------------------------------------------------------

QUEUE_SIZE = 64


def thread_to_task_ours(n: int) -> Sample:
    def sample() -> float:
        portal = _portal()
        ch: Channel[int] = Channel(QUEUE_SIZE)
        send = portal.channel(ch).send

        async def consume() -> None:
            get = ch.get
            for _ in range(n):
                await get()

        start = time.perf_counter()
        done = portal.start_task_soon(consume)
        for i in range(n):
            send(i)
        done.result()
        return n / (time.perf_counter() - start)

    return sample


def task_to_thread_ours(n: int) -> Sample:
    def sample() -> float:
        portal = _portal()
        ch: Channel[int] = Channel(QUEUE_SIZE)
        get = portal.channel(ch).get

        async def produce() -> None:
            send = ch.send
            for i in range(n):
                await send(i)

        start = time.perf_counter()
        done = portal.start_task_soon(produce)
        for _ in range(n):
            get()
        elapsed = time.perf_counter() - start
        done.result()
        return n / elapsed

    return sample


class _MixedQueue:
    """janus and culsans expose the same sync_q / async_q pair."""

    sync_q: Any
    async_q: Any


class _AiologicQueue:
    """aiologic's Queue behind the sync_q / async_q pair (green_* for threads)."""

    def __init__(self, size: int) -> None:
        queue = aiologic.Queue(size)
        self.sync_q = type("S", (), {"put": staticmethod(queue.green_put),
                                     "get": staticmethod(queue.green_get)})
        self.async_q = type("A", (), {"put": staticmethod(queue.async_put),
                                      "get": staticmethod(queue.async_get)})


class _SharedChannelQueue:
    """SharedChannel behind the sync_q / async_q pair (blocking view for threads)."""

    def __init__(self, size: int) -> None:
        ch: SharedChannel[int] = SharedChannel(size)
        self.sync_q = type("S", (), {"put": staticmethod(ch.blocking.send),
                                     "get": staticmethod(ch.blocking.get)})
        self.async_q = type("A", (), {"put": staticmethod(ch.send), "get": staticmethod(ch.get)})


def _make_queue(kind: str, size: int = QUEUE_SIZE) -> Any:
    async def make() -> Any:
        if kind == "janus":
            return janus.Queue(size)  # binds to the running loop
        if kind == "Queue":
            return BridgeQueue(size)
        if kind == "SharedChannel":
            return _SharedChannelQueue(size)
        if kind == "aiologic":
            return _AiologicQueue(size)
        return culsans.Queue(size)

    return _portal().call(make)


async def _close_queue(queue: Any) -> None:
    close = getattr(queue, "aclose", None)
    if close is not None:
        await close()


#: What a messaging sample divides the message count by: "wall" seconds (msgs/s), "cpu"
#: seconds of the process (msgs per CPU second: the cost, whatever share of the machine the
#: round got), or "wakes" (the loop's cross-thread wake-ups per message, self-pipe writes), or
#: "switches" (the process's context switches per message, every thread's: each is a thread
#: that blocked, on the queue or on the GIL, and was woken).
CLOCKS = ("wall", "cpu", "wakes", "switches")


def _messages(clock: str, run: Callable[[], None]) -> float:
    """What `clock` counts while `run` passes its messages: "wall" or "cpu" seconds, the
    loop's self-pipe writes ("wakes"; NaN on a loop without one) or the process's context
    "switches"."""
    loop = _portal().loop
    writes = [0]
    original = getattr(loop, "_write_to_self", None)
    if clock == "wakes":
        if original is None:
            return float("nan")  # not a selector loop: no self-pipe to count

        def counting() -> None:
            writes[0] += 1
            original()

        loop._write_to_self = counting  # type: ignore[attr-defined]
    switches, cpu, start = process_switches(), process_cpu_seconds(), time.perf_counter()
    try:
        run()
    finally:
        if clock == "wakes":
            del loop._write_to_self  # type: ignore[attr-defined]
    if clock == "wakes":
        return writes[0]
    if clock == "switches":
        return process_switches() - switches
    if clock == "cpu":
        return process_cpu_seconds() - cpu
    return time.perf_counter() - start


def _per_message(clock: str, amount: float, n: float) -> float:
    """A sample from `_messages`' count for `n` messages: messages per second for the clocks,
    counts per message for the others."""
    return n / amount if clock in ("wall", "cpu") else amount / n


def _pass(direction: str, kind: str, n: int, size: int, clock: str) -> float:
    """`n` messages through a fresh queue of `kind` and `size`, between a task on the portal's
    loop and this thread, in `direction` ("thread->task" or "task->thread"): what `clock`
    counted (`_messages`)."""
    portal = _portal()
    queue = _make_queue(kind, size)
    task: Callable[[], Coroutine[Any, Any, None]]
    if direction == "thread->task":
        put, get = queue.sync_q.put, queue.async_q.get

        async def consume() -> None:
            for _ in range(n):
                await get()

        def thread() -> None:
            for i in range(n):
                put(i)

        task = consume
    else:
        put, get = queue.async_q.put, queue.sync_q.get

        async def produce() -> None:
            for i in range(n):
                await put(i)

        def thread() -> None:
            for _ in range(n):
                get()

        task = produce

    def run() -> None:
        done = portal.start_task_soon(task)
        thread()
        done.result()

    counted = _messages(clock, run)
    portal.call(_close_queue, queue)
    return counted


DIRECTIONS = ("thread->task", "task->thread")


def thread_to_task_peer(kind: str, n: int, size: int = QUEUE_SIZE, clock: str = "wall") -> Sample:
    """`n` messages from a thread to a task through a queue of `kind` (see `_per_message`)."""
    return lambda: _per_message(clock, _pass("thread->task", kind, n, size, clock), n)


def task_to_thread_peer(kind: str, n: int, size: int = QUEUE_SIZE, clock: str = "wall") -> Sample:
    """`n` messages from a task to a thread through a queue of `kind` (see `_per_message`)."""
    return lambda: _per_message(clock, _pass("task->thread", kind, n, size, clock), n)


#: Each round of a message row: every contender passes its messages in this many blocks, in
#: alternation with the others.
MESSAGE_BLOCKS = 5


def messages_together(direction: str, kinds: dict[str, str], n: int, size: int = QUEUE_SIZE,
                      clock: str = "wall") -> dict[str, Sample]:
    """Samples for `kinds` (column name: `_make_queue` kind), `n` messages each per round in
    `MESSAGE_BLOCKS` blocks in alternation (`paired`), in `direction` ("thread->task" or
    "task->thread"): the columns are compared in one state of the machine."""
    per = max(n // MESSAGE_BLOCKS, 1)

    def block(kind: str) -> Callable[[], tuple[float, float]]:
        return lambda: (_pass(direction, kind, per, size, clock), per)

    return paired(MESSAGE_BLOCKS, partial(_per_message, clock),
                  {name: block(kind) for name, kind in kinds.items()})


# -- semaphore contention ------------------------------------------------------------------------

THREADS, TASKS, PERMITS = 4, 4, 2


def _semaphore(kind: str) -> tuple[Any, Any]:
    """(the tasks' async context manager, the threads' one) for a semaphore of `kind`."""
    if kind == "Portal":
        sem = Semaphore(PERMITS)  # loop-only: threads reach it through the portal's view
        return sem, _portal().semaphore(sem)
    if kind == "SharedSemaphore":
        shared = SharedSemaphore(PERMITS)
        return shared, shared.blocking
    peer = aiologic.Semaphore(PERMITS)
    return peer, peer


def contention(kind: str, iters: int) -> Sample:
    """Acquisitions/s of 4 threads + 4 tasks (tasks hold it across one sleep(0)) on 2 permits,
    from a fair start (as `benchmarks._bridge_permits`: the permits are held until all 8
    parties wait, so no party runs its loop alone before the others come)."""
    def sample() -> float:
        portal = _portal()
        for_tasks, for_threads = _semaphore(kind)

        async def waiting() -> int:  # read on the loop: the loop-only semaphore is its own
            return for_tasks.statistics().waiting  # type: ignore[no-any-return]

        async def task() -> None:
            for _ in range(iters):
                async with for_tasks:
                    await asyncio.sleep(0)

        def thread() -> None:
            for _ in range(iters):
                with for_threads:
                    pass

        for _ in range(PERMITS):
            for_threads.acquire()
        with ThreadGroup() as group:
            futures = [portal.start_task_soon(task) for _ in range(TASKS)]
            for _ in range(THREADS):
                group.start(thread)
            parked = _bridge_permits.wait_for_line(partial(portal.call, waiting))
            start = time.perf_counter()
            for _ in range(PERMITS):
                for_threads.release()
        for f in futures:
            f.result()
        spent = time.perf_counter() - start
        _bridge_permits.check_line(kind, parked)
        return (THREADS + TASKS) * iters / spent

    return sample


#: The reference column of the loop-only-through-a-Portal rows: our shared primitive of the same
#: shape, no Portal. Marked as those rows' floor, so they claim no advantage over a peer: the
#: loop-only primitives are for loop-side code, and a thread that meets tasks often should use
#: the shared one (the peers are compared with that in the rows above).
SHARED = "shared equivalent (no Portal)"
ROUND_TRIP_FLOOR = "floor: call_soon_threadsafe + raw lock"
#: The message rows' columns: ours (`SharedChannel`) and the peers, as `_make_queue` kinds.
_QUEUE_KINDS = {OURS: "SharedChannel", "janus": "janus", "culsans": "culsans",
                "aiologic Queue": "aiologic"}


def _round_trip_metric(name: str, state: str, when: str, calls: int, slow_calls: int) -> Metric:
    together = round_trips(calls, state)
    return Metric(name, "us/call", "lower", {
        OURS: together[OURS],
        "run_coroutine_threadsafe": together["run_coroutine_threadsafe"],
        "anyio BlockingPortal": round_trip_anyio(calls, state),
        "asgiref async_to_sync": round_trip_asgiref(slow_calls, state),
        ROUND_TRIP_FLOOR: together[ROUND_TRIP_FLOOR],
    }, floor=ROUND_TRIP_FLOOR, note=f"trivial coroutine, {when}; run_coroutine_threadsafe and "
       "the floor (call_soon_threadsafe of a callback that steps the coroutine and releases a "
       f"raw lock) on the same loop as ours, in {ROUND_TRIP_BLOCKS} blocks each per round, in "
       "alternation with ours")


def metrics(quick: bool) -> list[Metric]:
    calls = 300 if quick else 3_000
    slow_calls = 30 if quick else 300
    messages = 2_000 if quick else 20_000
    iters = 100 if quick else 1_000
    return [
        *[_round_trip_metric(name, state, when, calls, slow_calls)
          for name, state, when in (
              ("thread->loop round trip", "slept", "each round after the threads slept"),
              ("thread->loop round trip, right after CPU-heavy work", "hot",
               "each round right after both threads computed for 0.1 s"))],
        *[Metric(f"{direction} messages, SharedChannel({size})", "msgs/s", "higher",
                 messages_together(direction, _QUEUE_KINDS, messages, size),
                 note=f"bounded queue of {size}; ours: SharedChannel({size}) (.blocking for the "
                      f"thread), no loop round trip; {MESSAGE_BLOCKS} blocks each per round, in "
                      f"alternation")
          for direction in DIRECTIONS
          for size in (QUEUE_SIZE, 1)],
        # Why the size-64 wall-clock ratio varies from run to run: the same transfers per CPU
        # second of the process (the cost, whatever share of the machine a round got), the
        # loop's cross-thread wake-ups per message (the batching), and the thread switches per
        # message: a cost per switch that is the same to ours and the peers and grows with the
        # machine's wake-up latency, so the larger it is, the nearer 1 the ratio.
        *[Metric(f"{direction} messages, SharedChannel({QUEUE_SIZE}), {what}", unit, better,
                 messages_together(direction, _QUEUE_KINDS, messages, QUEUE_SIZE, clock),
                 note=note)
          for direction in DIRECTIONS
          for what, unit, better, clock, note in (
              ("per CPU second", "msgs/CPU-s", "higher", "cpu",
               ("messages per CPU second of the whole process (both threads): the cost of a "
                "message, independent of the share of the machine a round got")),
              ("loop wake-ups", "wake-ups/msg", "lower", "wakes",
               "self-pipe writes to the loop per message (cross-thread wake-ups)"),
              ("thread switches", "switches/msg", "lower", "switches",
               ("context switches of the whole process per message (a thread blocked on the "
                "queue or the GIL, then woken): each costs CPU time that moves with the "
                "machine's state (the results' thread_wake_us), the same to every column")))],
        *[Metric(f"{direction} messages, Queue({QUEUE_SIZE}) vs janus", "msgs/s", "higher",
                 messages_together(direction, {OURS: "Queue", "janus": "janus"}, messages),
                 note="integrations.bridge.Queue, the janus drop-in, through sync_q/async_q; "
                      f"{MESSAGE_BLOCKS} blocks each per round, in alternation")
          for direction in DIRECTIONS],
        Metric(f"thread->task messages, loop-only Channel({QUEUE_SIZE}) via Portal", "msgs/s",
               "higher", {
            OURS: thread_to_task_ours(messages),
            SHARED: thread_to_task_peer("SharedChannel", messages),
        }, floor=SHARED, note=f"ours: a loop-only Channel({QUEUE_SIZE}) + Portal.channel (a "
                              f"loop round trip per operation); reference: SharedChannel"
                              f"({QUEUE_SIZE}); no peer comparison (see the SharedChannel rows)"),
        Metric(f"task->thread messages, loop-only Channel({QUEUE_SIZE}) via Portal", "msgs/s",
               "higher", {
            OURS: task_to_thread_ours(messages),
            SHARED: task_to_thread_peer("SharedChannel", messages),
        }, floor=SHARED, note=f"ours: a loop-only Channel({QUEUE_SIZE}) + Portal.channel; "
                              f"reference: SharedChannel({QUEUE_SIZE}); no peer comparison"),
        Metric("thread+task semaphore contention, loop-only Semaphore via Portal",
               "acquisitions/s", "higher", {
            OURS: contention("Portal", iters),
            SHARED: contention("SharedSemaphore", iters),
        }, floor=SHARED, note=f"{THREADS} threads + {TASKS} tasks on {PERMITS} permits; ours: "
                              "executors.aio.Semaphore + Portal.semaphore (strict FIFO); "
                              "reference: SharedSemaphore; no peer comparison (aiologic is "
                              "compared with SharedSemaphore in the shared semaphore row)"),
    ]


def _with_permits(quick: bool) -> list[Metric]:
    """This module's metrics, then the shared semaphore and loop-lag ones."""
    return metrics(quick) + _bridge_permits.metrics(quick, _portal)


def main(argv: list[str] | None = None) -> None:
    with _resources:
        run_area("bridge", _with_permits, argv)


if __name__ == "__main__":
    main()
