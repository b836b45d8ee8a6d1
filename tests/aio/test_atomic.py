"""The `atomic` decorator: marks plain functions, refuses anything that can suspend."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator

import pytest

from executors.aio import atomic


def test_marks_and_returns_plain_function_unchanged() -> None:
    """A plain def is returned as is (no wrapper, no cost) with __executors_atomic__ set."""

    def take(items: list[int]) -> int:
        return items.pop()

    marked = atomic(take)
    assert marked is take
    assert take.__executors_atomic__ is True  # type: ignore[attr-defined]
    assert marked([1, 2]) == 2


def test_marks_methods_and_staticmethods() -> None:
    """Methods decorated in a class body keep working and carry the mark."""

    class Box:
        def __init__(self) -> None:
            self.n = 0

        @atomic
        def bump(self) -> int:
            self.n += 1
            return self.n

        @staticmethod
        @atomic
        def double(x: int) -> int:
            return 2 * x

    box = Box()
    assert box.bump() == 1 and Box.double(4) == 8
    assert Box.bump.__executors_atomic__ is True  # type: ignore[attr-defined]


def test_refuses_coroutine_function() -> None:
    """An async def could be interleaved at every await: refused when decorated."""
    with pytest.raises(TypeError, match="async"):

        @atomic
        async def step() -> None:
            pass


def test_refuses_async_generator() -> None:
    """An async generator is refused when decorated."""
    with pytest.raises(TypeError, match="async"):

        @atomic
        async def agen() -> AsyncIterator[int]:
            yield 1


def test_refuses_generator_function() -> None:
    """A generator function may stop half-way between two next() calls: refused."""
    with pytest.raises(TypeError, match="generator"):

        @atomic
        def gen() -> Iterator[int]:
            yield 1


def test_refuses_wrapped_coroutine_function() -> None:
    """A functools.wraps wrapper around a coroutine function is seen through and refused."""

    async def step() -> None:
        pass

    @functools.wraps(step)
    def wrapper() -> object:
        return step()

    with pytest.raises(TypeError, match="async"):
        atomic(wrapper)


def test_refuses_non_callable() -> None:
    """A non-callable is a TypeError naming what was passed."""
    with pytest.raises(TypeError, match="int"):
        atomic(3)  # type: ignore[type-var]


def test_accepts_callables_that_refuse_attributes() -> None:
    """Builtins cannot carry the mark; they are still accepted (they cannot suspend)."""
    assert atomic(len) is len
