"""The ``executors demo`` command: run the demo application (`_demo_app`) and print its report.

The application itself needs pymongo and nx-27017 (the ``demo`` extra); it is imported only when
the command runs, so the rest of the command works without them.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ("DESCRIPTION", "EPILOG", "HELP", "NAME", "add_arguments", "run")

NAME = "demo"
HELP = "run a threaded pymongo application on the executors' machinery; report"
DESCRIPTION = (
    "Serve simulated requests from worker threads through pymongo against an embedded "
    "nx-27017 server (or --uri): abandoned cursors are killed by a CursorReaper, a fair "
    "semaphore shared through the bridge caps database work for threads and an asyncio task, a "
    "channel feeds an asyncio consumer, a BackgroundService runs the periodic jobs. Prints a "
    "live view, then a report; exits 1 if anything leaked, 130 after Ctrl-C."
)
EPILOG = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of `executors demo` on *parser*."""
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to run (default 20)")
    parser.add_argument("--uri", default=None,
                        help="a MongoDB deployment to use instead of the embedded nx-27017 "
                        "server (the demo writes to, then drops, the database executors_demo)")
    parser.add_argument("--workers", type=int, default=8, help="worker threads (default 8)")
    parser.add_argument("--db-slots", type=int, default=4,
                        help="concurrent database operations allowed (default 4)")
    parser.add_argument("--abandon-rate", type=float, default=0.3,
                        help="share of requests that abandon their cursor (default 0.3)")
    parser.add_argument("--seed", type=int, default=None,
                        help="random seed, for a repeatable run")
    parser.add_argument("--plain", action="store_true",
                        help="plain progress lines even on a terminal")


def run(args: argparse.Namespace) -> int:
    """Run `executors demo` for parsed *args*; return the exit status."""
    # The application uses the integrations (pymongo, the bridge): only the command imports it.
    try:
        from . import _demo_app
    except ImportError as exc:
        print(f"executors demo: {exc}; install the extras: pip install -e '.[test]'",
              file=sys.stderr)
        return 2
    try:
        config = _demo_app.DemoConfig(seconds=args.seconds, uri=args.uri, workers=args.workers,
                                      db_slots=args.db_slots, abandon_rate=args.abandon_rate,
                                      seed=args.seed)
    except ValueError as exc:
        print(f"executors demo: {exc}", file=sys.stderr)
        return 2
    live = False if args.plain else None
    try:
        report = _demo_app.run_demo(config, sys.stdout, live=live)
    except RuntimeError as exc:  # the embedded server could not start
        print(f"executors demo: {exc}", file=sys.stderr)
        return 2
    print(report.render(), flush=True)
    if report.interrupted:
        return 130
    return 1 if report.leaks else 0
