"""The import graph follows the house plan: no circle, and no arrow the plan forbids.

ARCHITECTURE.md, "Floors and arrows": imports only go down. This test reads every module of
`executors` and `integrations` with `ast` (nothing is imported, so a module that fails to import
is still checked), takes every `import` and `from ... import` statement, including those inside
functions (a lazy import is still an arrow; only blocks under ``if TYPE_CHECKING:`` are exempt,
as they never run), and checks the graph. trio's ``_tests/test_exports.py`` and anyio's
``tests/test_all_attributes.py`` guard their layouts the same way.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("executors", "integrations")

# The threaded core: plain threads, never asyncio (a program that uses only threads pays nothing
# for asyncio). The service's private modules (a scheduler, a pool, a `_service` package) and a
# future `executors/service/` package belong to it.
CORE = re.compile(r"^executors\.(periodic|registry|deferred|service|threads|_scheduler\w*"
                  r"|_service\w*)(\.|$)")
# Threading machinery the asyncio half never imports: its primitives live on one event loop.
THREADING = re.compile(r"^(threading|_thread|queue|concurrent|multiprocessing)(\.|$)")
ASYNCIO = re.compile(r"^asyncio(\.|$)")
AIO = re.compile(r"^executors\.aio(\.|$)")
CLI = re.compile(r"^executors\._cli(\.|$)")
# The launcher of `python -m executors` is the command line's own entry point.
CLI_ENTRY = {"executors.__main__"}


@dataclasses.dataclass(frozen=True)
class Arrow:
    """One import statement: `source` imports `target` at `line` (`lazy`: inside a function)."""

    source: str
    target: str
    line: int
    lazy: bool

    def __str__(self) -> str:
        where = " (inside a function)" if self.lazy else ""
        return f"{self.source} -> {self.target} ({_path(self.source)}:{self.line}{where})"


@cache
def _modules() -> dict[str, Path]:
    """Every module of the two packages: dotted name -> file (a package is its __init__.py)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _path(module: str) -> str:
    return _modules()[module].relative_to(ROOT).as_posix()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of `tree` and whether it is inside a function, skipping the
    bodies of ``if TYPE_CHECKING:`` (their ``else:`` branches do run)."""

    def walk(node: ast.AST, lazy: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, lazy
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            children: list[ast.AST] = list(node.orelse)
        else:
            children = list(ast.iter_child_nodes(node))
        inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in children:
            yield from walk(child, inner)

    yield from walk(tree, False)


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a `from` statement reads from."""
    if node.level == 0:
        return node.module or ""
    is_package = _modules()[module].name == "__init__.py"
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


@cache
def _arrows() -> tuple[Arrow, ...]:
    """Every import arrow of every module. A `from X import Y` whose `X.Y` is a module of ours is
    an arrow to `X.Y`; otherwise to `X`. Implicit imports of parent packages are not arrows (the
    importing module's own package is already being imported when it runs)."""
    modules = _modules()
    arrows = []
    for module, path in modules.items():
        for node, lazy in _statements(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(module, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            arrows += [Arrow(module, target, node.lineno, lazy)
                       for target in dict.fromkeys(targets)]
    return tuple(arrows)


def _internal(target: str) -> bool:
    return target.split(".")[0] in PACKAGES


def _graph() -> dict[str, list[Arrow]]:
    graph: dict[str, list[Arrow]] = {module: [] for module in _modules()}
    for arrow in _arrows():
        if _internal(arrow.target) and arrow.target in graph and arrow.target != arrow.source:
            graph[arrow.source].append(arrow)
    return graph


def _reach(start: str, graph: dict[str, list[Arrow]]) -> dict[str, list[Arrow]]:
    """Every module `start` imports, directly or not, with the chain of arrows that gets there."""
    chains: dict[str, list[Arrow]] = {start: []}
    todo = [start]
    while todo:
        current = todo.pop()
        for arrow in graph[current]:
            if arrow.target not in chains:
                chains[arrow.target] = [*chains[current], arrow]
                todo.append(arrow.target)
    return chains


def _chain(arrows: list[Arrow], last: Arrow) -> str:
    return "\n    ".join(str(a) for a in [*arrows, last])


# -- the walker sees what it must -----------------------------------------------------------------


def test_walker_finds_every_kind_of_import() -> None:
    """The walk finds top-level, relative and function-level imports, and skips only
    ``if TYPE_CHECKING:`` bodies: a broken walker would make every rule below pass vacuously."""
    arrows = _arrows()
    assert len(_modules()) > 30, sorted(_modules())
    assert any(a.source == "executors.periodic" and a.target == "executors.registry"
               for a in arrows), "a relative `from . import registry` was missed"
    assert any(a.lazy for a in arrows), "no import inside a function was found"
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import asyncio\n"
                     "else:\n    import queue\ndef f():\n    import threading\n")
    found = {(node.names[0].name, lazy) for node, lazy in _statements(tree)
             if isinstance(node, ast.Import)}
    assert found == {("queue", False), ("threading", True)}


# -- (a) no circle --------------------------------------------------------------------------------


def _cycle(graph: dict[str, list[Arrow]]) -> list[Arrow] | None:
    """One circle of `graph` as its arrows, or None (depth-first search, colouring modules)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[Arrow] = []

    def visit(module: str) -> list[Arrow] | None:
        state[module] = 1
        for arrow in graph[module]:
            if state.get(arrow.target) == 1:
                start = next((i for i, a in enumerate(path) if a.source == arrow.target),
                             len(path))
                return [*path[start:], arrow]
            if arrow.target not in state:
                path.append(arrow)
                found = visit(arrow.target)
                if found:
                    return found
                path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_no_import_circle() -> None:
    """No module imports itself through others: the floors of the plan are a strict order."""
    cycle = _cycle(_graph())
    assert cycle is None, "import circle:\n    " + "\n    ".join(str(a) for a in cycle or [])


def test_cycle_finder_reports_a_circle() -> None:
    """The circle search finds a planted three-module circle and reports its arrows in order."""
    graph: dict[str, list[Arrow]] = {"a": [Arrow("a", "b", 1, False)],
                                     "b": [Arrow("b", "c", 1, False)],
                                     "c": [Arrow("c", "a", 1, True)], "d": []}
    cycle = _cycle(graph)
    assert cycle is not None and [a.source for a in cycle] == ["a", "b", "c"]
    assert _cycle({"a": [Arrow("a", "b", 1, False)], "b": []}) is None


# -- (b) the arrows the plan forbids ---------------------------------------------------------------


def _external(module: str, pattern: re.Pattern[str]) -> list[str]:
    """Arrows to a module matching `pattern` from `module` or anything of ours it imports."""
    graph = _graph()
    return [_chain(chain, arrow) for reached, chain in _reach(module, graph).items()
            for arrow in _arrows() if arrow.source == reached and pattern.match(arrow.target)]


def _modules_matching(pattern: re.Pattern[str]) -> list[str]:
    return sorted(m for m in _modules() if pattern.match(m))


def test_threaded_core_never_imports_asyncio() -> None:
    """The threaded core (periodic, registry, deferred, service and its private modules, threads)
    imports asyncio neither directly nor through any module of ours it imports."""
    core = _modules_matching(CORE)
    assert {"executors.periodic", "executors.registry", "executors.deferred",
            "executors.threads"} <= set(core)
    found = [chain for module in core for chain in _external(module, ASYNCIO)]
    assert not found, "the threaded core imports asyncio:\n    " + "\n  ".join(found)


def test_aio_never_imports_threading_machinery_or_integrations() -> None:
    """`executors.aio` lives on one event loop: none of its modules imports threading, _thread,
    queue, concurrent.futures or multiprocessing (directly or through our modules it imports),
    and none imports `integrations`."""
    aio = _modules_matching(AIO)
    assert "executors.aio.locks" in aio
    found = [chain for module in aio for chain in _external(module, THREADING)]
    graph = _graph()
    found += [_chain(chain[:-1], chain[-1]) for module in aio
              for reached, chain in _reach(module, graph).items()
              if chain and reached.startswith("integrations")]
    assert not found, "executors.aio imports threading machinery or integrations:\n    " + \
        "\n  ".join(found)


def test_nothing_imports_the_command_line() -> None:
    """`executors._cli` is the top floor: only its own modules and the `python -m executors`
    launcher import it."""
    found = [str(a) for a in _arrows() if CLI.match(a.target) and not CLI.match(a.source)
             and a.source not in CLI_ENTRY]
    assert not found, "imports of the command line:\n    " + "\n    ".join(found)


def test_executors_imports_integrations_only_from_the_command_line() -> None:
    """The library never depends on its adapters; the one arrow from `executors` to
    `integrations` is the command line's (the demo, the bench engine)."""
    found = [str(a) for a in _arrows() if a.source.startswith("executors")
             and a.target.split(".")[0] == "integrations" and not CLI.match(a.source)]
    assert not found, "executors imports integrations:\n    " + "\n    ".join(found)


def _stdlib_only_helper(module: str) -> bool:
    """A private module of `executors` (``_validate``, ``_clock``) importing nothing of ours."""
    return module.startswith("executors._") and not any(
        a.source == module and _internal(a.target) for a in _arrows())


def test_registry_depends_on_the_standard_library_only() -> None:
    """`executors.registry` imports nothing of ours but stdlib-only helpers (private modules
    that themselves import nothing of ours, such as `_validate`): the floor under every executor
    has no circle to join."""
    found = [str(a) for a in _arrows() if a.source == "executors.registry"
             and _internal(a.target) and not _stdlib_only_helper(a.target)]
    assert not found, "the registry imports more than the standard library:\n    " + \
        "\n    ".join(found)


@pytest.mark.parametrize(("source", "target", "rule"), [
    ("executors.periodic", "asyncio", test_threaded_core_never_imports_asyncio),
    ("executors.aio.locks", "threading",
     test_aio_never_imports_threading_machinery_or_integrations),
    ("executors.service", "executors._cli.demo", test_nothing_imports_the_command_line),
    ("executors.deferred", "integrations.mongo",
     test_executors_imports_integrations_only_from_the_command_line),
    ("executors.registry", "executors.periodic",
     test_registry_depends_on_the_standard_library_only),
])
def test_each_rule_catches_its_forbidden_arrow(source: str, target: str,
                                               rule: Callable[[], None],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each rule fails when its forbidden arrow is planted in the graph (so none passes by
    construction)."""
    planted = (*_arrows(), Arrow(source, target, 1, True))
    monkeypatch.setattr(sys.modules[__name__], "_arrows", lambda: planted)
    with pytest.raises(AssertionError):
        rule()
