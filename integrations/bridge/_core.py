"""The machinery under `integrations.bridge.Portal`: loop thread, inbox, waits, tasks."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import itertools
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, TypeVar

from executors.errors import ShutdownError

from ._selector import PortalSelector, StepTakingLoop, no_wake
from ._waiter import PortalFuture, ThreadWaiter, _Call

__all__ = ("PortalCore", "shutdown_error")

T = TypeVar("T")

# 3.12+: a Task can run its first step at once, inside the callback that creates it (what the
# eager task factory does): a round trip saves a loop iteration. Sound, unlike running the
# coroutine's first step without a Task (current_task() would be None there; research addendum).
_EAGER_START = sys.version_info >= (3, 12)
_Task = asyncio.Task
_names = itertools.count(1)
# The selector hook's handshake with posting threads (see PortalCore._post) relies on the GIL
# making plain attribute reads and writes sequentially consistent; a free-threaded build
# (3.13t+) without the GIL keeps call_soon_threadsafe for every post.
_GIL: bool = getattr(sys, "_is_gil_enabled", lambda: True)()


def shutdown_error() -> ShutdownError:
    # A fresh instance per waiter: one exception raised in several threads would have its
    # traceback rewritten by each of them.
    return ShutdownError(
        "the portal is closed: its event loop no longer runs calls (open a new Portal)"
    )


_shutdown_error = shutdown_error


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


class PortalCore:
    """State and machinery of a `Portal` (its only subclass): how the loop thread runs and
    stops, how thread-side work reaches the loop (one inbox), how a thread waits (a
    `ThreadWaiter`, undone on timeout or Ctrl-C), and how tasks are started and tracked.

    Threads never touch loop-side state (`_tasks`, the primitives) except through callbacks
    posted to the loop; loop-side code never blocks.
    """

    __slots__ = (
        "__weakref__",
        "_calls",
        "_closed",
        "_closing",
        "_dead",
        "_drained",
        "_futures",
        "_hooked",
        "_inbox",
        "_inbox_scheduled",
        "_kicked",
        "_loop",
        "_loop_ident",
        "_name",
        "_own",
        "_pending",
        "_sleeping",
        "_started",
        "_startup_error",
        "_state",
        "_submitted",
        "_tasks",
        "_thread",
        "_timeouts",
        "_wake",
    )

    def __init__(
        self, *, loop: asyncio.AbstractEventLoop | None = None, name: str | None = None
    ) -> None:
        if loop is not None and not isinstance(loop, asyncio.AbstractEventLoop):
            raise TypeError(f"loop must be an asyncio event loop, got {type(loop).__name__}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"name must be a str or None, got {type(name).__name__}")
        self._name = name if name is not None else f"Portal-{next(_names)}"
        self._own = loop is None
        self._loop: asyncio.AbstractEventLoop | None = loop
        self._loop_ident: int | None = None
        self._thread: threading.Thread | None = None
        self._state = "idle"
        self._closed = False  # close() was called: thread side refuses new work
        self._closing = False  # loop side: the shutdown began, new work fails there
        self._dead = False  # the loop no longer runs our callbacks
        # Thread-side waits not yet resolved: failed by the final sweep if the loop dies under
        # them, so no caller can hang on a callback that will never run (zigpy/bellows#745).
        self._pending: set[ThreadWaiter | PortalFuture[Any]] = set()
        # `Portal.call`s not yet resolved, each its own claim (see `_Call`).
        self._calls: dict[_Call, bool] = {}
        self._futures: set[PortalFuture[Any]] = set()  # start_task_soon futures not done
        self._tasks: set[asyncio.Task[Any]] = set()  # loop thread only
        # Thread -> loop callbacks, run in order by one loop callback: threads posting while a
        # drain is already scheduled do not write to the loop's self-pipe again (one wake-up
        # for a burst, e.g. a release followed by the next acquire).
        self._inbox: collections.deque[tuple[Callable[..., object], tuple[object, ...]]] = (
            collections.deque())
        self._inbox_scheduled = False
        # The loop-side hook (own loops on the default selector loop, see PortalSelector):
        # `_sleeping` is True while the loop thread is in, or about to enter, a select() that
        # may block; `_kicked` once a thread has written to the selector's wake-up socket for
        # that select (`_wake`: that socket's send, bound).
        # While the loop runs callbacks a post is only a deque append: the loop drains the
        # inbox after its next select() (every loop iteration calls it), so a busy loop is
        # never woken through its self-pipe (no write, no read, no epoll wake-up).
        self._hooked = False
        self._sleeping = False
        self._kicked = False
        self._wake: Callable[[bytes], object] = no_wake
        self._started = threading.Event()
        self._startup_error: BaseException | None = None
        self._drained = threading.Event()
        self._submitted = 0
        self._timeouts = 0

    def _attach(self) -> None:
        loop = self._loop
        assert loop is not None
        if loop.is_closed() or not loop.is_running():
            raise RuntimeError("Portal(loop=...) needs a loop that runs (in another thread)")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._loop_ident = threading.get_ident()
            return
        seen = threading.Event()

        def record() -> None:
            self._loop_ident = threading.get_ident()
            seen.set()

        loop.call_soon_threadsafe(record)
        if not seen.wait(10.0):
            raise RuntimeError("Portal(loop=...): the loop did not run a callback in 10 s")

    def _run(self) -> None:
        try:
            loop = self._new_loop()
        except BaseException as exc:
            self._startup_error = exc
            self._started.set()
            return
        self._loop = loop
        self._loop_ident = threading.get_ident()
        self._started.set()
        try:
            loop.run_forever()
        finally:
            self._finish(loop)

    def _new_loop(self) -> asyncio.AbstractEventLoop:
        """The portal's own loop: the one `asyncio.new_event_loop` makes, on our hooked
        selector (`PortalSelector`) when that is the stock selector loop. Any other loop
        (uvloop, the Windows proactor, a policy's own class) is used as it is, without the
        hook: threads then wake it through call_soon_threadsafe, as for an attached loop."""
        loop = asyncio.new_event_loop()
        if type(loop) is not asyncio.SelectorEventLoop or not _GIL:
            return loop
        loop.close()  # the same class again, on our selector (a socketpair, once per portal)
        loop = (asyncio.SelectorEventLoop if _EAGER_START else StepTakingLoop)(
            PortalSelector(self))
        self._hooked = True
        return loop

    def _finish(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop thread's last act: fail late arrivals, finish leftover tasks, close."""
        self._closing = True
        self._closed = True
        try:
            # Callbacks queued by threads while the loop stopped run here and fail cleanly
            # (they see _closing); tasks the callees started are cancelled and awaited, so no
            # "Task was destroyed but it is pending" and no late result to a closed loop.
            leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            self._dead = True
            loop.close()
            self._sweep()
            self._state = "closed"
            self._drained.set()

    def _sweep(self) -> None:
        # After _dead is set, a thread that adds a waiter re-checks _dead and fails it itself;
        # one added earlier is failed here. Either way nobody waits on a dead loop.
        for item in list(self._pending):
            if isinstance(item, ThreadWaiter):
                item.try_fail(_shutdown_error())
            elif not item.done():
                item._fail(_shutdown_error())
        for call in list(self._calls):
            self._fail_call(call)

    def _after_fork_in_child(self) -> None:
        # The child has no loop thread and must not touch the parent's loop: the portal is
        # simply gone there (a new Portal can be opened in the child).
        self._closed = self._closing = self._dead = True
        self._state = "closed"
        self._thread = None
        self._pending = set()
        self._calls = {}
        self._futures = set()
        self._tasks = set()
        self._inbox = collections.deque()
        self._inbox_scheduled = False
        self._hooked = self._sleeping = self._kicked = False
        self._wake = no_wake
        self._drained = threading.Event()
        self._drained.set()

    def _shutdown(self) -> None:
        """Loop thread: fail every pending thread wait, cancel our tasks, then stop."""
        self._closing = True
        for item in list(self._pending):
            if isinstance(item, ThreadWaiter) and item.abort is not None:
                with item.mutex:
                    if item.try_fail(_shutdown_error()):
                        item.abort()
        for call in list(self._calls):
            # Started calls fail at once (a callee may take its time to finish cancelling);
            # ones still in the inbox fail when `_start_call` sees `_closing`.
            task = call.task
            if task is not None and self._fail_call(call):
                task.cancel()
        for task in list(self._tasks):
            task.cancel()
        loop = self._loop
        assert loop is not None
        loop.create_task(self._stop_when_idle())

    async def _stop_when_idle(self) -> None:
        while self._tasks:
            await asyncio.wait(list(self._tasks))
            self._tasks = {task for task in self._tasks if not task.done()}
        if self._own:
            assert self._loop is not None
            self._loop.stop()
        else:
            self._dead = True  # for us: an attached loop keeps running other code
            self._sweep()
            self._state = "closed"
            self._drained.set()

    # -- thread-side machinery ---------------------------------------------------------------

    def _check_caller(self, what: str) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if threading.get_ident() == self._loop_ident:
            raise RuntimeError(
                f"{what} cannot be called from the portal's event loop thread: it would block "
                "the loop it waits for (a deadlock). In a coroutine, await the coroutine or use "
                "the aio primitive directly."
            )
        if self._closed or self._dead:
            raise _shutdown_error()
        if loop is None or self._state == "idle":
            raise RuntimeError(f"{self!r} is not open: use `with Portal() as portal:`")
        return loop

    def _submit(
        self, item: ThreadWaiter | PortalFuture[Any], fn: Callable[..., object], *args: object
    ) -> None:
        """Schedule ``fn(*args)`` on the loop for `item`'s sake; fail `item` if it cannot run."""
        loop = self._check_caller("this portal method")
        self._submitted += 1
        self._pending.add(item)
        try:
            self._post(loop, fn, args)
        except RuntimeError:  # the loop was closed meanwhile
            self._fail_item(item)
            return
        if self._dead:
            # The loop died after we checked: the final sweep may have missed `item`.
            self._fail_item(item)

    def _post(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[..., object], args: tuple[object, ...]
    ) -> None:
        self._inbox.append((fn, args))
        if self._hooked:
            # The loop drains after its next select(); wake it only if that select may block
            # (Dekker-style with PortalSelector.select: we append then read _sleeping, it sets
            # _sleeping then reads the inbox; under the GIL one of us sees the other's write).
            # The wake-up is one byte to the selector's own wake-up socket: no Handle, no
            # Python frame on either side (the selector drains the inbox itself when its select
            # returns, and reads that byte without telling the loop, see PortalSelector).
            if self._sleeping and not self._kicked:
                self._kicked = True
                try:
                    self._wake(b"\0")
                except OSError:
                    pass  # full: the loop has bytes to wake up for; closed: the loop is gone
                except BaseException:
                    # (Ctrl-C at the check after the send:) the byte may not have been sent, so
                    # the next post kicks again; a loop already awake loses nothing.
                    self._kicked = False
                    raise
            return
        if not self._inbox_scheduled:
            # Set before the drain can run: a post racing the drain either sees False (and
            # schedules another drain) or lands before the drain's final emptiness check.
            self._inbox_scheduled = True
            try:
                loop.call_soon_threadsafe(self._drain_inbox)
            except RuntimeError:
                self._inbox_scheduled = False
                raise

    def _drain_inbox(self) -> None:
        """Loop thread: run every posted callback, in the order they were posted."""
        self._inbox_scheduled = False
        inbox = self._inbox
        try:
            while inbox:
                fn, args = inbox.popleft()
                fn(*args)
        finally:
            if inbox and not self._inbox_scheduled:  # a callback raised: run the rest later
                self._inbox_scheduled = True
                assert self._loop is not None
                self._loop.call_soon(self._drain_inbox)

    def _resolve_call(self, call: _Call, value: object, failed: bool) -> bool:
        """Resolve `call` if it is still unresolved (its one claim); True if this did it."""
        if not self._calls.pop(call, False):
            return False
        call.failed = failed
        call.value = value
        call.task = None  # the task dies on the loop thread, not in the caller's
        call.done.release()
        return True

    def _fail_call(self, call: _Call) -> bool:
        return self._resolve_call(call, _shutdown_error(), True)

    def _fail_item(self, item: ThreadWaiter | PortalFuture[Any]) -> None:
        if isinstance(item, ThreadWaiter):
            item.try_fail(_shutdown_error())
        else:
            item._fail(_shutdown_error())

    def _soon(self, fn: Callable[..., object], *args: object) -> None:
        """Schedule a loop-thread callback with no waiter (an undo, a release); never raises."""
        loop = self._loop
        if loop is None or self._dead:
            return
        try:
            self._post(loop, fn, args)
        except RuntimeError:
            pass

    def _undo(self, waiter: ThreadWaiter) -> None:
        """After `try_abandon` won: undo the wait on the loop (leave the queue, cancel)."""
        self._soon(_run_abort, waiter)

    def _wait(
        self,
        waiter: ThreadWaiter,
        timeout: float | None = None,
        hand_back: Callable[[object], object] | None = None,
    ) -> bool:
        """Block until `waiter` is resolved; False if it gave up at `timeout` (and was undone).

        If the wait is interrupted (Ctrl-C) the waiter is abandoned and undone, or, when a value
        was already handed over, `hand_back(value)` returns it on the loop; then the
        interruption propagates.
        """
        try:
            if waiter.wait(timeout):
                return True
            if waiter.try_abandon():
                self._timeouts += 1
                self._undo(waiter)
                return False
            waiter.wait(None)  # resolved at the same moment: it is ours (released already)
            return True
        except BaseException:
            if waiter.try_abandon():
                self._undo(waiter)
            elif waiter.woken and hand_back is not None:
                self._soon(hand_back, waiter.value)
            raise
        finally:
            self._pending.discard(waiter)

    def _park(self, waiter: ThreadWaiter, attempt: Callable[[ThreadWaiter], None]) -> None:
        """Loop thread: run `attempt` (a fast path, else park `waiter`) under its lock."""
        with waiter.mutex:
            if not waiter.waiting:
                return  # gave up before we got here: nothing to do, nothing to undo
            if self._closing:
                waiter.try_fail(_shutdown_error())
                return
            try:
                attempt(waiter)
            except BaseException as exc:
                waiter.try_fail(exc)
                exc = None  # type: ignore[assignment]

    def _blocking(
        self,
        attempt: Callable[[ThreadWaiter], None],
        timeout: float | None = None,
        hand_back: Callable[[object], object] | None = None,
    ) -> tuple[bool, object]:
        """Run `attempt` on the loop for a new waiter and block: (resolved, value or raise)."""
        waiter = ThreadWaiter()
        self._submit(waiter, self._park, waiter, attempt)
        if not self._wait(waiter, timeout, hand_back):
            return False, None
        return True, waiter.outcome()

    def _new_task(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        context: contextvars.Context,
        name: str | None,
    ) -> asyncio.Task[T]:
        awaitable = context.run(fn, *args)
        if inspect.iscoroutine(awaitable):
            coro: Coroutine[Any, Any, T] = awaitable
        elif inspect.isawaitable(awaitable):
            coro = _await(awaitable)
        else:
            raise TypeError(
                f"fn must return an awaitable (pass an async function), got "
                f"{type(awaitable).__name__}"
            )
        return self._spawn(coro, context, name)

    def _spawn(
        self, coro: Coroutine[Any, Any, T], context: contextvars.Context, name: str | None
    ) -> asyncio.Task[T]:
        """A task for `coro` on the portal's loop, its first step run at once where we can:
        3.12+, eager start; 3.11, on our own selector loop without a task factory, the step the
        Task's constructor hands to the loop's `call_soon`, taken over and run now.

        3.11: a callee that finishes without suspending then costs no second loop iteration (no
        second epoll call, no second GIL hand-off): the thread's round trip is one wake-up of
        the loop, as for a bare ``call_soon_threadsafe`` callback. Sound where stepping the
        coroutine without a Task is not: the step is the Task's own (`current_task()` is the
        task, its context is entered), it merely runs earlier. The step never becomes a Handle
        in the loop's ready queue (`StepTakingLoop.call_soon` gives it to us instead); on any
        other loop the task is left to the loop. (Inline, as the task factory test: this is
        the round trip's path.)
        """
        loop = self._loop
        assert loop is not None
        if _EAGER_START:
            return _Task(coro, loop=loop, name=name, context=context,
                         eager_start=True)  # type: ignore[call-arg,unused-ignore]
        if not self._hooked or loop._task_factory is not None:  # type: ignore[attr-defined]
            return loop.create_task(coro, name=name, context=context)
        own: StepTakingLoop = loop  # type: ignore[assignment]  # (the hooked loop, on 3.11)
        own.taking = coro
        try:
            task: asyncio.Task[T] = _Task(coro, loop=loop, name=name, context=context)
        finally:
            taken, own.taken, own.taking = own.taken, None, None
        if taken is not None:
            # What the step's Handle would do when run, minus the Handle: a Task's step
            # catches every exception but KeyboardInterrupt and SystemExit, which Handle._run
            # re-raises too.
            taken[1].run(taken[0])
        return task

    def _submit_task(
        self,
        fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        name: str | None,
        spawn: Callable[[Coroutine[Any, Any, T], str | None, contextvars.Context],
                        asyncio.Task[T]] | None,
    ) -> PortalFuture[T]:
        future: PortalFuture[T] = PortalFuture(self._request_cancel)
        context = contextvars.copy_context()
        if spawn is None:
            self._futures.add(future)
        future.add_done_callback(self._forget_future)  # type: ignore[arg-type]
        self._submit(future, self._start_task, future, fn, args, context, name, spawn)
        return future

    def _forget_future(self, future: PortalFuture[Any]) -> None:
        self._futures.discard(future)
        self._pending.discard(future)

    def _start_task(
        self,
        future: PortalFuture[T],
        fn: Callable[..., Awaitable[T]],
        args: tuple[object, ...],
        context: contextvars.Context,
        name: str | None,
        spawn: Callable[[Coroutine[Any, Any, T], str | None, contextvars.Context],
                        asyncio.Task[T]] | None,
    ) -> None:
        if future.done():
            return
        if future._cancel_requested:
            future._finish_cancelled()
            return
        if self._closing:
            future._fail(_shutdown_error())
            return
        try:
            if spawn is None:
                task = self._new_task(fn, args, context, name)
            else:
                awaitable = context.run(fn, *args)
                coro = awaitable if inspect.iscoroutine(awaitable) else _await(awaitable)
                task = spawn(coro, name, context)
        except BaseException as exc:
            future._fail(exc)
            return
        future._task = task
        if task.done():
            future._settle(task, self._closing)
            return
        if spawn is None:
            self._tasks.add(task)
        task.add_done_callback(partial(self._task_done, future))

    def _task_done(self, future: PortalFuture[T], task: asyncio.Task[T]) -> None:
        self._tasks.discard(task)
        future._settle(task, self._closing)

    def _request_cancel(self, future: PortalFuture[Any]) -> None:
        self._soon(_cancel_task_of, future)


def _run_abort(waiter: ThreadWaiter) -> None:
    abort = waiter.abort
    if abort is not None:
        abort()


def _cancel_task_of(future: PortalFuture[Any]) -> None:
    task = future._task
    if task is not None:
        task.cancel()
