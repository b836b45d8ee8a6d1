"""`BackgroundService.run_until_signal`: a program's main thread serves until SIGTERM or Ctrl-C.

Each behaviour runs in a real child process (the signal handlers and the wake-up fd are the
process's): a signal taken by one of the service's own threads (thread-directed with
`pthread_kill`, the delivery that hung the docs' earlier `Event.wait()` entry point), SIGINT
and SIGTERM sent by the parent, a `close()` from a job, a start that fails. Bad arguments are
refused in this process before anything starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from executors import BackgroundService, ShutdownError

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

# The child's common part: INFO logs on stderr, and after the call a line saying whether the
# process's signal state is back as it was (handlers, wake-up fd).
PRELUDE = """
import logging, signal, sys, threading
from executors import BackgroundService
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))

def restored():
    fd = signal.set_wakeup_fd(-1)
    return (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before \\
        and fd == -1
"""


def _child(body: str) -> subprocess.Popen[str]:
    code = PRELUDE + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "WARNING" not in err, err[-3000:]
    return out, err


def _wait_serving(proc: subprocess.Popen[str]) -> list[str]:
    """Read the child's stderr up to the line saying it serves (its handlers are set)."""
    assert proc.stderr is not None
    lines = []
    while "serving until" not in (line := proc.stderr.readline()):
        assert line, f"the child ended before serving: {''.join(lines)}"
        lines.append(line)
    return lines


def test_a_sigterm_taken_by_a_service_thread_stops_the_service() -> None:
    """The kernel may hand a process's signal to any thread that does not block it; here a
    job's worker thread takes it. The main thread still wakes at once, the service shuts
    down (the report complete), and the handlers and wake-up fd are restored."""
    proc = _child("""
        svc = BackgroundService("sig")
        hits = []

        @svc.every(0.01, name="killer")
        def killer():
            hits.append(threading.current_thread().name)
            if len(hits) == 1:
                signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

        report = svc.run_until_signal(timeout=10)
        print(report.completed, restored(), hits[0] != "MainThread", svc.statistics().state)
    """)
    out, err = _finish(proc)
    assert out.split() == ["True", "True", "True", "closed"], (out, err)
    assert "INFO sig: serving until SIGTERM or SIGINT" in err
    assert "INFO sig: SIGTERM received: shutting down" in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_default_signals_sent_by_another_process_stop_it_cleanly(
        sig: signal.Signals) -> None:
    """Ctrl-C (SIGINT) and a process manager's SIGTERM, sent from outside as soon as the
    service serves: exit 0, no KeyboardInterrupt, the signal named in the log, a run in
    progress finished by the shutdown."""
    proc = _child("""
        import time
        svc = BackgroundService("sig")
        done = []

        @svc.every(0.01, name="work")
        def work():
            time.sleep(0.05)  # simulated work the shutdown waits for
            done.append(1)

        report = svc.run_until_signal(timeout=10)
        print(report.completed, report.unfinished_jobs, restored())
    """)
    _wait_serving(proc)
    proc.send_signal(sig)
    out, err = _finish(proc)
    assert out.split() == ["True", "()", "True"], (out, err)
    assert f"INFO sig: {sig.name} received: shutting down" in err
    assert "KeyboardInterrupt" not in err


def test_a_second_ctrl_c_interrupts_a_shutdown_that_waits() -> None:
    """The handlers go back when the wait ends: a first SIGINT begins a shutdown that waits
    for a run in progress (no timeout), a second one raises KeyboardInterrupt out of it, as
    Ctrl-C does in a program that set no handler."""
    proc = _child("""
        release = threading.Event()
        svc = BackgroundService("sig")

        @svc.every(0.01, name="long")
        def long():
            print("running", flush=True)
            release.wait(30)

        try:
            svc.run_until_signal(timeout=None)
        except KeyboardInterrupt:
            print("interrupted", restored(), flush=True)
        release.set()
        print(svc.shutdown(10).completed)
    """)
    _wait_serving(proc)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == "running\n"
    proc.send_signal(signal.SIGINT)
    assert proc.stderr.readline() == "INFO sig: SIGINT received: shutting down\n"
    proc.send_signal(signal.SIGINT)
    out, err = _finish(proc)
    assert out.split() == ["interrupted", "True", "True"], (out, err)


def test_only_the_signals_given_are_waited_for() -> None:
    """With ``SIGUSR1`` given, SIGUSR1 stops it; SIGTERM keeps its own handler meanwhile (here
    the program's), and the program's handlers are back afterwards."""
    proc = _child("""
        import os
        got = []
        signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
        before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT))
        svc = BackgroundService("sig")

        @svc.every(0.01, name="sender")
        def sender():
            if not got:
                os.kill(os.getpid(), signal.SIGTERM)  # the program's handler, not a stop
            elif len(got) == 1:
                got.append("usr1")
                os.kill(os.getpid(), signal.SIGUSR1)

        report = svc.run_until_signal(signal.SIGUSR1, timeout=10)
        print(report.completed, got, restored())
    """)
    out, err = _finish(proc)
    assert out.strip() == "True [15, 'usr1'] True", (out, err)
    assert "INFO sig: serving until SIGUSR1" in err
    assert "INFO sig: SIGUSR1 received: shutting down" in err


def test_a_close_from_a_job_ends_the_wait() -> None:
    """A service shut down from elsewhere (here its own job) ends `run_until_signal` too; a
    main thread waiting for a signal that will not come would hang the program."""
    proc = _child("""
        svc = BackgroundService("sig")

        @svc.every(0.01, name="closer")
        def closer():
            svc.close()

        report = svc.run_until_signal(timeout=10)
        print(report.completed, restored())
    """)
    out, err = _finish(proc)
    assert out.split() == ["True", "True"], (out, err)
    assert "INFO sig: shut down while serving" in err


def test_a_service_that_cannot_start_raises_with_the_handlers_restored() -> None:
    """`start`'s error comes out of `run_until_signal` (here: the service was shut down), the
    handlers are back and no thread is left."""
    proc = _child("""
        from executors import ShutdownError
        svc = BackgroundService("sig")
        svc.shutdown()
        try:
            svc.run_until_signal()
        except ShutdownError as exc:
            print("ShutdownError", restored(), threading.active_count())
    """)
    out, err = _finish(proc)
    assert out.split() == ["ShutdownError", "True", "1"], (out, err)


@pytest.mark.parametrize(("signals", "error", "match"), [
    ((signal.SIGKILL,), ValueError, "signals: SIGKILL cannot be waited for"),
    ((signal.SIGSEGV,), ValueError, "signals: SIGSEGV cannot be waited for"),
    ((0,), ValueError, "signals: 0 is not a signal"),
    ((100_000,), ValueError, "signals: 100000 is not a signal"),
    (("SIGTERM",), TypeError, "signals must be signal numbers"),
    ((True,), TypeError, "signals must be signal numbers"),
    ((1.0,), TypeError, "signals must be signal numbers"),
])
def test_bad_signals_are_refused_before_anything_starts(
        signals: tuple[object, ...], error: type[Exception], match: str) -> None:
    svc = BackgroundService("bad")
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    threads = threading.active_count()
    with pytest.raises(error, match=match):
        svc.run_until_signal(*signals)  # type: ignore[arg-type]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    assert threading.active_count() == threads
    assert svc.statistics().state == "idle"
    svc.shutdown()


@pytest.mark.parametrize(("timeout", "error"), [(-1, ValueError), ("10", TypeError),
                                                 (float("nan"), ValueError)])
def test_a_bad_timeout_is_refused_before_anything_starts(timeout: object,
                                                          error: type[Exception]) -> None:
    svc = BackgroundService("bad")
    with pytest.raises(error, match="timeout"):
        svc.run_until_signal(timeout=timeout)  # type: ignore[arg-type]
    assert svc.statistics().state == "idle"
    svc.shutdown()


def test_outside_the_main_thread_it_says_why() -> None:
    """Python runs signal handlers in the main thread only: from another thread, a
    RuntimeError saying so, and the service is not started."""
    svc = BackgroundService("elsewhere")
    errors: list[BaseException] = []

    def call() -> None:
        try:
            svc.run_until_signal()
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join(10)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
    assert "main thread" in str(errors[0])
    assert svc.statistics().state == "idle"
    with pytest.raises(ShutdownError):  # unchanged by the refused call: it can still be shut
        svc.shutdown()
        svc.start()
