"""What the coordinator is told to run (ProcessSpec, Ready) and what it reports (results)."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from executors._validate import seconds as _seconds

from ._template import check_template, split_command

__all__ = (
    "ProcessResult",
    "ProcessSpec",
    "Ready",
    "RunResult",
    "parse_signal",
    "signal_name",
)

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def parse_signal(value: str | int | signal.Signals) -> signal.Signals:
    """`"INT"`, `"SIGINT"`, `"2"` or `2` as a `signal.Signals`; ValueError names the value."""
    if isinstance(value, signal.Signals):
        return value
    if isinstance(value, int):
        try:
            return signal.Signals(value)
        except ValueError:
            raise ValueError(f"unknown signal number {value}") from None
    text = value.strip().upper()
    if text.isdigit():
        return parse_signal(int(text))
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return signal.Signals[text]
    except KeyError:
        raise ValueError(f"unknown signal {value!r} (use a name such as INT or TERM)") from None


def signal_name(signum: int) -> str:
    """`SIGINT` for 2; `SIG<n>` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


@dataclass(frozen=True, slots=True)
class Ready:
    """When a started process counts as ready, so the next one may start.

    `Ready.regex(r"Sampling process")` waits for a line of its stdout or stderr matching the
    pattern (`re.search`); `Ready.delay(0.5)` waits a fixed time. A process that never becomes
    ready within the coordinator's `ready_timeout` stops the run.

    Example:
        >>> Ready.parse("regex:^listening")
        Ready(kind='regex', value='^listening')
    """

    #: "regex" (ready when a line of stdout or stderr matches `value`) or "delay" (ready
    #: `value` seconds after it started).
    kind: Literal["regex", "delay"]
    #: The pattern for "regex"; for "delay", the number of seconds written as text.
    value: str

    @classmethod
    def regex(cls, pattern: str) -> Ready:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"ready regex {pattern!r} does not compile: {exc}") from None
        return cls("regex", pattern)

    @classmethod
    def delay(cls, seconds: float) -> Ready:
        return cls("delay", repr(_seconds(seconds, "ready delay")))

    @classmethod
    def parse(cls, text: str) -> Ready:
        """`regex:PATTERN` or `delay:SECONDS`; ValueError otherwise."""
        kind, sep, value = text.partition(":")
        if sep and kind == "regex":
            return cls.regex(value)
        if sep and kind == "delay":
            try:
                seconds = float(value)
            except ValueError:
                raise ValueError(f"ready delay {value!r} is not a number") from None
            return cls.delay(seconds)
        raise ValueError(f"readiness {text!r} must be regex:PATTERN or delay:SECONDS")

    @property
    def seconds(self) -> float:
        return float(self.value) if self.kind == "delay" else 0.0


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One process of a run: its name, command template and how to stop it.

    `command` is a string (split with `shlex.split`, never run by a shell) or an argv list; each
    argument may use `{pid}` (the process under test's pid), `{name}` and `{outdir}`; `{{`/`}}`
    are literal braces. `stop_signal=None` means SIGTERM for the process under test and SIGINT
    for supporting processes (py-spy and `perf stat` lose their output on SIGTERM). After the
    stop signal (and SIGCONT) the process has `grace` seconds, then its process group is
    SIGKILLed. `on_exit="stop"` makes a supporting process that ends stop the run.

    Raises TypeError/ValueError (naming the argument) for a bad name, command, template, signal,
    grace or on_exit.

    Example:
        >>> ProcessSpec("py-spy", "py-spy record -o {outdir}/put.svg -p {pid}").argv[-1]
        '{pid}'
    """

    #: The process's label in the live output, the log file names and the summary (letters,
    #: digits, ".", "_" or "-"; unique in a run; not "coord").
    name: str
    #: The command as given: a string (split like a shell would, never run by one) or an argv
    #: list, with `{pid}`, `{name}` and `{outdir}` placeholders.
    command: str | Sequence[str]
    #: The signal that asks the process to stop; None means SIGTERM for the process under
    #: test and SIGINT for a supporting process.
    stop_signal: signal.Signals | None = None
    #: Seconds the process has to exit after its stop signal before its process group (or,
    #: without `group_kill`, the process) is SIGKILLed.
    grace: float = 5.0
    #: What this process ending does, for a supporting process: "stop" ends the run,
    #: "ignore" lets it go on. (The process under test ending always stops the run.)
    on_exit: Literal["stop", "ignore"] = "stop"
    #: When the process counts as ready so the next one may start; None: as soon as it started.
    ready: Ready | None = None
    #: True: signals go to the process's whole process group; False: to the process only.
    group_kill: bool = True
    #: `command` split into arguments, placeholders not yet filled in (set from `command`).
    argv: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name) or self.name == "coord":
            raise ValueError(
                f"name {self.name!r} must be letters, digits, '.', '_' or '-' (not 'coord')"
            )
        argv = tuple(split_command(self.command))
        check_template(argv)
        object.__setattr__(self, "argv", argv)
        if self.stop_signal is not None:
            object.__setattr__(self, "stop_signal", parse_signal(self.stop_signal))
        object.__setattr__(self, "grace", _seconds(self.grace, "grace"))
        if self.on_exit not in ("stop", "ignore"):
            raise ValueError(f"on_exit must be 'stop' or 'ignore', got {self.on_exit!r}")
        if self.ready is not None and not isinstance(self.ready, Ready):
            raise TypeError(f"ready must be a Ready or None, got {self.ready!r}")


Outcome = Literal[
    "exited", "terminated", "killed-after-grace", "killed", "skipped", "failed-to-start",
    "still-running",
]


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """How one process of a run ended. Times are seconds from the start of the run.

    `returncode` follows `subprocess`: N for "exited N", -N for "terminated by signal N".
    `clean_stop` is true when the process exited 0, or was terminated by the stop signal the
    coordinator sent it (perf and strace re-raise SIGINT after writing their output).
    `on_its_own` is true when it ended before the coordinator signalled it.
    """

    #: The process's name, from its `ProcessSpec`.
    name: str
    #: "put" for the process under test, "support" for a supporting process.
    role: Literal["put", "support"]
    #: The command's arguments as in the spec, before placeholders are filled in.
    argv: tuple[str, ...]
    #: The process's pid, or None if it never started.
    pid: int | None
    #: "exited" (on its own or after a stop signal, with a status), "terminated" (by a
    #: signal), "killed-after-grace" (SIGKILLed when its grace ran out), "killed" (SIGKILLed
    #: by a second stop request), "skipped" (the run stopped before its turn),
    #: "failed-to-start" or "still-running" (still there after SIGKILL).
    outcome: Outcome
    #: When it started, in seconds after the run began; None if it never started.
    start: float | None
    #: Seconds from its start to its exit; None if it never started or never exited.
    duration: float | None
    #: Its exit status as `subprocess` gives it (N: exited N; -N: terminated by signal N), or
    #: None if it never started or its exit was not seen.
    returncode: int | None
    #: Every signal the coordinator sent it, in order: (signal name, seconds after the run
    #: began).
    signals: tuple[tuple[str, float], ...]
    #: The name of the signal that asks it to stop (e.g. "SIGINT").
    stop_signal: str
    #: Seconds it was given between its stop signal and SIGKILL.
    grace: float
    #: True if it exited 0, or was terminated by the stop signal the coordinator sent it.
    clean_stop: bool
    #: True if it ended before the coordinator signalled it to stop.
    on_its_own: bool
    #: Seconds from its start until it counted as ready (its `Ready` check passed); None if
    #: it has no readiness check or never became ready.
    ready_after: float | None
    #: Why it was skipped or did not start (or why its exit status is unknown); else None.
    error: str | None
    #: The last lines (at most 20) it wrote to stderr, oldest first.
    stderr_tail: tuple[str, ...]

    @property
    def description(self) -> str:
        """`exited 0`, `terminated by SIGINT (clean stop)`, `killed by SIGKILL after 0.5s grace`."""
        code = self.returncode
        if self.outcome == "skipped":
            return f"skipped ({self.error})" if self.error else "skipped"
        if self.outcome == "failed-to-start":
            return f"failed to start: {self.error}"
        if self.outcome == "still-running":
            return "still running after SIGKILL"
        if self.outcome == "killed-after-grace":
            return f"killed by SIGKILL after {self.grace:g}s grace"
        if code is None:
            return "unknown"
        if code >= 0:
            text = f"exited {code}"
        else:
            text = f"terminated by {signal_name(-code)}"
            if self.outcome == "killed":
                text += " (forced)"
            elif self.clean_stop:
                text += " (clean stop)"
        return text + (" (on its own)" if self.on_its_own else "")

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["signals"] = [{"signal": s, "at": round(t, 6)} for s, t in self.signals]
        data["argv"] = list(self.argv)
        data["stderr_tail"] = list(self.stderr_tail)
        data["description"] = self.description
        return data


@dataclass(frozen=True, slots=True)
class RunResult:
    """The outcome of `Coordinator.run()`.

    `exit_code` follows the policy of `executors supervise`: the process under test's code when
    it ended first (128+N if killed by signal N); 128+N after signal N stopped the run; 0 or 125
    when a supporting process ended first (0 only if it exited 0); 127/126 when the process under
    test is not found / not executable; 125 when a supporting process cannot start; 124 when a
    readiness check timed out. `trigger` is one of `put-exited`, `support-exited`, `signal`,
    `stop-requested`, `put-failed`, `start-failed`, `ready-timeout`.
    """

    #: The exit status for the caller, by the policy above (e.g. the process under test's own
    #: status when it ended first).
    exit_code: int
    #: What stopped the run: "put-exited", "support-exited", "signal", "stop-requested",
    #: "put-failed", "start-failed" or "ready-timeout".
    trigger: str
    #: The process whose exit, start failure or readiness timeout stopped the run; None when
    #: a signal or `stop()` did.
    trigger_name: str | None
    #: The signal that stopped the run (e.g. "SIGTERM") when `trigger` is "signal"; else None.
    trigger_signal: str | None
    #: One line saying what stopped the run (e.g. "put ended first").
    message: str
    #: Seconds from the start of the run to the end of its stop (on the coordinator's clock).
    duration: float
    #: Orphaned descendants the coordinator adopted and reaped during the run.
    orphans_reaped: int
    #: How each process ended: the process under test first, then the supporting ones in order.
    processes: tuple[ProcessResult, ...]

    def process(self, name: str) -> ProcessResult:
        """The result of the process called *name*; KeyError if there is none."""
        for p in self.processes:
            if p.name == name:
                return p
        raise KeyError(name)

    def to_dict(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "trigger": self.trigger,
            "trigger_name": self.trigger_name,
            "trigger_signal": self.trigger_signal,
            "message": self.message,
            "duration": round(self.duration, 6),
            "orphans_reaped": self.orphans_reaped,
            "processes": [p.to_dict() for p in self.processes],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format_text(self) -> str:
        """The summary table, one row per process, then the trigger and exit code."""
        header = ("name", "pid", "start", "duration", "signals", "result")
        rows = [header]
        for p in self.processes:
            sent = ",".join(s.removeprefix("SIG") for s, _ in p.signals if s != "SIGCONT")
            rows.append((
                p.name,
                "-" if p.pid is None else str(p.pid),
                "-" if p.start is None else f"+{p.start:.3f}s",
                "-" if p.duration is None else f"{p.duration:.3f}s",
                sent or "-",
                p.description,
            ))
        widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
        lines = [
            "  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
            for r in rows
        ]
        lines.append(f"coord: {self.message}; exit {self.exit_code}")
        return "\n".join(lines)
