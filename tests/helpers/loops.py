"""The event loop the suite runs on: asyncio's own, or uvloop's with EXECUTORS_TEST_LOOP=uvloop.

``EXECUTORS_TEST_LOOP=uvloop pytest tests/aio`` runs the asyncio-facing tests on uvloop's loop.
`install` (called once by ``tests/conftest.py``) makes ``asyncio.new_event_loop`` create that
loop; ``asyncio.run``, ``asyncio.Runner`` and ``unittest.IsolatedAsyncioTestCase`` all make
their loop through it (``asyncio.events.new_event_loop``, looked up at each call), on every
supported Python. No event loop policy is involved: policies are deprecated from Python 3.14
on, and the CPython test modules we run reset the policy after their tests.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
from collections.abc import Callable

__all__ = ("ENV", "eager_task_factory_unsupported", "install", "name")

ENV = "EXECUTORS_TEST_LOOP"
_CHOICES = ("asyncio", "uvloop")
_asyncio_new_event_loop = asyncio.new_event_loop


def name() -> str:
    """The loop the suite runs on: "asyncio" (the default) or "uvloop"."""
    value = os.environ.get(ENV, "asyncio") or "asyncio"
    if value not in _CHOICES:
        raise ValueError(f"{ENV} must be one of {', '.join(_CHOICES)}, got {value!r}")
    return value


def _factory() -> Callable[[], asyncio.AbstractEventLoop]:
    if name() == "uvloop":
        import uvloop

        return uvloop.new_event_loop  # type: ignore[no-any-return]
    return _asyncio_new_event_loop


def install() -> None:
    """Make every loop the tests create (through asyncio's functions) the chosen loop."""
    factory = _factory()
    asyncio.new_event_loop = asyncio.events.new_event_loop = factory


@functools.cache
def eager_task_factory_unsupported() -> str | None:
    """None if the chosen loop runs ``asyncio.eager_task_factory``; else why not (a skip reason).

    uvloop 0.23 on Python 3.13.0 raises TypeError from ``create_task`` under that factory,
    before any of our code runs.
    """
    if sys.version_info < (3, 12):
        return "asyncio.eager_task_factory is new in Python 3.12"
    loop = _factory()()
    try:
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
        probe = asyncio.sleep(0)
        try:
            loop.run_until_complete(probe)
        except TypeError as exc:
            probe.close()
            kind = f"{type(loop).__module__}.{type(loop).__name__}"
            return (f"{kind} cannot run asyncio.eager_task_factory on Python "
                    f"{sys.version.split()[0]}: create_task raises TypeError ({exc})")
        return None
    finally:
        loop.set_task_factory(None)
        loop.close()
