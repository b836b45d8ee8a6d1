"""Cancellation bookkeeping: the one rule for a cancellation that cannot be honoured (private).

The rule: whoever catches a `CancelledError` it cannot honour (the operation it interrupted has
already taken effect, or errors beat it) lets the task go on, and the cancellation is requested
again *once the task yields*, and only if the task is still counted as cancelling then
(`redeliver_cancel`, `defer_cancel`). Never an immediate ``uncancel(); cancel()``: before 3.13
the ``uncancel()`` of an ``asyncio.timeout()`` that consumed the request cannot withdraw it, and
a task that ends right after the operation would end cancelled although it took effect.

The task groups' helpers also keep the promises of `asyncio.TaskGroup` as it stands in Python
3.13 on every supported version: a refused coroutine is closed, and the parent task's
cancellation state (``cancelling()`` and the pending cancellation) is left as 3.13 leaves it.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any

from ._atomic import atomic

__all__ = ("UNCANCEL_CLEARS_MUST_CANCEL", "absorb_stale_cancel", "close_refused",
           "defer_cancel", "redeliver_cancel")

# Before 3.13, Task.uncancel() does not clear a pending `_must_cancel` when the count reaches 0
# (gh-116720, fixed in 3.13 by PR #117407).
UNCANCEL_CLEARS_MUST_CANCEL = sys.version_info >= (3, 13)


def close_refused(coro: object) -> None:
    """Close `coro` if it is a coroutine: a group that refuses it never runs it.

    No "coroutine was never awaited" warning (gh-115957, done by asyncio from 3.13 on; we do it
    on 3.11 and 3.12 too).
    """
    close = getattr(coro, "close", None)
    if close is not None and inspect.iscoroutine(coro):
        close()


async def absorb_stale_cancel(parent: asyncio.Task[Any]) -> None:
    """Take a pending cancellation of `parent` (the running task) that nobody requests any more.

    On 3.11/3.12, a cancel() made while the parent was already being woken by an earlier one
    sets `_must_cancel`; uncancel() to zero does not clear it, so a CancelledError nobody
    requested any more would hit the parent at its next await (gh-116720, the
    nested_groups_both_cancelled case). Call it where the caller knows the cancellation is its
    own; a real cancellation arriving meanwhile raises the count again and propagates.

    `_must_cancel` is private: a task that does not show it counts as "maybe pending" (yield
    once and absorb what nobody requests), the fallback listed in docs/content/design.md.
    """
    if UNCANCEL_CLEARS_MUST_CANCEL or getattr(parent, "_must_cancel", None) is False:
        return
    try:
        await asyncio.sleep(0)
    except asyncio.CancelledError:
        if parent.cancelling():
            raise


def redeliver_cancel(task: asyncio.Task[Any]) -> None:
    """Re-request an outside cancellation of `task` that raising errors would otherwise eat.

    Errors beat cancellation (gh-95704): a group or combinator raises its children's errors
    although `task` was cancelled meanwhile, and the cancellation must still reach `task` at
    its next await, with ``cancelling()`` keeping its count (gh-116720). Python 3.13 does it
    with ``uncancel(); cancel()``: the cancellation is then pending, and an ``uncancel()`` to
    zero before the next await withdraws it (the ``asyncio.timeout()`` around the group does
    exactly that when it was the canceller).

    On 3.11/3.12 that ``uncancel()`` leaves the pending cancellation in place, so the caller
    would be cancelled at its next await by a cancellation its timeout already consumed, with
    ``cancelling() == 0`` (issue 16). There the request is made once `task` has yielded to the
    loop, and only if its count is still above zero: the same outcome as 3.13's. One
    difference remains: a task that returns without awaiting anything after the group ends
    with its result there, and cancelled on 3.13.
    """
    if not task.cancelling():
        return
    if UNCANCEL_CLEARS_MUST_CANCEL:
        task.uncancel()
        task.cancel()
    else:
        task.get_loop().call_soon(_redeliver_if_still_requested, task, None)


@atomic
def defer_cancel(exc: asyncio.CancelledError) -> None:
    """The running task caught `exc` after its operation's point of no return: defer it.

    For an operation that took effect although a cancellation arrived (a send whose value a
    getter already took, njsmith in anyio#147: past the point of no return a cancellation must
    be a no-op for the operation). The caller returns the operation's result, and then:

    - the task ends with that result if it ends without yielding again (an ``asyncio.wait_for``
      inner task on 3.11, a task that only puts to a queue): a task never reports both
      "cancelled" and "it took effect";
    - when the task next yields, the cancellation is requested again (``uncancel(); cancel()``,
      with `exc`'s message, so ``cancelling()`` keeps its count) only if the task is still
      counted as cancelling: an ``asyncio.timeout()`` or ``wait_for`` (3.12+) that expired and
      withdrew its request with ``uncancel()`` as its block exited leaves no stray
      `CancelledError` behind, on every version; an outside ``cancel()`` arrives at the next
      await of a task that goes on.

    A no-op outside a task.
    """
    task = asyncio.current_task()
    if task is not None:
        task.get_loop().call_soon(_redeliver_if_still_requested, task,
                                  exc.args[0] if exc.args else None)


def _redeliver_if_still_requested(task: asyncio.Task[Any], message: object) -> None:
    # Runs once `task` has yielded (it is the running task when the callback is scheduled, and
    # the callback runs before the task's next step): if nobody withdrew the cancellation
    # meanwhile, cancel() interrupts the await it is parked on, and uncancel() first keeps the
    # count where the canceller left it.
    if task.done() or not task.cancelling():
        return
    task.uncancel()
    task.cancel(message)
