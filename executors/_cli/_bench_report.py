"""The reports of ``executors bench``: results files rendered as pages, tables and charts.

A results file (``AREA.json``, written by ``benchmarks/_harness.py``) becomes a Markdown page
with one table (ours first, then each peer, the ratio to the best peer second) and a PNG chart
(matplotlib, from the ``bench`` extra); an index page sums up every area. The same rendering
serves a user's ``--output`` folder and the repository's docs pages.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from ._words import plural

__all__ = (
    "OURS",
    "AreaResult",
    "MetricResult",
    "Spread",
    "area_table",
    "load_results",
    "render_all",
    "spreads",
)

OURS = "executors"


class Spread(TypedDict):
    """The smallest, median and largest of a metric's per-round values."""

    min: float
    median: float
    max: float


class MetricResult(TypedDict):
    """One metric of a results file, as benchmarks/_harness.py writes it.

    The spreads (see `spreads`) are absent from files written before they were added; the
    report then computes them from the samples.
    """

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
    spread: NotRequired[dict[str, Spread | None]]
    advantage_spread: NotRequired[Spread | None]
    floor_multiple: NotRequired[float | None]
    floor_multiple_spread: NotRequired[Spread | None]


def _multiple(better: str, reference: float, ours: float) -> float:
    """How many times `reference`'s cost ours pays: ours/reference where lower is better,
    reference/ours where higher is better (> 1: ours is worse; its inverse is ours'
    advantage)."""
    top, bottom = (ours, reference) if better == "lower" else (reference, ours)
    if bottom > 0:
        return top / bottom
    return math.inf if top > 0 else 1.0


def _spread(values: Sequence[float]) -> Spread | None:
    """min, median and max of `values` (NaN samples left out), or None if none is left."""
    kept = sorted(v for v in values if not math.isnan(v))
    if not kept:
        return None
    middle = len(kept) // 2
    median = kept[middle] if len(kept) % 2 else (kept[middle - 1] + kept[middle]) / 2
    return {"min": kept[0], "median": median, "max": kept[-1]}


def spreads(better: str, floor: str | None, best_peer: str | None,
            samples: Mapping[str, Sequence[float]]) -> dict[str, object]:
    """A metric's spreads, from its samples (contenders measured round-robin, so sample i of
    every contender comes from round i):

    - ``spread``: per contender, min/median/max of its samples (a median alone hides a
      bimodal run);
    - ``advantage_spread``: ours' advantage over `best_peer` round by round (> 1: ours is
      better), min/median/max;
    - ``floor_multiple``: how many times the `floor`'s cost ours pays (1.0: nothing above the
      bare mechanism), the median of the round-by-round multiples; ``floor_multiple_spread``:
      their min/median/max. None where there is no floor (or no peer).

    The headline of a comparison is the median of its round-by-round ratios, not the ratio of
    the two medians: a round compares its contenders in one state of the machine (a paired
    round, `benchmarks._harness.paired`, in the same second), while the two medians may come
    from rounds the machine ran at different speeds.
    """
    ours = samples.get(OURS, [])
    theirs = samples.get(best_peer, []) if best_peer is not None else []
    bare = samples.get(floor, []) if floor is not None else []
    multiples = _spread([
        _multiple(better, b, o) for b, o in zip(bare, ours, strict=False)
    ]) if ours and bare else None
    return {
        "spread": {name: _spread(vals) for name, vals in samples.items() if vals},
        "advantage_spread": _spread([
            1 / m if m else math.inf
            for m in (_multiple(better, t, o) for t, o in zip(theirs, ours, strict=False))
        ]) if ours and theirs else None,
        "floor_multiple": multiples["median"] if multiples is not None else None,
        "floor_multiple_spread": multiples,
    }


def _ratios(metric: MetricResult) -> tuple[Spread | None, float | None, Spread | None]:
    """(advantage spread, floor multiple, floor multiple spread): from the file, else computed."""
    if "advantage_spread" in metric and "floor_multiple" in metric:
        return (metric["advantage_spread"], metric["floor_multiple"],
                metric.get("floor_multiple_spread"))
    computed = spreads(metric["better"], metric["floor"], metric["best_peer"], metric["samples"])
    return (cast("Spread | None", computed["advantage_spread"]),
            cast("float | None", computed["floor_multiple"]),
            cast("Spread | None", computed["floor_multiple_spread"]))


def _factor(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:.2f}"


def _range(spread: Spread | None) -> str:
    """" (min to max)" of a spread over more than one round, else nothing."""
    if spread is None or spread["min"] == spread["max"]:
        return ""
    return f" ({_factor(spread['min'])} to {_factor(spread['max'])})"


class AreaResult(TypedDict):
    """A results file: benchmarks/results/<area>.json."""

    area: str
    quick: bool
    rounds: int
    python: str
    machine: str
    started: float
    seconds: float
    # The machine's state: a raw-lock ping-pong between two threads, us per round trip, before
    # and after the metrics (absent from files written before it was recorded).
    thread_wake_us: NotRequired[list[float]]
    metrics: list[MetricResult]
    # Later runs of some metrics only (``--only``), merged over their rows: each with its
    # filter, start, length, rounds, Python, machine state and the metrics it measured.
    partial_runs: NotRequired[list[dict[str, Any]]]


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


def _advantage(metric: MetricResult, *, spread: bool = True) -> str:
    adv = metric["advantage_over_best_peer"]
    if adv is None or metric["best_peer"] is None:
        return "n/a"
    factor = "∞" if math.isinf(adv) else f"{adv:.1f}"
    rounds = _range(_ratios(metric)[0]) if spread else ""
    return f"**{factor}x** vs {_md(metric['best_peer'])}{rounds}"


def _of_floor(metric: MetricResult) -> str:
    """"1.18x (1.10 to 1.25)": how many times the floor's cost ours pays, and its range."""
    _, multiple, rounds = _ratios(metric)
    if multiple is None:
        return "—"
    return f"{_factor(multiple)}x{_range(rounds)}"


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
    # "of floor" only where a metric has a floor: how many times the bare mechanism's cost
    # ours pays, measured in the same rounds. Ranges in parentheses: min to max over the rounds.
    floors = any(m["floor"] for m in metrics)
    lines = ["| metric | advantage | " + ("of floor | " if floors else "")
             + " | ".join(_md(n) for n in names) + " |",
             "|---|---|" + ("---|" if floors else "") + "---:|" * len(names)]
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
                     f"{_advantage(metric)} | " + (f"{_of_floor(metric)} | " if floors else "")
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def _run_line(result: AreaResult) -> str:
    when = datetime.datetime.fromtimestamp(result["started"], datetime.UTC)
    mode = "quick" if result["quick"] else "full"
    line = (f"{mode} run, {plural(result['rounds'], 'round')}, Python {result['python']} on "
            f"{result['machine']}, {when:%Y-%m-%d %H:%M} UTC, {result['seconds']:.0f} s")
    wake = result.get("thread_wake_us")
    if wake:
        line += (f"; two threads' raw-lock ping-pong {wake[0]:.0f} us per round trip before, "
                 f"{wake[-1]:.0f} us after")
    for partial in result.get("partial_runs", []):
        when = datetime.datetime.fromtimestamp(partial["started"], datetime.UTC)
        line += (f"; the {plural(len(partial['metrics']), 'row')} named with "
                 f"\"{_md(partial['only'])}\" measured in a later run "
                 f"({plural(partial['rounds'], 'round')}, Python {partial['python']}, "
                 f"{when:%Y-%m-%d %H:%M} UTC, {partial['seconds']:.0f} s)")
    return line


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


def _area_page(result: AreaResult, *, chart: bool) -> str:
    area = result["area"]
    notes = [f"- **{_md(m['name'])}**: {_md(m['note'])}" for m in result["metrics"] if m["note"]]
    parts = [
        f"# {area}",
        "",
        (f"<!-- Generated by `executors bench` from the results file {area}.json; "
         "edit the benchmark, not this page. -->"),
        "",
        (f"Ours beside every peer, measured interleaved in one process ({_run_line(result)}). "
         "Values are medians over the rounds; **advantage** is how many times better ours is "
         "than the best peer, whichever direction is better, and **of floor** how many times "
         "the floor's cost ours pays: each the median of the round-by-round ratios (a round "
         "measures every contender in one state of the machine), with their range. A *floor* "
         "is the physical limit (the bare mechanism with no features), not a peer."),
        "",
        area_table(result),
        "",
    ]
    if chart:
        parts += [f"![{area}: ours beside the peers]({area}.png)", ""]
    if notes:
        parts += ["## Notes", "", *notes, ""]
    parts += [f"Re-measure with `executors bench {area}` (add `--quick` for a smoke run).", ""]
    return "\n".join(parts)


def _index_page(results: Sequence[AreaResult]) -> str:
    lines = [
        "# Benchmark summary",
        "",
        ("<!-- Generated by `executors bench` from the results files; edit the benchmarks, "
         "not this page. -->"),
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
                     f"{_advantage(metric, spread=False)} | {mode}, Python {result['python']} |"
                     for metric in result["metrics"])
    lines += ["",
              ("Measure one area with `executors bench periodic`, or every area with "
               "`executors bench all`;"),
              "`executors bench --help` lists the areas and how long each takes.", ""]
    return "\n".join(lines)


def load_results(results_dir: Path) -> list[AreaResult]:
    """Every results file in *results_dir*, by area name."""
    results = []
    for path in sorted(results_dir.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, Mapping) and "metrics" in data and "area" in data:
            results.append(cast(AreaResult, data))
    return results


def render_all(results_dir: Path, out_dir: Path, *, charts: bool = True,
               prune: bool = False) -> list[Path]:
    """Write a page (and a chart) per results file in *results_dir*, and an index, into
    *out_dir*; return the files written.

    With *prune* (the repository's docs), pages and charts of areas that have no results file
    any more are removed, so the docs never show a stale area; a user's folder is never pruned.

    Raises:
        RuntimeError: *charts* without matplotlib (the ``bench`` extra).
    """
    results = load_results(results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    keep = {"index.md"}
    for result in results:
        area = result["area"]
        page = out_dir / f"{area}.md"
        page.write_text(_area_page(result, chart=charts))
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
    if prune:
        for stale in out_dir.iterdir():
            if stale.suffix in {".md", ".png"} and stale.name not in keep:
                stale.unlink()
    return written
