"""Go's channel tests (golang/go test/chan/*.go, runtime/chan_test.go) as behaviour tests."""

from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import tracemalloc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from executors.aio import (
    Channel,
    Closed,
    Get,
    GetResult,
    Operation,
    Select,
    Send,
    SendResult,
    select,
)
from executors.errors import ChannelClosed, WouldBlock

T = TypeVar("T")


def run(fn: Callable[[], Coroutine[object, object, T]]) -> T:
    return asyncio.run(fn())


async def wait_until(cond: Callable[[], bool], steps: int = 10_000) -> None:
    for _ in range(steps):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def settle(steps: int = 20) -> None:
    """Let every runnable task run until it parks (a bounded number of loop turns)."""
    for _ in range(steps):
        await asyncio.sleep(0)


def assert_idle(*channels: Channel[Any]) -> None:
    for ch in channels:
        stats = ch.statistics()
        assert (stats.waiting_senders, stats.waiting_getters) == (0, 0), ch


# --- doubleselect.go -----------------------------------------------------------------------------


def _doubleselect(n: int) -> None:
    """A sender selects i onto one of 4 unbuffered channels; 4 forwarders multiplex them onto
    one channel; the receiver sees every i exactly once (no duplicate, no loss)."""

    async def main() -> None:
        chans = [Channel[int]() for _ in range(4)]
        cmux: Channel[int] = Channel()

        async def sender() -> None:
            for i in range(n):
                await select(*(Send(c, i) for c in chans))
            for c in chans:
                c.close()

        async def mux(c: Channel[int]) -> None:
            async for v in c:
                await cmux.send(v)

        async def closer(muxes: list[asyncio.Task[None]]) -> None:
            await asyncio.gather(*muxes)
            cmux.close()

        seen: collections.Counter[int] = collections.Counter()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(sender())
            muxes = [tg.create_task(mux(c)) for c in chans]
            tg.create_task(closer(muxes))
            async for v in cmux:
                assert seen[v] == 0, f"{v} received twice"
                seen[v] += 1
        assert len(seen) == n and sum(seen.values()) == n
        assert_idle(cmux, *chans)

    run(main)


def test_doubleselect() -> None:
    """doubleselect.go with n = 20,000."""
    _doubleselect(20_000)


@pytest.mark.slow
def test_doubleselect_100k() -> None:
    """doubleselect.go with n = 100,000 (the Go test's size)."""
    _doubleselect(100_000)


# --- fifo.go, TestChan ---------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 10])
def test_values_fifo(size: int) -> None:
    """AsynchFifo / TestChan "100 integers": values arrive in send order at any capacity."""

    async def main() -> list[int]:
        ch: Channel[int] = Channel(size)

        async def produce() -> None:
            for i in range(100):
                await ch.send(i)
            ch.close()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(produce())
            return [v async for v in ch]

    assert run(main) == list(range(100))


def test_synch_fifo_daisy_chain() -> None:
    """SynchFifo: 10 tasks each wait their turn, then receive from one unbuffered channel and
    expect value i; main sends 0..9 (parked getters are served in order)."""

    async def main() -> None:
        ch: Channel[int] = Channel()
        first: Channel[None] = Channel()
        inp = first
        tasks = []
        for i in range(10):
            out: Channel[None] = Channel()

            async def worker(i: int, inp: Channel[None], out: Channel[None]) -> None:
                await inp.get()
                assert await ch.get() == i
                await out.send(None)

            tasks.append(asyncio.create_task(worker(i, inp, out)))
            inp = out
        await first.send(None)
        for i in range(10):
            await ch.send(i)
        await inp.get()
        await asyncio.gather(*tasks)

    run(main)


# --- sieve1.go -----------------------------------------------------------------------------------


def test_prime_sieve() -> None:
    """sieve1.go: chained filter tasks over unbuffered channels yield the first 25 primes."""

    async def main() -> list[int]:
        tasks = []

        async def generate(ch: Channel[int]) -> None:
            for i in itertools.count(2):
                await ch.send(i)

        async def filt(inp: Channel[int], out: Channel[int], prime: int) -> None:
            while True:
                i = await inp.get()
                if i % prime:
                    await out.send(i)

        ch: Channel[int] = Channel()
        tasks.append(asyncio.create_task(generate(ch)))
        primes = []
        for _ in range(25):
            prime = await ch.get()
            primes.append(prime)
            nxt: Channel[int] = Channel()
            tasks.append(asyncio.create_task(filt(ch, nxt, prime)))
            ch = nxt
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return primes

    assert run(main) == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61,
                         67, 71, 73, 79, 83, 89, 97]


# --- nonblock.go ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1])
def test_nonblock(size: int) -> None:
    """nonblock.go: a non-blocking get on an empty channel fails; with a getter started, a
    retried send_nowait succeeds; with a sender started, a retried get_nowait gets its value."""

    async def main() -> None:
        ch: Channel[int] = Channel(size)
        with pytest.raises(WouldBlock):
            ch.get_nowait()
        getter = asyncio.create_task(ch.get())
        for _ in range(10_000):
            try:
                ch.send_nowait(123)
                break
            except WouldBlock:
                await asyncio.sleep(0)
        else:
            raise AssertionError("send_nowait never succeeded")
        assert await getter == 123
        sender = asyncio.create_task(ch.send(456))
        for _ in range(10_000):
            try:
                assert ch.get_nowait() == 456
                break
            except WouldBlock:
                await asyncio.sleep(0)
        else:
            raise AssertionError("get_nowait never succeeded")
        await sender
        assert_idle(ch)

    run(main)


# --- select.go -----------------------------------------------------------------------------------


def test_select_send_cases_removed_after_firing() -> None:
    """select.go: a send-only select on two cap-1 channels, each case removed once it fires:
    exactly two successes, then WouldBlock (a never-ready case stands in for Go's default);
    the values received OR to 3."""
    a: Channel[int] = Channel(1)
    b: Channel[int] = Channel(1)
    sel = Select(Send(a, 1), Send(b, 2), Get(Channel[int]()))
    successes = 0
    for _ in range(5):
        try:
            result = sel.select_nowait()
        except WouldBlock:
            continue
        successes += 1
        sel.remove(result.operation)
    assert successes == 2
    assert a.get_nowait() | b.get_nowait() == 3


# --- select2.go ----------------------------------------------------------------------------------


def test_select2_no_residue() -> None:
    """select2.go: many selects (get from a fed channel vs a never-ready dummy) leave no
    registration and no memory growth on a second run."""

    async def rounds(n: int) -> None:
        c: Channel[int] = Channel()
        dummy: Channel[int] = Channel()

        async def sender() -> None:
            for i in range(n):
                await c.send(i)

        task = asyncio.create_task(sender())
        for i in range(n):
            result = await select(Get(c), Get(dummy))
            assert isinstance(result, GetResult) and result.value == i
        await task
        assert_idle(c, dummy)

    asyncio.run(rounds(5000))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        asyncio.run(rounds(5000))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 100_000


# --- select3.go: the blocking matrix -------------------------------------------------------------


async def _blocks(coro: Coroutine[object, object, object]) -> bool:
    """True if `coro` is still pending after the loop settles (then it is cancelled)."""
    task = asyncio.ensure_future(coro)
    await settle()
    if task.done():
        task.result()
        return False
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return True


def test_select3_blocking_matrix() -> None:
    """select3.go: get on empty blocks; send on full blocks; send with room does not; get on
    closed never blocks; a ready case does not block; a select meeting itself blocks."""

    async def main() -> None:
        empty: Channel[int] = Channel(1)
        assert await _blocks(empty.get())
        full: Channel[int] = Channel(1)
        full.send_nowait(0)
        assert await _blocks(full.send(1))
        room: Channel[int] = Channel(1)
        assert not await _blocks(room.send(1))
        closed: Channel[int] = Channel()
        closed.close()
        for _ in range(3):
            with pytest.raises(ChannelClosed):
                await closed.get()
        op = Get(closed)
        assert not await _blocks(select(op, Get(empty)))
        assert await select(op, Get(empty)) == Closed(closed, op)
        with pytest.raises(ChannelClosed):
            await closed.send(1)
        assert not await _blocks(select(Send(closed, 1), Get(empty)))
        assert not await _blocks(select(Get(room), Get(empty)))  # ready case
        unbuffered: Channel[int] = Channel()
        assert await _blocks(select(Send(unbuffered, 1), Get(unbuffered)))  # sees itself
        assert await _blocks(select(Get(closed, ignore_on_closed=True), Get(empty)))
        assert_idle(empty, full, room, closed, unbuffered)

    run(main)


# --- select5.go: generated single-task combinations ----------------------------------------------


def test_select5_real_op_always_chosen() -> None:
    """select5.go: a real send/get on a cap-1 channel combined with dummy unready cases (send
    and get on an unbuffered channel), removed cases and ignored closed cases, in every order:
    the real case is always chosen, with the right value, and nothing else changes."""
    dummy: Channel[int] = Channel()
    closed: Channel[int] = Channel()
    closed.close()
    fillers: list[Callable[[], Send[int] | Get[int]]] = [
        lambda: Send(dummy, -1),
        lambda: Get(dummy),
        lambda: Get(closed, ignore_on_closed=True),
        lambda: Send(closed, -2, ignore_on_closed=True),
    ]
    checked = 0
    for real_kind in ("send", "get"):
        for k in range(len(fillers) + 1):
            for combo in itertools.permutations(range(len(fillers)), k):
                for position in range(k + 1):
                    for ordered in (False, True):
                        c: Channel[int] = Channel(1)
                        if real_kind == "get":
                            c.send_nowait(7)
                        real = Send(c, 7) if real_kind == "send" else Get(c)
                        ops = [fillers[i]() for i in combo]
                        removed = Get(c)
                        ops.insert(position, real)
                        sel = Select(*ops, removed, ordered=ordered)
                        sel.remove(removed)
                        result = sel.select_nowait()
                        assert result.operation is real
                        if real_kind == "send":
                            assert result == SendResult(c, real)  # type: ignore[arg-type]
                            assert c.get_nowait() == 7
                        else:
                            assert result == GetResult(c, real, 7)  # type: ignore[arg-type]
                            assert len(c) == 0
                        assert_idle(dummy, c)
                        checked += 1
    assert checked > 500


def test_select5_nonblock_template() -> None:
    """select5.go "nonblock": a select of only unready cases fails with WouldBlock and touches
    nothing; repeated, it never parks anything."""
    a: Channel[int] = Channel()
    b: Channel[int] = Channel(1)
    b.send_nowait(1)
    sel = Select(Get(a), Send(a, 1), Send(b, 2))
    for _ in range(100):
        with pytest.raises(WouldBlock):
            sel.select_nowait()
    assert len(b) == 1
    assert_idle(a, b)


# --- select6.go / select7.go ---------------------------------------------------------------------


def test_select6_failed_case_keeps_queue_sound() -> None:
    """select6.go (Go issue 2075): G1 parks on get(c1); G2 selects {c1, c2}, is woken by c2,
    then gets from c1; two sends on c1 are both delivered."""

    async def main() -> None:
        c1: Channel[bool] = Channel()
        c2: Channel[bool] = Channel()
        c3: Channel[bool] = Channel()
        g1 = asyncio.create_task(c1.get())
        await settle()

        async def g2() -> None:
            await select(Get(c1), Get(c2))
            await c3.send(await c1.get())

        t2 = asyncio.create_task(g2())
        await settle()
        await c2.send(True)
        await settle()
        await c1.send(True)
        await c1.send(True)
        assert await c3.get() is True
        assert await g1 is True
        await t2
        assert_idle(c1, c2, c3)

    run(main)


def test_select7_all_shapes_complete() -> None:
    """select7.go: receiver {get, 1-case select, 2-case select with a dummy} x sender {send,
    1-case select, 2-case select with a dummy} all complete on an unbuffered channel."""

    async def main() -> None:
        dummy: Channel[int] = Channel()

        async def recv1(c: Channel[int]) -> int:
            return await c.get()

        async def recv2(c: Channel[int]) -> int:
            r = await select(Get(c))
            assert isinstance(r, GetResult)
            return r.value  # type: ignore[return-value]

        async def recv3(c: Channel[int]) -> int:
            r = await select(Get(c), Get(dummy))
            assert isinstance(r, GetResult)
            return r.value  # type: ignore[return-value]

        async def send1(c: Channel[int]) -> None:
            await c.send(1)

        async def send2(c: Channel[int]) -> None:
            await select(Send(c, 1))

        async def send3(c: Channel[int]) -> None:
            await select(Send(c, 1), Get(dummy))

        for recv in (recv1, recv2, recv3):
            for send in (send1, send2, send3):
                for recv_first in (True, False):
                    c: Channel[int] = Channel()
                    if recv_first:
                        r = asyncio.create_task(recv(c))
                        await settle()
                        await send(c)
                    else:
                        s = asyncio.create_task(send(c))
                        await settle()
                        r = asyncio.create_task(recv(c))
                        await s
                    assert await r == 1
                    assert_idle(c, dummy)

    run(main)


# --- TestSelfSelect, pygolang ping-pong ----------------------------------------------------------


@pytest.mark.parametrize("size", [0, 10])
def test_self_select(size: int) -> None:
    """TestSelfSelect: two tasks each run 1000 selects {Send(c, me), Get(c)}; with size 0 no
    task ever receives its own value, and neither deadlocks."""

    async def main() -> None:
        c: Channel[int] = Channel(size)

        async def participant(me: int) -> None:
            for _ in range(1000):
                r = await select(Send(c, me), Get(c))
                if size == 0 and isinstance(r, GetResult):
                    assert r.value != me, "a select received its own value"

        await asyncio.wait_for(asyncio.gather(participant(0), participant(1)), 20)
        assert_idle(c)

    run(main)


def test_buffered_ping_pong() -> None:
    """pygolang: select(Send(c, i), Get(c)) on a cap-1 channel alternates send, get."""

    async def main() -> None:
        c: Channel[int] = Channel(1)
        for i in range(100):
            r = await select(Send(c, i), Get(c))
            if i % 2 == 0:
                assert isinstance(r, SendResult)
            else:
                assert isinstance(r, GetResult) and r.value == i - 1

    run(main)


# --- TestSelectStress ----------------------------------------------------------------------------


def test_select_stress() -> None:
    """TestSelectStress: channels of size 0, 0, 2, 3; per channel a plain sender and a plain
    getter of N values, plus a 4-case sending select and a 4-case getting select that remove a
    case after N; everything terminates and every queue ends empty."""
    n = 1000

    async def main() -> None:
        chans = [Channel[int](s) for s in (0, 0, 2, 3)]
        counts: collections.Counter[int] = collections.Counter()

        async def plain_send(c: Channel[int]) -> None:
            for i in range(n):
                await c.send(i)

        async def plain_get(c: Channel[int]) -> None:
            for _ in range(n):
                await c.get()

        async def select_send() -> None:
            sent = [0] * 4
            ops: dict[Operation, int] = {Send(c, 0): i for i, c in enumerate(chans)}
            sel = Select(*ops)
            while len(sel):
                r = await sel.select()
                i = ops[r.operation]
                sent[i] += 1
                sel.remove(r.operation)
                if sent[i] < n:
                    op = Send(chans[i], sent[i])
                    ops[op] = i
                    sel.add(op)

        async def select_get() -> None:
            got = [0] * 4
            ops: dict[Operation, int] = {Get(c): i for i, c in enumerate(chans)}
            sel = Select(*ops)
            while len(sel):
                r = await sel.select()
                i = ops[r.operation]
                got[i] += 1
                counts[i] += 1
                if got[i] == n:
                    sel.remove(r.operation)

        async with asyncio.timeout(30):
            await asyncio.gather(
                *(plain_send(c) for c in chans), *(plain_get(c) for c in chans),
                select_send(), select_get(),
            )
        assert counts == {0: n, 1: n, 2: n, 3: n}
        assert_idle(*chans)

    run(main)


# --- TestSelectFairness, TestPseudoRandomSend ----------------------------------------------------


def test_select_fairness() -> None:
    """TestSelectFairness: two always-ready gets placed after two never-ready ones; 10,000
    selects pick each about half the time (within 5 sigma = 250)."""
    c1: Channel[int] = Channel(10_001)
    c2: Channel[int] = Channel(10_001)
    c3: Channel[int] = Channel()
    c4: Channel[int] = Channel()
    for i in range(10_001):
        c1.send_nowait(i)
        c2.send_nowait(i)
    g1 = Get(c1)
    sel = Select(Get(c3), Get(c4), g1, Get(c2))
    cnt1 = sum(sel.select_nowait().operation is g1 for _ in range(10_000))
    assert abs(cnt1 - 5000) <= 250, cnt1


def test_select_fairness_beyond_the_cached_permutations() -> None:
    """The same with 7 cases (past the 4 whose permutations are cached, so the order is drawn
    with random.sample): three always-ready gets at the end each win a third of 9,000 selects,
    within 5 sigma (sqrt(9000 * 1/3 * 2/3) = 44.7, so 224)."""
    never = [Channel[int]() for _ in range(4)]
    ready = [Channel[int](9_001) for _ in range(3)]
    for c in ready:
        for i in range(9_001):
            c.send_nowait(i)
    ops = [Get(c) for c in ready]
    sel = Select(*(Get(c) for c in never), *ops)
    wins = collections.Counter(sel.select_nowait().operation for _ in range(9_000))
    assert set(wins) == set(ops)
    for op in ops:
        assert abs(wins[op] - 3000) <= 224, [wins[o] for o in ops]


@pytest.mark.parametrize("size", [0, 100])
def test_pseudo_random_send(size: int) -> None:
    """TestPseudoRandomSend: select {Send(c, 1), Send(c, 0)} 100 times; each value appears
    more than n/10 times."""

    async def main() -> list[int]:
        c: Channel[int] = Channel(size)
        got: list[int] = []

        async def getter() -> None:
            got.extend([await c.get() for _ in range(100)])

        task = asyncio.create_task(getter())
        for _ in range(100):
            await select(Send(c, 1), Send(c, 0))
        await task
        return got

    got = run(main)
    assert sum(got) > 10 and 100 - sum(got) > 10


# --- TestChan (multiset), TestMultiConsumer, goroutines.go ---------------------------------------


@pytest.mark.parametrize("size", [0, 1, 7, 100])
def test_four_producers_four_consumers(size: int) -> None:
    """TestChan: 4 producers x 4 consumers x 1000 values: every value received exactly 4 times."""

    async def main() -> collections.Counter[int]:
        c: Channel[int] = Channel(size)
        seen: collections.Counter[int] = collections.Counter()

        async def producer() -> None:
            for i in range(1000):
                await c.send(i)

        async def consumer() -> None:
            async for v in c:
                seen[v] += 1

        consumers = [asyncio.create_task(consumer()) for _ in range(4)]
        await asyncio.gather(*(producer() for _ in range(4)))
        c.close()
        await asyncio.gather(*consumers)
        assert_idle(c)
        return seen

    seen = run(main)
    assert seen == dict.fromkeys(range(1000), 4)


def test_multi_consumer_worker_pool() -> None:
    """TestMultiConsumer: 23 workers range over a buffered queue and forward to a result
    channel; close-and-drain gives the exact count and sum."""
    n = 27_183

    async def main() -> tuple[int, int]:
        q: Channel[int] = Channel(53)
        r: Channel[int] = Channel(29)

        async def worker() -> None:
            async for v in q:
                await r.send(v)

        async def feeder() -> None:
            for i in range(n):
                await q.send(i)
            q.close()

        async def closer(workers: list[asyncio.Task[None]]) -> None:
            await asyncio.gather(*workers)
            r.close()

        count = total = 0
        async with asyncio.TaskGroup() as tg:
            workers = [tg.create_task(worker()) for _ in range(23)]
            tg.create_task(feeder())
            tg.create_task(closer(workers))
            async for v in r:
                count += 1
                total += v
        return count, total

    assert run(main) == (n, n * (n - 1) // 2)


def test_ten_thousand_stage_chain() -> None:
    """goroutines.go: 10,000 tasks chained `left.send(await right.get())` over unbuffered
    channels pass one value end to end."""

    async def main() -> int:
        leftmost: Channel[int] = Channel()
        left = leftmost
        tasks = []

        async def stage(left: Channel[int], right: Channel[int]) -> None:
            await left.send(await right.get() + 1)

        for _ in range(10_000):
            right: Channel[int] = Channel()
            tasks.append(asyncio.create_task(stage(left, right)))
            left = right
        await left.send(0)
        value = await leftmost.get()
        await asyncio.gather(*tasks)
        return value

    assert run(main) == 10_000


# --- TestNonblockRecvRace, TestNonblockSelectRace ------------------------------------------------


def test_nonblock_recv_race_with_close() -> None:
    """TestNonblockRecvRace: a cap-1 channel holding a value, closed by another task; get_nowait
    returns the value or raises ChannelClosed, never WouldBlock."""

    async def main() -> None:
        for _ in range(2000):
            c: Channel[int] = Channel(1)
            c.send_nowait(1)

            async def closer(c: Channel[int] = c) -> None:
                c.close()

            task = asyncio.create_task(closer())
            await asyncio.sleep(0)
            try:
                assert c.get_nowait() == 1
            except ChannelClosed:
                pass
            await task

    run(main)


def test_nonblock_select_race() -> None:
    """TestNonblockSelectRace(2): while c1 is drained and c2 is fed or closed by another task,
    a non-blocking select over {c1, c2} never reports "none ready"."""

    async def main() -> None:
        for i in range(2000):
            c1: Channel[int] = Channel(1)
            c2: Channel[int] = Channel(1)
            c1.send_nowait(1)

            async def other(c1: Channel[int] = c1, c2: Channel[int] = c2, i: int = i) -> None:
                if i % 2:
                    c2.send_nowait(1)
                else:
                    c2.close()
                try:
                    c1.get_nowait()
                except WouldBlock:  # the select drained c1 first
                    pass

            task = asyncio.create_task(other())
            if i % 3:
                await asyncio.sleep(0)
            result = Select(Get(c1), Get(c2)).select_nowait()  # never WouldBlock
            assert isinstance(result, GetResult | Closed)
            await task

    run(main)


# --- TestSelectStackAdjust: close wakes parked selects -------------------------------------------


def test_close_wakes_two_parked_selects() -> None:
    """close(d) wakes two selects parked on it, each reporting Closed for its own case."""

    async def main() -> None:
        c: Channel[int] = Channel()
        d: Channel[int] = Channel()
        ops = [Get(d), Get(d)]
        tasks = [asyncio.create_task(select(Get(c), op)) for op in ops]
        await wait_until(lambda: d.statistics().waiting_getters == 2)
        d.close()
        assert [await t for t in tasks] == [Closed(d, op) for op in ops]
        assert_idle(c, d)

    run(main)
