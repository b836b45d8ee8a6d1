"""Every benchmark script runs end to end in quick mode (a smoke check, never a speed assertion)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
AREAS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_"))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("area", AREAS)
def test_benchmark_runs_in_quick_mode(area: str) -> None:
    """`python -m benchmarks.<area> --quick` completes and prints its table with our column."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{area}", "--quick", "--no-write"],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| metric |" in proc.stdout
    assert "executors" in proc.stdout
