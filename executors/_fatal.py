"""The one rule for which exceptions escape a group bare instead of inside an ExceptionGroup."""

from __future__ import annotations

__all__ = ("is_fatal",)


def is_fatal(exc: BaseException) -> bool:
    """Return True if `exc` must propagate on its own, never wrapped in an ExceptionGroup.

    As in `asyncio.TaskGroup`: only `KeyboardInterrupt` and `SystemExit` escape the event loop's
    scheduler (gh-102572) and come out bare; every other exception, `BaseException` subclasses
    included, is grouped. Task groups, thread groups and the combinators all ask this one function.
    """
    return isinstance(exc, (KeyboardInterrupt, SystemExit))
