"""Counted nouns in the command's messages: "1 round", "3 rounds", never "1 rounds"."""

from __future__ import annotations

__all__ = ("plural",)


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """*count* and *noun*, the noun in the plural (*nouns*, default ``noun + "s"``) unless the
    count is exactly one; the count has thousands separators.

    Example:
        >>> plural(1, "round"), plural(3, "round"), plural(12_000, "time")
        ('1 round', '3 rounds', '12,000 times')
        >>> plural(0, "periodic job"), plural(2, "process", "processes")
        ('0 periodic jobs', '2 processes')
    """
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"
