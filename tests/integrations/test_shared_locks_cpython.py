"""CPython's `Lib/test/lock_tests.py` lock and semaphore tests, run against the blocking views.

`LockTests`, `SemaphoreTests` and `BoundedSemaphoreTests` (with their bases `BaseLockTests`
and `BaseSemaphoreTests`) construct the primitive under test through the class attribute
``locktype`` / ``semtype``; here those build a `SharedLock`, `SharedSemaphore` or
`SharedBoundedSemaphore` and return its ``.blocking`` view, so every stdlib test drives our
thread side with real threads. Each skip names the API difference.
"""

from __future__ import annotations

import importlib
import types
import unittest
from typing import Any

import pytest

from integrations.bridge import (
    BlockingSharedLock,
    BlockingSharedSemaphore,
    SharedBoundedSemaphore,
    SharedLock,
    SharedSemaphore,
)

__all__ = ()

try:
    _stdlib: types.ModuleType | None = importlib.import_module("test.lock_tests")
except ImportError:  # Debian and others ship the test package separately
    _stdlib = None

if _stdlib is None:
    pytest.skip("this interpreter ships no `test` package (test.lock_tests)",
                allow_module_level=True)
assert _stdlib is not None


def _lock() -> BlockingSharedLock:
    return SharedLock().blocking


def _semaphore(value: int = 1) -> BlockingSharedSemaphore:
    return SharedSemaphore(value).blocking


def _bounded(value: int = 1) -> BlockingSharedSemaphore:
    return SharedBoundedSemaphore(value).blocking


_SKIPS = {
    "test_timeout": (
        "asserts OverflowError for a timeout above threading.TIMEOUT_MAX (1e100); ours follows "
        "the library's one timeout rule (any finite number >= 0) and waits without limit "
        "beyond TIMEOUT_MAX. The other checks of this test are pinned by "
        "test_shared_locks.py::test_bad_arguments and the lock_tests' test_acquire_timeout"
    ),
    "test_at_fork_reinit": (
        "calls threading's private Lock._at_fork_reinit(); ours has no such method: a fork hook "
        "gives every shared primitive a fresh mutex in the child "
        "(test_bridge_fork.py::test_shared_semaphore_drops_dead_waiters_in_the_child)"
    ),
    "test_repr": (
        "asserts threading's repr format ('<...Semaphore at ...: value=3>'); ours shows our "
        "class and the FIFO state ('[unlocked, value:3]', waiters, woken), pinned by "
        "test_shared_locks.py::test_task_api_matches_aio_semaphore"
    ),
}


def _make(base_name: str, attr: str, factory: Any, what: str) -> type[unittest.TestCase]:
    base = getattr(_stdlib, base_name)
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"CPython's lock_tests.{base_name} against {what}.blocking.",
        attr: staticmethod(factory),
    }
    for name, reason in _SKIPS.items():
        if name == "test_repr" and base_name == "LockTests":
            continue  # threading's '<unlocked ... object at ...>' shape: ours matches it
        if hasattr(base, name):
            namespace[name] = unittest.skip(reason)(getattr(base, name))
    return type(f"TestCPython{base_name}On{what}", (base,), namespace)


TestCPythonLockTests = _make("LockTests", "locktype", _lock, "SharedLock")
TestCPythonSemaphoreTests = _make("SemaphoreTests", "semtype", _semaphore, "SharedSemaphore")
TestCPythonBoundedSemaphoreTests = _make(
    "BoundedSemaphoreTests", "semtype", _bounded, "SharedBoundedSemaphore")
