"""The ``executors bench`` command: run the benchmark areas with progress, then their reports.

Each area is a script in a source checkout's ``benchmarks/`` folder that measures ours and the
peers in one process, interleaved, and writes a results file (JSON). This module runs them (one
subprocess per area, progress on stderr, tables on stdout); `_bench_report` renders the results
into pages and charts.

Where things go: a user's run writes its results and reports into a directory of their choosing
(``--output``, default ``./bench-results``) and never touches the repository's tracked files.
Only ``--update-repo``, a maintainer's option, writes ``benchmarks/results/*.json`` and
re-renders ``docs/content/benchmarks/``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, cast

from ._bench_report import AreaResult, render_all

__all__ = (
    "DESCRIPTION",
    "EPILOG",
    "HELP",
    "NAME",
    "AreaRun",
    "add_arguments",
    "areas",
    "run",
    "run_areas",
)

NAME = "bench"
HELP = "run benchmarks: ours beside the peers, same run; reports into a directory"
DESCRIPTION = (
    "Run benchmark areas: ours beside every peer, measured interleaved in one process run. "
    "The results (JSON), a report page per area and charts go to --output (default "
    "./bench-results, in the current directory); the repository's own files are never "
    "rewritten unless --update-repo is given. Needs a source checkout (the benchmarks and "
    "their peers are not installed with the package) and the bench extra."
)
# The epilog lists the areas found in the checkout with their durations: add_arguments builds it.
EPILOG = None

ROOT = Path(__file__).resolve().parents[2]
# The benchmarks live beside the package in a source checkout (they import the peers, which are
# not runtime dependencies); the command runs them from there.
BENCHMARKS_DIR = ROOT / "benchmarks"
# The repository's tracked results and docs pages: written by --update-repo only.
REPO_RESULTS_DIR = BENCHMARKS_DIR / "results"
REPO_DOCS_DIR = ROOT / "docs" / "content" / "benchmarks"
DEFAULT_OUTPUT = Path("bench-results")

# Rough duration of a quick run per area (one round each), measured on a loaded 2-core machine;
# only the --help text uses it. A full run's duration comes from the area's last results file.
_QUICK_SECONDS = {"bridge": 1, "channels": 1, "deferred": 7, "locks": 1, "periodic": 11,
                  "scheduler": 10, "service": 11, "taskgroups": 1, "traversal": 2}

_PROGRESS = re.compile(r"^\[(?P<area>[\w-]+)\] (?P<metric>.+) \.\.\.$")


def areas(benchmarks_dir: Path = BENCHMARKS_DIR) -> list[str]:
    """The benchmark areas of the checkout (``benchmarks/<area>.py``), sorted."""
    if not benchmarks_dir.is_dir():
        return []
    return sorted(p.stem for p in benchmarks_dir.glob("*.py") if not p.stem.startswith("_"))


# -- running ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AreaRun:
    """How one area's run went."""

    area: str
    returncode: int
    seconds: float
    metrics_done: int


class _Progress:
    """A one-line progress bar on a terminal; plain lines otherwise (CI logs, pipes)."""

    def __init__(self, stream: IO[str], total_areas: int) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._total_areas = total_areas
        self._started = time.monotonic()

    def update(self, index: int, area: str, done: int, expected: int | None, label: str) -> None:
        elapsed = time.monotonic() - self._started
        head = f"[{index}/{self._total_areas}] {area}"
        if not self._tty:
            print(f"{head}: {label} ({elapsed:.0f} s)", file=self._stream, flush=True)
            return
        width = 24
        if expected:
            filled = min(width, round(width * done / expected))
            bar = "#" * filled + "-" * (width - filled)
            count = f"{done}/{expected}"
        else:
            bar = "." * (done % (width + 1))
            count = f"{done}"
        line = f"{head} [{bar:<{width}}] {count} {elapsed:5.0f}s  {label}"
        columns = 100
        try:
            # A terminal that reports no size (0 columns: a fresh pty, some CI runners) keeps
            # the default rather than cutting the line down to nothing.
            columns = os.get_terminal_size(self._stream.fileno()).columns or columns
        except (OSError, ValueError):
            pass
        print("\r\x1b[K" + line[: max(20, columns - 1)], end="", file=self._stream, flush=True)

    def clear(self) -> None:
        if self._tty:
            print("\r\x1b[K", end="", file=self._stream, flush=True)

    def finish_area(self, index: int, area: str, run: AreaRun) -> None:
        status = "ok" if run.returncode == 0 else f"FAILED (exit {run.returncode})"
        if self._tty:
            print("\r\x1b[K", end="", file=self._stream)
        print(f"[{index}/{self._total_areas}] {area}: {status}, {run.metrics_done} metrics "
              f"in {run.seconds:.0f} s", file=self._stream, flush=True)


def _previous(area: str, results_dir: Path) -> AreaResult | None:
    # The area's last results file: in results_dir, else the checkout's (read, never written).
    for folder in (results_dir, REPO_RESULTS_DIR):
        try:
            data = json.loads((folder / f"{area}.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("metrics"), list):
            return cast(AreaResult, data)
    return None


def _expected_metrics(area: str, results_dir: Path) -> int | None:
    # The previous results file says how many metrics the area measures: enough for a bar.
    previous = _previous(area, results_dir)
    return None if previous is None else len(previous["metrics"])


def _drain(stream: IO[str], into: list[str]) -> None:
    # Ctrl-C may close the pipe under this thread (the interrupted start() never saw it run).
    with contextlib.suppress(ValueError, OSError):
        into.extend(stream)


def run_areas(selected: Sequence[str], *, quick: bool, write: bool, results_dir: Path,
              root: Path = ROOT, stdout: IO[str] | None = None,
              stderr: IO[str] | None = None) -> list[AreaRun]:
    """Run each area (``python -m benchmarks.<area>`` in *root*) in its own interpreter, in turn.

    The area's tables go to *stdout*; its progress lines are turned into a progress bar (or
    plain lines) on *stderr*. With *write*, each area writes ``<results_dir>/<area>.json``.
    An exception here (Ctrl-C) kills the running area before it propagates.
    """
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    progress = _Progress(err, len(selected))
    runs = []
    for index, area in enumerate(selected, 1):
        cmd = [sys.executable, "-m", f"benchmarks.{area}"]
        if quick:
            cmd.append("--quick")
        if write:
            cmd += ["--json", str(results_dir / f"{area}.json")]
        else:
            cmd.append("--no-write")
        expected = _expected_metrics(area, results_dir)
        started = time.monotonic()
        done = 0
        progress.update(index, area, done, expected, "starting")
        captured_out: list[str] = []
        with subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, bufsize=1) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            # stdout (the table) is small and printed at the end; drain it on a helper so
            # neither pipe can fill up while we read the other.
            reader = threading.Thread(target=_drain, args=(proc.stdout, captured_out),
                                      daemon=True)
            try:
                reader.start()
                for line in proc.stderr:
                    match = _PROGRESS.match(line.rstrip("\n"))
                    if match:
                        progress.update(index, area, done, expected, match["metric"])
                        done += 1
                    else:
                        # Anything else an area says on stderr (a warning, a traceback) is shown.
                        progress.clear()
                        print(line, end="", file=err, flush=True)
            except BaseException:
                # Ctrl-C reaches the area too when it comes from a terminal, but not when only
                # this process is signalled: never leave a measuring child behind.
                progress.clear()
                proc.kill()
                proc.wait()
                if reader.is_alive():
                    reader.join(5)  # at EOF now that the area is gone
                raise
            reader.join()
            returncode = proc.wait()
        run = AreaRun(area, returncode, time.monotonic() - started, done)
        progress.finish_area(index, area, run)
        out.write("".join(captured_out))
        out.flush()
        runs.append(run)
    return runs


# -- the command -----------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    return f"~{seconds:.0f} s" if seconds < 90 else f"~{seconds / 60:.0f} min"


def _full_seconds(area: str) -> float | None:
    """How long the area's last full run took, from the repository's results file."""
    previous = _previous(area, REPO_RESULTS_DIR)
    return previous["seconds"] if previous is not None and not previous["quick"] else None


def _areas_epilog(available: Sequence[str]) -> str:
    """The areas with their approximate durations, quick and full, for --help."""
    if not available:
        return ("areas: none here. The benchmarks live in a source checkout "
                "(git clone, then pip install -e '.[bench]').")
    rows = []
    total_quick = total_full = 0.0
    for area in available:
        full = _full_seconds(area)
        quick = _QUICK_SECONDS.get(area)
        total_quick += quick or 0
        total_full += full or 0
        rows.append(f"  {area:<12} {_duration(quick) if quick else '?':>8}   "
                    f"{_duration(full) if full else '?':>8}")
    rows.append(f"  {'all':<12} {_duration(total_quick):>8}   {_duration(total_full):>8}")
    return "\n".join([
        "areas (approximate duration with --quick, then of a full run; the full figure is the",
        "last full run's, from benchmarks/results/AREA.json):",
        *rows,
        "",
        "examples:",
        "  executors bench periodic               # one area, into ./bench-results",
        "  executors bench all --quick            # every area, one round each: do they work?",
        "  executors bench locks --output bench-out  # results and report pages in ./bench-out",
        "  executors bench all --update-repo      # maintainers: refresh the repository's",
        "                                         # results, docs pages and charts",
    ])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of `executors bench` on *parser* (its epilog lists the areas)."""
    available = areas()
    parser.epilog = _areas_epilog(available)
    parser.add_argument("areas", nargs="*", metavar="AREA",
                        help="areas to run (listed below), or 'all'; required")
    parser.add_argument("--quick", action="store_true",
                        help="one round each, to check that they work; its figures are marked "
                        "quick and are no measurement")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, metavar="DIR",
                        help="where the results (AREA.json), report pages (AREA.md, index.md) "
                        "and charts (AREA.png) go (default: ./bench-results)")
    parser.add_argument("--update-repo", action="store_true",
                        help="maintainers: write the repository's benchmarks/results/AREA.json "
                        "and re-render docs/content/benchmarks/ instead (source checkout only; "
                        "never with --quick)")
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: re-render the report pages and charts from the "
                        "results already there (--output's, or with --update-repo the "
                        "repository's)")


def _checkout_problem() -> str | None:
    """Why --update-repo cannot run here, or None in a source checkout."""
    needed = [ROOT / "pyproject.toml", REPO_RESULTS_DIR, REPO_DOCS_DIR]
    missing = [str(p) for p in needed if not p.exists()]
    if not missing:
        return None
    return (f"--update-repo rewrites a source checkout's results and docs, and this is not one "
            f"(missing: {', '.join(missing)}); use --output DIR for your own results")


def _render(results_dir: Path, out_dir: Path, *, prune: bool) -> list[Path]:
    try:
        return render_all(results_dir, out_dir, prune=prune)
    except RuntimeError as exc:  # no matplotlib: the pages are still worth having
        print(f"executors bench: no charts ({exc})", file=sys.stderr)
        return render_all(results_dir, out_dir, charts=False, prune=prune)


def _usage(message: str) -> int:
    print(f"executors bench: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run `executors bench` for parsed *args*; return the exit status.

    0 when every area ran, 1 when one failed, 2 for a usage error, 130 after Ctrl-C.
    """
    if args.update_repo:
        problem = _checkout_problem()
        if problem is not None:
            return _usage(problem)
        if args.quick:
            return _usage("--update-repo takes no --quick: a quick run's figures must never "
                          "replace a full run's")
        results_dir, pages_dir = REPO_RESULTS_DIR, REPO_DOCS_DIR
    else:
        # Absolute: the areas run in the checkout, not in the user's working directory.
        results_dir = pages_dir = args.output.resolve()
    if args.render:
        if args.areas or args.quick:
            return _usage("--render takes no areas and no --quick; it re-renders every "
                          "results file")
        written = _render(results_dir, pages_dir, prune=args.update_repo)
        print(f"executors bench: rendered {len(written)} file(s) into {pages_dir}",
              file=sys.stderr)
        return 0
    available = areas()
    if not available:
        return _usage("no benchmarks/ folder beside the package: the benchmarks run from a "
                      "source checkout (git clone, then pip install -e '.[bench]')")
    if not args.areas:
        total = sum(_full_seconds(area) or 0.0 for area in available)
        return _usage(f"name the areas to run, or 'all' (a full run of all takes "
                      f"{_duration(total)}): {', '.join(available)}; --help gives each one's "
                      "duration")
    selected = available if "all" in args.areas else list(dict.fromkeys(args.areas))
    unknown = [a for a in selected if a not in available]
    if unknown:
        return _usage(f"unknown area(s) {', '.join(unknown)}; choose from "
                      f"{', '.join(available)}, or all")
    try:
        runs = run_areas(selected, quick=args.quick, write=True, results_dir=results_dir)
    except KeyboardInterrupt:
        print(f"\nexecutors bench: interrupted; the areas that finished are in {results_dir}",
              file=sys.stderr, flush=True)
        return 130
    written = _render(results_dir, pages_dir, prune=args.update_repo)
    print(f"executors bench: results in {results_dir}; {len(written)} report file(s) in "
          f"{pages_dir}", file=sys.stderr)
    failed = [r.area for r in runs if r.returncode != 0]
    if failed:
        print(f"executors bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0

