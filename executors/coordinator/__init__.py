"""The process coordinator: a process under test, supporting processes on its pid, ordered stop.

A subsystem of its own: it uses nothing else from `executors` but the one rule for seconds,
and the `executors supervise` command is a thin layer over it.
"""

from __future__ import annotations

# Layout (every module but this one is private; the one rule for seconds is
# `executors._validate`):
#
# - `_engine.py`: `Coordinator`, the event loop and the stop state machine;
# - `_spec.py`: what it is told to run (`ProcessSpec`, `Ready`) and what it reports (results);
# - `_child.py`: one managed child (its pipes, pidfd, signals sent, result);
# - `_orphans.py`: adopting and reaping orphaned descendants as a subreaper;
# - `_output.py`: line buffering and the labelled live echo;
# - `_sys.py`: Linux process plumbing (spawning, the subreaper flag, process groups, /proc);
# - `_template.py`: `{pid}`/`{name}`/`{outdir}` command templates, never run by a shell.
from ._engine import EXIT_NOT_EXECUTABLE as EXIT_NOT_EXECUTABLE
from ._engine import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from ._engine import EXIT_READY_TIMEOUT as EXIT_READY_TIMEOUT
from ._engine import EXIT_START_FAILED as EXIT_START_FAILED
from ._engine import Coordinator as Coordinator
from ._engine import CoordinatorStatistics as CoordinatorStatistics
from ._spec import ProcessResult as ProcessResult
from ._spec import ProcessSpec as ProcessSpec
from ._spec import Ready as Ready
from ._spec import RunResult as RunResult
from ._spec import parse_signal as parse_signal
from ._template import PLACEHOLDERS as PLACEHOLDERS
from ._template import TemplateError as TemplateError

__all__ = (
    "Coordinator",
    "CoordinatorStatistics",
    "ProcessSpec",
    "Ready",
    "ProcessResult",
    "RunResult",
    "TemplateError",
    "PLACEHOLDERS",
    "EXIT_READY_TIMEOUT",
    "EXIT_START_FAILED",
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "parse_signal",
)
