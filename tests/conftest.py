"""Suite-wide fixtures: a test fails on any unhandled thread exception or unraisable exception,
and on a non-daemon thread it started that outlives it."""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import loops
from helpers.quiet import run_lock

# EXECUTORS_TEST_LOOP=uvloop: every loop the tests make through asyncio is uvloop's (helpers/loops).
loops.install()


def pytest_report_header() -> str:
    return f"event loop: {loops.name()} ({loops.ENV})"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores. Many tests spend their time waiting (on a
    child process, a server, a run they measure), so a worker per core leaves cores idle: on
    2 cores, 3 workers ran the first tier in 4 min 5 s, 2 workers in 4 min 58 s (same
    machine, one after the other). A test that measures the machine is `serial` and runs
    alone whatever the count."""
    return (os.cpu_count() or 1) + 1


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[object]:
    """Under pytest-xdist, a `serial` test runs alone: no other worker runs a test meanwhile
    (helpers/quiet). Outermost, so the wait for quiet does not count in the test's timeout."""
    basetemp = item.config.option.basetemp
    lock = run_lock(Path(basetemp)) if basetemp else None
    if lock is None:
        return (yield)
    with lock.exclusive() if item.get_closest_marker("serial") else lock.shared():
        return (yield)


class _Collected:
    """Unhandled thread and unraisable exceptions seen while one test ran."""

    def __init__(self) -> None:
        self.thread: list[threading.ExceptHookArgs] = []
        self.unraisable: list[Any] = []
        self.allowed = False

    def messages(self) -> list[str]:
        out = [
            f"thread {a.thread.name if a.thread else '?'}: {a.exc_type.__name__}: {a.exc_value}"
            for a in self.thread
        ]
        out += [f"unraisable in {u.object!r}: {u.exc_type.__name__}: {u.exc_value}"
                for u in self.unraisable]
        return out


@pytest.fixture(autouse=True)
def _fail_on_background_exceptions() -> Iterator[_Collected]:
    """Fail the test if a thread died of an exception or an exception was unraisable.

    PyMongo's executors let target errors reach `threading.excepthook` silently in tests; ours
    must never leak one, so the suite treats any as a failure. A test that provokes one on
    purpose uses the `background_exceptions` fixture and asserts on what it saw.
    """
    collected = _Collected()
    old_thread_hook, old_unraisable_hook = threading.excepthook, sys.unraisablehook

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        collected.thread.append(args)

    def unraisable_hook(args: Any) -> None:
        collected.unraisable.append(args)

    threading.excepthook = thread_hook
    sys.unraisablehook = unraisable_hook
    try:
        yield collected
    finally:
        threading.excepthook = old_thread_hook
        sys.unraisablehook = old_unraisable_hook
    if collected.messages() and not collected.allowed:
        pytest.fail("background exceptions:\n" + "\n".join(collected.messages()), pytrace=False)


@pytest.fixture
def background_exceptions(_fail_on_background_exceptions: _Collected) -> _Collected:
    """The thread/unraisable exceptions of this test, for tests that provoke them on purpose."""
    _fail_on_background_exceptions.allowed = True
    return _fail_on_background_exceptions


#: How long a test's own non-daemon threads may take to end once the test has returned (s).
_THREAD_GRACE = 10.0


@pytest.fixture(autouse=True)
def _fail_on_leaked_threads() -> Iterator[None]:
    """Fail the test if a non-daemon thread it started is still alive after it returned.

    A thread left spinning by a failed test slows every later test of the run on a 2-core
    machine, and a timing test far away then fails or times out instead of the one at fault
    (and a non-daemon thread keeps the interpreter from exiting). Threads of session and
    module fixtures started before the test; daemon threads (executors, loops the library
    runs) end with the process by design and are checked by the tests that own them.
    """
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + _THREAD_GRACE
    leaked = []
    for thread in threading.enumerate():
        if thread in before or thread.daemon or thread is threading.current_thread():
            continue
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            leaked.append(thread)
    if leaked:
        frames = sys._current_frames()
        stacks = [f"{t.name}:\n" + "".join(traceback.format_stack(frames[t.ident]))
                  for t in leaked if t.ident in frames]
        pytest.fail(f"{len(leaked)} non-daemon thread(s) outlived the test:\n"
                    + "\n".join(stacks), pytrace=False)
