"""The bridge's shared permits and its wake-up costs, for `benchmarks.bridge`.

`metrics(quick, portal)` returns the metrics `benchmarks.bridge` adds to its list:

- **shared semaphore contention**: 4 threads and 4 tasks (tasks on the portal's loop, holding
  the permit across one ``sleep(0)``) take turns on a semaphore of 2 permits, all of them in
  line from the first hand-off (the permits are held until every party waits), each round a
  few short runs of every contender in alternation (`paired`), per wall-clock second and per
  CPU second of the process (the cost, steady whatever share of the machine a round got):
  ours (`SharedSemaphore`, one strict FIFO for threads and tasks, no loop round trip for
  threads), aiologic's ``Semaphore``, and the floor: a bare ``threading.Lock``-guarded counter
  with a FIFO of direct hand-offs (a thread's own lock, or one ``call_soon_threadsafe`` per
  task), with no bookkeeping for cancellation, timeouts, re-entry or closed loops. The gap
  between ours and the floor is what those guarantees cost.
- **shared semaphore contention on one CPU**: the same, with every thread of the process pinned
  to one CPU (Linux). Wall clock is then CPU time and no wake-up waits for another virtual CPU,
  so the ratio to the floor measures the cost of an acquisition, steady whatever the host's
  state (the results' ``thread_wake_us``).
- **thread switches per acquisition**, in runs as the first row's: every switch is a thread
  that blocked and was woken, a cost set by the machine, the same to every column.
- **Python bytecodes per acquisition**, in a run as the first row's, counted by a trace function
  in the loop's thread and the parties' threads: the Python work of an acquisition, which no
  state of the machine changes (the rows above move with the cost of a thread wake-up), so its
  ratio to the floor is what the guarantees cost in instructions.
- **loop lag under thread contention**: the p99 delay of a ``call_soon`` callback on a loop whose
  4 tasks contend with 4 threads on 2 permits: ours (`SharedSemaphore`), culsans (a queue of 2
  tokens: get = acquire, put = release), aiologic, and the floor above (the contention itself
  lags the loop; the floor's lag is the part no primitive removes), in runs paired as the
  first row's. A primitive whose mutex the loop thread blocks on shows here.
- **wake-ups per call**: for ``Portal.call`` and ``asyncio.run_coroutine_threadsafe`` on the same
  loop, the wake-up writes per call (to the loop's self-pipe or the portal's own wake-up socket:
  each is a cross-thread wake-up of the loop) and the caller thread's voluntary context switches
  per call (each is one time it blocked and was woken
  by another thread), from ``getrusage(RUSAGE_THREAD)``. The round trip itself is measured by
  `benchmarks.bridge`'s "thread->loop round trip".

Used as ``metrics.extend(_bridge_permits.metrics(quick, _portal))``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import sys
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiologic
import culsans

from benchmarks._harness import OURS, Metric, paired, process_cpu_seconds, process_switches
from executors import ThreadGroup
from integrations.bridge import Portal, SharedSemaphore

__all__ = (
    "metrics",
    "contention",
    "can_pin",
    "bytecodes",
    "loop_lag",
    "wakeups_per_call",
    "FloorSemaphore",
    "wait_for_line",
    "check_line",
)

Sample = Callable[[], float]
THREADS, TASKS, PERMITS = 4, 4, 2


class FloorSemaphore:
    """The floor: a Lock-guarded counter and a FIFO of direct hand-offs, nothing else.

    No cancellation or timeout handling, no re-entry, no closed-loop handling, no batching of
    loop wake-ups (one ``call_soon_threadsafe`` per task hand-off, as aiologic). Strict FIFO.

    Why it is a fair floor for a strict-FIFO semaphore (it skips none of that work): a release
    adds to the count only when nobody waits, so a newcomer never takes a permit while anyone
    waits; the head is chosen under the mutex and woken after the mutex is left, as ours. What
    it leaves out is what FIFO does not need: a waiter that leaves (cancellation, timeouts),
    re-entry from finalizers, closed loops, Ctrl-C. Batching the task wake-ups per loop, as ours
    does, is not needed either; a floor that batched them measured no faster in this benchmark
    (its per-burst bookkeeping costs about what the fewer self-pipe writes save), so the floor
    stays the bare form.
    """

    def __init__(self, value: int) -> None:
        self._mutex = threading.Lock()
        self._value = value
        self._line: deque[Any] = deque()

    def acquire_thread(self) -> None:
        with self._mutex:
            if self._value:
                self._value -= 1
                return
            parked = threading.Lock()
            parked.acquire()
            self._line.append(parked)
        parked.acquire()

    async def acquire_task(self) -> None:
        with self._mutex:
            if self._value:
                self._value -= 1
                return
            fut = asyncio.get_running_loop().create_future()
            self._line.append(fut)
        await fut

    def release(self) -> None:
        with self._mutex:
            if not self._line:
                self._value += 1
                return
            head = self._line.popleft()
        if isinstance(head, asyncio.Future):
            loop = head.get_loop()
            if asyncio._get_running_loop() is loop:
                head.set_result(None)
            else:
                loop.call_soon_threadsafe(head.set_result, None)
        else:
            head.release()


def _primitive(kind: str) -> tuple[Callable[[], None], Callable[[], Awaitable[None]],
                                   Callable[[], None], Callable[[], int]]:
    """(thread acquire, task acquire, release, parties waiting) of a fresh primitive of
    `kind`."""
    if kind == "ours":
        sem = SharedSemaphore(PERMITS)
        return (sem.blocking.acquire, sem.acquire, sem.release,
                lambda: sem.statistics().waiting)
    if kind == "aiologic":
        peer = aiologic.Semaphore(PERMITS)
        return peer.green_acquire, peer.async_acquire, peer.release, lambda: peer.waiting
    if kind == "culsans":
        queue: Any = culsans.Queue(PERMITS)
        for _ in range(PERMITS):
            queue.sync_q.put_nowait(None)
        return (queue.sync_q.get, queue.async_q.get, lambda: queue.sync_q.put_nowait(None),
                lambda: queue.getting)
    floor = FloorSemaphore(PERMITS)
    return floor.acquire_thread, floor.acquire_task, floor.release, lambda: len(floor._line)


def _run_contention(
    portal: Portal, kind: str, iters: int,
    probe: Callable[[], Awaitable[list[float]]] | None = None, clock: str = "wall",
) -> tuple[float, float, list[float]]:
    """4 threads + 4 tasks, `iters` acquisitions each: (what `clock` counted: "wall" seconds,
    "cpu" seconds of the process or the process's context "switches"; the acquisitions; the
    probe's result, or an empty list).

    The start is fair: this thread holds every permit until all 8 parties wait in line, then
    releases them, and the clock starts there. Started one by one instead, a thread could run
    its whole loop alone before the others (or the tasks) came (a free permit, no hand-off, no
    switch: 2,000 acquisitions fit in one GIL switch interval), and a round measured that.
    """
    acquire_thread, acquire_task, release, waiting = _primitive(kind)
    for _ in range(PERMITS):
        acquire_thread()
    go: list[asyncio.Future[None]] = []  # the probe starts with the contention

    async def task() -> None:
        for _ in range(iters):
            await acquire_task()
            try:
                await asyncio.sleep(0)
            finally:
                release()

    def thread() -> None:
        for _ in range(iters):
            acquire_thread()
            release()

    async def tasks() -> list[float]:
        go.append(asyncio.get_running_loop().create_future())
        work = asyncio.gather(*(task() for _ in range(TASKS)))
        result: list[float] = []
        if probe is not None:
            await go[0]
            result = await probe()
        await work
        return result

    with ThreadGroup() as group:
        future = portal.start_task_soon(tasks)
        for _ in range(THREADS):
            group.start(thread)
        parked = wait_for_line(waiting)
        switches, cpu, start = process_switches(), process_cpu_seconds(), time.perf_counter()
        for _ in range(PERMITS):
            release()
        if go:
            portal.loop.call_soon_threadsafe(go[0].set_result, None)
    probed = future.result()
    amount = (process_switches() - switches if clock == "switches"
              else process_cpu_seconds() - cpu if clock == "cpu" else time.perf_counter() - start)
    check_line(kind, parked)
    return amount, (THREADS + TASKS) * iters, probed


def wait_for_line(waiting: Callable[[], int]) -> int:
    """The fair start's wait: until all `THREADS` + `TASKS` parties wait in line (30 s at
    most), polling `waiting`; how many do (`check_line` it once the run is over)."""
    deadline = time.monotonic() + 30
    while waiting() < THREADS + TASKS and time.monotonic() < deadline:
        time.sleep(0.001)
    return waiting()


def check_line(kind: str, parked: int) -> None:
    """Raise if not every party waited at the start: such a run measured a party running
    alone, not contention."""
    if parked != THREADS + TASKS:
        raise RuntimeError(f"{kind}: {parked} of {THREADS + TASKS} parties waited at the start")


#: The contenders of the semaphore rows: their names in the results, and `_primitive`'s kinds.
KINDS = {OURS: "ours", "aiologic": "aiologic", "floor": "floor"}
#: Each round of a semaphore row: this many contention runs of each kind, in alternation.
BLOCKS = 4


def contention(portal: Callable[[], Portal], iters: int, clock: str = "wall",
               one_cpu: bool = False) -> dict[str, Sample]:
    """Samples for `KINDS` on 4 threads + 4 tasks (`iters` acquisitions each per round) on 2
    permits: acquisitions per second (`clock` "wall"), per CPU second of the process ("cpu"),
    or the process's context switches per acquisition ("switches"). A round is `BLOCKS` runs
    of each kind in alternation (`paired`), so the kinds are compared in one state of the
    machine. With `one_cpu`, every thread of the process is on one CPU during each run."""
    per = max(iters // BLOCKS, 1)

    def run(kind: str) -> Callable[[], tuple[float, float]]:
        def block() -> tuple[float, float]:
            target = portal()  # started (its loop thread too) before any pinning
            with _one_cpu() if one_cpu else contextlib.nullcontext():
                amount, acquisitions, _ = _run_contention(target, kind, per, clock=clock)
            return amount, acquisitions

        return block

    def finish(amount: float, acquisitions: float) -> float:
        return amount / acquisitions if clock == "switches" else acquisitions / amount

    return paired(BLOCKS, finish, {name: run(kind) for name, kind in KINDS.items()})


@contextlib.contextmanager
def _one_cpu() -> Iterator[None]:
    """Every thread of the process (and the threads they start) on one CPU, then back (a
    thread started meanwhile keeps the one CPU: the benchmark's process is its own)."""
    before: dict[int, set[int]] = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended since the listing
            before[tid] = os.sched_getaffinity(tid)
    cpu = {min(os.sched_getaffinity(0))}
    for tid in before:
        with contextlib.suppress(ProcessLookupError):  # one that ended since
            os.sched_setaffinity(tid, cpu)
    try:
        yield
    finally:
        for tid, cpus in before.items():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(tid, cpus)


def bytecodes(portal: Callable[[], Portal], iters: int) -> dict[str, Sample]:
    """Samples for `KINDS`: the Python bytecodes executed per acquisition by the threads of a
    contention run (`iters` acquisitions per party), counted by a trace function in the loop's
    thread and in the 4 parties' threads. The Python work of an acquisition, which no state of
    the machine changes (the other rows' ratios move with the cost of a thread wake-up).

    Tracing slows every thread alike, so the parties still contend; the measuring thread (its
    polling before the start, its two releases) is not counted."""
    def sample(kind: str) -> Sample:
        def one() -> float:
            target = portal()
            count = [0]

            def local(frame: Any, event: str, arg: Any) -> Any:
                if event == "opcode":
                    count[0] += 1  # no checkpoint inside the increment: no update is lost
                return local

            def tracer(frame: Any, event: str, arg: Any) -> Any:
                frame.f_trace_opcodes = True
                return local

            async def trace_loop(on: bool) -> None:
                sys.settrace(tracer if on else None)

            target.call(trace_loop, True)
            threading.settrace(tracer)
            try:
                _, acquisitions, _ = _run_contention(target, kind, iters)
            finally:
                threading.settrace(None)  # type: ignore[arg-type]
                target.call(trace_loop, False)
            return count[0] / acquisitions

        return one

    return {name: sample(kind) for name, kind in KINDS.items()}


def can_pin() -> bool:
    """True where `_one_cpu` can pin the process's threads (Linux)."""
    return hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")


def _lag_probe(count: int) -> Callable[[], Awaitable[list[float]]]:
    """A probe for `_run_contention`: the delays (us) of `count` chained ``call_soon``
    callbacks on the running loop."""
    async def probe() -> list[float]:
        loop = asyncio.get_running_loop()
        delays: list[float] = []
        done = loop.create_future()

        def tick(scheduled: float) -> None:
            delays.append(time.perf_counter() - scheduled)
            if len(delays) < count:
                loop.call_soon(tick, time.perf_counter())
            elif not done.done():
                done.set_result(None)

        loop.call_soon(tick, time.perf_counter())
        await done
        return [delay * 1e6 for delay in delays]

    return probe


def _p99(delays: list[float]) -> float:
    ordered = sorted(delays)
    return ordered[int(len(ordered) * 0.99) - 1]


#: The loop-lag row's contenders: culsans joins them (a queue of 2 tokens).
LAG_KINDS = {OURS: "ours", "culsans": "culsans", "aiologic": "aiologic", "floor": "floor"}


def loop_lag(portal: Callable[[], Portal], iters: int) -> dict[str, Sample]:
    """Samples for `LAG_KINDS`: the p99 delay (us) of a ``call_soon`` callback on the loop
    while its tasks contend (`iters` acquisitions per party per round). A round is `BLOCKS`
    runs of each kind in alternation (`paired`); its sample is the p99 of the delays of its
    runs pooled (the p99 of one short run is its few slowest ticks: too noisy alone)."""
    per = max(iters // BLOCKS, 1)

    def run(kind: str) -> Callable[[], tuple[list[float], float]]:
        def block() -> tuple[list[float], float]:
            return _run_contention(portal(), kind, per, _lag_probe(per))[2], 1.0

        return block

    return paired(BLOCKS, lambda delays, _: _p99(delays),
                  {name: run(kind) for name, kind in LAG_KINDS.items()})


def wakeups_per_call(portal: Callable[[], Portal], how: str, what: str, n: int) -> Sample:
    """Per call of `how` ("portal" or "rcts"): loop self-pipe writes (`what` = "loop") or caller
    voluntary context switches (`what` = "caller")."""
    async def noop() -> None:
        pass

    def sample() -> float:
        p = portal()
        loop = p.loop
        writes = [0]
        original = getattr(loop, "_write_to_self", None)
        if original is None:
            return float("nan")  # not a selector loop: no self-pipe to count

        def counting() -> None:
            writes[0] += 1
            original()

        # The portal's own loop is woken through the portal's wake-up socket, not the loop's
        # self-pipe: count those writes too.
        wake = p._wake

        def counting_wake(data: bytes) -> object:
            writes[0] += 1
            return wake(data)

        loop._write_to_self = counting  # type: ignore[attr-defined]
        p._wake = counting_wake
        try:
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
            for _ in range(n):
                if how == "portal":
                    p.call(noop)
                else:
                    asyncio.run_coroutine_threadsafe(noop(), loop).result()
            switches = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before
        finally:
            del loop._write_to_self  # type: ignore[attr-defined]
            p._wake = wake
        return (writes[0] if what == "loop" else switches) / n

    return sample


def metrics(quick: bool, portal: Callable[[], Portal]) -> list[Metric]:
    iters = 200 if quick else 2_000
    calls = 300 if quick else 3_000
    return [
        Metric("shared semaphore: 4 threads + 4 tasks", "acquisitions/s", "higher",
               contention(portal, iters), floor="floor",
               note=f"{THREADS} threads + {TASKS} tasks on {PERMITS} permits, all in line from "
                    f"the start; ours: SharedSemaphore, strict FIFO; floor: Lock-guarded counter "
                    f"+ direct hand-off; each round {BLOCKS} runs of each in alternation"),
        # The wall-clock rate moves with the share of the (shared, 2-core) machine a round
        # gets: the contention is a chain of thread wake-ups, each waiting for a CPU. Per CPU
        # second of the process it is the cost of an acquisition, steady from round to round.
        Metric("shared semaphore: 4 threads + 4 tasks, per CPU second", "acquisitions/CPU-s",
               "higher", contention(portal, iters, "cpu"), floor="floor",
               note="the row above per CPU second of the whole process (every thread): the "
                    "cost of an acquisition, whatever share of the machine a round got"),
        # On one CPU the rate is the cost alone: every wake-up is a switch on the same CPU,
        # never a wake-up of another virtual CPU (whose latency moves several-fold with the
        # host, see the results' thread_wake_us), so the ratio to the floor is steady.
        Metric("shared semaphore: 4 threads + 4 tasks, one CPU", "acquisitions/s", "higher",
               contention(portal, iters, one_cpu=True) if can_pin() else dict.fromkeys(KINDS),
               floor="floor", note="the first row with every thread of the process pinned to one "
           "CPU: wall clock is CPU time, and the steady measure of an acquisition's cost"),
        # Every switch is a thread that blocked and was woken: its cost is the machine's (the
        # results' thread_wake_us), the same to every column. Strict FIFO makes a thread
        # that releases and acquires again wait its turn, so the floor switches too.
        Metric("shared semaphore: 4 threads + 4 tasks, thread switches", "switches/acquisition",
               "lower", contention(portal, iters, "switches"), floor="floor",
               note="context switches of the whole process per acquisition, in runs as the "
                    "first row's (a thread blocked, on the semaphore or the GIL, then woken)"),
        Metric("shared semaphore: 4 threads + 4 tasks, Python bytecodes", "bytecodes/acquisition",
               "lower", bytecodes(portal, 50 if quick else 300), floor="floor",
               note="bytecodes run by the loop's thread and the 4 threads' (a trace function "
                    "counts them) per acquisition, one run of 300 acquisitions per party per "
                    "round: the Python work of an acquisition, which the machine's state does "
                    "not change"),
        Metric("loop lag under thread contention (p99)", "us", "lower", loop_lag(portal, iters),
               floor="floor", note="call_soon delay on a loop whose 4 tasks contend with 4 "
               f"threads on 2 permits, the p99 of a round's {BLOCKS} runs of each in "
               "alternation; culsans: a queue of 2 tokens; floor: the semaphore floor above"),
        Metric("loop wake-ups per thread->loop call", "writes/call", "lower", {
            OURS: wakeups_per_call(portal, "portal", "loop", calls),
            "run_coroutine_threadsafe": wakeups_per_call(portal, "rcts", "loop", calls),
        }, note="wake-up writes per call (the loop's self-pipe, the portal's wake-up socket; "
           "same loop)"),
        Metric("caller blocks per thread->loop call", "switches/call", "lower", {
            OURS: wakeups_per_call(portal, "portal", "caller", calls),
            "run_coroutine_threadsafe": wakeups_per_call(portal, "rcts", "caller", calls),
        }, note="voluntary context switches of the calling thread per call (same loop)"),
    ]
