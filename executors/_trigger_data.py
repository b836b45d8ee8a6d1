"""Reading `triggers.trigger_from_data`'s input (each key checked, and named when wrong) and
the triggers' own argument checks (a zone, an aware datetime, one of some words)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, time
from typing import TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ("aware", "checked", "choice", "iso", "number", "text", "whole", "zone")

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


def zone(tz: object) -> ZoneInfo:
    """`tz` (a key or a `ZoneInfo` with a key) as a zone; an error naming `tz` otherwise."""
    if isinstance(tz, str):
        try:
            return ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"tz: no time zone with the key {tz!r}") from exc
    if isinstance(tz, ZoneInfo):
        if tz.key is None:
            raise ValueError("tz: a zone read from a file has no key; pass a key such as "
                             "'Europe/Berlin'")
        return tz
    raise TypeError(f"tz must be a zoneinfo.ZoneInfo or a key such as 'Europe/Berlin', got "
                    f"{type(tz).__name__}")


def aware(value: object, name: str, error: type[Exception] = ValueError) -> datetime:
    """`value` if it is an aware datetime; an error naming `name` otherwise."""
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be an aware datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise error(f"{name} is naive: name a zone (e.g. tzinfo=ZoneInfo('Europe/Berlin'))")
    return value


def choice(value: object, name: str, choices: tuple[str, ...]) -> str:
    """`value` if it is one of `choices`; a ValueError naming `name` otherwise."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return str(value)
