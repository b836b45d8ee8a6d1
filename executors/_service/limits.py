"""What every store accepts: the bounds a job's name and a stored schedule's arguments are
checked against at ``schedule()`` / ``cron()``, before anything is written.

A declaration the store refuses later stops nothing else (the store loop retries it on its own),
but most refusals are known in advance, and a refusal named at the call is worth more than one
in a log: these bounds are below what each store was measured to take (the Schedules page,
"What a stored schedule may hold"), so a schedule that passes here is one every store keeps.

- **A name** is a non-empty `str` of at most `NAME_MAX` characters, valid UTF-8 (no lone
  surrogate: SQLite, PostgreSQL and MongoDB all refuse to encode one), with no control character
  (NUL is refused by PostgreSQL; a newline forges a log line, an escape sequence rewrites a
  terminal). The same rule for every job, stored or not: a name is printed in the same logs.
- **Arguments** (``args`` and ``kwargs``) are JSON made of strings, numbers, booleans, None,
  lists and string-keyed mappings; no string (value or key) holds NUL or a lone surrogate; no
  value nests deeper than `ARGS_DEPTH_MAX` containers; their JSON, UTF-8 encoded, is at most
  `ARGS_SIZE_MAX` bytes. The depth is checked by a walk with a stack of its own (never
  recursion), before anything is encoded: 1,500 levels are a `ValueError`, not a
  `RecursionError`.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Mapping, Sequence

__all__ = ("ARGS_DEPTH_MAX", "ARGS_SIZE_MAX", "NAME_MAX", "check_arguments", "check_name")

#: The longest name (characters). At 4 UTF-8 bytes a character that is 800 bytes: under
#: PostgreSQL's b-tree entry limit (about 2,700 bytes, measured), ``pg_notify``'s payload
#: (under 8,000 bytes) and older MongoDB servers' 1,024-byte index keys.
NAME_MAX = 200
#: The deepest nesting of lists and mappings inside one argument. MongoDB refuses documents
#: nested past 100 levels (the record adds 3 around the arguments); Python's own ``json``
#: fails near 1,000.
ARGS_DEPTH_MAX = 32
#: The most bytes of UTF-8 JSON that a stored schedule's ``args`` and ``kwargs`` take together:
#: MongoDB's 16 MiB document is the smallest store limit measured, and every claim and status
#: read copies the arguments, so one mebibyte, sixteen times under it.
ARGS_SIZE_MAX = 1 << 20


def check_name(name: object, what: str = "name") -> str:
    """`name`, checked against the rule above.

    Raises:
        TypeError: it is not a str.
        ValueError: empty, longer than `NAME_MAX`, a lone surrogate or a control character
            (its position said).
    """
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError(f"{what} must not be empty")
    if len(name) > NAME_MAX:
        raise ValueError(f"{what} must be at most {NAME_MAX} characters, got {len(name):,}")
    for i, char in enumerate(name):
        kind = unicodedata.category(char)
        if kind == "Cs":
            raise ValueError(f"{what} must be valid UTF-8: a lone surrogate "
                             f"{char!a} at position {i}")
        if kind == "Cc":
            raise ValueError(f"{what} must not contain control characters: {char!a} at "
                             f"position {i}")
    return name


def check_arguments(args: Sequence[object], kwargs: Mapping[str, object],
                    schedule: str) -> None:
    """Refuse arguments that some store would refuse, naming the argument (``args[1]['k']``).

    Raises:
        TypeError: a value that is not JSON (a set, an object, a non-string key, NaN or an
            infinity).
        ValueError: NUL or a lone surrogate in a string or a key, nesting past
            `ARGS_DEPTH_MAX`, JSON past `ARGS_SIZE_MAX` bytes.
    """
    # (path, value, depth): the walk's own stack, so any depth is a clear error, not a
    # RecursionError from the interpreter.
    stack: list[tuple[str, object, int]] = [(f"kwargs[{k!r}]", v, 1)
                                            for k, v in reversed(list(kwargs.items()))]
    stack.extend((f"args[{i}]", v, 1) for i, v in reversed(list(enumerate(args))))
    for key in kwargs:
        _check_text(key, f"the keyword {key!r}", schedule)
    where = f"of stored schedule {schedule!r}"
    while stack:
        path, value, depth = stack.pop()
        if value is None or isinstance(value, (bool, int)):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise TypeError(f"{_kind(path)} {where} must be JSON: {path} is {value!r}")
        elif isinstance(value, str):
            _check_text(value, path, schedule)
        elif isinstance(value, (list, tuple, dict)):
            if depth > ARGS_DEPTH_MAX:
                root = path[:path.index("]") + 1]  # the argument, not the way down
                raise ValueError(f"{root} {where} nests deeper than {ARGS_DEPTH_MAX} lists "
                                 "or mappings")
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise TypeError(f"{_kind(path)} {where} must be JSON: {path} has the "
                                        f"key {key!r}, not a str")
                    _check_text(key, f"a key of {path}", schedule)
                    stack.append((f"{path}[{key!r}]", item, depth + 1))
            else:
                stack.extend((f"{path}[{i}]", item, depth + 1) for i, item in enumerate(value))
        else:
            raise TypeError(f"{_kind(path)} {where} must be JSON (nothing is pickled): "
                            f"{path} is a {type(value).__name__}")
    size = len(json.dumps([list(args), dict(kwargs)], ensure_ascii=False,
                          separators=(",", ":")).encode("utf-8"))
    if size > ARGS_SIZE_MAX:
        raise ValueError(f"args and kwargs {where} take {size:,} bytes of JSON; at most "
                         f"{ARGS_SIZE_MAX:,}")


def _kind(path: str) -> str:
    return path[:path.index("[")]  # "args" or "kwargs"


def _check_text(text: str, path: str, schedule: str) -> None:
    if "\x00" in text:
        raise ValueError(f"{path} of stored schedule {schedule!r} must not contain NUL "
                         f"(at position {text.index(chr(0))})")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{path} of stored schedule {schedule!r} must be valid UTF-8: a "
                         f"lone surrogate at position {exc.start}") from None
