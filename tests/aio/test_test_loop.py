"""The suite really runs on the loop EXECUTORS_TEST_LOOP names (helpers/loops.py)."""

from __future__ import annotations

import asyncio
import sys
import unittest

import pytest
from helpers import loops


def _expected() -> str:
    return "uvloop" if loops.name() == "uvloop" else "asyncio"


def test_asyncio_run_and_new_event_loop_use_the_chosen_loop() -> None:
    """asyncio.run, asyncio.Runner and asyncio.new_event_loop all make the chosen loop, so a
    uvloop run of the suite is not silently a second asyncio run."""

    async def kind() -> str:
        return type(asyncio.get_running_loop()).__module__.split(".")[0]

    assert asyncio.run(kind()) == _expected()
    with asyncio.Runner() as runner:
        assert runner.run(kind()) == _expected()
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(kind()) == _expected()
    finally:
        loop.close()


class TestIsolatedCase(unittest.IsolatedAsyncioTestCase):
    """CPython's test suites we run are IsolatedAsyncioTestCase classes: they get it too."""

    async def test_loop(self) -> None:
        """The loop of an IsolatedAsyncioTestCase is the chosen one."""
        kind = type(asyncio.get_running_loop()).__module__.split(".")[0]
        self.assertEqual(kind, _expected())


def test_bad_choice_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt EXECUTORS_TEST_LOOP is an error naming the variable, never a silent default."""
    monkeypatch.setenv(loops.ENV, "uv-loop")
    with pytest.raises(ValueError, match=loops.ENV):
        loops.name()


@pytest.mark.skipif(sys.version_info < (3, 12), reason="eager_task_factory is new in 3.12")
def test_eager_support_probe_leaves_no_warning() -> None:
    """The probe behind the eager variants' skip answers without a "never awaited" warning,
    whichever the answer is."""
    loops.eager_task_factory_unsupported.cache_clear()
    reason = loops.eager_task_factory_unsupported()
    assert reason is None or "TypeError" in reason
