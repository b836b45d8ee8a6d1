"""A griffe extension: a multi-line string constant is shown as a block, not one clipped line.

mkdocstrings shows an attribute's value in its heading, on one line: ``SCHEMA = "\\nCREATE
TABLE ...`` ran thousands of pixels past the content column. This extension shows such a value
(a string literal with line breaks inside) as an ellipsis in the heading, and in full, as a
code block, at the end of the attribute's docstring.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any

import griffe

__all__ = ("MultilineValues",)

_ELIDED = '"""..."""'


class MultilineValues(griffe.Extension):
    """Move multi-line string values of attributes from their heading into their docstring."""

    def on_attribute_instance(
        self, *, node: ast.AST | griffe.ObjectNode, attr: griffe.Attribute, **kwargs: Any,
    ) -> None:
        """Show `attr`'s value as a block when it is a string literal of several lines."""
        value = getattr(node, "value", None)
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)
                and "\n" in value.value.strip("\n")):
            return
        attr.value = _ELIDED
        lines = textwrap.dedent(value.value).strip("\n")
        block = f"Its value:\n\n```text\n{lines}\n```"
        text = f"{attr.docstring.value}\n\n{block}" if attr.docstring is not None else block
        attr.docstring = griffe.Docstring(text, lineno=attr.lineno, endlineno=attr.endlineno,
                                          parent=attr)
