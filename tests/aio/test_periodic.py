"""AsyncPeriodicExecutor: PyMongo's async executor API, without polling or its known bugs."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from executors.aio import AsyncPeriodicExecutor

pytestmark = pytest.mark.timeout(30)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


class Recorder:
    """A target that records the loop time of each run and can be told what to return."""

    def __init__(self, *, keep_going: Callable[[int], bool] = lambda n: True,
                 body: Callable[[], Awaitable[None]] | None = None) -> None:
        self.times: list[float] = []
        self.keep_going = keep_going
        self.body = body
        self.ran = asyncio.Event()

    async def __call__(self) -> bool:
        self.times.append(asyncio.get_running_loop().time())
        self.ran.set()
        if self.body is not None:
            await self.body()
        return self.keep_going(len(self.times))

    async def wait_runs(self, n: int, within: float = 5) -> None:
        async with asyncio.timeout(within):
            while len(self.times) < n:
                self.ran.clear()
                await self.ran.wait()


def test_join_without_open_is_safe() -> None:
    """join() on a never-opened executor returns True at once (PyMongo PYTHON-1050)."""

    async def main() -> bool:
        ex = AsyncPeriodicExecutor(1, 0.1, Recorder())
        return await ex.join(timeout=0.01)

    assert run(main()) is True


def test_target_returning_false_stops() -> None:
    """A falsy result stops the executor; join() then returns True and the state is closed."""

    async def main() -> None:
        rec = Recorder(keep_going=lambda n: n < 3)
        ex = AsyncPeriodicExecutor(0.001, 0, rec)
        ex.open()
        assert await ex.join(5)
        assert len(rec.times) == 3
        assert ex.statistics().state == "closed" and ex.closed

    run(main())


def test_skip_sleep_before_open_makes_second_run_immediate() -> None:
    """skip_sleep() before open(): the second run follows the first at once (interval 30)."""

    async def main() -> None:
        rec = Recorder()
        ex = AsyncPeriodicExecutor(30, 0.001, rec)
        ex.skip_sleep()
        ex.open()
        await rec.wait_runs(2)
        assert rec.times[1] - rec.times[0] < 1
        ex.close()
        assert await ex.join(5)

    run(main())


def test_never_polls_and_wake_is_immediate() -> None:
    """Asleep with interval 30, the task does not wake at all (PyMongo's wakes every
    min_interval); wake() runs the target promptly once min_interval has passed."""

    async def main() -> None:
        rec = Recorder()
        ex = AsyncPeriodicExecutor(30, 0.05, rec)
        ex.open()
        await rec.wait_runs(1)
        await asyncio.sleep(0.3)
        stats = ex.statistics()
        assert stats.runs == 1 and stats.wakeups == 0
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        ex.wake()
        await rec.wait_runs(2)
        assert rec.times[1] - t0 < 1  # at once (generous: a loaded CI machine), not 30 s
        assert ex.statistics().wake_requests == 1
        ex.close()
        assert await ex.join(5)

    run(main())


def test_wake_is_throttled_by_min_interval_and_kept_during_a_run() -> None:
    """An early run waits min_interval after the previous run started; a wake that arrives
    while the target runs is served after it."""

    async def main() -> None:
        holder: list[AsyncPeriodicExecutor] = []

        async def body() -> None:
            if len(rec.times) == 1:
                holder[0].wake()  # during the first run

        rec = Recorder(body=body)
        ex = AsyncPeriodicExecutor(30, 0.2, rec)
        holder.append(ex)
        ex.open()
        await rec.wait_runs(2)
        gap = rec.times[1] - rec.times[0]
        assert 0.19 <= gap < 10  # min_interval, not the 30 s interval
        ex.close()
        assert await ex.join(5)

    run(main())


def test_close_from_own_task_does_not_cancel_itself() -> None:
    """PYTHON-6226: a target that closes its executor is not cancelled; its run completes and
    the executor can be reopened and runs again."""
    finished: list[bool] = []

    async def main() -> None:
        holder: list[AsyncPeriodicExecutor] = []

        async def body() -> None:
            if len(rec.times) == 1:
                holder[0].close()
                await asyncio.sleep(0.01)  # would raise CancelledError if self-cancelled
                finished.append(True)

        rec = Recorder(body=body)
        ex = AsyncPeriodicExecutor(0.01, 0, rec)
        holder.append(ex)
        ex.open()
        assert await ex.join(5)
        assert finished == [True] and len(rec.times) == 1
        task = ex._task
        assert task is not None and not task.cancelled()
        ex.open()
        await rec.wait_runs(3)
        ex.close()
        assert await ex.join(5)

    run(main())


def test_close_from_another_task_cancels_the_run_and_reopen_works() -> None:
    """close() from another task cancels a run in progress (PYTHON-5053); open() right after
    starts a fresh task once the cancelled one finished (PyMongo's re-open was a no-op)."""
    cancelled: list[bool] = []

    async def main() -> None:
        async def body() -> None:
            if len(rec.times) == 1:
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    await asyncio.sleep(0.01)  # async cleanup
                    cancelled.append(True)
                    raise

        rec = Recorder(body=body)
        ex = AsyncPeriodicExecutor(0.01, 0, rec)
        ex.open()
        await rec.wait_runs(1)
        await asyncio.sleep(0)
        ex.close()
        assert ex.statistics().state == "closing"
        ex.open()
        await rec.wait_runs(3)
        assert cancelled == [True]
        ex.close()
        assert await ex.join(5)
        assert ex.statistics().state == "closed"
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]

    run(main())


def test_close_from_another_thread_and_weakref_callback() -> None:
    """close() from another thread hands over to the loop; close as a weakref callback stops
    the executor when its owner is collected."""

    class Owner:
        pass

    async def main() -> None:
        ex = AsyncPeriodicExecutor(30, 0, Recorder())
        ex.open()
        await asyncio.to_thread(ex.close)
        assert await ex.join(5)

        ex2 = AsyncPeriodicExecutor(30, 0, Recorder())
        owner = Owner()
        ref = weakref.ref(owner, ex2.close)
        ex2.open()
        await asyncio.sleep(0)
        del owner
        gc.collect()
        assert ref() is None
        assert await ex2.join(5)

    run(main())


def test_fresh_context_for_the_task() -> None:
    """PYTHON-5406: values the opener set in contextvars are not seen by the target."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("deadline", default="unset")
    seen: list[str] = []

    async def target() -> bool:
        seen.append(var.get())
        var.set("set by target")
        return len(seen) < 2

    async def main() -> None:
        var.set("opener's deadline")
        ex = AsyncPeriodicExecutor(0.001, 0, target)
        ex.open()
        assert await ex.join(5)
        assert var.get() == "opener's deadline"

    run(main())
    assert seen[0] == "unset"


def test_join_timeout_does_not_cancel() -> None:
    """PYTHON-5044: join(timeout) that times out returns False and leaves the task running;
    join from the executor's own task returns False at once."""
    from_inside: list[bool] = []

    async def main() -> None:
        holder: list[AsyncPeriodicExecutor] = []

        async def body() -> None:
            if not from_inside:
                from_inside.append(await holder[0].join())

        rec = Recorder(body=body)
        ex = AsyncPeriodicExecutor(30, 0, rec)
        holder.append(ex)
        ex.open()
        assert await ex.join(0.05) is False
        assert ex.statistics().task_alive
        ex.close()
        assert await ex.join(5) is True

    run(main())
    assert from_inside == [False]


def test_update_interval_reschedules_the_sleeping_task() -> None:
    """update_interval() takes effect at once, not after the current (long) sleep."""

    async def main() -> None:
        rec = Recorder()
        ex = AsyncPeriodicExecutor(30, 0, rec)
        ex.open()
        await rec.wait_runs(1)
        ex.update_interval(0.01)
        await rec.wait_runs(3, within=10)
        assert ex.interval == 0.01
        ex.close()
        assert await ex.join(5)

    run(main())


def test_target_errors(caplog: pytest.LogCaptureFixture) -> None:
    """An error is logged on executors.aio.periodic and counted; "continue" keeps the schedule,
    "stop" stops."""

    failures = 0

    async def fail() -> bool:
        nonlocal failures
        failures += 1
        if failures == 3:
            third.set()
        raise ValueError("boom")

    third = asyncio.Event()

    async def main() -> None:
        ex = AsyncPeriodicExecutor(0.001, 0, fail)
        ex.open()
        async with asyncio.timeout(5):
            await third.wait()
        ex.close()
        assert await ex.join(5)
        assert ex.statistics().last_error == "ValueError: boom"
        assert "errors=" in repr(ex)

        stopper = AsyncPeriodicExecutor(0.001, 0, fail, on_error="stop")
        stopper.open()
        assert await stopper.join(5)
        assert stopper.statistics().errors == 1

    with caplog.at_level(logging.ERROR, logger="executors.aio.periodic"):
        run(main())
    assert any("boom" in r.exc_text for r in caplog.records if r.exc_text)


def test_outside_cancellation_stops_it() -> None:
    """A cancellation that is not close()'s (loop shutdown) stops the executor and propagates."""

    async def main() -> AsyncPeriodicExecutor:
        ex = AsyncPeriodicExecutor(30, 0, Recorder())
        ex.open()
        await asyncio.sleep(0.01)
        assert ex._task is not None
        ex._task.cancel()
        await asyncio.wait([ex._task])
        assert ex._task.cancelled()
        return ex

    ex = run(main())
    assert ex.closed and ex.statistics().state == "closed"


def test_bad_input() -> None:
    """Bad arguments raise TypeError/ValueError naming the argument."""
    rec = Recorder()
    with pytest.raises(TypeError, match="interval"):
        AsyncPeriodicExecutor("1", 0, rec)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval"):
        AsyncPeriodicExecutor(float("nan"), 0, rec)
    with pytest.raises(ValueError, match="min_interval"):
        AsyncPeriodicExecutor(1, -2, rec)
    with pytest.raises(ValueError, match="min_interval"):
        AsyncPeriodicExecutor(1, 2, rec)
    with pytest.raises(TypeError, match="target"):
        AsyncPeriodicExecutor(1, 0, 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="name"):
        AsyncPeriodicExecutor(1, 0, rec, name=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_error"):
        AsyncPeriodicExecutor(1, 0, rec, on_error="ignore")  # type: ignore[arg-type]
    ex = AsyncPeriodicExecutor(1, 0.5, rec)
    with pytest.raises(ValueError, match="new_interval"):
        ex.update_interval(0.1)
    with pytest.raises(ValueError, match="new_interval"):
        ex.update_interval(float("inf"))
    with pytest.raises(RuntimeError, match="running event loop"):
        ex.open()

    async def bad_join() -> None:
        with pytest.raises(ValueError, match="timeout"):
            await ex.join(-1)

    run(bad_join())


_NAN = float("nan")
_INF = float("inf")


@pytest.mark.parametrize(("value", "error"), [
    (_INF, ValueError), (_NAN, ValueError), (-1, ValueError), (-0.5, ValueError),
    (True, TypeError), (False, TypeError), ("1", TypeError), (None, TypeError)])
@pytest.mark.parametrize("argument", ["interval", "min_interval", "new_interval"])
def test_durations_follow_the_one_rule(argument: str, value: object,
                                       error: type[Exception]) -> None:
    """interval, min_interval and update_interval's new_interval are durations
    (executors._validate): finite, >= 0, a real number; inf, NaN, negatives and bools are
    refused with the argument's name."""
    rec = Recorder()
    with pytest.raises(error, match=argument):
        if argument == "interval":
            AsyncPeriodicExecutor(value, 0, rec)  # type: ignore[arg-type]
        elif argument == "min_interval":
            AsyncPeriodicExecutor(10, value, rec)  # type: ignore[arg-type]
        else:
            AsyncPeriodicExecutor(10, 0, rec).update_interval(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "error"), [
    (_NAN, ValueError), (-1, ValueError), (True, TypeError), (False, TypeError),
    ("1", TypeError)])
def test_join_timeout_refuses_what_the_rule_refuses(value: object,
                                                    error: type[Exception]) -> None:
    """join(timeout=...) is a timeout (executors._validate): NaN, negatives and bools are
    refused naming `timeout`."""

    async def main() -> None:
        ex = AsyncPeriodicExecutor(10, 0, Recorder())
        with pytest.raises(error, match="timeout"):
            await ex.join(value)  # type: ignore[arg-type]

    run(main())


def test_join_timeout_inf_means_wait_as_long_as_it_takes() -> None:
    """join(math.inf) waits like join(None) (the rule: inf means no timeout); it used to be
    refused as "not finite"."""

    async def main() -> bool:
        ex = AsyncPeriodicExecutor(10, 0, Recorder())
        ex.open()
        await asyncio.sleep(0)
        asyncio.get_running_loop().call_later(0.05, ex.close)
        return await ex.join(_INF)

    assert run(main()) is True


def test_statistics_and_repr() -> None:
    """statistics() is a frozen snapshot; repr shows the state, next run and counters."""

    async def main() -> None:
        rec = Recorder()
        ex = AsyncPeriodicExecutor(30, 0, rec, name="monitor")
        assert repr(ex) == "<AsyncPeriodicExecutor 'monitor' idle interval=30s runs=0>"
        ex.open()
        await rec.wait_runs(1)
        await asyncio.sleep(0)
        text = repr(ex)
        assert text.startswith("<AsyncPeriodicExecutor 'monitor' open next_run_in=")
        assert text.endswith("interval=30s runs=1>")
        stats = ex.statistics()
        assert stats.state == "open" and stats.runs == 1 and stats.task_alive
        assert stats.next_run_at is not None and stats.last_run_started is not None
        with pytest.raises(AttributeError):
            stats.runs = 5  # type: ignore[misc]
        ex.close()
        assert await ex.join(5)
        assert ex.statistics().next_run_at is None
        assert ex.name == "monitor" and ex.min_interval == 0 and ex.target is rec

    run(main())
