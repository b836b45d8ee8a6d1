"""A griffe extension: our docstrings' ``Example:`` sections render as examples (doctest code).

The project's docstrings title their doctests ``Example:`` (CONVENTIONS.md). griffe's Google
parser knows only ``Examples:`` as an examples section and renders ``Example:`` as an admonition
of plain Markdown, where ``>>> D[int](max_pending=2)`` would even read as a link. This extension
renames the title before parsing, so the doctests render as highlighted code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ("ExampleSections",)

_TITLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rewrite ``Example:`` section titles to ``Examples:`` in every loaded docstring."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _TITLE.sub(r"\1Examples:", obj.docstring.value)
