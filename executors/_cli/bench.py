"""The engine of ``executors bench``: run the benchmark areas with progress, render the reports.

Each area is a script in the checkout's ``benchmarks/`` folder that measures ours and the peers
in one process, interleaved, and writes ``benchmarks/results/<area>.json``. This module runs them
(one subprocess per area, progress on stderr, tables on stdout) and renders every results file
into the docs' benchmark pages: a markdown table per area, ratios first, and a PNG chart
(matplotlib, from the ``bench`` extra). Only the command line imports it.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TypedDict, cast

__all__ = (
    "DESCRIPTION",
    "EPILOG",
    "HELP",
    "NAME",
    "AreaRun",
    "BENCHMARKS_DIR",
    "DOCS_BENCH_DIR",
    "OURS",
    "RESULTS_DIR",
    "add_arguments",
    "areas",
    "render_all",
    "run",
    "run_areas",
)

NAME = "bench"
HELP = "run benchmarks: ours beside the peers, same run"
DESCRIPTION = HELP
EPILOG = None

ROOT = Path(__file__).resolve().parents[2]
# The benchmarks live beside the package in a source checkout (they import the peers, which are
# not runtime dependencies); the command runs them from there.
BENCHMARKS_DIR = ROOT / "benchmarks"
RESULTS_DIR = BENCHMARKS_DIR / "results"
DOCS_BENCH_DIR = ROOT / "docs" / "content" / "benchmarks"
OURS = "executors"

_PROGRESS = re.compile(r"^\[(?P<area>[\w-]+)\] (?P<metric>.+) \.\.\.$")


class MetricResult(TypedDict):
    """One metric of a results file, as benchmarks/_harness.py writes it."""

    name: str
    unit: str
    better: str
    note: str
    floor: str | None
    medians: dict[str, float]
    samples: dict[str, list[float]]
    unavailable: list[str]
    best_peer: str | None
    advantage_over_best_peer: float | None


class AreaResult(TypedDict):
    """A results file: benchmarks/results/<area>.json."""

    area: str
    quick: bool
    rounds: int
    python: str
    machine: str
    started: float
    seconds: float
    metrics: list[MetricResult]


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


def _expected_metrics(area: str, results_dir: Path) -> int | None:
    # The previous results file says how many metrics the area measures: enough for a bar.
    try:
        data = json.loads((results_dir / f"{area}.json").read_text())
        return len(data["metrics"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def run_areas(selected: Sequence[str], *, quick: bool, write: bool,
              results_dir: Path = RESULTS_DIR, root: Path = ROOT, stdout: IO[str] | None = None,
              stderr: IO[str] | None = None) -> list[AreaRun]:
    """Run each area (``python -m benchmarks.<area>`` in *root*) in its own interpreter, in turn.

    The area's tables go to *stdout*; its progress lines are turned into a progress bar (or
    plain lines) on *stderr*. With *write*, each area writes ``<results_dir>/<area>.json``.
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
            reader = threading.Thread(target=captured_out.extend, args=(proc.stdout,),
                                      daemon=True)
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
            reader.join()
            returncode = proc.wait()
        run = AreaRun(area, returncode, time.monotonic() - started, done)
        progress.finish_area(index, area, run)
        out.write("".join(captured_out))
        out.flush()
        runs.append(run)
    return runs


# -- rendering -------------------------------------------------------------------------------


def _md(text: str) -> str:
    """Text as literal Markdown: ``__del__`` must not turn bold, nor a ``|`` split a cell."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside backticks only
        parts[i] = re.sub(r"([\\_*|\[\]])", r"\\\1", parts[i])
    return "`".join(parts)


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if math.isinf(value):
        return "∞"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 0.1:
        return f"{value:.3f}"
    return f"{value:.3g}"


def _advantage(metric: MetricResult) -> str:
    adv = metric["advantage_over_best_peer"]
    if adv is None or metric["best_peer"] is None:
        return "n/a"
    factor = "∞" if math.isinf(adv) else f"{adv:.1f}"
    return f"**{factor}x** vs {_md(metric['best_peer'])}"


def _contenders(metrics: Sequence[MetricResult]) -> list[str]:
    names: list[str] = []
    for metric in metrics:
        for name in [*metric["medians"], *metric["unavailable"]]:
            if name not in names:
                names.append(name)
    floors = {m["floor"] for m in metrics if m["floor"]}
    # Ours first, then the peers, then the physical floors.
    return sorted(names, key=lambda n: (n != OURS, n in floors))


def area_table(result: AreaResult) -> str:
    """The area's markdown table: metric, advantage over the best peer, then every contender."""
    metrics = result["metrics"]
    names = _contenders(metrics)
    lines = ["| metric | advantage | " + " | ".join(_md(n) for n in names) + " |",
             "|---|---|" + "---:|" * len(names)]
    for metric in metrics:
        cells = []
        for name in names:
            if name in metric["medians"]:
                cell = _fmt(metric["medians"][name])
                cells.append(f"**{cell}**" if name == OURS else cell)
            else:
                cells.append("unavailable" if name in metric["unavailable"] else "—")
        lines.append(f"| {_md(metric['name'])} ({_md(metric['unit'])}, {metric['better']} is "
                     "better) | "
                     f"{_advantage(metric)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _run_line(result: AreaResult) -> str:
    when = datetime.datetime.fromtimestamp(result["started"], datetime.UTC)
    mode = "quick" if result["quick"] else "full"
    return (f"{mode} run, {result['rounds']} round(s), Python {result['python']} on "
            f"{result['machine']}, {when:%Y-%m-%d %H:%M} UTC, {result['seconds']:.0f} s")


def _chart(result: AreaResult, path: Path) -> None:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - the bench extra brings it
        raise RuntimeError("rendering charts needs matplotlib: "
                           "pip install -e '.[bench]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = result["metrics"]
    heights = [0.9 + 0.42 * max(1, len(m["medians"])) for m in metrics]
    fig, axes = plt.subplots(len(metrics), 1, figsize=(8, sum(heights) + 0.3), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, metric in zip((row[0] for row in axes), metrics, strict=True):
        names = [n for n in _contenders([metric]) if n in metric["medians"]]
        values = [metric["medians"][n] for n in names]
        colours = ["#3f51b5" if n == OURS else "#9e9e9e" if n == metric["floor"] else "#ff9800"
                   for n in names]
        ys = list(range(len(names)))[::-1]
        positive = [v for v in values if v > 0]
        log = bool(positive) and len(positive) == len(values) and (
            max(positive) / min(positive) > 30)
        ax.barh(ys, values, color=colours, height=0.6)
        for y, name in zip(ys, names, strict=True):
            samples = metric["samples"].get(name, [])
            ax.plot(samples, [y] * len(samples), "k.", markersize=3, alpha=0.6)
        if log:
            ax.set_xscale("log")
        top = max(values) if values and max(values) > 0 else 1.0
        for y, name, value in zip(ys, names, values, strict=True):
            # The label goes right of the bar and of its samples, so no dot hides it.
            x = max([value, *metric["samples"].get(name, [])])
            if log and x <= 0:
                x = min(positive)
            ax.text(x, y, f"  {_fmt(value)}", va="center", fontsize=8)
        if log:
            ax.set_xlabel("log scale", fontsize=7)
        else:
            top = max([top, *(max(s) for s in metric["samples"].values() if s)])
            ax.set_xlim(0, top * 1.3)
        ax.set_yticks(ys, names, fontsize=8)
        adv = metric["advantage_over_best_peer"]
        suffix = ""
        if adv is not None and metric["best_peer"]:
            if adv >= 1:
                suffix = f"  (ours {'∞' if math.isinf(adv) else f'{adv:.1f}'}x better)"
            else:
                suffix = f"  (best peer {1 / adv:.1f}x better)"
        ax.set_title(f"{metric['name']} [{metric['unit']}, {metric['better']} is better]{suffix}",
                     fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def _area_page(result: AreaResult) -> str:
    area = result["area"]
    notes = [f"- **{_md(m['name'])}**: {_md(m['note'])}" for m in result["metrics"] if m["note"]]
    parts = [
        f"# {area}",
        "",
        (f"<!-- Generated by `executors bench --render` from benchmarks/results/{area}.json; "
         "edit the benchmark, not this page. -->"),
        "",
        (f"Ours beside every peer, measured interleaved in one process ({_run_line(result)}). "
         "Values are medians over the rounds; **advantage** is how many times better ours is "
         "than the best peer, whichever direction is better. A *floor* is the physical limit "
         "(the bare mechanism with no features), not a peer."),
        "",
        area_table(result),
        "",
        f"![{area}: ours beside the peers]({area}.png)",
        "",
    ]
    if notes:
        parts += ["## Notes", "", *notes, ""]
    parts += [f"Re-measure with `executors bench {area}` (add `--quick` for a smoke run).", ""]
    return "\n".join(parts)


def _index_page(results: Sequence[AreaResult]) -> str:
    lines = [
        "# Benchmark summary",
        "",
        "<!-- Generated by `executors bench --render`; edit the benchmarks, not this page. -->",
        "",
        ("Every area runs ours and each peer in the same process, interleaved round by round, "
         "so the noise of a shared machine falls on all of them alike. Never compare absolute "
         "numbers across runs or machines: compare the ratios. **Advantage** is how many times "
         "better ours is than the best peer on that metric (above 1: ours is better)."),
        "",
        "| area | metric | advantage | run |",
        "|---|---|---|---|",
    ]
    for result in results:
        area = result["area"]
        mode = "quick" if result["quick"] else "full"
        lines.extend(f"| [{area}]({area}.md) | {_md(metric['name'])} ({_md(metric['unit'])}) | "
                     f"{_advantage(metric)} | {mode}, Python {result['python']} |"
                     for metric in result["metrics"])
    lines += ["", "Run them all with `executors bench` (or one area: `executors bench periodic`);",
              "`executors bench --render` rebuilds these pages from the results files.", ""]
    return "\n".join(lines)


def load_results(results_dir: Path = RESULTS_DIR) -> list[AreaResult]:
    """Every results file in *results_dir*, by area name."""
    results = []
    for path in sorted(results_dir.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, Mapping) and "metrics" in data and "area" in data:
            results.append(cast(AreaResult, data))
    return results


def render_all(results_dir: Path = RESULTS_DIR, out_dir: Path = DOCS_BENCH_DIR, *,
               charts: bool = True) -> list[Path]:
    """Write the benchmark pages (and charts) for every results file; return the files written.

    Pages of areas that have no results file any more are removed, so the docs never show a
    stale area.
    """
    results = load_results(results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    keep = {"index.md"}
    for result in results:
        area = result["area"]
        page = out_dir / f"{area}.md"
        page.write_text(_area_page(result))
        written.append(page)
        keep.add(page.name)
        if charts:
            chart = out_dir / f"{area}.png"
            _chart(result, chart)
            written.append(chart)
            keep.add(chart.name)
    index = out_dir / "index.md"
    index.write_text(_index_page(results))
    written.append(index)
    for stale in out_dir.iterdir():
        if stale.suffix in {".md", ".png"} and stale.name not in keep:
            stale.unlink()
    return written


# -- the command -----------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of `executors bench` on *parser*."""
    parser.add_argument("areas", nargs="*", help="areas to run (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="one round each, to check they work (writes no results unless "
                        "--write)")
    parser.add_argument("--write", action="store_true",
                        help="with --quick: write the results files anyway")
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: re-render the docs' benchmark pages and charts "
                        "from benchmarks/results/*.json")
    parser.add_argument("--no-render", action="store_true",
                        help="after measuring, leave the docs' benchmark pages as they are")


def run(args: argparse.Namespace) -> int:
    """Run `executors bench` for parsed *args*; return the exit status."""
    if args.render:
        if args.areas or args.quick:
            print("executors bench: --render takes no areas and no --quick; it re-renders "
                  "every results file", file=sys.stderr)
            return 2
        written = render_all()
        print(f"executors bench: rendered {len(written)} file(s) into "
              f"{DOCS_BENCH_DIR}", file=sys.stderr)
        return 0
    available = areas()
    if not available:
        print("executors bench: no benchmarks/ directory beside the package; "
              "run it from a source checkout", file=sys.stderr)
        return 2
    selected = args.areas or available
    unknown = [a for a in selected if a not in available]
    if unknown:
        print(f"executors bench: unknown area(s) {', '.join(unknown)}; "
              f"choose from {', '.join(available)}", file=sys.stderr)
        return 2
    # A quick run checks that the benchmarks work; its numbers must not replace a full run's.
    write = not args.quick or args.write
    runs = run_areas(selected, quick=args.quick, write=write)
    failed = [r.area for r in runs if r.returncode != 0]
    if write and not args.no_render:
        written = render_all()
        print(f"executors bench: results in {RESULTS_DIR}; {len(written)} docs file(s) "
              f"rendered into {DOCS_BENCH_DIR}", file=sys.stderr)
    if failed:
        print(f"executors bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
