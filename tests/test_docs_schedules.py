"""The Schedules page: its APScheduler mapping cites real source, its DST section covers every case.

The page's Python examples run in tests/test_docs_examples.py (every ```python block of the docs
does); this module checks what prose cannot run: that each row of the "APScheduler 3 ->
executors" table names a file of the installed APScheduler and names defined in that file, and
that the DST section has its worked example per case.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "content" / "schedules.md"
# "apscheduler/triggers/cron/__init__.py: CronTrigger.from_crontab", several per cell; names
# after the first may drop the class ("BaseScheduler.pause_job`, `resume_job").
CITATION = re.compile(r"`(apscheduler/[\w/]+\.py): ([^`]+)`((?:, `[\w.]+`)*)")


def _section(heading: str) -> str:
    text = PAGE.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def _mapping_rows() -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in _section("## From APScheduler 3").splitlines()
            if line.startswith("| ") and not line.startswith("| APScheduler 3.11 |")]


def _defined(tree: ast.Module) -> set[str]:
    """Top-level names, and Class.method for the methods of top-level classes."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            names.update(f"{node.name}.{item.name}" for item in node.body
                         if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_every_mapping_row_cites_apscheduler_source_that_exists() -> None:
    """Each row of the mapping table cites at least one file of the installed APScheduler 3
    with a function, class or constant that file defines (methods as Class.method; a bare
    method name after the first reuses the first one's class)."""
    apscheduler = pytest.importorskip("apscheduler", reason="the bench extra brings APScheduler")
    assert apscheduler.__version__.startswith("3."), apscheduler.__version__
    package = Path(apscheduler.__file__).resolve().parent.parent
    rows = _mapping_rows()
    assert len(rows) >= 15, f"the mapping table has only {len(rows)} rows"
    for row in rows:
        assert len(row) == 3, f"a mapping row without three cells: {row}"
        cites = CITATION.findall(row[2])
        assert cites, f"no APScheduler source cited in the row {row[0]!r}"
        for path, first, more in cites:
            source = package / path
            assert source.is_file(), f"{path} is no file of APScheduler {apscheduler.__version__}"
            defined = _defined(ast.parse(source.read_text()))
            name = first.split(" (")[0].strip()
            assert name in defined, f"{path} defines no {name!r} (row {row[0]!r})"
            cls = name.rsplit(".", 1)[0] if "." in name else ""
            for extra in re.findall(r"`([\w.]+)`", more):
                full = extra if "." in extra or not cls else f"{cls}.{extra}"
                assert full in defined or extra in defined, (
                    f"{path} defines no {full!r} (row {row[0]!r})")


def test_the_bugs_cite_their_apscheduler_issues() -> None:
    """The mapping names the APScheduler issues of the research note for each bug it fixes:
    DST, silent misfires, suspend, weekday 0, max_instances, pickles."""
    section = _section("## From APScheduler 3")
    for issue in (14, 120, 146, 182, 286, 292, 296, 411, 423, 455, 474, 495, 606, 644, 794,
                  863, 980, 1021, 1102, 1103):
        assert f"#{issue}" in section, f"APScheduler #{issue} is not cited"


def test_the_dst_section_has_a_worked_example_per_case() -> None:
    """The rule is stated once, then a runnable example per case the issue names: New York's
    spring gap and fall fold, Berlin, Lord Howe's 30-minute change, Samoa's missing day."""
    section = _section("## Time that does not exist or happens twice")
    assert section.count("| L ... |") == 1, "the rule's table is not stated exactly once"
    for heading, zone in (("### New York, 2024-03-10", "America/New_York"),
                          ("### New York, 2024-11-03", "America/New_York"),
                          ("### Berlin, 2024", "Europe/Berlin"),
                          ("### Lord Howe", "Australia/Lord_Howe"),
                          ("### Samoa, 2011-12-30", "Pacific/Apia")):
        assert heading in section, f"no worked example under {heading!r}"
        case = section[section.index(heading):]
        block = case[case.index("```python\n"):]
        assert zone in block[:block.index("\n```\n")], f"{heading}: no example in {zone}"


def test_the_migration_shows_before_and_runs_after() -> None:
    """The migration shows the APScheduler program (not run) and the executors one as a
    ```python block, which tests/test_docs_examples.py runs."""
    section = _section("## From APScheduler 3")
    before = section.index("```py\n")
    after = section.index("```python\n", before)
    assert "BlockingScheduler" in section[before:after]
    assert "make_service" in section[after:] and "VirtualClock" in section[after:]
