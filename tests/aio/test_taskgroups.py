"""TaskGroup: Python 3.13's behaviour on every supported version, and the bugs it avoids."""

from __future__ import annotations

import asyncio
import gc
import sys
import weakref
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
)

from executors.aio import TaskGroup

# -- TaskGroup -------------------------------------------------------------------------------


def test_refused_coroutine_is_closed() -> None:
    """create_task on a group not entered / finished / shutting down closes the coroutine
    (gh-115957, 3.13 behaviour) on every interpreter: no "never awaited" warning."""

    async def main() -> None:
        tg = TaskGroup()
        with pytest.raises(RuntimeError, match="has not been entered"):
            tg.create_task(asyncio.sleep(0))
        async with tg:
            pass
        with pytest.raises(RuntimeError, match="is finished"):
            tg.create_task(asyncio.sleep(0))
        with pytest.raises(ExceptionGroup):
            async with TaskGroup() as tg2:
                tg2.create_task(raise_after(0, Boom))
                try:
                    await asyncio.sleep(1)
                finally:
                    with pytest.raises(RuntimeError, match="is shutting down"):
                        tg2.create_task(asyncio.sleep(0))

    run_never_awaited_free(main())


@pytest.mark.parametrize("eager", EAGER)
def test_nested_groups_both_fail_balanced(eager: bool) -> None:
    """gh-116720 on every interpreter: inner and outer children fail at once; the outer error
    is raised, cancelling() is 1 inside the outer block and 0 after, with no stray cancel
    (3.11/3.12's uncancel() leaves `_must_cancel` set; ours absorbs it)."""

    async def main() -> list[int]:
        seen = []
        try:
            async with TaskGroup() as outer:
                try:
                    async with TaskGroup() as inner:
                        inner.create_task(raise_after(0, RuntimeError))
                        outer.create_task(raise_after(0, ValueError))
                except* RuntimeError:
                    pass
                seen.append(asyncio.current_task().cancelling())  # type: ignore[union-attr]
        except* ValueError:
            pass
        seen.append(asyncio.current_task().cancelling())  # type: ignore[union-attr]
        await asyncio.sleep(0)  # no stale cancellation arrives here
        return seen

    assert run(main(), eager=eager) == [1, 0]


def test_error_and_outside_cancel_redelivered() -> None:
    """Errors beat cancellation, and an outside cancel that arrived meanwhile is re-delivered
    at the next await with cancelling() stable at 1 (test_error_and_cancel, 3.13)."""
    log: list[str] = []

    async def inner(started: asyncio.Event) -> None:
        try:
            async with TaskGroup() as tg:
                tg.create_task(raise_after(0, Boom))
                started.set()
                await asyncio.sleep(1)
        except* Boom:
            log.append(f"group {asyncio.current_task().cancelling()}")  # type: ignore[union-attr]
        await asyncio.sleep(1)
        log.append("not cancelled")

    async def main() -> None:
        started = asyncio.Event()
        t = asyncio.create_task(inner(started))
        await started.wait()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t

    run(main())
    assert log == ["group 1"]


@pytest.mark.parametrize("eager", EAGER)
def test_cancelling_balanced_after_handled_error(eager: bool) -> None:
    """After `except*` handles a child error, the parent's cancelling() is 0 again (gh-95289)."""

    async def main() -> int:
        try:
            async with TaskGroup() as tg:
                tg.create_task(raise_after(0, RuntimeError))
                await asyncio.sleep(1)
        except* RuntimeError:
            pass
        await asyncio.sleep(0)
        return asyncio.current_task().cancelling()  # type: ignore[union-attr]

    assert run(main(), eager=eager) == 0


def test_cancelled_error_subclass_is_cancellation() -> None:
    """A subclass of CancelledError leaving the body counts as cancellation (3.13 issubclass,
    3.11/3.12 compared identity)."""

    class MyCancel(asyncio.CancelledError):
        pass

    async def main() -> None:
        async with TaskGroup() as tg:
            tg.create_task(asyncio.sleep(1))
            raise MyCancel

    with pytest.raises(MyCancel):
        run(main())


def test_keyboard_interrupt_from_body_is_bare() -> None:
    """KeyboardInterrupt from the body comes out bare; other BaseExceptions are grouped."""

    async def body(exc: type[BaseException]) -> None:
        async with TaskGroup() as tg:
            tg.create_task(asyncio.sleep(1))
            raise exc

    with pytest.raises(KeyboardInterrupt):
        run(body(KeyboardInterrupt))
    with pytest.raises(BaseExceptionGroup) as info:
        run(body(MyBaseExc))
    assert not isinstance(info.value, ExceptionGroup)
    assert [type(e) for e in info.value.exceptions] == [MyBaseExc]


@pytest.mark.parametrize("eager", EAGER)
def test_eager_children(eager: bool) -> None:
    """Children that finish or fail during create_task (eager factory) are accounted for:
    results kept, failure raised as an ExceptionGroup, no hang (gh-104144)."""

    async def value(x: int) -> int:
        return x

    async def fail_now() -> None:
        raise Boom

    async def main() -> list[int]:
        async with TaskGroup() as tg:
            tasks = [tg.create_task(value(i)) for i in range(5)]
        assert not tg._tasks
        return [t.result() for t in tasks]

    assert run(main(), eager=eager) == [0, 1, 2, 3, 4]

    async def failing() -> None:
        async with TaskGroup() as tg:
            tg.create_task(fail_now())
            await asyncio.sleep(1)

    with pytest.raises(ExceptionGroup) as info:
        run(failing(), eager=eager)
    assert [type(e) for e in info.value.exceptions] == [Boom]


def test_group_and_errors_not_retained() -> None:
    """After the block raised, the group holds no exception and nothing keeps the group alive
    through a traceback (the gh-124958 / gh-128552 cycles)."""

    async def main() -> weakref.ref[TaskGroup]:
        tg = TaskGroup()
        try:
            async with tg:
                tg.create_task(raise_after(0, Boom))
        except* Boom:
            pass
        assert tg._errors == [] and tg._base_error is None
        return weakref.ref(tg)

    gc.disable()
    try:
        ref = run(main())
        assert ref() is None  # freed by reference counting alone, no cycle
    finally:
        gc.enable()


def test_taskgroup_repr() -> None:
    """repr shows the state: entered with its task count, then finished."""

    async def main() -> list[str]:
        out = []
        async with TaskGroup() as tg:
            tg.create_task(asyncio.sleep(0.01))
            out.append(repr(tg))
        out.append(repr(tg))
        return out

    entered, finished = run(main())
    assert entered == "<TaskGroup tasks=1 entered>"
    assert finished == "<TaskGroup finished>"


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager_task_factory is new in 3.12")
def test_eager_child_spawning_a_failing_sibling_does_not_hang() -> None:
    """issue 16 bug 2 (CPython gh-128550): under the eager task factory, a child that starts
    eagerly creates a sibling that fails at once, then waits forever. The failure is accounted
    for from a done callback, once the spawning child is in the group, so it is cancelled too
    and the group raises the ExceptionGroup (accounted inline, the spawner was missed and the
    group hung)."""
    stuck: list[asyncio.Task[Any]] = []

    async def group() -> list[type[BaseException]]:
        with pytest.raises(ExceptionGroup) as info:
            async with TaskGroup() as tg:
                stuck.append(tg.create_task(spawn_failing_sibling(tg.create_task, Boom)))
        return [type(e) for e in info.value.exceptions]

    async def main() -> list[type[BaseException]]:
        return await finishes_within(group(), 5, stuck)  # type: ignore[no-any-return]

    assert run(main(), eager=True) == [Boom]
    assert stuck[0].cancelled()
