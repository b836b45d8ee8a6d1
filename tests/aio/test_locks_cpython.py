"""CPython's own `test.test_asyncio.test_locks` LockTests and SemaphoreTests, run against ours.

The stdlib test module calls ``asyncio.Lock()``, ``asyncio.Semaphore(...)`` and
``asyncio.BoundedSemaphore()`` at test time, so rebinding those three names on the `asyncio`
package for the duration of each test runs the stdlib tests against our classes
(`asyncio.locks.Lock` is left alone: `asyncio.Condition` builds its default lock from it).
Tests that inspect asyncio's private structure in a way a different design cannot match are
skipped, each with its reason and the test of ours that pins the same behaviour black-box.
"""

from __future__ import annotations

import asyncio
import importlib
import types
import unittest
from typing import Any

import pytest

import executors.aio.locks as ours

__all__ = ()

try:
    _stdlib: types.ModuleType | None = importlib.import_module("test.test_asyncio.test_locks")
except ImportError:  # Debian and others ship the test package separately (libpython3.X-testsuite)
    _stdlib = None

if _stdlib is None:
    pytest.skip("this interpreter ships no `test` package (test.test_asyncio.test_locks)",
                allow_module_level=True)

assert _stdlib is not None
_NAMES = {"Lock": ours.Lock, "Semaphore": ours.Semaphore, "BoundedSemaphore": ours.BoundedSemaphore}

_SKIPS = {
    "test_cancel_race": (
        "indexes asyncio's private deque of futures (lock._waiters[0].cancelled()) and asserts "
        "asyncio's locked() == False while the lock is handed to a woken task (gh-138121); ours "
        "is deliberately True then. Pinned black-box by test_locks.py::test_lock_cancel_race"
    ),
    "test_acquire_fifo_order_4": (
        "asserts len(sem._waiters) == 3 with the woken task still in asyncio's deque; ours "
        "removes a waiter when it is handed its permit. The order [1, 2, 3, 4] it checks is "
        "pinned by test_locks.py::test_releases_while_head_not_resumed_keep_fifo"
    ),
}


class _Patched:
    """Mixin: rebinds asyncio.Lock/Semaphore/BoundedSemaphore to ours around each test."""

    _saved: dict[str, Any]

    def setUp(self) -> None:
        self._saved = {name: getattr(asyncio, name) for name in _NAMES}
        for name, cls in _NAMES.items():
            setattr(asyncio, name, cls)
        super().setUp()  # type: ignore[misc]

    def tearDown(self) -> None:
        try:
            super().tearDown()  # type: ignore[misc]
        finally:
            for name, cls in self._saved.items():
                setattr(asyncio, name, cls)


def _make(base_name: str) -> type[unittest.TestCase]:
    base = getattr(_stdlib, base_name)
    namespace: dict[str, Any] = {"__module__": __name__, "__doc__": (
        f"CPython's {base_name} with asyncio's classes rebound to executors.aio's.")}
    for attr, reason in _SKIPS.items():
        if hasattr(base, attr):
            namespace[attr] = unittest.skip(reason)(getattr(base, attr))
    return type(f"TestCPython{base_name}", (_Patched, base), namespace)


TestCPythonLockTests = _make("LockTests")
TestCPythonSemaphoreTests = _make("SemaphoreTests")


def test_patching_reaches_the_stdlib_module() -> None:
    """Inside a patched test, the stdlib test module's `asyncio.Semaphore` is ours."""
    case = TestCPythonSemaphoreTests("test_initial_value_zero")
    case.setUp()
    try:
        assert _stdlib is not None
        assert _stdlib.asyncio.Semaphore is ours.Semaphore
        assert _stdlib.asyncio.Lock is ours.Lock
    finally:
        case.tearDown()
    assert asyncio.Semaphore is not ours.Semaphore
