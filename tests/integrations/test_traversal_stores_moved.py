"""The traversal stores' former module names still import, warn, and give the same objects."""

from __future__ import annotations

import importlib
import sys

import pytest
from helpers.moved import is_moved

MOVED = [("integrations.sqlite_store", "integrations.traversal_stores.sqlite"),
         ("integrations.postgres_store", "integrations.traversal_stores.postgres")]


@pytest.mark.parametrize(("old", "new"), MOVED)
def test_former_name_warns_and_reexports_the_store(old: str, new: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing a traversal store by its former name raises a DeprecationWarning naming the
    new module, and every public name it offers is the new module's object."""
    monkeypatch.delitem(sys.modules, old, raising=False)  # the warning fires on first import
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import from {new}$"):
        former = importlib.import_module(old)
    current = importlib.import_module(new)
    assert former.__all__ == current.__all__
    for name in current.__all__:
        assert getattr(former, name) is getattr(current, name), name
    assert is_moved(old) and not is_moved(new)
