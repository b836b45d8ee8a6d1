"""Where a stored run's CPU goes: py-spy's samples of a serving process, summed by part.

``python -m benchmarks._stored_workload --profile DIR`` samples each serving process over the
window (py-spy, every thread, idle ones left out) and writes its collapsed stacks to DIR; this
module reads them and adds each sample to one part of the service, found from the innermost
frame out (a part's own frames and what they call: the store's driver, the encoders): the
first frame naming a part decides. The parts are the stored run's path: the claim, its plan,
the hand-off to the pool, the run's bookkeeping (and its body, the target), events, the
completion write, the status copy, renewals, the next-due read, declarations, the
PostgreSQL listener; the rest is "other".

Run: ``python -m benchmarks._stored_profile DIR [--runs N]`` prints the parts' shares of the
samples (and, with the runs done in the window, the CPU per run each part stands for).
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

__all__ = ("PARTS", "breakdown", "main", "part_of")

#: (part, pattern of a frame ``"function (file:line)"``), tried from the innermost frame out.
PARTS: tuple[tuple[str, str], ...] = (
    ("target", r"^record_ours "),
    ("plan", r"\(stored_plan\.py:|^(?:LoopPlanner\.)?plan |^Cron\.next_after "),
    ("events", r"\(events\.py:|^announce_missed "),
    ("status copy", r"\(stored_status\.py:"),
    ("declaration", r"\(stored_declare\.py:|\.declare "),
    ("renewals", r"^StoreLoop\._renew |\.renew "),
    ("completion write", (r"^StoreLoop\.(?:complete|_write_finished|_retry_completions"
                          r"|_completed) |\.complete_many |\.complete |^finishing "
                          r"|^finish_record |^finish_claim ")),
    ("claim + completion", r"\.complete_and_claim "),
    ("next due", r"\.next_due "),
    ("claim", (r"\.claim |^settle_claim |\.(?:_admitted|_load) |^admit "
               r"|\(stored_trust\.py:")),
    ("run bookkeeping", r"^run_claim |^InFlight\.run |^StoredRun\.run |^Job\._run_once "),
    ("hand-off to the pool", r"^StoreLoop\._start_run |^Pool\.(?:put|_run_worker) "),
    ("listener", r"\(postgres_connections\.py:"),
    ("loop pass", r"^StoreLoop\.(?:_serve|_run|_handle) "),
)
_COMPILED = [(part, re.compile(pattern)) for part, pattern in PARTS]


def part_of(stack: list[str]) -> str:
    """The part a sample's stack (outermost frame first) stands for."""
    for frame in reversed(stack):
        for part, pattern in _COMPILED:
            if pattern.search(frame):
                return part
    return "other"


def breakdown(folder: Path) -> collections.Counter[str]:
    """Samples per part, over every collapsed-stack file (``*.txt``) in `folder`."""
    parts: collections.Counter[str] = collections.Counter()
    for path in sorted(folder.glob("*.txt")):
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                parts[part_of(stack.split(";"))] += int(count)
    return parts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks._stored_profile")
    parser.add_argument("folder", type=Path)
    parser.add_argument("--runs", type=int, default=None,
                        help="runs done in the window, to print CPU per run by part")
    parser.add_argument("--rate", type=int, default=100, help="py-spy's samples a second")
    args = parser.parse_args(argv)
    parts = breakdown(args.folder)
    total = sum(parts.values()) or 1
    for part, samples in parts.most_common():
        line = f"{part:22} {samples:7d} samples {100 * samples / total:5.1f} %"
        if args.runs:
            line += f"  {1e6 * samples / args.rate / args.runs:8.1f} µs per run"
        print(line)


if __name__ == "__main__":
    main()
