"""The import graph follows the house plan: no circle, and no arrow the plan forbids.

ARCHITECTURE.md, "Floors and arrows": imports only go down. This test reads every module of
`executors` and `integrations` with `ast` (nothing is imported, so a module that fails to import
is still checked), takes every `import` and `from ... import` statement, including those inside
functions (a lazy import is still an arrow) and under ``if TYPE_CHECKING:``, and checks the
graph. The rules about what runs (asyncio in the threaded core, threads in `executors.aio`)
read the arrows that run; the circle check of `executors` and the rule that `integrations`
uses public names read them all, since a type-only arrow is still a back-reference. The scheme
table of the schedule stores (URL scheme -> module, class, imported by name when a URL asks)
is read as data: its string imports are the one registered arrow from the library up to
`integrations`, and no other string of the library names an `integrations` module. trio's
``_tests/test_exports.py`` and anyio's ``tests/test_all_attributes.py`` guard their layouts
the same way.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
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
# A string that is a dotted module name of `integrations` (a prose mention has spaces).
INTEGRATIONS_NAME = re.compile(r"^integrations(\.\w+)+$")


# The documented waiter protocol the bridge builds on (ARCHITECTURE, "Floors and arrows"): the
# private names of `executors` that `integrations` may import. The waiter module, and the
# record an aio channel parks per operation, which the bridge's select across shared and aio
# channels parks in an aio channel's line (the waiter module's docstring says so).
WAITER_PROTOCOL = ("executors.aio._waiters", "executors.aio.channels._Registration")

# Where the schedule stores' scheme table may live, in order: a module-level mapping, URL scheme
# -> (module, class, ...). Its string imports are the one registered arrow up to `integrations`.
BACKEND_TABLES = (("executors.stores", "BACKENDS"),)

@dataclasses.dataclass(frozen=True)
class Arrow:
    """One import statement: `source` imports `target` at `line` (`lazy`: inside a function;
    `typing`: under ``if TYPE_CHECKING:``, so it never runs)."""

    source: str
    target: str
    line: int
    lazy: bool
    typing: bool = False

    def __str__(self) -> str:
        where = " (inside a function)" if self.lazy else ""
        where += " (for the type checker)" if self.typing else ""
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


def _statements(tree: ast.AST, *, typing: bool = False
                ) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement of `tree`, whether it is inside a function, and whether it is
    under ``if TYPE_CHECKING:``; those bodies are skipped unless `typing` (their ``else:``
    branches do run)."""
    Found = Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]

    def walk(node: ast.AST, lazy: bool, typed: bool) -> Found:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, lazy, typed
            return
        inner = lazy or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body if typing else ():
                yield from walk(child, inner, True)
            for child in node.orelse:
                yield from walk(child, inner, typed)
            return
        for child in ast.iter_child_nodes(node):
            yield from walk(child, inner, typed)

    yield from walk(tree, False, False)


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
def _tree(module: str) -> ast.Module:
    path = _modules()[module]
    return ast.parse(path.read_text(), str(path))


@cache
def _every_arrow() -> tuple[Arrow, ...]:
    """Every import arrow of every module, ``if TYPE_CHECKING:`` ones included. A `from X import
    Y` whose `X.Y` is a module of ours is an arrow to `X.Y`; otherwise to `X`. Implicit imports
    of parent packages are not arrows (the importing module's own package is already being
    imported when it runs)."""
    modules = _modules()
    arrows = []
    for module in modules:
        for node, lazy, typed in _statements(_tree(module), typing=True):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(module, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            arrows += [Arrow(module, target, node.lineno, lazy, typed)
                       for target in dict.fromkeys(targets)]
    return tuple(arrows)


def _arrows() -> tuple[Arrow, ...]:
    """The arrows that run: every import but those under ``if TYPE_CHECKING:``."""
    return tuple(a for a in _every_arrow() if not a.typing)


def _internal(target: str) -> bool:
    return target.split(".")[0] in PACKAGES


def _graph(arrows: tuple[Arrow, ...] | None = None) -> dict[str, list[Arrow]]:
    graph: dict[str, list[Arrow]] = {module: [] for module in _modules()}
    for arrow in _arrows() if arrows is None else arrows:
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
    found = {(node.names[0].name, lazy) for node, lazy, _ in _statements(tree)
             if isinstance(node, ast.Import)}
    assert found == {("queue", False), ("threading", True)}
    every = {(node.names[0].name, lazy, typed) for node, lazy, typed
             in _statements(tree, typing=True) if isinstance(node, ast.Import)}
    assert every == {("asyncio", False, True), ("queue", False, False),
                     ("threading", True, False)}
    assert any(a.typing for a in _every_arrow()), "no TYPE_CHECKING import was found"


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
    """No module imports itself through others: the floors of the plan are a strict order.
    (The scheme table's string imports are left out: an arrow up to `integrations` closes a
    circle by nature, and the table is where the plan allows it, lazily.)"""
    cycle = _cycle(_graph())
    assert cycle is None, "import circle:\n    " + "\n    ".join(str(a) for a in cycle or [])


def _circled(graph: dict[str, list[Arrow]]) -> dict[str, list[Arrow]]:
    """Each module that is in a circle of `graph`, with one circle through it (its arrows)."""
    found: dict[str, list[Arrow]] = {}
    for module in graph:
        chains = _reach(module, graph)
        for reached, chain in chains.items():
            back = next((a for a in graph[reached] if a.target == module), None)
            if back is not None and module not in found:
                found[module] = [*chain, back]
    return found


def _executors_circles() -> dict[str, list[Arrow]]:
    """The modules of `executors` in an import circle of `executors`, counting the arrows that
    never run (``if TYPE_CHECKING:``) and those inside functions: each is a back-reference."""
    every = tuple(a for a in _every_arrow()
                  if a.source.startswith("executors") and a.target.startswith("executors"))
    return _circled(_graph(every))


def test_executors_has_no_circle_counting_type_only_and_lazy_imports() -> None:
    """No module of `executors` reaches itself, even through an import made for the type
    checker only or inside a function: a layer names nothing above it, not even in a type
    (`registry` names the executors it lists by its `LiveExecutor` protocol, not by class)."""
    new = _executors_circles()
    assert not new, "import circles in executors:\n    " + "\n  ".join(
        f"{module}:\n      " + "\n      ".join(str(a) for a in chain)
        for module, chain in sorted(new.items()))


def test_cycle_finder_reports_a_circle() -> None:
    """The circle search finds a planted three-module circle and reports its arrows in order;
    the per-module search names each module on it and no module off it."""
    graph: dict[str, list[Arrow]] = {"a": [Arrow("a", "b", 1, False)],
                                     "b": [Arrow("b", "c", 1, False)],
                                     "c": [Arrow("c", "a", 1, True, True)], "d": []}
    cycle = _cycle(graph)
    assert cycle is not None and [a.source for a in cycle] == ["a", "b", "c"]
    assert _cycle({"a": [Arrow("a", "b", 1, False)], "b": []}) is None
    circled = _circled(graph)
    assert set(circled) == {"a", "b", "c"}
    assert [a.source for a in circled["b"]] == ["b", "c", "a"]


# -- integrations use public names -----------------------------------------------------------------


def _private(dotted: str) -> bool:
    return any(part.startswith("_") for part in dotted.split("."))


def _private_imports() -> dict[str, list[str]]:
    """"source -> target" for each private `executors` name a module of `integrations` imports
    (a private module, ``executors._x`` or ``executors.x._y``, or a private name imported from
    a public module), with where; the documented waiter protocol excepted. Every statement
    counts, ``if TYPE_CHECKING:`` and function-level ones too."""
    found: dict[str, list[str]] = {}
    for module in _modules():
        if not module.startswith("integrations"):
            continue
        for node, _lazy, _typed in _statements(_tree(module), typing=True):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(module, node)
                targets = [base if _private(base) else f"{base}.{alias.name}"
                           for alias in node.names]
            for target in targets:
                if (target.split(".")[0] == "executors" and _private(target)
                        and not target.startswith(WAITER_PROTOCOL)):
                    where = f"{_path(module)}:{node.lineno}"
                    found.setdefault(f"{module} -> {target}", []).append(where)
    return found


def test_integrations_import_no_private_executors_name() -> None:
    """`integrations` builds on the public names of `executors` (and the documented waiter
    protocol in ``executors.aio._waiters``): no private module, no private name of a public
    module."""
    found = _private_imports()
    assert not found, "integrations imports private executors names:\n    " + "\n    ".join(
        f"{arrow} ({', '.join(where)})" for arrow, where in sorted(found.items()))


def test_private_name_rule_sees_every_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """The private-name search catches a private module (top level or in a subpackage), a
    private name from a public module, in a function and under ``if TYPE_CHECKING:``; it
    passes public names and the waiter protocol."""
    planted = "integrations.bridge._planted"
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "from executors import _validate, PeriodicExecutor\n"
                     "import executors._threads\n"
                     "from executors.aio.locks import _READY, Lock\n"
                     "from executors.aio._waiters import Waiter\n"
                     "if TYPE_CHECKING:\n    from executors._clock import Clock\n"
                     "def f():\n    from executors.stores._x import y\n")
    modules, trees = _modules(), _tree
    this = sys.modules[__name__]
    monkeypatch.setattr(this, "_modules", lambda: {**modules, planted: modules["integrations"]})
    monkeypatch.setattr(this, "_tree", lambda name: tree if name == planted else trees(name))
    found = {arrow.split(" -> ")[1] for arrow in _private_imports() if arrow.startswith(planted)}
    assert found == {"executors._validate", "executors._threads", "executors.aio.locks._READY",
                     "executors._clock", "executors.stores._x"}


# -- the scheme table: the one registered arrow up -------------------------------------------------


def _table() -> tuple[str, dict[str, tuple[str, str]]]:
    """The scheme table's module (where the mapping is written) and its entries, scheme ->
    (module, class), from the first place of `BACKEND_TABLES` that holds one."""
    for package, name in BACKEND_TABLES:
        if package not in _modules():
            continue
        table = getattr(importlib.import_module(package), name)
        written = [m for m in _modules() if (m == package or m.startswith(package + "."))
                   and any(isinstance(node, ast.Assign | ast.AnnAssign)
                           and name in {t.id for t in (node.targets if isinstance(node, ast.Assign)
                                                       else [node.target])
                                        if isinstance(t, ast.Name)}
                           for node in _tree(m).body)]
        assert len(written) == 1, f"{package}.{name} is written in {written}"
        return written[0], {scheme: (entry[0], entry[1]) for scheme, entry in table.items()}
    raise AssertionError(f"no scheme table at any of {BACKEND_TABLES}")


def _defines(module: str, name: str) -> bool:
    """`module` binds `name` at its top level (a class, an assignment or an import)."""
    for node in _tree(module).body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.ImportFrom | ast.Import) and any(
                (alias.asname or alias.name) == name for alias in node.names):
            return True
    return False


def test_scheme_table_is_the_one_registered_arrow_up() -> None:
    """The schedule stores' scheme table names modules that exist and classes they define;
    the ones in `integrations` are all in `integrations.schedule_stores`; and no other string
    of the library outside the command line names an `integrations` module (a string import
    is an arrow the statement walk cannot see: the table is its one registered place)."""
    source, entries = _table()
    assert {"sqlite", "mongodb", "postgresql"} <= set(entries), entries
    for scheme, (module, cls) in entries.items():
        assert module in _modules(), f"{scheme}: no module {module}"
        assert _defines(module, cls), f"{scheme}: {module} defines no {cls}"
        if module.split(".")[0] == "integrations":
            assert module.startswith("integrations.schedule_stores."), (scheme, module)
        else:
            assert module.split(".")[0] == "executors", (scheme, module)
    named = [f"{m}: {node.value!r}" for m in _modules()
             if m.startswith("executors") and m != source and not CLI.match(m)
             for node in ast.walk(_tree(m)) if isinstance(node, ast.Constant)
             and isinstance(node.value, str) and INTEGRATIONS_NAME.match(node.value)]
    assert not named, "string imports of integrations outside the scheme table:\n    " + \
        "\n    ".join(named)


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
