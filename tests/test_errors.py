"""The exception hierarchy: every error the library raises derives from ExecutorsError."""

from __future__ import annotations

import asyncio

import pytest

from executors.aio import PersistentTaskGroup
from executors.errors import ClosedError, ExecutorsError, ShutdownError


def test_shutdown_error_is_a_runtime_error() -> None:
    """issue 16: ShutdownError is a RuntimeError (what asyncio.TaskGroup, concurrent.futures and
    aiotools raise for work handed to a finished owner), still a ClosedError and an
    ExecutorsError; code written for those peers catches ours with `except RuntimeError`."""
    assert issubclass(ShutdownError, RuntimeError)
    assert issubclass(ShutdownError, ClosedError)
    assert issubclass(ShutdownError, ExecutorsError)

    async def main() -> str:
        group = PersistentTaskGroup()
        await group.shutdown()
        try:
            group.create_task(asyncio.sleep(0))
        except RuntimeError as exc:  # as code written for aiotools does
            return type(exc).__name__
        return "accepted"

    assert asyncio.run(main()) == "ShutdownError"


def test_every_public_error_derives_from_executors_error() -> None:
    """Every class in executors.errors.__all__ is an ExecutorsError: one `except` catches all
    the library's own errors."""
    import executors.errors as errors

    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, ExecutorsError), name
    with pytest.raises(ExecutorsError):
        raise ShutdownError("x")
