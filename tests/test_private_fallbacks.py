"""Every private asyncio, threading or sys attribute the library reads has a fallback for an
interpreter (or a task class) without it; each test here hides the attribute and checks that
the public behaviour still holds. The list, with the reasons, is in docs/content/design.md
("Private attributes and their fallbacks")."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import types

import pytest

from executors import PeriodicExecutor, _threads
from executors.aio._cancel import absorb_stale_cancel

_TIMEOUT = 60  # seconds for a child interpreter on a loaded machine


def _run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=_TIMEOUT, check=False)


# -- threading._daemon_threads_allowed (3.12+) ------------------------------------------------


def _hide_daemon_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide ``threading._daemon_threads_allowed`` from the library only: threading's own
    Thread.__init__ reads it on 3.12+, so it cannot leave the real module."""
    view = types.ModuleType("threading")
    view.__dict__.update(
        {k: v for k, v in vars(threading).items() if k != "_daemon_threads_allowed"})
    monkeypatch.setattr(_threads, "threading", view)


def _executor_thread_daemon(name: str) -> bool:
    """Open a PeriodicExecutor, wait for its first run, close and join it; return whether its
    thread was a daemon."""
    ran = threading.Event()
    ex = PeriodicExecutor(interval=60, min_interval=0, target=lambda: ran.set() or True,
                          name=name)
    ex.open()
    try:
        assert ran.wait(10)
        thread = ex._thread
        assert thread is not None
        return thread.daemon
    finally:
        ex.close()
        assert ex.join(10)


def test_without_daemon_threads_allowed_threads_are_daemons(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``threading._daemon_threads_allowed`` (3.11 has none) daemon threads are taken
    to be allowed: a PeriodicExecutor runs its target on a daemon thread and stops."""
    _hide_daemon_check(monkeypatch)
    assert _threads.daemon_threads_allowed() is True
    assert _executor_thread_daemon("fallback-probe") is True


class _RefusesDaemon(threading.Thread):
    """A thread whose start refuses daemons, as a subinterpreter without them does."""

    def start(self) -> None:
        if self.daemon:
            raise RuntimeError("daemon threads are disabled in this (sub)interpreter")
        super().start()


def test_without_daemon_threads_allowed_a_refusal_still_falls_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the check, an interpreter that refuses daemons is found out at ``start()``: the
    thread is started again as a non-daemon one, and the executor runs and stops."""
    _hide_daemon_check(monkeypatch)
    monkeypatch.setattr(_threads, "Thread", _RefusesDaemon)
    assert _executor_thread_daemon("fallback-refused") is False


# -- threading._register_atexit (3.9+) --------------------------------------------------------


def test_without_register_atexit_the_exit_shutdown_still_runs() -> None:
    """Without ``threading._register_atexit`` the registry registers nothing before
    threading's join of non-daemon threads; its ``atexit`` handler still runs the exit
    shutdown (hooks, close and join of live executors) and the interpreter exits at once."""
    result = _run_child("""
        import threading
        del threading._register_atexit
        from executors import PeriodicExecutor, registry
        registry.add_shutdown_hook(lambda deadline: print("exit shutdown ran", flush=True))
        ex = PeriodicExecutor(interval=60, min_interval=0, target=lambda: True, name="x")
        ex.open()
        registry.stop_before_thread_join()  # the fallback: nothing to register with
        print("registered before join:", registry.exit_budget._before_join, flush=True)
    """)
    assert result.returncode == 0, result.stderr
    assert "registered before join: False" in result.stdout
    assert "exit shutdown ran" in result.stdout
    assert result.stderr == ""


# -- asyncio.Task._must_cancel (read on 3.11 and 3.12 only) -----------------------------------


class _TaskWithoutMustCancel(asyncio.Task):  # type: ignore[type-arg]
    """A task class that does not show ``_must_cancel`` (as a third-party task might not)."""

    @property
    def _must_cancel(self) -> bool:  # type: ignore[override]
        raise AttributeError("_must_cancel")


def test_without_must_cancel_a_stale_cancellation_is_still_absorbed() -> None:
    """The gh-116720 state in a task that does not show ``Task._must_cancel``: the task
    cancelled itself and withdrew it (``uncancel()`` to 0, which on 3.11/3.12 leaves the
    cancellation pending). The groups' `absorb_stale_cancel` must still take it, so that it
    does not hit the task at its next await: not knowing counts as "maybe pending" (yield
    once, absorb a CancelledError nobody requests any more). On 3.13 uncancel() withdraws it
    itself and the attribute is never read."""

    async def main() -> str:
        task = asyncio.current_task()
        assert task is not None
        with pytest.raises(AttributeError):
            task._must_cancel  # noqa: B018  # hidden
        task.cancel()
        task.uncancel()
        assert task.cancelling() == 0
        await absorb_stale_cancel(task)
        await asyncio.sleep(0)  # no stale cancellation arrives here
        return "not cancelled"

    loop = asyncio.new_event_loop()
    try:
        task = _TaskWithoutMustCancel(main(), loop=loop)
        assert loop.run_until_complete(task) == "not cancelled"
    finally:
        loop.close()


def test_without_must_cancel_a_real_cancellation_still_propagates() -> None:
    """The fallback's yield absorbs only a cancellation nobody requests: one requested
    (cancelling() > 0) while it yields propagates."""

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # requested, and not withdrawn
        await absorb_stale_cancel(task)

    loop = asyncio.new_event_loop()
    try:
        task = _TaskWithoutMustCancel(main(), loop=loop)
        with pytest.raises(asyncio.CancelledError):
            loop.run_until_complete(task)
    finally:
        loop.close()


# -- sys._is_gil_enabled (3.13+; read by integrations.bridge) ----------------------------------


def test_without_is_gil_enabled_the_portal_hooks_its_loop_and_serves_calls() -> None:
    """Without ``sys._is_gil_enabled`` (3.11 and 3.12 have none) the bridge takes the GIL to
    be there: the portal runs its loop on the hooked selector and serves calls from threads.
    Needs no change in the bridge: the fallback is its ``getattr`` default."""
    result = _run_child("""
        import sys
        if hasattr(sys, "_is_gil_enabled"):
            del sys._is_gil_enabled
        import asyncio
        from integrations.bridge import Portal

        async def double(x):
            await asyncio.sleep(0)
            return 2 * x

        with Portal() as portal:
            print("call:", portal.call(double, 21), flush=True)
            print("hooked:", portal._hooked, flush=True)
    """)
    assert result.returncode == 0, result.stderr
    assert "call: 42" in result.stdout
    assert "hooked: True" in result.stdout


def test_without_get_running_loop_the_shared_primitives_still_hand_over() -> None:
    """Without ``asyncio._get_running_loop`` the bridge's hand-offs use the public call.

    A fresh interpreter hides the private function before the bridge is imported; a thread
    then hands a permit and a value to tasks parked on a loop in another thread, and a task
    hands to a task of its own loop (the path that asks for the running loop).
    """
    script = textwrap.dedent(
        """
        import asyncio, threading
        del asyncio._get_running_loop
        import asyncio.events
        from integrations.bridge import SharedChannel, SharedSemaphore, _waker
        assert _waker.running_loop is _waker._running_loop_or_none
        assert _waker.running_loop() is None

        sem = SharedSemaphore(0)
        channel = SharedChannel()
        parked = threading.Event()

        async def main():
            assert _waker.running_loop() is asyncio.get_running_loop()
            getter = asyncio.ensure_future(channel.get())
            async def acquire():
                await sem.acquire()
                return "permit"
            acquirer = asyncio.ensure_future(acquire())
            await asyncio.sleep(0)
            parked.set()
            assert await acquirer == "permit"
            assert await getter == 7
            same_loop = asyncio.ensure_future(channel.get())
            await asyncio.sleep(0)
            await channel.send(8)
            assert await same_loop == 8

        def thread():
            assert parked.wait(10)
            sem.blocking.release()
            channel.blocking.send(7)

        t = threading.Thread(target=thread)
        t.start()
        asyncio.run(main())
        t.join()
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
