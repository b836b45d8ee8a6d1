"""The ``executors`` command: ``bench`` (and the other subcommands as they land)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ("main",)

# The benchmarks live beside the package in a source checkout (they import the peers, which are
# not runtime dependencies); the command runs them from there.
BENCHMARKS_DIR = Path(__file__).resolve().parent.parent / "benchmarks"


def _bench_areas() -> list[str]:
    if not BENCHMARKS_DIR.is_dir():
        return []
    return sorted(p.stem for p in BENCHMARKS_DIR.glob("*.py") if not p.stem.startswith("_"))


def _cmd_bench(args: argparse.Namespace) -> int:
    available = _bench_areas()
    if not available:
        print("executors bench: no benchmarks/ directory beside the package; "
              "run it from a source checkout", file=sys.stderr)
        return 2
    areas = args.areas or available
    unknown = [a for a in areas if a not in available]
    if unknown:
        print(f"executors bench: unknown area(s) {', '.join(unknown)}; "
              f"choose from {', '.join(available)}", file=sys.stderr)
        return 2
    status = 0
    for index, area in enumerate(areas, 1):
        print(f"[{index}/{len(areas)}] benchmark {area}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", f"benchmarks.{area}"]
        if args.quick:
            cmd.append("--quick")
        status |= subprocess.call(cmd, cwd=BENCHMARKS_DIR.parent)
    return status


def _add_supervise(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from . import _coordinator_cli

    supervise = sub.add_parser(
        "supervise",
        help="run a process under test with profilers on its pid; stop them in order",
        description=_coordinator_cli.DESCRIPTION,
        epilog=_coordinator_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _coordinator_cli.add_arguments(supervise)
    supervise.set_defaults(func=_coordinator_cli.run, supervise_parser=supervise)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="executors", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    bench = sub.add_parser("bench", help="run benchmarks: ours beside the peers, same run")
    bench.add_argument("areas", nargs="*", help="areas to run (default: all)")
    bench.add_argument("--quick", action="store_true", help="one round each, to check they work")
    bench.set_defaults(func=_cmd_bench)
    _add_supervise(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
