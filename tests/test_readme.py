"""The README and the docs pages as a newcomer reads them: code that fits the rendered column,
a Quick start that installs only what each command needs, signatures named as the code names
them."""

from __future__ import annotations

import importlib
import inspect
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "content").glob("*.md"))]

#: Characters of a code line that fit the rendered column (GitHub's README view and the docs
#: theme both clip wider lines behind a scroll bar, so a reader sees half a command).
CODE_WIDTH = 88

FENCE = re.compile(r"^\s*(```|~~~)")


def _code_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line inside a fenced code block (``` or ~~~, indented or
    not, as in lists and admonitions)."""
    found = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)
                continue
            if match.group(1) == fence:
                fence = None
                continue
        if fence is not None:
            found.append((number, line))
    return found


def test_code_line_finder_sees_fenced_blocks_only() -> None:
    """The width check reads every fenced block (also indented and ~~~ ones) and no prose."""
    text = "prose " * 30 + "\n```sh\nshort\n```\n  ~~~python\n  x = 1\n  ~~~\nmore prose\n"
    assert _code_lines(text) == [(3, "short"), (6, "  x = 1")]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_code_lines_fit_the_rendered_column(page: Path) -> None:
    """No code line of the README or a docs page is wider than the rendered column (88
    characters): wider ones are clipped, and a clipped command or example misleads."""
    wide = [f"{page.relative_to(ROOT)}:{number}: {len(line)} chars: {line.strip()[:60]}..."
            for number, line in _code_lines(page.read_text()) if len(line) > CODE_WIDTH]
    assert not wide, f"code lines wider than {CODE_WIDTH} characters:\n" + "\n".join(wide)


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start")
    block = text[text.index("```sh\n", start) + 6:]
    block = block[:block.index("```")]
    return [line for line in block.splitlines() if line.strip()]


def test_docs_home_page_shows_the_readme_quick_start() -> None:
    """The docs home page's Quick start opens with the README's two commands, verbatim and in
    order, in one code block (issue 24: it had a five-step sequence of its own); the page may
    explain each step below them."""
    text = (ROOT / "docs" / "content" / "index.md").read_text()
    start = text.index("## Quick start")
    section = text[start:text.index("\n## ", start + 1)]
    fence = re.search(r"```(\w*)\n(.*?)```", section, re.DOTALL)
    assert fence, "the docs Quick start has no code block"
    commands = [line.removeprefix("$ ") for line in fence.group(2).splitlines() if line.strip()]
    assert commands == _quick_start_commands(), commands


def _extras() -> dict[str, list[str]]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        extras: dict[str, list[str]] = tomllib.load(f)["project"]["optional-dependencies"]
    return extras


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def _expand(extra: str, extras: dict[str, list[str]]) -> set[str]:
    """The distributions an extra installs, following `executors[a,b]` self-references."""
    names: set[str] = set()
    for requirement in extras[extra]:
        own = re.fullmatch(r"executors\[([\w,\s]+)\]", requirement)
        if own:
            for part in own.group(1).split(","):
                names |= _expand(part.strip(), extras)
        else:
            names |= _names([requirement])
    return names


def test_quick_start_demo_command_installs_only_the_demo_extra() -> None:
    """The Quick start's first command installs the `demo` extra alone, and that extra is
    what the demo needs (pymongo and nx-27017), not the test, bench and docs tools (95
    packages, 520 MB before issue 17)."""
    demo_command = _quick_start_commands()[0]
    assert demo_command.endswith("executors demo")
    assert re.findall(r"'\.\[([^\]]*)\]'", demo_command) == ["demo"], demo_command
    assert _expand("demo", _extras()) == {"pymongo", "nx-27017"}


def test_quick_start_test_command_installs_what_the_suite_needs() -> None:
    """The second command (the one .ci/run runs) installs the test, bench and docs extras:
    the suite runs the benchmarks' quick mode and builds the docs."""
    test_command = _quick_start_commands()[1]
    assert test_command.endswith("-m pytest")
    extras = _extras()
    wanted = _expand("test", extras) | _expand("bench", extras) | _expand("docs", extras)
    installed: set[str] = set()
    for group in re.findall(r"'\.\[([^\]]*)\]'", test_command):
        for extra in group.split(","):
            installed |= _expand(extra.strip(), extras)
    assert wanted <= installed, f"missing: {sorted(wanted - installed)}"


def test_docs_extra_brings_a_signature_formatter() -> None:
    """The docs extra alone builds readable signatures: mkdocstrings formats a long signature
    over several lines only when Black or Ruff is installed, else prints it on one line cut
    off behind a scroll bar (issue 34: a docs-only build said "Formatting signatures requires
    either Black or Ruff to be installed", and schedule() and cron() were unreadable)."""
    assert _expand("docs", _extras()) & {"ruff", "black"}


# `Class.method(a, b, c)` in the README's prose: the names a reader will type as keywords.
MENTION = re.compile(r"`([A-Z]\w*)\.(\w+)\(([a-z_]\w*(?:, [a-z_]\w*)*)\)`")
MODULES = ("executors", "executors.aio", "integrations.bridge", "integrations.mongo")


def _resolve(name: str) -> object | None:
    for module in MODULES:
        found = getattr(importlib.import_module(module), name, None)
        if found is not None:
            return found
    return None


def test_readme_names_parameters_as_the_code_does() -> None:
    """Every `Class.method(a, b, ...)` the README shows names the method's parameters as its
    signature does, in order (the README once called `for_owner`'s `target` `method`)."""
    text = (ROOT / "README.md").read_text()
    mentions = MENTION.findall(text)
    assert any(method == "for_owner" for _, method, _ in mentions)
    wrong = []
    for cls_name, method, args in mentions:
        cls = _resolve(cls_name)
        if cls is None:
            continue
        parameters = [p for p in inspect.signature(getattr(cls, method)).parameters
                      if p not in ("self", "cls")]
        shown = args.split(", ")
        if parameters[:len(shown)] != shown:
            wrong.append(f"{cls_name}.{method}({args}): the code says {parameters}")
    assert not wrong, "\n".join(wrong)
