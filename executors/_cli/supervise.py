"""The `executors supervise` command: options to ProcessSpecs, run, summary, exit status."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import TypeVar

from executors._validate import seconds
from executors.coordinator import Coordinator, ProcessSpec, Ready, TemplateError, parse_signal

__all__ = ("DESCRIPTION", "EPILOG", "HELP", "NAME", "add_arguments", "run")

NAME = "supervise"
HELP = "run a process under test with profilers on its pid; stop them in order"

DESCRIPTION = (
    "Start COMMAND (the process under test), then each --with process (which may refer to its "
    "pid as {pid}); when any of them ends or on SIGINT/SIGTERM/SIGHUP, stop the --with processes "
    "(stop signal, SIGCONT, grace, SIGKILL to the group), then the process under test, and print "
    "a summary."
)

EPILOG = """\
templates: each --with COMMAND is split like a shell would (shlex) but never run by one;
  {pid}, {name} and {outdir} are substituted in each argument; {{ and }} are literal braces.
exit status:
  the process under test's status when it ended first (128+N if killed by signal N);
  after SIGINT/SIGTERM/SIGHUP the coordinator stops everything, then dies by the same signal;
  0 or 125 when a --with process ended first (0 only if it exited 0);
  127 / 126 when COMMAND is not found / not executable (nothing else started);
  125 when a --with command cannot start; 124 when a --ready check timed out; 2 usage error.
example:
  executors supervise --log-dir out --with 'spy=py-spy record -o {outdir}/put.svg -p {pid}' \\
      -- python app.py
"""

_T = TypeVar("_T")

# Profilers that lose their results on SIGTERM (research note, section 3, measured).
_TERM_LOSES_OUTPUT = (("py-spy", "record"), ("perf", "stat"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of `executors supervise` on *parser*."""
    parser.add_argument("--name", default="put", metavar="NAME",
                        help="name of the process under test (default: put)")
    parser.add_argument("-w", "--with", dest="with_", action="append", default=[],
                        metavar="NAME=COMMAND", help="a supporting process (repeatable)")
    parser.add_argument("--grace", action="append", default=[], metavar="[NAME=]SECONDS",
                        help="time between the stop signal and SIGKILL (default 5)")
    parser.add_argument("--stop-signal", action="append", default=[], metavar="NAME=SIGNAL",
                        help="default INT for supporting processes, TERM for the process "
                             "under test")
    parser.add_argument("--on-exit", action="append", default=[], metavar="NAME=stop|ignore",
                        help="whether a supporting process ending stops the run (default stop)")
    parser.add_argument("--ready", action="append", default=[],
                        metavar="NAME=regex:PATTERN|delay:SECONDS",
                        help="wait for this before starting the next process")
    parser.add_argument("--ready-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="stop the run if a process is not ready in time (default 30)")
    parser.add_argument("--no-group-kill", action="append", default=[], metavar="NAME",
                        help="signal only the process, not its process group")
    parser.add_argument("--log-dir", metavar="DIR",
                        help="write DIR/NAME.out, NAME.err, coord.log and summary.json")
    parser.add_argument("--outdir", metavar="DIR",
                        help="value of {outdir} (default: --log-dir, else the current directory)")
    parser.add_argument("--summary", choices=("text", "json", "none"), default="text",
                        help="summary printed to stderr at the end (default text)")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour labels (auto: only on a terminal)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="do not echo output and lifecycle lines")
    parser.add_argument("--no-subreaper", action="store_true",
                        help="do not adopt and reap orphaned descendants")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARG...]",
                        help="the process under test")


def _pairs(values: list[str], option: str, names: set[str],
           parser: argparse.ArgumentParser) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name:
            parser.error(f"{option} {value!r}: expected NAME=VALUE")
        if name not in names:
            parser.error(f"{option} {value!r}: no process named {name!r} "
                         f"(known: {', '.join(sorted(names))})")
        out[name] = rest
    return out


def _seconds(text: str, option: str, parser: argparse.ArgumentParser, *,
             allow_zero: bool = True) -> float:
    """*text* as seconds by the library's one rule (`executors._validate`); a usage error
    names the option as typed."""
    try:
        value = float(text)
    except ValueError:
        parser.error(f"{option} {text!r}: expected a number of seconds")
    try:
        return seconds(value, option, allow_zero=allow_zero)
    except ValueError as exc:
        parser.error(str(exc))


def _per_process(text: str, option: str, name: str, parser: argparse.ArgumentParser,
                 parse: Callable[[str], _T]) -> _T:
    """*parse(text)*, or a usage error naming ``option NAME=TEXT`` and the reason."""
    try:
        return parse(text)
    except ValueError as exc:
        parser.error(f"{option} {name}={text}: {exc}")


def _build(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Coordinator:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("missing -- COMMAND [ARG...] (the process under test)")
    withs: list[tuple[str, str]] = []
    for value in args.with_:
        name, sep, cmd = value.partition("=")
        if not sep or not name or not cmd:
            parser.error(f"--with {value!r}: expected NAME=COMMAND")
        withs.append((name, cmd))
    names = {args.name, *(n for n, _ in withs)}
    default_grace = 5.0
    graces: dict[str, float] = {}
    for value in args.grace:
        if "=" in value:
            for name, text in _pairs([value], "--grace", names, parser).items():
                graces[name] = _seconds(text, f"--grace {name}", parser)
        else:
            default_grace = _seconds(value, "--grace", parser)
    ready_timeout = _seconds(str(args.ready_timeout), "--ready-timeout", parser,
                             allow_zero=False)
    stops = _pairs(args.stop_signal, "--stop-signal", names, parser)
    on_exit = _pairs(args.on_exit, "--on-exit", names - {args.name}, parser)
    readies = _pairs(args.ready, "--ready", names, parser)
    for name in args.no_group_kill:
        if name not in names:
            parser.error(f"--no-group-kill {name!r}: no process named {name!r}")
    for name, value in on_exit.items():
        if value not in ("stop", "ignore"):
            parser.error(f"--on-exit {name}={value}: expected stop or ignore")
    try:
        specs = []
        for name, cmd in [(args.name, command), *withs]:
            specs.append(ProcessSpec(
                name,
                cmd,
                stop_signal=_per_process(stops[name], "--stop-signal", name, parser,
                                         parse_signal) if name in stops else None,
                grace=graces.get(name, default_grace),
                on_exit="ignore" if on_exit.get(name) == "ignore" else "stop",
                ready=_per_process(readies[name], "--ready", name, parser,
                                   Ready.parse) if name in readies else None,
                group_kill=name not in args.no_group_kill,
            ))
        color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
        coordinator = Coordinator(
            specs[0], specs[1:], log_dir=args.log_dir, outdir=args.outdir,
            echo=None if args.quiet else sys.stdout, color=color,
            ready_timeout=ready_timeout, subreaper=not args.no_subreaper,
        )
    except (TemplateError, ValueError, TypeError) as exc:
        parser.error(str(exc))
    for spec in specs[1:]:
        stop_sig = spec.stop_signal or signal.SIGINT
        for tool, sub in _TERM_LOSES_OUTPUT:
            if (os.path.basename(spec.argv[0]) == tool and sub in spec.argv
                    and stop_sig == signal.SIGTERM):
                print(f"executors supervise: warning: {tool} {sub} writes nothing when stopped "
                      f"by SIGTERM; prefer --stop-signal {spec.name}=INT", file=sys.stderr)
    return coordinator


def run(args: argparse.Namespace) -> int:
    """Run `executors supervise` for parsed *args*; return the exit status (see EPILOG)."""
    parser: argparse.ArgumentParser = args.parser
    coordinator = _build(args, parser)
    try:
        result = coordinator.run()
    except OSError as exc:
        print(f"executors supervise: {exc}", file=sys.stderr)
        return 125
    if args.summary == "text":
        print(result.format_text(), file=sys.stderr)
    elif args.summary == "json":
        print(result.to_json(), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    if result.trigger == "signal" and result.trigger_signal is not None:
        # Die by the same signal so a calling shell sees WIFSIGNALED and stops its own loop
        # ("wait and cooperative exit"); perf and strace do the same. As PID 1 a default
        # disposition is ignored by the kernel, so the exit status is the fallback.
        sig = signal.Signals[result.trigger_signal]
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return result.exit_code
