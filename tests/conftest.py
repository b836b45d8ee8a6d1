"""Suite-wide fixtures: a test fails on any unhandled thread exception or unraisable exception."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import loops

# EXECUTORS_TEST_LOOP=uvloop: every loop the tests make through asyncio is uvloop's (helpers/loops).
loops.install()


def pytest_report_header() -> str:
    return f"event loop: {loops.name()} ({loops.ENV})"


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
