"""A griffe extension: every documented field of a class gets its meaning as its own docstring.

Our dataclasses document their fields in one of two ways (CONVENTIONS.md, "statistics() returns a
frozen dataclass"):

- a ``#:`` comment block right above the field (the Sphinx convention)::

      #: Jobs whose run was still executing at the deadline.
      unfinished_jobs: tuple[str, ...]

- an ``Attributes:`` section in the class docstring (Google style).

griffe reads neither into the attribute itself: it ignores comments, and an ``Attributes:`` entry
stays in the class's table while the attribute object has no docstring, so mkdocstrings shows the
field without its meaning (or not at all). This extension reads the ``#:`` lines above an
attribute from the source and sets them as its docstring; for a field with no ``#:`` comment it
copies the class's ``Attributes:`` entry. A docstring written under the attribute wins over both.
A ``#:`` comment applies to the one attribute under it, as in Sphinx: a field under a blank line
or under another field gets nothing from it.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe

__all__ = ("FieldComments", "comment_above")

_MARK = "#:"


def comment_above(lines: list[str], lineno: int) -> str | None:
    """The text of the ``#:`` comment block directly above 1-based line `lineno`, or None.

    Each line's ``#:`` and one following space are removed; the lines keep their order.
    """
    found: list[str] = []
    index = lineno - 2  # the line above, 0-based
    while index >= 0:
        stripped = lines[index].strip()
        if not stripped.startswith(_MARK):
            break
        text = stripped[len(_MARK):]
        found.append(text[1:] if text.startswith(" ") else text)
        index -= 1
    if not found:
        return None
    return "\n".join(reversed(found)).strip() or None


class FieldComments(griffe.Extension):
    """Set ``#:`` comments and ``Attributes:`` entries as the docstrings of class attributes."""

    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, **kwargs: Any,
    ) -> None:
        """Give `attr` the ``#:`` comment above it, unless it has a docstring of its own."""
        if attr.docstring is not None or attr.lineno is None:
            return
        try:
            filepath = attr.filepath
            file_lines = attr.lines_collection[filepath] if not isinstance(filepath, list) else []
        except (KeyError, ValueError, griffe.BuiltinModuleError):
            return  # no source (an inspected or builtin object): nothing to read
        text = comment_above(file_lines, attr.lineno)
        if text is not None:
            attr.docstring = griffe.Docstring(
                text, lineno=attr.lineno - 1, endlineno=attr.lineno - 1, parent=attr,
            )

    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        """Copy each ``Attributes:`` entry of `cls`'s docstring to the field it names."""
        if cls.docstring is None:
            return
        sections = griffe.parse_google(cls.docstring, warnings=False)
        for section in sections:
            if not isinstance(section, griffe.DocstringSectionAttributes):
                continue
            for entry in section.value:
                member = cls.members.get(entry.name)
                if (isinstance(member, griffe.Attribute) and member.docstring is None
                        and entry.description):
                    member.docstring = griffe.Docstring(entry.description, parent=member)
