"""Every ```python block in README.md and docs/ is a complete script that runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for i, match in enumerate(FENCE.finditer(page.read_text())):
            found.append((f"{page.relative_to(ROOT)}#{i + 1}", match.group(1)))
    return found


EXAMPLES = _examples()


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_example_runs(where: str, code: str, tmp_path: Path) -> None:
    """The example exits 0 with nothing on stderr, in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-X", "dev", "-c", code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, f"{where} failed:\n{proc.stderr[-3000:]}"
    assert proc.stderr == "", f"{where} wrote to stderr:\n{proc.stderr[-3000:]}"
