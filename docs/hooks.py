"""MkDocs hooks: nav sections and API reference pages that follow the files in the tree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

__all__ = ("TOPIC_ORDER", "on_config", "on_files", "public_modules")

DOCS = Path(__file__).resolve().parent
CONTENT = DOCS / "content"
ROOT = DOCS.parent
PACKAGES = ("executors", "integrations")

# Pages with a fixed place in mkdocs.yml's nav; every other top-level page is a topic.
FIXED = {"index.md", "tutorial.md", "design.md", "comparison.md", "changelog.md"}

# The reading order of the topic pages; a page not listed here goes after them, by name.
TOPIC_ORDER = (
    "periodic.md",
    "deferred.md",
    "service.md",
    "semaphore.md",
    "channels.md",
    "structured-concurrency.md",
    "async-periodic.md",
    "threads-meet-asyncio.md",
    "supervise.md",
)

# Modules with nothing to document for users: the command line is documented in the tutorial.
NOT_REFERENCED = {"executors.cli"}


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
            name = ".".join(parts)
            if name not in NOT_REFERENCED:
                names.append(name)
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


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add one generated API reference page per public module (mkdocstrings renders it)."""
    for module in public_modules():
        content = f"::: {module}\n"
        files.append(File.generated(config, _reference_uri(module), content=content))
    return files
