"""Stress harness: cancellations that race a hand-off (issue 23, item 1).

Three producers send numbered values and three consumers get them, through one endpoint (a
channel's ``send``/``get``, a ``select`` over them, a Queue's ``put``/``get``), while every
operation is cut short in one of four ways (`MODES`):

- ``wait_for``: ``await asyncio.wait_for(op, t)`` (on 3.11 the operation runs in an inner task);
- ``timeout``: ``async with asyncio.timeout(t): await op``;
- ``cancel``: the party tasks are long-lived and a canceller task calls ``cancel()`` on them at
  random moments; each party takes the cancellation and goes on;
- ``task``: every operation runs in a task of its own, cancelled by a timer.

Timeouts and timers are drawn from `DELAYS` (0.5 ms, 1 ms, 1 s). Threads can take either side
through a blocking view (`run_with_threads`). The `Ledger` then holds the promises to check:

- a value is received if and only if its sender saw success, and exactly once;
- no ``CancelledError`` reaches a task whose ``cancelling()`` is 0 (a *stray*);
- every ``cancel()`` that landed is delivered (at the next await of a task that goes on);
- a task of one operation ends with its result or cancelled, never both (``task`` mode: its
  value went through if and only if it ended with its result).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ("DELAYS", "MODES", "Endpoint", "Ledger", "ThreadEndpoint", "run_tasks",
           "run_with_threads", "select_endpoint", "sender_task_cancelled_after_hand_off")

#: The timeouts and cancel delays the parties draw from (seconds).
DELAYS = (0.0005, 0.001, 1.0)
#: How the operations are cut short.
MODES = ("wait_for", "timeout", "cancel", "task")
#: The pauses a party takes between its operations (seconds): a counterpart that pauses makes
#: the other side park, so that its timeout can fire about when the hand-off happens.
PAUSES = (0, 0, 0.0005, 0.001)
PARTIES = 3


@dataclasses.dataclass
class Endpoint:
    """The task side of a primitive: ``send``/``get`` coroutines, ``close``, its closed errors."""

    send: Callable[[int], Awaitable[object]]
    get: Callable[[], Awaitable[Any]]
    close: Callable[[], object]
    closed: tuple[type[BaseException], ...]


def select_endpoint(ch: Any, idle: Any) -> Endpoint:
    """`ch`'s send and get through ``select``, each beside a Get on `idle` (it never fires)."""
    from executors.aio import Closed, Get, Send, SendResult, select
    from executors.errors import ChannelClosed

    async def send(value: int) -> None:
        result = await select(Send(ch, value), Get(idle))
        if isinstance(result, Closed):
            raise ChannelClosed("closed")
        assert isinstance(result, SendResult)

    async def get() -> Any:
        result = await select(Get(ch), Get(idle))
        if isinstance(result, Closed):
            raise ChannelClosed("closed")
        return result.value  # type: ignore[union-attr]

    return Endpoint(send, get, ch.close, (ChannelClosed,))


def sender_task_cancelled_after_hand_off(ch: Any, how: str) -> tuple[bool, object]:
    """A task that only sends 7 on `ch` (``ch.send`` or a select with a case that never fires)
    parks; a getter takes the value and the task is cancelled before it resumes (the 3.11
    wait_for shape). Returns (the task ended cancelled, its result or None)."""
    from executors.aio import Channel, Get, Send, select

    async def main() -> tuple[bool, object]:
        task: asyncio.Task[object] = asyncio.ensure_future(
            ch.send(7) if how == "send" else select(Send(ch, 7), Get(Channel())))
        await asyncio.sleep(0)
        assert ch.statistics().waiting_senders == 1
        assert ch.get_nowait() == 7
        task.cancel()
        await asyncio.wait([task])
        return task.cancelled(), None if task.cancelled() else task.result()

    return asyncio.run(main())


@dataclasses.dataclass
class ThreadEndpoint:
    """The thread side: blocking ``send(v, timeout)``/``get(timeout)``, their errors."""

    send: Callable[[int, float], object]
    get: Callable[[float], Any]
    close: Callable[[], object]
    timeouts: tuple[type[BaseException], ...]
    closed: tuple[type[BaseException], ...]


@dataclasses.dataclass
class Ledger:
    """What every party saw; `violations` compares it with the promises."""

    sent: list[int] = dataclasses.field(default_factory=list)
    unsent: list[int] = dataclasses.field(default_factory=list)
    received: list[Any] = dataclasses.field(default_factory=list)
    strays: int = 0
    requested: Counter[str] = dataclasses.field(default_factory=Counter)
    delivered: Counter[str] = dataclasses.field(default_factory=Counter)
    left_cancelling: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def took(self, task: asyncio.Task[Any]) -> None:
        """`task` caught a CancelledError: count it as delivered, or as a stray at count 0."""
        count = task.cancelling()
        if not count:
            self.strays += 1
        self.delivered[task.get_name()] += count
        while task.uncancel():
            pass

    def violations(self) -> dict[str, int]:
        """Each broken promise with how many times it broke (empty: all kept)."""
        received = Counter(self.received)
        sent = set(self.sent)
        found = {
            "received but its sender saw failure": sum(
                1 for v in received if v not in sent),
            "sent but never received": sum(1 for v in sent if v not in received),
            "received twice": sum(n - 1 for n in received.values() if n > 1),
            "reported both sent and unsent": len(sent & set(self.unsent)),
            "CancelledError with cancelling() == 0": self.strays,
            "cancel() never delivered": sum(
                max(self.requested[k] - self.delivered[k], 0) for k in self.requested),
            "task left with cancelling() > 0": self.left_cancelling,
        }
        return {k: v for k, v in found.items() if v}


class _Run:
    """One run's shared state: the ledger, the mode, the canceller's stop signals."""

    def __init__(self, ledger: Ledger, mode: str, seed: int) -> None:
        self.ledger = ledger
        self.mode = mode
        self.seed = seed
        self.stop_cancelling = False
        self.stopped = asyncio.Event()  # no cancel() is made after this is set
        self.producing = 0
        self.produced = asyncio.Event()

    async def attempt(self, op: Callable[[], Awaitable[Any]],
                      r: random.Random) -> tuple[bool, Any]:
        """Run `op` cut short as the mode says: (True, result) or (False, None) if cut."""
        delay = r.choice(DELAYS)
        if self.mode == "wait_for":
            try:
                return True, await asyncio.wait_for(op(), delay)
            except TimeoutError:
                return False, None
        if self.mode == "timeout":
            try:
                async with asyncio.timeout(delay):
                    return True, await op()
            except TimeoutError:
                return False, None
        if self.mode == "task":
            task: asyncio.Task[Any] = asyncio.ensure_future(op())
            timer = asyncio.get_running_loop().call_later(delay, task.cancel)
            try:
                await asyncio.wait([task])
            finally:
                timer.cancel()
            if task.cancelled():
                return False, None
            return True, task.result()
        return True, await op()  # "cancel": the canceller interrupts the party itself

    async def settle(self, task: asyncio.Task[Any]) -> None:
        """Take every cancellation still on its way, then record what is left over."""
        while True:
            try:
                await self.stopped.wait()
                await asyncio.sleep(0)  # a cancellation deferred by the last operation lands
                break
            except asyncio.CancelledError:
                self.ledger.took(task)
        if task.cancelling():
            self.ledger.left_cancelling += 1

    async def producer(self, endpoint: Endpoint, values: range) -> None:
        task = _current()
        r = random.Random(f"{self.seed}-{task.get_name()}")
        ledger = self.ledger
        for value in values:
            try:
                ok, _ = await self.attempt(lambda v=value: endpoint.send(v), r)  # type: ignore[misc]
            except endpoint.closed:
                ledger.unsent.append(value)
                break
            except asyncio.CancelledError:
                ledger.unsent.append(value)
                ledger.took(task)
                continue
            (ledger.sent if ok else ledger.unsent).append(value)
            try:
                await asyncio.sleep(r.choice(PAUSES))  # a deferred cancellation lands here
            except asyncio.CancelledError:
                ledger.took(task)
        self.producing -= 1
        if not self.producing:
            self.produced.set()
        await self.settle(task)

    async def consumer(self, endpoint: Endpoint) -> None:
        task = _current()
        r = random.Random(f"{self.seed}-{task.get_name()}")
        ledger = self.ledger
        while True:
            try:
                ok, value = await self.attempt(endpoint.get, r)
            except endpoint.closed:
                break
            except asyncio.CancelledError:
                ledger.took(task)
                continue
            if ok:
                ledger.received.append(value)
            try:
                await asyncio.sleep(r.choice(PAUSES))
            except asyncio.CancelledError:
                ledger.took(task)
        await self.settle(task)

    async def canceller(self, parties: list[asyncio.Task[Any]]) -> None:
        r = random.Random(f"{self.seed}-canceller")
        while not self.stop_cancelling:
            await asyncio.sleep(r.choice((0, 0, 0.0005, 0.001)))
            party = r.choice(parties)
            if party.cancel():
                self.ledger.requested[party.get_name()] += 1


def _current() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    assert task is not None
    return task


async def run_tasks(make: Callable[[], Endpoint], mode: str, seed: int, per_producer: int,
                    *, producers: bool = True, consumers: bool = True,
                    ledger: Ledger | None = None,
                    others_done: Callable[[], Awaitable[object]] | None = None) -> Ledger:
    """Run the task parties (3 producers and/or 3 consumers) on the running loop.

    With ``producers=False`` the channel is closed by whoever runs the producing threads;
    `others_done` is then awaited before the canceller stops.
    """
    assert mode in MODES, mode
    ledger = Ledger() if ledger is None else ledger
    run = _Run(ledger, mode, seed)
    endpoint = make()
    parties: list[asyncio.Task[Any]] = []
    if producers:
        run.producing = PARTIES
        parties += [asyncio.create_task(
            run.producer(endpoint, range(i * per_producer, (i + 1) * per_producer)),
            name=f"producer-{i}") for i in range(PARTIES)]
    if consumers:
        parties += [asyncio.create_task(run.consumer(endpoint), name=f"consumer-{i}")
                    for i in range(PARTIES)]
    canceller = (asyncio.create_task(run.canceller(parties))
                 if mode == "cancel" else None)
    if producers:
        await run.produced.wait()
    if others_done is not None:
        await others_done()
    run.stop_cancelling = True
    if canceller is not None:
        await canceller
    run.stopped.set()
    if producers:
        await asyncio.gather(*parties[:PARTIES])
        endpoint.close()
    await asyncio.gather(*parties)
    return ledger


def _thread_producer(endpoint: ThreadEndpoint, values: range, seed: str,
                     ledger: Ledger) -> None:
    r = random.Random(seed)
    for value in values:
        try:
            endpoint.send(value, r.choice(DELAYS))
        except endpoint.timeouts:
            ledger.unsent.append(value)
            continue
        except endpoint.closed:
            ledger.unsent.append(value)
            break
        ledger.sent.append(value)
        _pause(r)


def _pause(r: random.Random) -> None:
    # A thread party's pause between operations (as the tasks' PAUSES); 0 is no pause.
    pause = r.choice(PAUSES)
    if pause:
        threading.Event().wait(pause)


def _thread_consumer(endpoint: ThreadEndpoint, seed: str, ledger: Ledger) -> None:
    r = random.Random(seed)
    while True:
        try:
            value = endpoint.get(r.choice(DELAYS))
        except endpoint.timeouts:
            continue
        except endpoint.closed:
            return
        ledger.received.append(value)
        _pause(r)


def run_with_threads(make: Callable[[], tuple[Endpoint, ThreadEndpoint]], mode: str,
                     seed: int, per_producer: int, threads_produce: bool,
                     run_on_loop: Callable[[Callable[[], Awaitable[Ledger]]], Ledger]
                     ) -> Ledger:
    """Tasks on one side, threads (through a blocking view) on the other.

    `run_on_loop` runs a coroutine function on the loop the endpoint belongs to (``asyncio.run``
    for a shared primitive, ``portal.call`` for a loop-only channel behind a Portal) and returns
    its result; the threads run meanwhile.
    """
    ledger = Ledger()
    made: list[tuple[Endpoint, ThreadEndpoint]] = []
    ready = threading.Event()
    threads: list[threading.Thread] = []

    async def on_loop() -> Ledger:
        endpoint, view = make()
        made.append((endpoint, view))
        ready.set()

        async def threads_done() -> None:
            # The starter has filled `threads` once it has returned.
            await asyncio.to_thread(lambda: (starter.join(10), _join_all(threads)))

        if threads_produce:
            # The thread producers close the channel once all of them are done (a closer
            # thread joins them), which ends the task consumers.
            return await run_tasks(lambda: endpoint, mode, seed, per_producer,
                                   producers=False, ledger=ledger, others_done=threads_done)
        return await run_tasks(lambda: endpoint, mode, seed, per_producer,
                               consumers=False, ledger=ledger)

    def start_threads() -> None:
        ready.wait(10)
        _, view = made[0]
        if threads_produce:
            producers = [threading.Thread(
                target=_thread_producer,
                args=(view, range(i * per_producer, (i + 1) * per_producer),
                      f"{seed}-thread-{i}", ledger)) for i in range(PARTIES)]
            closer = threading.Thread(target=lambda: (_join_all(producers), view.close()))
            threads.extend([*producers, closer])
        else:
            threads.extend(threading.Thread(
                target=_thread_consumer, args=(view, f"{seed}-thread-{i}", ledger))
                for i in range(PARTIES))
        for thread in threads:
            thread.start()

    starter = threading.Thread(target=start_threads)
    starter.start()
    try:
        result = run_on_loop(on_loop)
    finally:
        starter.join(10)
        _join_all(threads)
    return result


def _join_all(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(30)
