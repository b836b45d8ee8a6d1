"""`atomic`: marks a plain function as an atomic section of an asyncio primitive."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypeVar

__all__ = ("atomic",)

F = TypeVar("F", bound=Callable[..., object])


def atomic(fn: F) -> F:
    """Mark `fn` as an atomic section: a plain function that changes a primitive's state.

    On one event loop, code that contains no ``await`` cannot be interleaved with other tasks, so
    a plain ``def`` is an atomic section for free. The decorator makes that visible to readers and
    enforces it: coroutine functions, async generators and generator functions (which may be
    suspended half-way) are refused when decorated. It adds no runtime cost: `fn` is returned
    unchanged, with ``__executors_atomic__ = True`` set on it.

    Raises:
        TypeError: `fn` is not callable, or may suspend (coroutine function, async generator,
            generator function).

    Example:
        >>> @atomic
        ... def _take(state: list[int]) -> int:
        ...     return state.pop()
    """
    if not callable(fn):
        raise TypeError(f"atomic: expected a function, got {type(fn).__name__}")
    target = inspect.unwrap(fn) if hasattr(fn, "__wrapped__") else fn
    if inspect.iscoroutinefunction(target) or inspect.isasyncgenfunction(target):
        raise TypeError(
            f"atomic: {getattr(fn, '__qualname__', fn)!r} is async; an atomic section must be a "
            "plain def with no await (it would be interleaved at every await)"
        )
    if inspect.isgeneratorfunction(target):
        raise TypeError(
            f"atomic: {getattr(fn, '__qualname__', fn)!r} is a generator function; an atomic "
            "section must run to completion in one call"
        )
    try:
        fn.__executors_atomic__ = True  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # builtins and some callables refuse attributes
        pass
    return fn
