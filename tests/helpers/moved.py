"""The modules kept under a former name: their docstring starts with ``Deprecated:``.

Such a module only re-exports the new one and warns on import (DeprecationWarning), so the suites
that import every module (doctests, ``__all__``) leave it to its own test, and the docs give it
no reference page (docs/hooks.py applies the same rule).
"""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ("is_moved",)

ROOT = Path(__file__).resolve().parent.parent.parent


def is_moved(module: str) -> bool:
    """True when `module` (dotted, of ours) is a former name kept for a module that moved."""
    path = ROOT.joinpath(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    docstring = ast.get_docstring(ast.parse(file.read_text())) or ""
    return docstring.startswith("Deprecated:")
