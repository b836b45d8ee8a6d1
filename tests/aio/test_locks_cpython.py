"""CPython's own `test.test_asyncio.test_locks` LockTests and SemaphoreTests, run against ours.

(And ConditionTests, whose tests that build ``asyncio.Condition(asyncio.Lock())`` then run
asyncio's Condition over our Lock.)

The stdlib test module calls ``asyncio.Lock()``, ``asyncio.Semaphore(...)`` and
``asyncio.BoundedSemaphore()`` at test time, so rebinding those three names on the `asyncio`
package for the duration of each test runs the stdlib tests against our classes
(`asyncio.locks.Lock` is left alone: `asyncio.Condition` builds its default lock from it).
Tests that inspect asyncio's private structure in a way a different design cannot match are
skipped, each with its reason and the test of ours that pins the same behaviour black-box.

On 3.12 and 3.13 both classes run a second time with ``asyncio.eager_task_factory`` on every
loop (tasks start inside ``create_task``): ours passes all the others there too, while asyncio's
own Lock fails ``test_finished_waiter_cancelled`` under it.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
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
    "test_ambiguous_loops": (
        "(ConditionTests) sets lock._loop on a held lock nobody waits on and expects the next "
        "wait to raise 'is bound to a different event loop'; ours is bound only while tasks "
        "wait on it (so it serves successive loops), and the test's own task holds the lock, "
        "so it would wait for ever. The error is pinned by test_locks.py::"
        "test_waiting_from_a_second_loop_while_one_waits_raises, the successive loops by "
        "test_locks.py::test_not_bound_to_the_first_event_loop"
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


class _EagerPolicy(asyncio.DefaultEventLoopPolicy):
    """Every new loop gets the 3.12+ eager task factory (IsolatedAsyncioTestCase makes one per
    test through the policy)."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        return loop


class _Eager:
    """Mixin: runs each test on loops with the eager task factory."""

    def run(self, result: Any = None) -> Any:
        asyncio.set_event_loop_policy(_EagerPolicy())
        try:
            return super().run(result)  # type: ignore[misc]
        finally:
            asyncio.set_event_loop_policy(None)


def _make(base_name: str, *mixins: type, suffix: str = "") -> type[unittest.TestCase]:
    base = getattr(_stdlib, base_name)
    namespace: dict[str, Any] = {"__module__": __name__, "__doc__": (
        f"CPython's {base_name} with asyncio's classes rebound to executors.aio's{suffix}.")}
    for attr, reason in _SKIPS.items():
        if hasattr(base, attr):
            namespace[attr] = unittest.skip(reason)(getattr(base, attr))
    name = f"TestCPython{base_name}{'Eager' if mixins else ''}"
    return type(name, (*mixins, _Patched, base), namespace)


TestCPythonLockTests = _make("LockTests")
TestCPythonSemaphoreTests = _make("SemaphoreTests")
# asyncio.Condition over our Lock (the tests that pass asyncio.Lock() to Condition use ours).
TestCPythonConditionTests = _make("ConditionTests")
if sys.version_info >= (3, 12):
    _EAGER = ", on loops with the eager task factory"
    TestCPythonLockTestsEager = _make("LockTests", _Eager, suffix=_EAGER)
    TestCPythonSemaphoreTestsEager = _make("SemaphoreTests", _Eager, suffix=_EAGER)


def tearDownModule() -> None:
    """The stdlib module resets the event loop policy after its tests; so do we."""
    asyncio.set_event_loop_policy(None)


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


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager_task_factory is new in 3.12")
def test_eager_policy_installs_the_factory() -> None:
    """The eager run really runs eagerly: loops from its policy carry eager_task_factory."""
    loop = _EagerPolicy().new_event_loop()
    try:
        assert loop.get_task_factory() is asyncio.eager_task_factory  # type: ignore[attr-defined]
    finally:
        loop.close()
