"""A griffe extension: the API reference names no private base class, and loses no method to one.

A public class often gets part of its API from a private base (``Portal(PortalCore)``,
``SharedSemaphore(_SharedPermits)``). mkdocstrings prints such a base ("Bases: PortalCore") although
no page documents it, and, since it shows no inherited members, leaves out the methods the base
defines (``SharedSemaphore.acquire`` was missing). This extension moves the public members of every
private base into the class that inherits them, as if written there, then drops the base from the
class's list of bases.

A base is private when it is one of ours (``executors``, ``integrations``) and no reference page
documents it: its name starts with ``_``, or it is neither defined in a public module nor exported
by the ``__all__`` of a public package whose private modules define it (the rule of
``hooks.public_modules``). Other bases (``Generic[T]``, ``Exception``, a documented class of ours)
are shown as before.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import griffe

__all__ = ("PrivateBases", "documented_names")

DOCS = Path(__file__).resolve().parent
PACKAGES = ("executors", "integrations")


def documented_names() -> dict[str, set[str]]:
    """Each public module (one reference page) and the names its page documents."""
    # docs/hooks.py decides which modules get a page; load it from its file (not a package).
    spec = importlib.util.spec_from_file_location("_docs_hooks_for_bases", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return {module: hooks.exported_names(module) for module in hooks.public_modules()}


def _base_path(base: str | griffe.Expr) -> str | None:
    """The dotted path of the class a base expression names (``_Side[T]``: ``..._Side``)."""
    if isinstance(base, griffe.ExprSubscript):
        base = base.left
    if isinstance(base, (griffe.ExprName, griffe.ExprAttribute)):
        return base.canonical_path
    return None


def _classes(obj: griffe.Object) -> Iterator[griffe.Class]:
    for member in list(obj.members.values()):
        if member.is_alias:
            continue  # a re-export: its class is walked where it is defined
        if isinstance(member, griffe.Class):
            yield member
        if isinstance(member, (griffe.Module, griffe.Class)):
            yield from _classes(member)


class PrivateBases(griffe.Extension):
    """Fold private bases into the public classes that inherit from them."""

    def __init__(self) -> None:
        super().__init__()
        self._documented = documented_names()

    def is_private(self, path: str) -> bool:
        """Whether the class at dotted *path* is one of ours that no reference page shows."""
        module, _, name = path.rpartition(".")
        if module.partition(".")[0] not in PACKAGES:
            return False  # the standard library's or another package's: shown as written
        if name.startswith("_"):
            return True
        return not any(
            name in names and (module == page or module.startswith(page + "."))
            for page, names in self._documented.items())

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader,
                   **kwargs: Any) -> None:
        """Once a package of ours is loaded, fold every private base of its classes."""
        if pkg.name in PACKAGES:
            for cls in _classes(pkg):
                self._fold(cls, loader)

    def _fold(self, cls: griffe.Class, loader: griffe.GriffeLoader) -> None:
        kept: list[str | griffe.Expr] = []
        for base in cls.bases:
            path = _base_path(base)
            if path is None or not self.is_private(path):
                kept.append(base)
                continue
            target = self._load(path, loader)
            if not isinstance(target, griffe.Class):
                kept.append(base)  # members unknown: keep the base rather than lose them
                continue
            for name, member in target.all_members.items():
                if name.startswith("_") or name in cls.members:
                    continue  # private, or overridden by the class itself
                resolved = member.final_target if isinstance(member, griffe.Alias) else member
                cls.set_member(name, griffe.Alias(name, resolved, parent=cls))
        cls.bases = kept

    @staticmethod
    def _load(path: str, loader: griffe.GriffeLoader) -> griffe.Object | None:
        top = path.partition(".")[0]
        try:
            if top not in loader.modules_collection.members:
                loader.load(top)  # a base from our other package (``executors.aio._waiters``)
            found = loader.modules_collection.get_member(path)
        except (KeyError, griffe.AliasResolutionError, ImportError):
            return None
        return found.final_target if isinstance(found, griffe.Alias) else found
