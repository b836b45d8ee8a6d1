"""The ``executors demo`` command: run the demo application (`_demo_app`) and print its report.

The application itself needs pymongo and nx-27017 (the ``demo`` extra); it is imported only when
the command runs, so the rest of the command works without them.
"""

from __future__ import annotations

import argparse
import sys

from executors import _validate

from ._urls import redact

__all__ = ("DESCRIPTION", "EPILOG", "HELP", "NAME", "add_arguments", "run")

NAME = "demo"
HELP = "run a threaded pymongo application on the executors' machinery; report"
DESCRIPTION = (
    "Serve simulated requests from worker threads through pymongo against an embedded "
    "nx-27017 server (or --uri): abandoned cursors are killed by a CursorReaper, a fair "
    "semaphore shared through the bridge caps database work for threads and an asyncio task, a "
    "channel feeds an asyncio consumer, a BackgroundService runs the periodic jobs. Prints a "
    "live view, then a report; exits 1 if anything leaked or --uri does not answer, 2 on a bad "
    "option, 130 after Ctrl-C."
)
EPILOG = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of `executors demo` on *parser*."""
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="seconds to run, > 0 (default 20)")
    parser.add_argument("--uri", default=None,
                        help="a MongoDB deployment (mongodb://... or mongodb+srv://...) to use "
                        "instead of the embedded nx-27017 server; the demo writes to, then "
                        "drops, the database executors_demo")
    parser.add_argument("--workers", type=int, default=8, help="worker threads, >= 1 (default 8)")
    parser.add_argument("--db-slots", type=int, default=4,
                        help="concurrent database operations allowed, >= 1 (default 4)")
    parser.add_argument("--abandon-rate", type=float, default=0.3,
                        help="share of requests that abandon their cursor, 0 to 1 (default 0.3)")
    parser.add_argument("--seed", type=int, default=None,
                        help="random seed, for a repeatable run")
    parser.add_argument("--plain", action="store_true",
                        help="plain progress lines even on a terminal")


def _check_options(args: argparse.Namespace) -> None:
    """Refuse a bad option value before anything starts, naming the flag as typed (exit 2)."""
    try:
        _validate.seconds(args.seconds, "--seconds", allow_zero=False)
        _validate.count(args.workers, "--workers")
        _validate.count(args.db_slots, "--db-slots")
        # NaN fails both comparisons, so it is refused too.
        if not 0 <= args.abandon_rate <= 1:
            raise ValueError(f"--abandon-rate must be a share within [0, 1], "
                             f"got {args.abandon_rate!r}")
    except (TypeError, ValueError) as exc:
        args.parser.error(str(exc))


# The modules the demo extra brings (pymongo's packages and its dnspython); an ImportError
# naming another is a bug to show in full, not a missing install.
_DEMO_EXTRA_MODULES = frozenset({"pymongo", "bson", "gridfs", "dns"})


def run(args: argparse.Namespace) -> int:
    """Run `executors demo` for parsed *args*; return the exit status."""
    _check_options(args)
    # The application uses the integrations (pymongo, the bridge): only the command imports it.
    try:
        from . import _demo_app
    except ImportError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in _DEMO_EXTRA_MODULES:
            raise
        # A wheel install has no source checkout: name the extra by the package's name.
        print(f"executors demo: needs {missing}, which is not installed here; install the "
              "demo extra: pip install 'executors[demo]'", file=sys.stderr)
        return 2
    if args.uri is not None:
        try:
            _demo_app.check_uri(args.uri)
        except (ValueError, ConnectionError) as exc:
            print(f"executors demo: --uri {redact(args.uri)}: {exc}",
                  file=sys.stderr)
            # Not a MongoDB URI is a usage error (2); a well-formed one nobody answers, 1.
            return 2 if isinstance(exc, ValueError) else 1
    config = _demo_app.DemoConfig(seconds=args.seconds, uri=args.uri, workers=args.workers,
                                  db_slots=args.db_slots, abandon_rate=args.abandon_rate,
                                  seed=args.seed)
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
