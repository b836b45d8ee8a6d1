"""The threaded core's import arrows follow the plan: no circle, no asyncio, registry at the bottom.

The plan (ARCHITECTURE.md, "Floors and arrows"): ``service, deferred -> periodic -> registry ->
(stdlib)``, and the threaded core never imports asyncio. Imports are read from the source (in
functions too; ``if TYPE_CHECKING:`` blocks are for the type checker and are left out), as
trio's tests guard its ``_core``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import executors

ROOT = Path(executors.__file__).parent
# The threaded core and the private modules it is made of.
CORE = ("registry", "periodic", "deferred", "service", "threads", "testing", "_threads",
        "_job", "_scheduler", "_pool", "_deferred_queue", "_validate", "_clock", "_fatal")


def _imports(name: str) -> set[str]:
    """The modules `executors.<name>` imports at run time (dotted names)."""
    tree = ast.parse((ROOT / f"{name}.py").read_text())
    tree.body = [node for node in tree.body if not (
        isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `from . import x` names a module, `from .x import y` x
                found.update(f"executors.{alias.name}" for alias in node.names
                             if node.module is None)
                if node.module is not None:
                    found.add(f"executors.{node.module}")
            elif node.module == "executors":
                found.update(f"executors.{alias.name}" for alias in node.names
                             if (ROOT / f"{alias.name}.py").exists())
            else:
                found.add(node.module or "")
    return found


def _ours(name: str) -> set[str]:
    return {m.removeprefix("executors.") for m in _imports(name) if m.startswith("executors.")}


def test_core_modules_import_no_asyncio_and_nothing_outside_the_library() -> None:
    """No module of the threaded core imports asyncio, integrations or the command line."""
    for name in CORE:
        for module in _imports(name):
            top = module.split(".")[0]
            assert top != "asyncio" and top != "integrations", (name, module)
            assert not module.startswith("executors._cli"), (name, module)
            assert top in sys.stdlib_module_names or top in {"executors", "__future__",
                                                              "typing_extensions"}, (name, module)


def test_core_has_no_import_circle() -> None:
    """The threaded core's imports among themselves form no circle (registry imported
    periodic, which imports registry, before the plan's arrows were restored)."""
    graph = {name: _ours(name) & set(CORE) for name in CORE}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join([*path, name, nxt]))
            if nxt not in state:
                visit(nxt, [*path, name])
        state[name] = 2

    for name in CORE:
        if name not in state:
            visit(name, [])


def test_the_bottom_floors_import_only_the_helpers_below_them() -> None:
    """registry, _validate, _clock and _fatal depend on the stdlib (and each other's helpers
    only); periodic does not import deferred, service or threads."""
    assert _ours("registry") <= {"_validate", "_clock"}
    assert _ours("_validate") == set() and _ours("_clock") == set() and _ours("_fatal") == set()
    assert not _ours("periodic") & {"deferred", "service", "threads", "_job", "_scheduler"}
