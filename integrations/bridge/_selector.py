"""The portal's own loop: its selector (the inbox hook around every select(), and the wake-up
socket threads write to) and, on 3.11, its `call_soon` that hands a new task's first step over."""

from __future__ import annotations

import asyncio
import contextvars
import selectors
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._core import PortalCore

__all__ = ("PortalSelector", "StepTakingLoop", "no_wake")

_Task = asyncio.Task


class PortalSelector(selectors.DefaultSelector):
    """The default selector, plus the portal's inbox hook around every select() call.

    Before a select that may block it publishes that the loop sleeps (threads then wake it
    with one byte to the selector's own wake-up socket) and re-checks the inbox; after every
    select it drains the inbox itself: no Handle per wake-up, and a post that arrived while
    the loop was busy is served in the next iteration without waking anything. The threads'
    side of the handshake is `PortalCore._post` (and `Portal.call`, inline).
    """

    def __init__(self, core: PortalCore) -> None:
        super().__init__()
        self._core = core
        # The threads' wake-up socket: ours, not the loop's self-pipe, so a wake-up costs the
        # loop no reader callback (a Handle and four Python calls) and the poster no Python
        # frame (asyncio's _write_to_self). The loop never sees it: select() consumes its
        # event. Non-blocking on both ends: a full buffer means a wake-up is pending anyway.
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        key = self.register(self._wake_r, selectors.EVENT_READ)
        self._wake_event = (key, selectors.EVENT_READ)
        core._wake = self._wake_w.send

    def select(
        self, timeout: float | None = None
    ) -> list[tuple[selectors.SelectorKey, int]]:
        core = self._core
        if timeout is None or timeout > 0:
            core._sleeping = True
            if core._inbox:
                timeout = 0  # a post raced our decision to sleep: do not sleep
        try:
            events = super().select(timeout)
        finally:
            core._sleeping = False
            core._kicked = False
        if events and self._wake_event in events:
            events.remove(self._wake_event)
            try:
                self._wake_r.recv(4096)  # at most a few bytes: one per kicked select
            except OSError:  # (BlockingIOError: nothing to read after all)
                pass
        # Whether a thread woke this select or it returned for other reasons, the posts run
        # now, in this iteration (before the I/O callbacks it found): `_drain_inbox` run here
        # instead of as a loop callback (a Handle made, queued and run per wake-up), inline.
        # This is between two callbacks of the loop, as a Handle would be; an exception a
        # callback lets out is reported as a Handle's would be (the loop's exception
        # handler), and the next callback runs.
        inbox = core._inbox
        while inbox:
            fn, args = inbox.popleft()
            try:
                fn(*args)
            except (SystemExit, KeyboardInterrupt):
                raise  # out of the loop, as from a Handle
            except BaseException as exc:
                loop = core._loop
                assert loop is not None
                loop.call_exception_handler({
                    "message": f"Exception in portal callback {fn!r}",
                    "exception": exc,
                })
        return events

    def close(self) -> None:
        self._core._wake = no_wake
        try:
            super().close()
        finally:
            self._wake_r.close()
            self._wake_w.close()


def no_wake(data: bytes) -> None:
    """The wake-up of a portal with no hooked loop (or whose loop is closed): none."""


class StepTakingLoop(asyncio.SelectorEventLoop):
    """Python 3.11: the portal's own loop, whose `call_soon` can hand a new task's first step
    to the code creating the task instead of queuing it (`PortalCore._spawn` runs it at once,
    as 3.12's eager start does; 3.12+ use asyncio's loop and eager start).

    `_spawn` sets `taking` to the coroutine it is about to wrap in a Task and clears it right
    after: the Task's constructor, having stored that coroutine, calls
    ``loop.call_soon(step, context=...)`` once, and that step (a bound method of a Task whose
    coroutine is `taking`) is stored in `taken` instead of becoming a Handle in the ready
    queue. Any other callback, and every call while `taking` is None, is scheduled by asyncio's
    own `call_soon`.
    """

    taking: object = None
    taken: tuple[Callable[[], object], contextvars.Context] | None = None

    def call_soon(  # type: ignore[override]
        self, callback: Callable[..., object], *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle | None:
        coro = self.taking
        if coro is not None and context is not None:
            task = getattr(callback, "__self__", None)
            if type(task) is _Task and task.get_coro() is coro:
                # The step of the task `_spawn` is making, on the loop thread of the running
                # loop (it cannot be closed): the step alone, no checks, no Handle.
                self.taking = None
                self.taken = (callback, context)
                return None
        return super().call_soon(callback, *args, context=context)
