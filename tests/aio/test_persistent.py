"""PersistentTaskGroup and spawn_background: a long-lived owner of tasks."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import math
import sys
import weakref
from collections.abc import Coroutine
from typing import Any

import pytest
from helpers.aio_groups import (
    EAGER,
    Boom,
    MyBaseExc,
    finishes_within,
    raise_after,
    run,
    run_never_awaited_free,
    spawn_failing_sibling,
    until_cancelled,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from executors.aio import PersistentTaskGroup, spawn_background
from executors.errors import ShutdownError


def test_ptg_failure_does_not_cancel_siblings_handler_called_at_once() -> None:
    """A failing task does not cancel its siblings; the handler is called once per failure,
    when it happens (not at exit); nothing is raised at exit."""
    calls: list[tuple[str, str]] = []

    async def main() -> list[str]:
        release = asyncio.Event()

        def handler(exc: BaseException, task: asyncio.Task[object]) -> None:
            calls.append((type(exc).__name__, task.get_name()))

        async def sibling() -> str:
            await release.wait()
            return "ok"

        async with PersistentTaskGroup(exception_handler=handler) as group:
            s = group.create_task(sibling())
            for i in range(3):
                group.create_task(raise_after(0, Boom), name=f"bad{i}")
            for _ in range(5):
                await asyncio.sleep(0)
            assert len(calls) == 3 and not s.done()  # reported at once; sibling untouched
            release.set()
        return [await s]

    assert run(main()) == ["ok"]
    assert sorted(calls) == [("Boom", "bad0"), ("Boom", "bad1"), ("Boom", "bad2")]


def test_ptg_async_handler_and_handler_failure_go_to_loop() -> None:
    """An async handler runs as a task the exit waits for; a failing handler (sync or async)
    reaches the loop's exception handler and raises nothing."""
    seen: list[str] = []
    loop_errors: list[str] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, ctx: loop_errors.append(type(ctx["exception"]).__name__)
        )

        async def handler(exc: BaseException, task: asyncio.Task[object]) -> None:
            await asyncio.sleep(0.01)
            seen.append(type(exc).__name__)
            if isinstance(exc, ValueError):
                raise KeyError("handler bug")

        async with PersistentTaskGroup(exception_handler=handler) as group:
            group.create_task(raise_after(0, Boom))
            group.create_task(raise_after(0, ValueError))

        def sync_handler(exc: BaseException, task: asyncio.Task[object]) -> None:
            raise LookupError("sync handler bug")

        async with PersistentTaskGroup(exception_handler=sync_handler) as group:
            group.create_task(raise_after(0, Boom))
        assert group.statistics().handler_errors == 1

    run(main())
    assert sorted(seen) == ["Boom", "ValueError"]
    assert sorted(loop_errors) == ["KeyError", "LookupError"]


def test_ptg_default_handler_reports_to_loop() -> None:
    """Without a handler, each failure goes to the loop's exception handler with the task."""
    reported: list[tuple[str, str]] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda loop, ctx: reported.append((type(ctx["exception"]).__name__,
                                               ctx["task"].get_name()))
        )
        async with PersistentTaskGroup(name="app") as group:
            group.create_task(raise_after(0, Boom), name="job")

    run(main())
    assert reported == [("Boom", "job")]


def test_ptg_handle_result_exception_and_cancel() -> None:
    """create_task returns the task: awaiting gives the result or raises the error; cancelling
    it cancels the work cleanly, with nothing sent to the loop's exception handler (aiotools'
    proxy future raised InvalidStateError there)."""
    loop_errors: list[object] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: loop_errors.append(ctx))
        cleaned = asyncio.Event()

        async def slow() -> None:
            try:
                await asyncio.sleep(10)
            finally:
                cleaned.set()

        group = PersistentTaskGroup(exception_handler=lambda exc, task: None)
        assert await group.create_task(asyncio.sleep(0, 7)) == 7
        with pytest.raises(Boom):
            await group.create_task(raise_after(0, Boom))
        handle = group.create_task(slow())
        await asyncio.sleep(0)
        handle.cancel()
        with pytest.raises(asyncio.CancelledError):
            await handle
        assert cleaned.is_set()
        await group.shutdown()
        stats = group.statistics()
        assert (stats.succeeded, stats.failed, stats.cancelled, stats.running) == (1, 1, 1, 0)

    run(main())
    assert loop_errors == []


@pytest.mark.parametrize("exc", [MyBaseExc, SystemExit])
def test_ptg_base_exception_not_swallowed(exc: type[BaseException]) -> None:
    """A task ending with a BaseException that is not an Exception is not swallowed: the group
    cancels the rest and re-raises it at exit (SystemExit bare, others grouped)."""
    cancelled: list[bool] = []

    async def main() -> None:
        async with PersistentTaskGroup() as group:
            group.create_task(until_cancelled(cancelled))
            group.create_task(raise_after(0, exc))
            await asyncio.sleep(10)  # interrupted

    expected = SystemExit if exc is SystemExit else BaseExceptionGroup
    with pytest.raises(expected):
        run(main())
    assert cancelled == [True]

    async def attribute_mode() -> int:
        group = PersistentTaskGroup()
        group.create_task(raise_after(0, exc))
        await asyncio.sleep(0.01)
        with pytest.raises(expected):
            await group.shutdown()
        await group.shutdown()  # raised once
        return asyncio.current_task().cancelling()  # type: ignore[union-attr]

    if exc is MyBaseExc:
        assert run(attribute_mode()) == 0


def test_ptg_refuses_after_shutdown_and_closes_coroutine() -> None:
    """create_task after shutdown() (or after the async-with exit) raises ShutdownError and
    closes the refused coroutine."""

    async def main() -> None:
        group = PersistentTaskGroup()
        group.create_task(asyncio.sleep(0))
        await group.shutdown()
        assert group.closed
        with pytest.raises(ShutdownError):
            group.create_task(asyncio.sleep(0))
        async with PersistentTaskGroup() as group2:
            pass
        with pytest.raises(ShutdownError):
            group2.create_task(asyncio.sleep(0))

    run_never_awaited_free(main())


def test_ptg_constructible_outside_loop_and_shutdown_before_start() -> None:
    """The group is built with no running loop; shutting down before a task ran its first step
    leaves no "never awaited" warning (aiotools' wrapper coroutine did)."""
    group = PersistentTaskGroup(name="early")
    assert repr(group) == "<PersistentTaskGroup 'early' idle running=0 spawned=0>"
    started = []

    async def work() -> None:
        started.append(True)

    async def main() -> None:
        for _ in range(5):
            group.create_task(work())
        await group.shutdown()

    run_never_awaited_free(main())
    assert started == []
    assert group.statistics().cancelled == 5


def test_ptg_shutdown_cancels_and_waits_for_cleanup() -> None:
    """shutdown() cancels running tasks and returns only after their async cleanup finished;
    it is idempotent."""
    cleaned = []

    async def worker(i: int) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)
            cleaned.append(i)
            raise

    async def main() -> None:
        group = PersistentTaskGroup()
        for i in range(10):
            group.create_task(worker(i))
        await asyncio.sleep(0)
        await group.shutdown()
        assert sorted(cleaned) == list(range(10))
        await group.shutdown()
        assert group.statistics().state == "closed"

    run(main())


def test_ptg_shutdown_timeout_is_a_grace_period() -> None:
    """shutdown(timeout) lets tasks finish on their own within the grace period, then cancels
    what is left."""
    finished: list[str] = []

    async def job(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        finished.append(name)

    async def main() -> None:
        group = PersistentTaskGroup()
        group.create_task(job("quick", 0))
        group.create_task(job("slow", 10))
        await group.shutdown(timeout=0.5)
        stats = group.statistics()
        assert (stats.succeeded, stats.cancelled) == (1, 1)

    run(main())
    assert finished == ["quick"]


def test_ptg_caller_cancelled_during_shutdown_still_waits() -> None:
    """Cancelling the task awaiting shutdown() (twice) cancels the children once, still waits
    for their cleanup to complete, then propagates CancelledError."""
    cleaned = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.02)
            cleaned.append(True)

    async def main() -> None:
        group = PersistentTaskGroup()
        group.create_task(stubborn())
        closer = asyncio.create_task(group.shutdown(timeout=5))
        await asyncio.sleep(0.01)
        closer.cancel()
        await asyncio.sleep(0.005)
        closer.cancel()  # again, during the children's cleanup: it must not be interrupted
        with pytest.raises(asyncio.CancelledError):
            await closer
        assert cleaned == [True]

    run(main())


def test_ptg_async_with_waits_for_tasks_spawned_during_exit() -> None:
    """The async-with exit waits for every task, including ones spawned while it waits."""
    done: list[int] = []

    async def chain(group: PersistentTaskGroup, n: int) -> None:
        await asyncio.sleep(0)
        done.append(n)
        if n:
            group.create_task(chain(group, n - 1))

    async def main() -> None:
        async with PersistentTaskGroup() as group:
            group.create_task(chain(group, 5))
        assert done == [5, 4, 3, 2, 1, 0]

    run(main())


def test_ptg_async_with_body_error_or_cancel_cancels_tasks_and_waits() -> None:
    """If the body of ``async with PersistentTaskGroup()`` raises, or the caller is cancelled
    while the exit waits, the tasks are cancelled, their async cleanup completes before the
    block is left, and the body's error (or the cancellation) propagates unchanged, with the
    caller's cancelling() balanced."""
    cleaned: list[str] = []

    async def worker(tag: str) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)
            cleaned.append(tag)
            raise

    async def body_raises() -> int:
        with pytest.raises(Boom):
            async with PersistentTaskGroup() as group:
                group.create_task(worker("a"))
                group.create_task(worker("b"))
                await asyncio.sleep(0)
                raise Boom
        assert sorted(cleaned) == ["a", "b"]
        assert group.statistics().cancelled == 2 and group.closed
        return asyncio.current_task().cancelling()  # type: ignore[union-attr]

    assert run(body_raises()) == 0
    cleaned.clear()

    async def cancelled_while_exiting() -> None:
        entered = asyncio.Event()

        async def owner() -> None:
            async with PersistentTaskGroup() as group:
                group.create_task(worker("c"))
                entered.set()
            cleaned.append("not reached")

        t = asyncio.create_task(owner())
        await entered.wait()
        await asyncio.sleep(0)  # the owner now waits in the exit
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert cleaned == ["c"]

    run(cancelled_while_exiting())


def test_ptg_memory_flat_over_many_tasks() -> None:
    """No unbounded growth: after 5,000 tasks (half failing) the group holds no task and no
    exception (aiotools #54)."""

    async def main() -> None:
        group = PersistentTaskGroup(exception_handler=lambda exc, task: None)
        refs: list[weakref.ref[BaseException]] = []

        async def maybe_fail(i: int) -> None:
            await asyncio.sleep(0)
            if i % 2:
                exc = Boom(i)
                refs.append(weakref.ref(exc))
                raise exc

        tasks = [group.create_task(maybe_fail(i)) for i in range(5000)]
        await asyncio.wait(tasks)
        del tasks  # ours were the last references to the tasks (and their exceptions)
        assert len(group._tasks) == 0
        gc.collect()
        assert sum(ref() is not None for ref in refs) == 0
        await group.shutdown()
        stats = group.statistics()
        assert (stats.spawned, stats.succeeded, stats.failed) == (5000, 2500, 2500)

    run(main())


@pytest.mark.parametrize("eager", EAGER)
def test_ptg_eager_tasks(eager: bool) -> None:
    """Under the eager task factory, tasks completing during create_task are counted."""

    async def value(x: int) -> int:
        return x

    async def main() -> tuple[int, int]:
        async with PersistentTaskGroup() as group:
            tasks = [group.create_task(value(i)) for i in range(100)]
        return sum(t.result() for t in tasks), group.statistics().succeeded

    assert run(main(), eager=eager) == (4950, 100)


def test_ptg_bad_input_repr_and_current() -> None:
    """Bad arguments name themselves; current() is the owning group inside its block and its
    tasks; repr and statistics show the state."""
    with pytest.raises(TypeError, match="name"):
        PersistentTaskGroup(name=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exception_handler"):
        PersistentTaskGroup(exception_handler="x")  # type: ignore[arg-type]

    async def main() -> None:
        group = PersistentTaskGroup(name="g")
        with pytest.raises(ValueError, match="timeout"):
            await group.shutdown(timeout=-1)
        with pytest.raises(TypeError, match="timeout"):
            await group.shutdown(timeout="1")  # type: ignore[arg-type]
        assert PersistentTaskGroup.current() is None
        async with PersistentTaskGroup(name="app") as app:
            assert PersistentTaskGroup.current() is app
            inner = await app.create_task(_current_name())
            assert inner == "app"
            app.create_task(asyncio.sleep(0.05))
            assert repr(app) == "<PersistentTaskGroup 'app' open running=1 spawned=2>"
        assert PersistentTaskGroup.current() is None
        assert app.statistics().state == "closed"
        assert app.get_name() == "app"

    run(main())


async def _current_name() -> str | None:
    current = PersistentTaskGroup.current()
    return None if current is None else current.name


def test_ptg_create_task_needs_a_running_loop() -> None:
    """create_task outside a running loop raises RuntimeError and closes the coroutine."""
    group = PersistentTaskGroup()
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="running event loop"):
        group.create_task(coro)
    assert coro.cr_frame is None  # closed


# -- spawn_background: the managed background task pattern -----------------------------------


def test_spawn_background_hands_work_to_the_owner() -> None:
    """Work handed off by a short-lived handler outlives the handler, is awaited by the owner's
    exit, and its failure reaches the owner's handler."""
    log: list[str] = []
    failures: list[str] = []
    mail_server_up: list[asyncio.Event] = []

    async def send_email(to: str) -> None:
        await mail_server_up[0].wait()
        log.append(f"sent {to}")

    async def handler(request: str) -> str:
        spawn_background(send_email(request))
        if request == "bad":
            spawn_background(raise_after(0, Boom))
        return f"ok {request}"

    async def main() -> None:
        async with PersistentTaskGroup(
            name="app", exception_handler=lambda exc, task: failures.append(repr(exc))
        ) as app:
            mail_server_up.append(asyncio.Event())
            responses = [await app.create_task(handler(r)) for r in ("a", "bad")]
            assert responses == ["ok a", "ok bad"]
            assert log == []  # the handlers returned; their background work is still pending
            mail_server_up[0].set()  # the owner's exit waits for the work
        assert sorted(log) == ["sent a", "sent bad"]

    run(main())
    assert failures == ["Boom()"]


def test_spawn_background_is_cancelled_at_owner_shutdown_and_needs_an_owner() -> None:
    """Background work is cancelled by the owner's shutdown; with no owner, spawn_background
    raises and closes the coroutine; an explicit group= works from anywhere on the loop."""
    cancelled: list[bool] = []

    async def main() -> None:
        coro = until_cancelled(cancelled)
        with pytest.raises(RuntimeError, match="no owner"):
            spawn_background(coro)
        assert coro.cr_frame is None
        app = PersistentTaskGroup(name="app")
        spawn_background(until_cancelled(cancelled), group=app)
        await asyncio.sleep(0)
        await app.shutdown()
        with pytest.raises(ShutdownError):
            spawn_background(until_cancelled(cancelled), group=app)

    run(main())
    assert cancelled == [True]


def test_ptg_tasks_see_the_creators_context() -> None:
    """Tasks copy their creator's context (plus the owning group), like asyncio's tasks."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def read() -> str:
        return var.get()

    async def main() -> str:
        var.set("request-42")
        async with PersistentTaskGroup() as group:
            t = group.create_task(read())
        return t.result()

    assert run(main()) == "request-42"


def test_ptg_concurrent_shutdowns_all_return() -> None:
    """Several tasks awaiting shutdown() at once (one with a grace period) all return once the
    last task has finished."""

    async def main() -> None:
        group = PersistentTaskGroup()
        for _ in range(3):
            group.create_task(asyncio.sleep(0.02))
        closers = [asyncio.create_task(group.shutdown(timeout=t)) for t in (None, 5, None)]
        async with asyncio.timeout(5):
            await asyncio.gather(*closers)
        assert group.statistics().running == 0

    run(main())


# -- a state machine over PersistentTaskGroup ------------------------------------------------


class PersistentGroupMachine(RuleBasedStateMachine):
    """Random spawns (succeeding, failing, slow), handle cancellations, loop steps and
    shutdowns; after every step the counters add up, the handler has seen exactly the failures,
    the group holds only its own tasks, and after a shutdown none is left."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.handled: list[BaseException] = []
        self.group = PersistentTaskGroup(
            exception_handler=lambda exc, task: self.handled.append(exc)
        )
        self.handles: list[asyncio.Task[object]] = []
        self.shut = False

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        async def spawn() -> None:
            self.handles.append(self.group.create_task(coro))

        if self.shut:
            coro.close()
            return
        self.loop.run_until_complete(spawn())

    @rule(steps=st.integers(0, 3))
    def spawn_ok(self, steps: int) -> None:
        async def ok() -> object:
            for _ in range(steps):
                await asyncio.sleep(0)
            return steps

        self._spawn(ok())

    @rule(steps=st.integers(0, 3))
    def spawn_failing(self, steps: int) -> None:
        async def bad() -> object:
            for _ in range(steps):
                await asyncio.sleep(0)
            raise Boom(steps)

        self._spawn(bad())

    @rule()
    def spawn_slow(self) -> None:
        self._spawn(asyncio.sleep(3600))

    @rule(index=st.integers(0, 50))
    def cancel_a_handle(self, index: int) -> None:
        if self.handles:
            self.handles[index % len(self.handles)].cancel()

    @rule(steps=st.integers(1, 4))
    def run_loop(self, steps: int) -> None:
        async def idle() -> None:
            for _ in range(steps):
                await asyncio.sleep(0)

        self.loop.run_until_complete(idle())

    @rule()
    def shutdown(self) -> None:
        self.loop.run_until_complete(self.group.shutdown())
        self.shut = True

    @invariant()
    def counters_add_up(self) -> None:
        stats = self.group.statistics()
        assert stats.spawned == len(self.handles)
        assert stats.spawned == stats.succeeded + stats.failed + stats.cancelled + stats.running
        assert stats.failed == len(self.handled)
        # A task that just finished is counted as running until its done-callback has run.
        assert stats.running >= sum(not h.done() for h in self.handles)
        assert set(self.group._tasks) <= set(self.handles)
        if self.shut:
            assert stats.running == 0 and stats.state == "closed"

    def teardown(self) -> None:
        self.loop.run_until_complete(self.group.shutdown())
        assert self.group.statistics().running == 0
        self.loop.close()


TestPersistentGroupMachine = PersistentGroupMachine.TestCase
TestPersistentGroupMachine.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None
)


@pytest.mark.parametrize("timeout", [None, math.inf])
def test_ptg_shutdown_without_limit_waits_for_tasks_to_finish(timeout: float | None) -> None:
    """shutdown(timeout=None) and shutdown(timeout=math.inf) follow the one timeout rule: the
    tasks are given as long as they take and none is cancelled; the default (0) cancels at
    once."""

    async def main() -> None:
        group = PersistentTaskGroup()
        group.create_task(asyncio.sleep(0.05))
        await group.shutdown(timeout=timeout)
        assert (group.statistics().succeeded, group.statistics().cancelled) == (1, 0)
        hasty = PersistentTaskGroup()
        hasty.create_task(asyncio.sleep(3600))
        await hasty.shutdown()
        assert (hasty.statistics().succeeded, hasty.statistics().cancelled) == (0, 1)

    run(main())


def test_old_import_path_still_works() -> None:
    """The persistent group moved to executors.aio.persistent; the names stay importable from
    executors.aio.taskgroups, where they used to live."""
    from executors.aio import persistent, taskgroups

    assert taskgroups.PersistentTaskGroup is persistent.PersistentTaskGroup
    assert taskgroups.PersistentTaskGroupStatistics is persistent.PersistentTaskGroupStatistics
    assert taskgroups.spawn_background is persistent.spawn_background


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager_task_factory is new in 3.12")
@pytest.mark.parametrize("mode", ["async with", "shutdown"])
def test_ptg_eager_task_spawning_a_failing_sibling_does_not_hang(mode: str) -> None:
    """issue 16 bug 2 (CPython gh-128550): under the eager task factory, a task that starts
    eagerly creates a sibling that dies at once of a BaseException (which shuts the group
    down), then waits forever. The death is accounted for from a done callback, once the
    spawning task is in the group, so the shutdown cancels it and the BaseException comes out
    (accounted inline, the spawner was missed and the group never ended)."""
    stuck: list[asyncio.Task[Any]] = []

    async def in_group() -> list[type[BaseException]]:
        with pytest.raises(BaseExceptionGroup) as info:
            if mode == "async with":
                async with PersistentTaskGroup() as group:
                    spawner = spawn_failing_sibling(group.create_task, MyBaseExc)
                    stuck.append(group.create_task(spawner))
            else:
                group = PersistentTaskGroup()
                spawner = spawn_failing_sibling(group.create_task, MyBaseExc)
                stuck.append(group.create_task(spawner))
                await group.shutdown(timeout=None)
        return [type(e) for e in info.value.exceptions]

    async def main() -> list[type[BaseException]]:
        return await finishes_within(in_group(), 5, stuck)  # type: ignore[no-any-return]

    assert run(main(), eager=True) == [MyBaseExc]
    assert stuck[0].cancelled()


def test_all_ptaskgroups_lists_the_live_groups() -> None:
    """issue 16 (aiotools compatibility): PersistentTaskGroup.all_ptaskgroups() lists every
    group from its construction until it is closed with no task left, in creation order, as
    aiotools' classmethod of that name does; a group nobody holds drops out."""
    before = set(PersistentTaskGroup.all_ptaskgroups())

    def mine() -> list[str]:
        return [g.name for g in PersistentTaskGroup.all_ptaskgroups() if g not in before]

    async def main() -> list[list[str]]:
        seen = []
        attribute = PersistentTaskGroup(name="attribute")
        seen.append(mine())
        async with PersistentTaskGroup(name="outer") as outer:
            async with PersistentTaskGroup(name="inner"):
                outer.create_task(asyncio.sleep(0.01))
                seen.append(mine())
            seen.append(mine())
        seen.append(mine())
        attribute.create_task(asyncio.sleep(3600))
        shutting = asyncio.ensure_future(attribute.shutdown())
        await asyncio.sleep(0)
        seen.append(mine())  # shutting down: still listed until its task has finished
        await shutting
        seen.append(mine())
        forgotten = PersistentTaskGroup(name="forgotten")
        seen.append(mine())
        del forgotten
        gc.collect()
        seen.append(mine())
        return seen

    assert run(main()) == [
        ["attribute"],
        ["attribute", "outer", "inner"],
        ["attribute", "outer"],
        ["attribute"],
        ["attribute"],
        [],
        ["forgotten"],
        [],
    ]
