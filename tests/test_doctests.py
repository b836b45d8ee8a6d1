"""The `Example:` sections of the library's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
from helpers.moved import is_moved

import executors
import integrations

# __main__ runs the command when imported; it has no doctests.
SKIP = {"executors.__main__"}


def _modules() -> list[str]:
    names = []
    for package in (executors, integrations):
        names.append(package.__name__)
        names.extend(info.name
                     for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
                     if info.name not in SKIP and not is_moved(info.name))
    return names


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name: str) -> None:
    """Every doctest in the module passes."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an integration whose optional dependency is absent
        pytest.skip(f"{name} needs an optional dependency: {exc}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
