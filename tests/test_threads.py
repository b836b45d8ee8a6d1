"""Tests for executors.threads: ThreadGroup joins, groups errors, cancels; CancelToken."""

from __future__ import annotations

import contextvars
import signal
import sys
import threading
import time

import pytest

import executors
from executors import CancelToken, ThreadCancelled, ThreadGroup
from executors.testing import wait_until

# -- CancelToken -------------------------------------------------------------------------------


def test_token_cancel_is_idempotent_and_first_reason_wins() -> None:
    """cancel() sets the flag once; the first reason is kept; wait() returns True at once."""
    token = CancelToken()
    assert not token.cancelled and token.reason is None and not token.wait(0)
    token.cancel("first")
    token.cancel("second")
    assert token.cancelled and token.reason == "first" and token.wait(0)
    assert "cancelled" in repr(token)


def test_token_raise_if_cancelled() -> None:
    """raise_if_cancelled() is a no-op until cancel(), then raises ThreadCancelled."""
    token = CancelToken()
    token.raise_if_cancelled()
    token.cancel("why")
    with pytest.raises(ThreadCancelled, match="why"):
        token.raise_if_cancelled()


def test_token_callbacks_run_once_also_when_added_late() -> None:
    """on_cancel callbacks run once at cancel(); one added afterwards runs at once."""
    token = CancelToken()
    seen: list[str] = []
    token.on_cancel(lambda: seen.append("early"))
    token.cancel()
    token.cancel()
    token.on_cancel(lambda: seen.append("late"))
    assert seen == ["early", "late"]


def test_token_wait_wakes_a_blocked_thread() -> None:
    """A thread sleeping in token.wait() returns as soon as another thread cancels."""
    token = CancelToken()
    woke = threading.Event()

    def sleeper() -> None:
        assert token.wait(30)
        woke.set()

    t = threading.Thread(target=sleeper)
    t.start()
    token.cancel()
    assert woke.wait(10)
    t.join()


def test_token_bad_input() -> None:
    """Bad arguments raise TypeError naming them."""
    with pytest.raises(TypeError, match="reason"):
        CancelToken().cancel(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callback"):
        CancelToken().on_cancel(3)  # type: ignore[arg-type]


def test_token_run_sets_current() -> None:
    """token.run(fn) makes CancelToken.current() the token inside fn only."""
    token = CancelToken()
    assert CancelToken.current() is None
    assert token.run(CancelToken.current) is token
    assert CancelToken.current() is None


# -- ThreadGroup -------------------------------------------------------------------------------


def test_exports() -> None:
    """The package root re-exports ThreadGroup and CancelToken."""
    assert executors.ThreadGroup is ThreadGroup and executors.CancelToken is CancelToken


def test_block_joins_every_thread_and_futures_hold_results() -> None:
    """Leaving the block joins all threads; start() returns a future with the result."""
    release = threading.Event()
    done: list[int] = []

    def work(i: int) -> int:
        release.wait(10)
        done.append(i)
        return i * 2

    with ThreadGroup(name="g") as g:
        futures = [g.start(work, i) for i in range(5)]
        assert g.statistics().running == 5
        release.set()
    assert sorted(done) == [0, 1, 2, 3, 4]
    assert [f.result(0) for f in futures] == [0, 2, 4, 6, 8]
    stats = g.statistics()
    assert (stats.state, stats.started, stats.running, stats.succeeded, stats.failed) == (
        "closed", 5, 0, 5, 0)
    assert not [t for t in threading.enumerate() if t.name.startswith("g-")]


def test_first_failure_cancels_token_and_errors_are_grouped() -> None:
    """A failing thread cancels the token; siblings stop cooperatively; errors come as a group."""
    stopped = threading.Event()

    def sibling() -> None:
        token = CancelToken.current()
        assert token is not None
        token.wait(30)
        stopped.set()
        token.raise_if_cancelled()  # a ThreadCancelled after cancel is not an error

    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ExceptionGroup) as info, ThreadGroup() as g:
        g.start(sibling)
        g.start(fail)
    assert stopped.is_set()
    assert [type(e) for e in info.value.exceptions] == [ValueError]
    assert g.token.cancelled and "boom" in (g.token.reason or "")


def test_block_exception_cancels_joins_and_is_grouped_with_thread_errors() -> None:
    """The block raising cancels the token, joins, and joins its error to the thread errors."""
    def fails_when_cancelled() -> None:
        token = CancelToken.current()
        assert token is not None and token.wait(30)
        raise OSError("cleanup failed")

    with pytest.raises(ExceptionGroup) as info, ThreadGroup() as g:
        g.start(fails_when_cancelled)
        raise KeyError("body")
    assert [type(e) for e in info.value.exceptions] == [KeyError, OSError]


def test_block_exception_alone_propagates_bare() -> None:
    """With no thread errors, the block's own exception propagates as it is."""
    with pytest.raises(KeyError), ThreadGroup() as g:
        g.start(lambda: CancelToken.current().wait(30))  # type: ignore[union-attr]
        raise KeyError("body")


def test_thread_keyboard_interrupt_comes_out_bare() -> None:
    """KeyboardInterrupt or SystemExit from a thread comes out bare, not grouped."""
    def exit_() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit), ThreadGroup() as g:
        g.start(exit_)


def test_threads_may_start_threads_while_joining() -> None:
    """A thread of the group can start more threads while the block joins; all are joined."""
    seen: list[int] = []

    def spawn(g: ThreadGroup, depth: int) -> None:
        seen.append(depth)
        if depth < 3:
            g.start(spawn, g, depth + 1)

    with ThreadGroup() as g:
        g.start(spawn, g, 0)
    assert sorted(seen) == [0, 1, 2, 3]
    with pytest.raises(RuntimeError, match="finished"):
        g.start(print)


def test_start_outside_block_and_reentry_refused() -> None:
    """start() before entering, re-entering, and a non-callable are refused."""
    g = ThreadGroup()
    with pytest.raises(RuntimeError, match="not been entered"):
        g.start(print)
    with pytest.raises(TypeError, match="fn"), g:
        g.start(3)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="already been entered"), g:
        pass
    with pytest.raises(TypeError, match="name"):
        ThreadGroup(name=3)  # type: ignore[arg-type]


def test_context_is_copied_into_threads() -> None:
    """Each thread runs in a copy of the starter's contextvars context."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    with ThreadGroup() as g:
        f = g.start(var.get)
    assert f.result(0) == "caller"


@pytest.mark.skipif(sys.platform == "win32", reason="pthread_kill")
def test_ctrl_c_while_joining_cancels_and_joins() -> None:
    """SIGINT while the block joins cancels the token, joins every thread, raises bare KI."""
    assert threading.current_thread() is threading.main_thread()
    joined = threading.Event()
    main = threading.main_thread().ident
    assert main is not None

    def worker() -> None:
        token = CancelToken.current()
        assert token is not None
        token.wait(30)
        joined.set()

    def interrupter(g: ThreadGroup) -> None:
        wait_until(lambda: g.statistics().state == "joining")
        time.sleep(0.05)  # let the main thread block in its join (a real-time test)
        signal.pthread_kill(main, signal.SIGINT)

    g = ThreadGroup()
    with pytest.raises(KeyboardInterrupt), g:
        g.start(worker)
        t = threading.Thread(target=interrupter, args=(g,))
        t.start()
    t.join()
    assert joined.is_set() and g.token.reason == "KeyboardInterrupt"
    assert g.statistics().running == 0


def test_ctrl_c_in_block_cancels_and_joins() -> None:
    """KeyboardInterrupt raised in the block cancels the token and joins before propagating."""
    finished = threading.Event()

    def worker() -> None:
        CancelToken.current().wait(30)  # type: ignore[union-attr]
        finished.set()

    with pytest.raises(KeyboardInterrupt), ThreadGroup() as g:
        g.start(worker)
        raise KeyboardInterrupt
    assert finished.is_set()


def test_repr_and_statistics() -> None:
    """repr shows name, state, running count, failures and cancellation."""
    g = ThreadGroup(name="r")
    assert repr(g) == "<ThreadGroup 'r' idle running=0>"
    with pytest.raises(ExceptionGroup), g:
        g.start(int, "x")
    assert repr(g) == "<ThreadGroup 'r' closed running=0 failed=1 cancelled>"
    assert g.statistics().failed == 1
