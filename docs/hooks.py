"""MkDocs hooks: nav sections, API reference pages and measured figures that follow the tree.

Measured figures come from the benchmark results, never typed by hand
---------------------------------------------------------------------

Any figure about a measured result (a latency, a throughput, a CPU share, a ratio) is written in
a page as a marker that `on_page_markdown` replaces, at build time, by the value in
``benchmarks/results/<area>.json``::

    PyMongo's wake takes {{ bench("periodic", "wake() -> target", "pymongo 4.20.0") }} ms
    ours is {{ bench_ratio("locks", "uncontended acquire/release", "executors", "asyncio") }}x
    {{ bench_table("channels") }}

- ``bench(area, metric, contender[, fmt])``: the median of `contender` on `metric` (the metric's
  ``name`` and the contender's key in ``medians``, exactly as in the JSON file).
- ``bench_ratio(area, metric, a, b[, fmt])``: median of `a` divided by median of `b`.
- ``bench_table(area)``: a Markdown table of every metric of the area: the advantage of ours over
  the best peer (how many times better), then one column per contender.
- `fmt` is a format spec (``".1f"``, ``",.0f"``) or ``"k"`` (``356k``, ``4.44M``, ``0.539``:
  three significant digits; tables use it); the default
  gives two significant digits below 10, whole numbers above (``0.11``, ``5.5``, ``305``,
  ``1,234``).

An unknown area, metric or contender, or a malformed marker, fails the build and names the
page, the marker and what the file offers. The arguments are Python literals (read with
`ast.literal_eval`), so quotes inside names need escaping. README.md is rendered by GitHub, not by
MkDocs: there a figure is followed by the same call in an HTML comment,
``305 ms<!-- bench("periodic", "wake() -> target", "pymongo 4.20.0") -->``, and
tests/test_docs_site.py checks that every such figure equals what `bench` renders, and that no
figure with a unit in README's prose lacks its marker.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

__all__ = (
    "TOPIC_ORDER",
    "bench",
    "bench_ratio",
    "bench_table",
    "exported_names",
    "former_names",
    "on_config",
    "on_files",
    "on_page_markdown",
    "public_modules",
    "render_figures",
)

DOCS = Path(__file__).resolve().parent
CONTENT = DOCS / "content"
ROOT = DOCS.parent
RESULTS = ROOT / "benchmarks" / "results"
PACKAGES = ("executors", "integrations")

# Pages with a fixed place in mkdocs.yml's nav; every other top-level page is a topic.
FIXED = {"index.md", "tutorial.md", "design.md", "comparison.md", "changelog.md"}

# The reading order of the topic pages; a page not listed here goes after them, by name.
TOPIC_ORDER = (
    "periodic.md",
    "deferred.md",
    "service.md",
    "schedules.md",
    "semaphore.md",
    "channels.md",
    "structured-concurrency.md",
    "async-periodic.md",
    "threads-meet-asyncio.md",
    "supervise.md",
)


def public_modules() -> list[str]:
    """Dotted names of the public modules, in a stable order.

    A module is public when no part of its name starts with `_`. A package is referenced on its
    own page when it has no public submodule (``integrations.bridge``: its names live in private
    modules); a package with public submodules (``executors``, ``executors.aio``) only re-exports
    them, and their pages document the names.
    """
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
                if any(not p.name.startswith("_") for p in path.parent.glob("*.py")) or any(
                        (d / "__init__.py").is_file() and not d.name.startswith("_")
                        for d in path.parent.iterdir()):
                    continue
            if any(part.startswith("_") for part in parts):
                continue
            # A former name kept for a moved module (docstring "Deprecated: ...") re-exports
            # the new module, whose page documents the names.
            if (ast.get_docstring(ast.parse(path.read_text())) or "").startswith("Deprecated:"):
                continue
            names.append(".".join(parts))  # the command line is private (_cli): the tutorial
    return sorted(names)


def _topics() -> list[str]:
    present = {p.name for p in CONTENT.glob("*.md")} - FIXED
    ordered = [name for name in TOPIC_ORDER if name in present]
    return ordered + sorted(present - set(ordered))


def _benchmarks() -> list[str]:
    pages = sorted(p.name for p in (CONTENT / "benchmarks").glob("*.md"))
    if "index.md" in pages:
        pages.remove("index.md")
        pages.insert(0, "index.md")
    return [f"benchmarks/{name}" for name in pages]


def _reference_uri(module: str) -> str:
    return f"reference/{module}.md"


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Fill the nav sections left empty in mkdocs.yml from the pages that exist."""
    fill: dict[str, list[Any]] = {
        "Topics": _topics(),
        "Benchmarks": _benchmarks(),
        "API reference": [{module: _reference_uri(module)} for module in public_modules()],
    }
    nav = []
    for entry in config.nav or []:
        if isinstance(entry, dict) and len(entry) == 1:
            (title, value), = entry.items()
            if title in fill and value == []:
                if fill[title]:
                    nav.append({title: fill[title]})
                continue  # an empty section is dropped, never shown empty
        nav.append(entry)
    config.nav = nav
    return config


def _module_sources(module: str) -> list[Path]:
    path = ROOT.joinpath(*module.split("."))
    if path.is_dir():  # a package documents names its private modules define
        return sorted(path.glob("*.py"))
    return [path.with_suffix(".py")]


def exported_names(module: str) -> set[str]:
    """The names in *module*'s ``__all__``, read from its source (nothing is imported)."""
    return set(all_in_order(module))


def _members(module: str) -> str:
    """*module*'s ``__all__`` as a JSON list, in its order (the page's order), or ``true`` (all
    public members) for a module without one."""
    names = all_in_order(module)
    return json.dumps(names) if names else "true"


def all_in_order(module: str) -> list[str]:
    """*module*'s ``__all__`` in its order, read from its source (empty if it has none)."""
    for source in _module_sources(module):
        if source.name in ("__init__.py", f"{module.rpartition('.')[2]}.py"):
            for node in ast.parse(source.read_text()).body:
                if isinstance(node, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                    return list(ast.literal_eval(node.value))
    return []


def former_names(module: str) -> dict[str, str]:
    """The former names *module* still exports, each with the name that replaced it.

    A former name is a module-level ``old = new`` (or ``old: T = new``) where both names are in
    the module's ``__all__``: the same object under its old name, kept so old code runs. The
    reference page lists them last, under "Former names", instead of among the current names.
    """
    exported = exported_names(module)
    found: dict[str, str] = {}
    for source in _module_sources(module):
        for node in ast.parse(source.read_text()).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if (isinstance(target, ast.Name) and isinstance(value, ast.Name)
                    and {target.id, value.id} <= exported):
                found[target.id] = value.id
    return found


# The reference page of a module with former names: its current names as usual (mkdocstrings'
# filters are regular expressions on member names), then the former ones under their heading.
_FORMER_PAGE = """::: {module}
    options:
      filters: {filters}

## Former names

Names from earlier versions, kept so that code written with them still runs. Each is another
name for the object after its `=`; new code uses that name.

"""


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add one generated API reference page per public module (mkdocstrings renders it)."""
    for module in public_modules():
        former = former_names(module)
        if former:
            filters = json.dumps(["!^_", *(f"!^{name}$" for name in sorted(former))])
            content = _FORMER_PAGE.format(module=module, filters=filters) + "".join(
                f"::: {module}.{name}\n    options:\n      heading_level: 3\n\n"
                for name in sorted(former))
        else:
            # Only the names of __all__: module-level helpers (a logger, type variables) are
            # not the module's contract and would push its main class down the page.
            content = f"::: {module}\n    options:\n      members: {_members(module)}\n"
        files.append(File.generated(config, _reference_uri(module), content=content))
    return files


# -- measured figures ------------------------------------------------------------------------------

# `{{ bench(...) }}`, `{{ bench_ratio(...) }}`, `{{ bench_table(...) }}` in a page.
MARKER = re.compile(r"\{\{\s*(bench|bench_ratio|bench_table)\((.*?)\)\s*\}\}", re.DOTALL)


def _results(area: str) -> dict[str, Any]:
    path = RESULTS / f"{area}.json"
    if not path.is_file():
        known = sorted(p.stem for p in RESULTS.glob("*.json"))
        raise KeyError(f"no results file for area {area!r} (known: {known})")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _metric(area: str, metric: str) -> dict[str, Any]:
    metrics: list[dict[str, Any]] = _results(area)["metrics"]
    for entry in metrics:
        if entry["name"] == metric:
            return entry
    raise KeyError(f"{area}.json has no metric {metric!r} (known: {[m['name'] for m in metrics]})")


def _median(area: str, metric: str, contender: str) -> float:
    medians: dict[str, float] = _metric(area, metric)["medians"]
    if contender not in medians:
        raise KeyError(f"{area}.json's {metric!r} has no contender {contender!r} "
                       f"(known: {sorted(medians)})")
    return float(medians[contender])


def _format(value: float, fmt: str | None) -> str:
    if math.isinf(value):
        return "∞"
    if fmt == "k":
        for scale, suffix in ((1e6, "M"), (1e3, "k")):
            if abs(value) >= scale:
                scaled = value / scale
                return f"{scaled:.3g}{suffix}" if scaled < 100 else f"{scaled:.0f}{suffix}"
        fmt = ".3g"
    if fmt is not None:
        return format(value, fmt)
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.0f}"
    return f"{value:#.2g}"


def bench(area: str, metric: str, contender: str, fmt: str | None = None) -> str:
    """The median of `contender` on `metric` in ``benchmarks/results/<area>.json``, formatted."""
    return _format(_median(area, metric, contender), fmt)


def bench_ratio(area: str, metric: str, a: str, b: str, fmt: str | None = None) -> str:
    """The median of `a` divided by the median of `b` on `metric`, formatted."""
    return _format(_median(area, metric, a) / _median(area, metric, b), fmt)


def bench_table(area: str) -> str:
    """Every metric of `area` as a Markdown table: one row per metric, one column per contender,
    the units and the direction ("higher is better") in the metric's cell."""
    data = _results(area)
    contenders: list[str] = []
    for entry in data["metrics"]:
        contenders += [name for name in entry["medians"] if name not in contenders]
    # "of floor": how many times the floor's cost ours pays, where the results file has it.
    floors = any(entry.get("floor_multiple") is not None for entry in data["metrics"])
    lines = ["| metric | advantage | " + ("of floor | " if floors else "")
             + " | ".join(contenders) + " |",
             "|---|---|" + ("---|" if floors else "") + "---|" * len(contenders)]
    for entry in data["metrics"]:
        cells = [_format(entry["medians"][c], "k") if c in entry["medians"] else "—"
                 for c in contenders]
        label = f"{entry['name']} ({entry['unit']}, {entry['better']} is better)"
        advantage = entry.get("advantage_over_best_peer")
        edge = (f"{_format(advantage, '.1f')}x vs {entry['best_peer']}"
                f"{_rounds(entry.get('advantage_spread'))}"
                if advantage is not None and entry.get("best_peer") else "n/a")
        multiple = entry.get("floor_multiple")
        of_floor = (f"{_format(multiple, '.2f')}x{_rounds(entry.get('floor_multiple_spread'))}"
                    if multiple is not None else "—")
        lines.append(f"| {label} | {edge} | " + (f"{of_floor} | " if floors else "")
                     + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Python {data['python']}, {data['rounds']} interleaved rounds, medians; the "
                 "ratios are the medians of the round-by-round ratios, with their range "
                 f"(`benchmarks/results/{area}.json`).")
    return "\n".join(lines)


def _rounds(spread: dict[str, float] | None) -> str:
    """" (min to max)" of a ratio over the rounds of the run, when the file records it."""
    if not spread or spread["min"] == spread["max"]:
        return ""
    return f" ({_format(spread['min'], '.2f')} to {_format(spread['max'], '.2f')})"


_CALLS: dict[str, Callable[..., str]] = {
    "bench": bench, "bench_ratio": bench_ratio, "bench_table": bench_table,
}


def render_figures(text: str, where: str = "<text>") -> str:
    """`text` with every measured-figure marker replaced by its value.

    Raises:
        ValueError: a marker names an unknown area, metric or contender, or is malformed.
    """

    def replace(match: re.Match[str]) -> str:
        try:
            args = ast.literal_eval(f"({match.group(2)},)")
            return _CALLS[match.group(1)](*args)
        except (KeyError, TypeError, ValueError, SyntaxError) as exc:
            raise ValueError(f"{where}: {match.group(0)!r}: {exc}") from exc

    return MARKER.sub(replace, text)


def on_page_markdown(markdown: str, page: Page, **kwargs: Any) -> str:
    """Replace the measured-figure markers of a page by the values in the results files."""
    try:
        return render_figures(markdown, page.file.src_uri)
    except ValueError as exc:
        raise PluginError(str(exc)) from exc
