"""Command templates for the coordinator: `{pid}`, `{name}`, `{outdir}` in each argv element."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

__all__ = ("PLACEHOLDERS", "TemplateError", "check_template", "render", "split_command")

PLACEHOLDERS = ("pid", "name", "outdir")

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


class TemplateError(ValueError):
    """A command template names an unknown placeholder or has an unmatched brace."""


def split_command(command: str | Sequence[str]) -> list[str]:
    """A command as an argv list: a string is split with `shlex.split` (no shell ever runs).

    Raises ValueError for an empty command or unbalanced quotes.
    """
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ValueError(f"command {command!r}: {exc}") from None
    else:
        argv = list(command)
        if not all(isinstance(a, str) for a in argv):
            raise TypeError(f"command must be a string or a sequence of strings, got {command!r}")
    if not argv:
        raise ValueError("command must not be empty")
    return argv


def _render_one(arg: str, values: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        key = match.group(1)
        if key is None:
            raise TemplateError(
                f"unmatched {token!r} in {arg!r}; write {{{{ or }}}} for a literal brace"
            )
        if key not in values:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise TemplateError(f"unknown placeholder {{{key}}} in {arg!r}; known: {known}")
        return values[key]

    return _TOKEN.sub(substitute, arg)


def render(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Substitute placeholders in every argv element separately.

    Substitution happens after splitting, so a value can never become two arguments or reach a
    shell: `'{pid}; echo x'` stays one argument. `{{` and `}}` are literal braces.
    Raises TemplateError for an unknown placeholder or a lone brace.
    """
    return [_render_one(arg, values) for arg in argv]


def check_template(argv: Sequence[str]) -> None:
    """Raise TemplateError now if *argv* would fail to render (before anything starts)."""
    render(argv, dict.fromkeys(PLACEHOLDERS, "0"))
