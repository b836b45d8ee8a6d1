"""Shared helpers of the coordinator tests: the signal-recording child and its log."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

RECORDER = str(Path(__file__).resolve().parent / "signal_recorder.py")
ROOT = Path(__file__).resolve().parent.parent.parent


def recorder(log: Path, *options: str) -> list[str]:
    """argv of a signal-recording child writing to *log*."""
    return [sys.executable, RECORDER, str(log), *options]


@dataclass(frozen=True)
class Event:
    kind: str
    args: tuple[str, ...]
    at: float


def events(log: Path) -> list[Event]:
    """The events a recorder logged, in order."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        parts = line.split(" ")
        out.append(Event(parts[0], tuple(parts[1:-1]), float(parts[-1])))
    return out


def signals(log: Path) -> list[tuple[int, float]]:
    """(signal number, monotonic time) of every signal the recorder received."""
    return [(int(e.args[0]), e.at) for e in events(log) if e.kind == "signal"]


def pid_of(log: Path) -> int:
    for e in events(log):
        if e.kind == "start":
            return int(e.args[0])
    raise AssertionError(f"{log} has no start line")


def wait_until(condition: Callable[[], object], timeout: float = 10.0,
               interval: float = 0.01) -> None:
    """Poll *condition* until true; fail the test after *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {condition}")
        time.sleep(interval)


def alive(pid: int) -> bool:
    """Whether *pid* exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def env_with_package() -> dict[str, str]:
    """The environment for `python -m executors` run from the source checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env
