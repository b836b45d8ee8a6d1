"""No module of the library outgrows one reading unless its logic is one piece, and says why.

ARCHITECTURE.md: "A module may grow past ~600 lines only where its logic is one piece; split by
concept, not by size." This test keeps that rule: a module of `executors` or `integrations` longer
than `LIMIT` lines fails unless it is in `EXCEPTIONS`, with the reason it stays whole beside its
name, and every exception is also named in the "Module size" section of the design page
(docs/content/design.md), so the list in the documentation and the one enforced here are the same.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("executors", "integrations")
DESIGN = ROOT / "docs" / "content" / "design.md"

#: "~600 lines", with room for a docstring or a fix: past this a module must split or be listed.
LIMIT = 650
#: Even one piece must stay readable: an exception past this is a module to rethink.
EXCEPTION_CEILING = 1_200

#: Modules allowed past `LIMIT` (paths from the repository root), each with why it is one piece.
EXCEPTIONS: dict[str, str] = {
    "executors/aio/channels.py": (
        "Channel and select share one atomic protocol (registrations, the select's claim that "
        "removes its other registrations in the same step): split, each half would reach into "
        "the other's state"),
    "executors/coordinator/_engine.py": (
        "one state machine: the coordinator's event loop and its ordered stop act on the same "
        "children, signals and deadlines; its pieces that stand alone (_child, _orphans, the "
        "specs and results) are already modules of their own"),
    "integrations/bridge/_shared_channel.py": (
        "the channel shared by threads and tasks: its select holds every channel's mutex while "
        "it polls and parks, so the channel, its select and the after-fork reset are one "
        "mutex protocol"),
    "executors/service.py": (
        "the BackgroundService face: one class whose methods are the service's API, each with "
        "its contract; the machinery behind them is already split into _service's modules"),
    "integrations/bridge/_shared_locks.py": (
        "SharedSemaphore, SharedBoundedSemaphore and SharedLock are one permit protocol "
        "(_SharedPermits) behind one mutex, with its re-entry and fork handling; the blocking "
        "views are thin faces of it"),
}


def _modules() -> dict[str, int]:
    """Every module of the two packages (path from the root) and its number of lines."""
    sizes = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            with path.open(encoding="utf-8") as f:
                sizes[path.relative_to(ROOT).as_posix()] = sum(1 for _ in f)
    return sizes


def test_no_module_passes_the_limit_unless_it_is_a_documented_exception() -> None:
    """Every module of `executors` and `integrations` has at most `LIMIT` lines, except the
    listed exceptions, which stay under `EXCEPTION_CEILING`."""
    sizes = _modules()
    assert len(sizes) > 20, f"found only {len(sizes)} modules: is ROOT right?"
    too_long = {path: n for path, n in sizes.items() if n > LIMIT and path not in EXCEPTIONS}
    assert not too_long, (
        f"modules past {LIMIT} lines (split them by concept, or, if one is truly one piece, "
        f"add it with its reason to EXCEPTIONS here and to design.md's 'Module size'): "
        + ", ".join(f"{path} ({n})" for path, n in sorted(too_long.items())))
    past_ceiling = {path: n for path, n in sizes.items()
                    if path in EXCEPTIONS and n > EXCEPTION_CEILING}
    assert not past_ceiling, f"exceptions past {EXCEPTION_CEILING} lines: {past_ceiling}"


def test_every_exception_exists_and_gives_a_reason() -> None:
    """A listed exception is a module that exists (a renamed or split module leaves the list)
    and carries a reason in words."""
    sizes = _modules()
    for path, reason in EXCEPTIONS.items():
        assert path in sizes, f"{path} is listed as an exception but is no module any more"
        assert len(reason.split()) >= 8, f"{path}: say why it is one piece"


def test_every_exception_is_named_in_the_design_page() -> None:
    """The exceptions enforced here are the ones the design page documents, and no other."""
    text = DESIGN.read_text(encoding="utf-8")
    match = re.search(r"^## Module size\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/content/design.md has no '## Module size' section"
    section = match.group(1)
    missing = [path for path in EXCEPTIONS if f"`{path}`" not in section]
    assert not missing, f"exceptions not named in design.md's 'Module size': {missing}"
    named = set(re.findall(r"`((?:executors|integrations)/[\w/]+\.py)`", section))
    sizes = _modules()
    unlisted = sorted(p for p in named - set(EXCEPTIONS) if sizes.get(p, 0) > LIMIT)
    assert not unlisted, f"design.md names modules past {LIMIT} lines not in EXCEPTIONS: {unlisted}"


@pytest.mark.parametrize("lines, listed, fails", [(LIMIT, False, False), (LIMIT + 1, False, True),
                                                   (LIMIT + 1, True, False)])
def test_the_rule_fails_a_long_module_that_is_not_listed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: int, listed: bool,
        fails: bool) -> None:
    """The check itself can fail: a package holding a module one line past `LIMIT` fails it
    unless the module is listed; one at `LIMIT` passes."""
    package = tmp_path / "executors"
    package.mkdir()
    for i in range(21):
        (package / f"m{i}.py").write_text("x = 1\n")
    (package / "long.py").write_text("x = 1\n" * lines)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)  # the check reads ROOT when it runs
    if listed:
        monkeypatch.setitem(EXCEPTIONS, "executors/long.py", "one piece, for the sake of this test")
    if fails:
        with pytest.raises(AssertionError, match=re.escape("executors/long.py")):
            test_no_module_passes_the_limit_unless_it_is_a_documented_exception()
    else:
        test_no_module_passes_the_limit_unless_it_is_a_documented_exception()
