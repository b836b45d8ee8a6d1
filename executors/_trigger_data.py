"""Reading `triggers.trigger_from_data`'s input: each key checked, and named when wrong."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time
from typing import TypeVar

__all__ = ("checked", "iso", "number", "text", "whole")

_D = TypeVar("_D", date, datetime, time)
_MISSING = object()


def checked(data: Mapping[str, object], key: str, kinds: tuple[type, ...],
            default: object = _MISSING) -> object:
    """`data[key]` (or `default` when absent), checked to be one of `kinds` (never a bool);
    null is accepted where `default` is None."""
    if key not in data:
        if default is _MISSING:
            raise ValueError(f"trigger data: missing key {key!r}")
        return default
    found = data[key]
    if found is None and default is None:
        return None
    if isinstance(found, bool) or not isinstance(found, kinds):
        raise ValueError(f"trigger data: {key!r} has the wrong type ({type(found).__name__})")
    return found


def text(data: Mapping[str, object], key: str, default: object = _MISSING) -> str:
    """A string."""
    return str(checked(data, key, (str,), default))


def whole(data: Mapping[str, object], key: str, default: int) -> int:
    """An int (the constructors check its range)."""
    found = checked(data, key, (int,), default)
    assert isinstance(found, int)
    return found


def number(data: Mapping[str, object], key: str, default: object = _MISSING) -> float:
    """An int or a float, as a float."""
    found = checked(data, key, (int, float), default)
    assert isinstance(found, (int, float))
    return float(found)


def iso(data: Mapping[str, object], key: str, kind: type[_D],
        default: object = _MISSING) -> _D | None:
    """An ISO date, datetime or time (None when absent or null, where `default` is None)."""
    found = checked(data, key, (str,), default)
    if found is None:
        return None
    try:
        return kind.fromisoformat(str(found))
    except ValueError as exc:
        raise ValueError(f"trigger data: {key!r} is not an ISO {kind.__name__}: "
                         f"{found!r}") from exc
