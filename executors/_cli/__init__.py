"""The ``executors`` command: the top floor, one module per subcommand, wired one way.

Each subcommand module (`bench`, `demo`, `supervise`, `traverse`, `schedules`) offers the same
six names: `NAME`, `HELP` (one line for the top-level help), `DESCRIPTION` and `EPILOG` (its own
help),
`add_arguments(parser)` (which may refine that help: bench lists the areas it finds) and
`run(args) -> int` (the exit status). `SUBCOMMANDS` below lists them; nothing else registers a
subcommand. A subcommand module imports nothing heavy at import time (the demo's pymongo, the
stores' drivers are imported when it runs), so `executors --help` works on a bare install.
Nothing imports this package but the console script, ``python -m executors`` and the tests.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
import textwrap
from collections.abc import Sequence
from typing import Protocol

from . import bench, demo, schedules, supervise, traverse
from ._usage import unrecognized

__all__ = ("SUBCOMMANDS", "build_parser", "main")

DESCRIPTION = (
    "Background machinery for threaded Python programs, and a clean way into asyncio. "
    "This command runs the demo application, the benchmarks, the process supervisor and the "
    "tree traversal, and steers stored schedules; 'executors COMMAND --help' describes each."
)

# Exit status after Ctrl-C, as shells report a process that SIGINT ended (128 + 2).
EXIT_INTERRUPTED = 130


class Subcommand(Protocol):
    """What every subcommand module offers (a module satisfies this protocol)."""

    # Read-only, so a module's `EPILOG = None` and another's `EPILOG = "..."` both fit.
    @property
    def NAME(self) -> str: ...
    @property
    def HELP(self) -> str: ...
    @property
    def DESCRIPTION(self) -> str: ...
    @property
    def EPILOG(self) -> str | None: ...

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


SUBCOMMANDS: tuple[Subcommand, ...] = (demo, bench, supervise, traverse, schedules)


def _version() -> str:
    try:
        return importlib.metadata.version("executors")
    except importlib.metadata.PackageNotFoundError:  # a bare source tree, never installed
        from executors import __version__

        return __version__


def _fill(text: str) -> str:
    # Subcommands keep their epilogs' layout (tables, examples), so their help is formatted
    # raw; their descriptions are prose, wrapped here.
    return "\n\n".join(textwrap.fill(paragraph, 78) for paragraph in text.split("\n\n"))


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command: one sub-parser per entry of `SUBCOMMANDS`."""
    parser = argparse.ArgumentParser(prog="executors", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"executors {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in SUBCOMMANDS:
        sub_parser = sub.add_parser(
            command.NAME, help=command.HELP, description=_fill(command.DESCRIPTION),
            epilog=command.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
        command.add_arguments(sub_parser)
        # `parser` lets a subcommand report a usage error on its own usage line (exit 2).
        sub_parser.set_defaults(run=command.run, parser=sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with *argv* (default: ``sys.argv[1:]``); return its exit status.

    Ctrl-C anywhere outside a subcommand's own handling prints one line and gives 130. An
    argument nobody recognised is a usage error of the subcommand it was given to, naming the
    closest option (exit 2).
    """
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    args, extras = parser.parse_known_args(words)
    if extras:
        unrecognized(parser, args, extras, words)
    try:
        status: int = args.run(args)
    except KeyboardInterrupt:
        print(f"\nexecutors {args.command}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    return status
