"""Every public module declares `__all__` as a tuple, and the packages re-export all of it.

Covers both packages: `executors` (whose root and `executors.aio` re-export their modules' names)
and `integrations` (adapters imported by path, `integrations.mongo`, `integrations.bridge`: its
root re-exports nothing, since each adapter brings its own optional dependency).
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest
from helpers.moved import is_moved

import executors
import executors.aio
import integrations


def _public_modules(package: types.ModuleType) -> list[str]:
    names = []
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or is_moved(info.name):
            continue  # a former name warns on import (test_traversal_stores_moved.py)
        names.append(info.name)
    return names


# The two roots that re-export (checked like any module), then every public module and package.
MODULES = ["executors", "executors.aio",
           *(m for m in _public_modules(executors) if m != "executors.aio"),
           *_public_modules(integrations)]


@pytest.mark.parametrize("name", MODULES)
def test_module_has_all_tuple(name: str) -> None:
    """Each public module has an `__all__` tuple naming objects that exist."""
    module = importlib.import_module(name)
    assert isinstance(getattr(module, "__all__", None), tuple), f"{name} has no __all__ tuple"
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"


# Modules whose names are reached through their own namespace rather than the package root.
NOT_REEXPORTED_AT_ROOT = {"executors.registry", "executors.testing", "executors.coordinator",
                         "executors.stores", "executors.clock", "executors.validate",
                         "executors.library_threads"}


@pytest.mark.parametrize("name", MODULES)
def test_package_reexports_module(name: str) -> None:
    """The public names of each module are re-exported by its package, where the plan says so."""
    module = importlib.import_module(name)
    package: types.ModuleType
    if name.startswith("executors.aio."):
        package = executors.aio
    elif name in NOT_REEXPORTED_AT_ROOT or name in ("executors", "executors.aio") or \
            name.startswith("integrations."):
        return  # a root itself, a namespace of its own, or an adapter imported by path
    else:
        package = executors
    for attr in module.__all__:
        assert getattr(package, attr, None) is getattr(module, attr), (
            f"{package.__name__} does not re-export {name}.{attr}"
        )
        assert attr in package.__all__, f"{attr} missing from {package.__name__}.__all__"
