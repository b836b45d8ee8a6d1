"""Shared machinery for the benchmarks: interleaved rounds, medians, ratios, JSON and a table.

Every area script builds a list of `Metric`s, each with one measuring function per contender
(ours first, then the peers), and calls `run_area`. Contenders are measured round-robin, so noise
on this shared machine spreads over all of them instead of favouring whoever ran last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

# The table is the one the docs pages show: `executors bench` renders results files with the same
# function (benchmarks are scripts, outside the package's import graph).
from executors._cli._bench_report import OURS, AreaResult, Spread, area_table, spreads
from executors._cli._words import plural

__all__ = ("OURS", "RESULTS_DIR", "Metric", "measure", "paired", "parse_args",
           "process_cpu_seconds", "process_switches", "quick_mode", "run_area", "thread_wake_us")

RESULTS_DIR = Path(__file__).resolve().parent / "results"


#: What a `paired` block measured: a float (seconds, switches) or anything that adds up.
_Amount = TypeVar("_Amount")


@dataclasses.dataclass
class Metric:
    """One measured quantity, with a sampling function per contender.

    Each function runs one round and returns one sample (in `unit`). Contenders whose function
    is None are listed as unavailable (a peer that does not install here, say).
    """

    name: str
    unit: str
    better: str  # "lower" or "higher"
    contenders: dict[str, Callable[[], float] | None]
    floor: str | None = None  # a contender that is the physical floor, not a peer
    note: str = ""


def quick_mode(argv: Sequence[str] | None = None) -> bool:
    return "--quick" in (argv if argv is not None else sys.argv) or bool(
        os.environ.get("EXECUTORS_BENCH_QUICK")
    )


def parse_args(area: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=f"benchmarks/{area}.py")
    parser.add_argument("--quick", action="store_true", help="few rounds, to check it works")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / f"{area}.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--only", default=None, metavar="TEXT",
                        help="measure only the metrics whose name holds TEXT, and write them "
                             "into the results file over their former rows (the others kept)")
    args = parser.parse_args(argv)
    if os.environ.get("EXECUTORS_BENCH_QUICK"):
        args.quick = True
    return args


def _summary(metric: Metric, samples: dict[str, list[float]]) -> dict[str, object]:
    medians = {name: statistics.median(vals) for name, vals in samples.items() if vals}
    peers = {
        name: med for name, med in medians.items() if name != OURS and name != metric.floor
    }
    best_peer = None
    if peers and OURS in medians:
        pick = min if metric.better == "lower" else max
        best_peer = pick(peers, key=lambda n: peers[n])
    ratios = spreads(metric.better, metric.floor, best_peer, samples)
    # The median of the round-by-round advantages (see `spreads`: a round compares one state
    # of the machine), not the ratio of the medians.
    advantage = cast("Spread | None", ratios["advantage_spread"])
    return {
        "name": metric.name,
        "unit": metric.unit,
        "better": metric.better,
        "note": metric.note,
        "floor": metric.floor,
        "medians": medians,
        "samples": samples,
        "unavailable": [n for n, fn in metric.contenders.items() if fn is None],
        "best_peer": best_peer,
        # > 1 means ours is better than the best peer by that factor, whichever way is better.
        "advantage_over_best_peer": advantage["median"] if advantage is not None else None,
        # spread, advantage_spread, floor_multiple, floor_multiple_spread (see the function).
        **ratios,
    }


def measure(metric: Metric, rounds: int) -> dict[str, object]:
    samples: dict[str, list[float]] = {n: [] for n, fn in metric.contenders.items() if fn}
    for _ in range(rounds):
        for name, fn in metric.contenders.items():
            if fn is not None:
                samples[name].append(float(fn()))
    return _summary(metric, samples)


def paired(blocks: int, finish: Callable[[_Amount, float], float],
           contenders: dict[str, Callable[[], tuple[_Amount, float]]],
           before: Callable[[], None] | None = None) -> dict[str, Callable[[], float]]:
    """Sampling functions for `contenders` measured together, block by block, in alternation.

    Each contender's function runs one block and returns (amount, work): seconds (or CPU
    seconds, or context switches) spent on that much work (calls, acquisitions), or anything
    else the blocks add up with ``+`` (a list of delays, pooled). The first of
    them called in a round runs `blocks` blocks of every contender, the order reversed every
    other block (so neither goes first after `before`, which runs before each block), and keeps
    each one's ``finish(total amount, total work)`` for its own call in that round.

    On a machine whose speed moves within a second (a virtual CPU's wake-ups, see
    `thread_wake_us`), measuring one contender for a second and then the next compares two
    states of the machine; blocks of a few milliseconds in alternation compare the contenders
    in the same state, so their ratio round by round is the cost, not the drift.
    """
    kept: dict[str, float] = {}

    def run() -> None:
        totals: dict[str, tuple[_Amount, float]] = {}
        names = list(contenders)
        for block in range(blocks):
            if before is not None:
                before()
            for name in names if block % 2 == 0 else reversed(names):
                amount, work = contenders[name]()
                if name in totals:
                    pooled, done = totals[name]
                    amount, work = pooled + amount, done + work  # type: ignore[operator]
                totals[name] = (amount, work)
        kept.update((name, finish(amount, work)) for name, (amount, work) in totals.items())

    def sample(name: str) -> Callable[[], float]:
        def one() -> float:
            if name not in kept:
                run()
            return kept.pop(name)

        return one

    return {name: sample(name) for name in contenders}


def process_cpu_seconds() -> float:
    """CPU time of the whole process so far, every thread's (user and system)."""
    import resource  # Unix: the areas that use it measure threads of a Unix process

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_switches() -> int:
    """Context switches of the whole process so far, every thread's (voluntary: a thread
    blocked and was woken; involuntary: it was preempted)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def thread_wake_us(round_trips: int = 2_000) -> float:
    """The machine's state, for the results file: the median time (us) of a raw-lock ping-pong
    between two threads (each round trip is two cross-thread wake-ups), over 5 tries.

    On this kind of virtual machine it moves several-fold with the host's state (a halted
    virtual CPU waits for the host to wake it up), and every wall-clock figure that chains
    thread wake-ups moves with it: a figure is published with the state it was measured in.
    """
    def once() -> float:
        ping, pong = threading.Lock(), threading.Lock()
        ping.acquire()
        pong.acquire()

        def other() -> None:
            for _ in range(round_trips):
                ping.acquire()
                pong.release()

        thread = threading.Thread(target=other)
        thread.start()
        start = time.perf_counter()
        for _ in range(round_trips):
            ping.release()
            pong.acquire()
        spent = time.perf_counter() - start
        thread.join()
        return spent / round_trips * 1e6

    return statistics.median(once() for _ in range(5))


def _merged(path: Path, run: dict[str, object], only: str) -> dict[str, object]:
    """The results file at `path` with `run`'s metrics (a run of ``--only only``) over the
    rows of the same name, the others kept, and the run listed in its ``partial_runs`` (when,
    how long, how many rounds, which metrics: a page says which rows are of a later run)."""
    try:
        whole: dict[str, object] = json.loads(path.read_text())
    except FileNotFoundError:
        return {**run, "partial_runs": [_partial(run, only)]}
    if whole.get("quick") != run["quick"]:
        raise SystemExit(f"{path}: a {'quick' if run['quick'] else 'full'} run cannot be "
                         "merged into a file of the other kind")
    fresh = {m["name"]: m for m in cast("list[dict[str, Any]]", run["metrics"])}
    measured = set(fresh)
    kept = cast("list[dict[str, Any]]", whole["metrics"])
    rows = [fresh.pop(m["name"], m) for m in kept] + list(fresh.values())
    # An earlier partial run whose every row this one measured again is no longer on the page.
    earlier = [p for p in cast("list[dict[str, Any]]", whole.get("partial_runs", []))
               if not set(p.get("metrics", ())) <= measured]
    return {**whole, "metrics": rows, "partial_runs": [*earlier, _partial(run, only)]}


def _partial(run: dict[str, object], only: str) -> dict[str, object]:
    return {"only": only, "started": run["started"], "seconds": run["seconds"],
            "rounds": run["rounds"], "python": run["python"],
            "thread_wake_us": run["thread_wake_us"],
            "metrics": [m["name"] for m in cast("list[dict[str, Any]]", run["metrics"])]}


def run_area(area: str, metrics: Callable[[bool], list[Metric]], argv: Sequence[str] | None = None,
             default_rounds: int = 5, quick_rounds: int = 1) -> list[dict[str, object]]:
    """Measure every metric (interleaved rounds), print a markdown table, write JSON."""
    args = parse_args(area, argv)
    rounds = args.rounds or (quick_rounds if args.quick else default_rounds)
    started = time.time()
    wake_before = thread_wake_us()
    results = []
    chosen = [m for m in metrics(args.quick) if args.only is None or args.only in m.name]
    if not chosen:
        raise SystemExit(f"benchmarks/{area}.py: no metric's name holds {args.only!r}")
    for metric in chosen:
        print(f"[{area}] {metric.name} ...", file=sys.stderr, flush=True)
        results.append(measure(metric, rounds))
    wake_after = thread_wake_us()
    payload: dict[str, object] = {
        "area": area,
        "quick": args.quick,
        "rounds": rounds,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "started": started,
        "seconds": time.time() - started,
        # The machine's state (see thread_wake_us), before and after the metrics.
        "thread_wake_us": [wake_before, wake_after],
        "metrics": results,
    }
    if args.only is not None:
        payload = _merged(args.json, payload, args.only)
    table = payload["table"] = area_table(cast(AreaResult, payload))
    print(f"\n## {area} ({'quick' if args.quick else 'full'}, {plural(rounds, 'round')}, "
          f"Python {platform.python_version()}; thread ping-pong {wake_before:.1f} us before, "
          f"{wake_after:.1f} us after)\n")
    print(table)
    if not args.no_write:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return results
