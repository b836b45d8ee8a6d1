"""The process coordinator engine, with real child processes that record the signals they get."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.coord_tools import RECORDER, alive, events, pid_of, recorder, signals, wait_until

from executors.coordinator import (
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_READY_TIMEOUT,
    EXIT_START_FAILED,
    Coordinator,
    ProcessSpec,
    Ready,
    RunResult,
    TemplateError,
    parse_signal,
)
from executors.coordinator._output import LineBuffer
from executors.coordinator._sys import children_of_self, proc_state
from executors.coordinator._template import render, split_command

INT, TERM, KILL, CONT = signal.SIGINT, signal.SIGTERM, signal.SIGKILL, signal.SIGCONT
READY = Ready.regex("^ready$")


def spec(name: str, argv: list[str], **kw: object) -> ProcessSpec:
    kw.setdefault("grace", 0.5)
    if RECORDER in argv:
        # Signals are only recorded once the helper installed its handlers: it says "ready".
        kw.setdefault("ready", READY)
    return ProcessSpec(name, argv, **kw)  # type: ignore[arg-type]


def trigger(tmp_path: Path, after: float = 0.3, code: int = 0) -> ProcessSpec:
    """A supporting process that ends the run by exiting after *after* seconds."""
    return spec("trigger", recorder(tmp_path / "trigger.log", "--exit-after", str(after),
                                    "--code", str(code)))


def sent(result: RunResult, name: str) -> list[str]:
    return [s for s, _ in result.process(name).signals if s != "SIGCONT"]


# -- order and escalation ------------------------------------------------------------------------


def test_supporting_processes_stop_before_the_process_under_test(tmp_path: Path) -> None:
    """Checklist 1-2: every supporting process gets SIGINT once and is reaped before the PUT
    gets anything; the PUT then gets SIGTERM once; nothing is SIGKILLed."""
    put_log, s1, s2 = tmp_path / "put.log", tmp_path / "s1.log", tmp_path / "s2.log"
    result = Coordinator(
        spec("put", recorder(put_log)),
        [spec("s1", recorder(s1)), spec("s2", recorder(s2)), trigger(tmp_path)],
    ).run()
    assert result.trigger == "support-exited" and result.trigger_name == "trigger"
    assert result.exit_code == 0
    assert [s for s, _ in signals(s1) if s != CONT] == [INT]
    assert [s for s, _ in signals(s2) if s != CONT] == [INT]
    put_signals = [(s, t) for s, t in signals(put_log) if s != CONT]
    assert [s for s, _ in put_signals] == [TERM]
    # The PUT's signal comes after both supporting processes died (their last log line).
    last_support = max(events(s1)[-1].at, events(s2)[-1].at)
    assert put_signals[0][1] > last_support
    put_result = result.process("put")
    for name in ("s1", "s2"):
        r = result.process(name)
        assert r.description == "terminated by SIGINT (clean stop)"
        assert r.start is not None and r.duration is not None
        assert r.start + r.duration <= put_result.signals[0][1]
    assert put_result.description == "terminated by SIGTERM (clean stop)"
    assert sent(result, "put") == ["SIGTERM"] and sent(result, "s1") == ["SIGINT"]
    # systemd.kill(5): SIGCONT right after the stop signal, so a stopped process can act on it.
    for name in ("s1", "s2", "put"):
        assert [s for s, _ in result.process(name).signals][1:] == ["SIGCONT"]
    assert result.process("trigger").description == "exited 0 (on its own)"


def test_ignored_stop_signals_escalate_to_sigkill_after_grace(tmp_path: Path) -> None:
    """Checklist 2-3: a child ignoring its stop signal is SIGKILLed at grace (±0.25 s) with its
    group; total shutdown stays within the sum of the graces; the summary says so."""
    put_log, s_log = tmp_path / "put.log", tmp_path / "s.log"
    start = time.monotonic()
    result = Coordinator(
        spec("put", recorder(put_log, "--ignore", "TERM"), grace=0.3),
        [spec("s", recorder(s_log, "--ignore", "INT"), grace=0.3), trigger(tmp_path, 0.2)],
    ).run()
    elapsed = time.monotonic() - start
    for name in ("s", "put"):
        r = result.process(name)
        assert r.outcome == "killed-after-grace"
        assert r.description == "killed by SIGKILL after 0.3s grace"
        times = dict(r.signals)
        assert abs(times["SIGKILL"] - times[r.stop_signal] - 0.3) < 0.25
    assert [s for s, _ in signals(s_log) if s != CONT] == [INT]
    assert [s for s, _ in signals(put_log) if s != CONT] == [TERM]
    assert pid_of(put_log) and not alive(pid_of(put_log)) and not alive(pid_of(s_log))
    assert elapsed < 0.2 + 0.3 + 0.3 + 1.5  # trigger + both graces + start-up tolerance


def test_grace_zero_means_sigkill_at_once(tmp_path: Path) -> None:
    """Checklist 2: grace 0 sends SIGKILL immediately, without a stop signal first."""
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log"), grace=0),
        [spec("s", recorder(tmp_path / "s.log"), grace=0), trigger(tmp_path, 0.1)],
    ).run()
    assert sent(result, "s") == ["SIGKILL"] and sent(result, "put") == ["SIGKILL"]
    assert result.process("s").outcome == "killed-after-grace"
    assert result.process("put").outcome == "killed-after-grace"
    # "At once": the SIGKILL goes out in the loop turn that saw the trigger exit, and the PUT's
    # only after the supporting process is gone.
    t, s, put = (result.process(n) for n in ("trigger", "s", "put"))
    assert t.start is not None and t.duration is not None and s.duration is not None
    trigger_seen = t.start + t.duration
    assert 0 <= s.signals[0][1] - trigger_seen < 0.1
    assert s.start is not None and put.signals[0][1] >= s.start + s.duration
    assert [sg for sg, _ in signals(tmp_path / "s.log")] == []  # nothing before the SIGKILL


def test_slow_cleanup_within_grace_is_not_killed(tmp_path: Path) -> None:
    """Checklist 4: a child that handles its stop signal and needs 0.5 s to write its output
    (the py-spy/perf-stat case) is waited for, not SIGKILLed, and its file exists."""
    log = tmp_path / "s.log"
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("s", recorder(log, "--cleanup", "0.5"), grace=3), trigger(tmp_path, 0.1)],
    ).run()
    assert Path(str(log) + ".done").read_text() == "done\n"
    assert sent(result, "s") == ["SIGINT"]
    assert result.process("s").description == "exited 0"
    assert result.process("s").clean_stop


def test_configured_stop_signals_are_sent(tmp_path: Path) -> None:
    """--stop-signal: each process gets the signal configured for it instead of the default
    (INT for the PUT, HUP for a supporting process); dying by it counts as a clean stop."""
    put_log, s_log = tmp_path / "put.log", tmp_path / "s.log"
    result = Coordinator(
        spec("put", recorder(put_log), stop_signal=INT),
        [spec("s", recorder(s_log), stop_signal=signal.SIGHUP), trigger(tmp_path, 0.1)],
    ).run()
    assert [s for s, _ in signals(s_log) if s != CONT] == [signal.SIGHUP]
    assert [s for s, _ in signals(put_log) if s != CONT] == [INT]
    assert result.process("s").description == "terminated by SIGHUP (clean stop)"
    assert result.process("put").description == "terminated by SIGINT (clean stop)"
    assert result.process("s").stop_signal == "SIGHUP"


def test_group_kill_reaches_grandchildren(tmp_path: Path) -> None:
    """Checklist 5, 18: `sh -c "sleep 1000 & sleep 1000"` leaves no sleep alive after the run."""
    pids = tmp_path / "pids"
    script = f"sleep 1000 & echo $! > {pids}; echo ready; sleep 1000"
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("sh", ["sh", "-c", script]), trigger(tmp_path, 0.2)],
    ).run()
    background = int(pids.read_text())
    assert not alive(background)
    assert proc_state(background) is None  # not even a zombie: adopted and reaped
    assert result.process("sh").outcome == "terminated"


def test_without_group_kill_only_the_shell_is_signalled(tmp_path: Path) -> None:
    """Checklist 5 (negative control): with group kill off (and no subreaper to adopt the
    orphans) the background sleep survives the run."""
    pids = tmp_path / "pids"
    script = f"sleep 1000 & echo $! > {pids}; echo ready; wait"
    Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("sh", ["sh", "-c", script], group_kill=False, grace=0.2),
         trigger(tmp_path, 0.2)],
        subreaper=False,
    ).run()
    background = int(pids.read_text())
    try:
        assert alive(background)
    finally:
        os.kill(background, signal.SIGKILL)


def test_stopped_child_still_terminates(tmp_path: Path) -> None:
    """Checklist 6: a SIGSTOPped child gets SIGCONT after its stop signal and ends cleanly,
    well before its grace would expire."""
    log = tmp_path / "s.log"
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("s", recorder(log, "--self-stop"), grace=5), trigger(tmp_path, 0.3)],
    ).run()
    wait_until(lambda: proc_state(pid_of(log)) is None)
    r = result.process("s")
    assert r.description == "terminated by SIGINT (clean stop)"
    assert r.duration is not None and r.duration < 3
    assert INT in [s for s, _ in signals(log)]


def _run_stopping_twice(coordinator: Coordinator, log: Path, stop_signal: signal.Signals
                        ) -> tuple[RunResult, float]:
    """Run *coordinator*; from another thread, stop() it once the process logging to *log* has
    started, and again once that process received *stop_signal*. The result and the run's
    duration in seconds."""

    def stopper() -> None:
        wait_until(lambda: pid_of_or_none(log))
        coordinator.stop()
        wait_until(lambda: stop_signal in [s for s, _ in signals(log)])
        coordinator.stop()

    thread = threading.Thread(target=stopper)
    thread.start()
    start = time.monotonic()
    result = coordinator.run()
    thread.join()
    return result, time.monotonic() - start


def test_second_stop_request_skips_the_grace(tmp_path: Path) -> None:
    """Checklist 7: a second stop() while a child waits out its grace SIGKILLs it at once."""
    put_log = tmp_path / "put.log"
    coordinator = Coordinator(
        spec("put", recorder(put_log, "--ignore", "TERM"), grace=20), handle_signals=False,
    )
    result, elapsed = _run_stopping_twice(coordinator, put_log, TERM)
    assert elapsed < 5
    assert result.trigger == "stop-requested" and result.exit_code == 143
    assert result.process("put").description == "terminated by SIGKILL (forced)"


def test_second_stop_during_supporting_grace_kills_the_rest_in_order(tmp_path: Path) -> None:
    """Checklist 7: a second stop() while a supporting process waits out its grace SIGKILLs it
    at once; the PUT then gets SIGKILL straight away (no stop signal, no grace), still only
    after the supporting process is gone."""
    put_log, s_log = tmp_path / "put.log", tmp_path / "s.log"
    coordinator = Coordinator(
        spec("put", recorder(put_log, "--ignore", "TERM"), grace=20),
        [spec("s", recorder(s_log, "--ignore", "INT"), grace=20)],
        handle_signals=False,
    )
    result, elapsed = _run_stopping_twice(coordinator, s_log, INT)
    assert elapsed < 10  # not the 2 x 20 s of grace
    assert result.trigger == "stop-requested" and result.exit_code == 143
    s, put = result.process("s"), result.process("put")
    assert sent(result, "s") == ["SIGINT", "SIGKILL"]
    assert s.description == "terminated by SIGKILL (forced)"
    assert sent(result, "put") == ["SIGKILL"]
    assert put.description == "terminated by SIGKILL (forced)"
    assert [sg for sg, _ in signals(put_log)] == []  # never got a SIGTERM
    assert s.start is not None and s.duration is not None
    assert put.signals[0][1] >= s.start + s.duration


def pid_of_or_none(log: Path) -> int | None:
    return next((int(e.args[0]) for e in events(log) if e.kind == "start"), None)


# -- triggers and exit codes ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [("sys.exit(0)", 0), ("sys.exit(3)", 3), ("sys.exit(255)", 255),
     ("os.kill(os.getpid(), signal.SIGSEGV)", 139), ("os.kill(os.getpid(), signal.SIGKILL)", 137)],
)
def test_process_under_test_ending_first_gives_its_exit_code(
    tmp_path: Path, code: str, expected: int
) -> None:
    """Checklist 8: the PUT's own status (128+N when killed by signal N) becomes the exit code,
    after the supporting processes were stopped."""
    program = f"import os, signal, sys, time; time.sleep(0.3); {code}"
    result = Coordinator(
        spec("put", [sys.executable, "-c", program]),
        [spec("s", recorder(tmp_path / "s.log"))],
    ).run()
    assert result.trigger == "put-exited" and result.exit_code == expected
    assert result.process("put").on_its_own
    assert sent(result, "s") == ["SIGINT"] and sent(result, "put") == []


@pytest.mark.parametrize(("code", "expected"), [(0, 0), (4, EXIT_START_FAILED)])
def test_supporting_process_ending_first_stops_the_run(
    tmp_path: Path, code: int, expected: int
) -> None:
    """Checklist 9: a supporting process (on_exit=stop) ending first stops the PUT; exit 0 if it
    exited 0 else 125; the summary names the trigger."""
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")), [trigger(tmp_path, 0.1, code)],
    ).run()
    assert (result.trigger, result.trigger_name, result.exit_code) == (
        "support-exited", "trigger", expected)
    assert f"exit {expected}" in result.format_text()
    assert "trigger ended first" in result.format_text()


def test_on_exit_ignore_keeps_running_and_reaps_promptly(tmp_path: Path) -> None:
    """Checklist 9, 15, 20: with on_exit=ignore a supporting process that fails at once does not
    stop the run, is reaped promptly (no zombie while the PUT runs), keeps its exact exit code,
    and its stderr tail is in the summary."""
    quick_log = tmp_path / "quick.log"
    put_log = tmp_path / "put.log"
    seen: dict[str, object] = {}

    def watch() -> None:
        wait_until(lambda: pid_of_or_none(quick_log))
        pid = pid_of(quick_log)
        wait_until(lambda: proc_state(pid) is None, timeout=5)
        seen["gone_at"] = time.monotonic()

    thread = threading.Thread(target=watch)
    thread.start()
    result = Coordinator(
        spec("put", recorder(put_log, "--exit-after", "1.0")),
        [spec("quick", recorder(quick_log, "--exit-after", "0", "--code", "5",
                                "--stderr", "perf: No such process"), on_exit="ignore")],
    ).run()
    thread.join()
    put_exit = next(e.at for e in events(put_log) if e.kind == "exit")
    assert isinstance(seen["gone_at"], float) and seen["gone_at"] < put_exit
    assert result.trigger == "put-exited" and result.exit_code == 0
    quick = result.process("quick")
    assert quick.returncode == 5 and quick.description == "exited 5 (on its own)"
    assert "perf: No such process" in quick.stderr_tail


# -- start-up failures ---------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "expected"), [
    (["no-such-command-executors-test"], EXIT_NOT_FOUND),
    (["/etc/hostname"], EXIT_NOT_EXECUTABLE),
])
def test_put_that_cannot_start(tmp_path: Path, argv: list[str], expected: int) -> None:
    """Checklist 13: PUT not found / not executable → 127 / 126; nothing else starts."""
    s_log = tmp_path / "s.log"
    result = Coordinator(spec("put", argv), [spec("s", recorder(s_log))]).run()
    assert result.exit_code == expected and result.trigger == "put-failed"
    assert not s_log.exists()
    assert result.process("s").outcome == "skipped"
    assert result.process("put").outcome == "failed-to-start"


def test_supporting_command_not_found(tmp_path: Path) -> None:
    """Checklist 14: the PUT is stopped and reaped, exit 125, the message names the command,
    and the processes after it never start."""
    put_log, later = tmp_path / "put.log", tmp_path / "later.log"
    result = Coordinator(
        spec("put", recorder(put_log)),
        [spec("bad", ["no-such-profiler-executors-test", "-p", "{pid}"]),
         spec("later", recorder(later))],
    ).run()
    assert result.exit_code == EXIT_START_FAILED and result.trigger == "start-failed"
    assert "no-such-profiler-executors-test" in result.process("bad").description
    assert [s for s, _ in signals(put_log) if s != CONT] == [TERM]
    assert not alive(pid_of(put_log)) and not later.exists()
    assert result.process("later").outcome == "skipped"


def test_supporting_process_failing_before_ready_stops_the_run_at_once(tmp_path: Path) -> None:
    """Checklist 15: a profiler that cannot attach exits before its readiness line (py-spy
    without ptrace rights); that is a trigger at once (125, its stderr tail in the summary), not
    a readiness timeout, and the processes after it never start."""
    put_log, later = tmp_path / "put.log", tmp_path / "later.log"
    message = "Error: Operation not permitted (os error 1)"
    failing = [sys.executable, "-c",
               f"import sys; print({message!r}, file=sys.stderr); sys.exit(1)"]
    start = time.monotonic()
    result = Coordinator(
        spec("put", recorder(put_log)),
        [spec("spy", failing, ready=Ready.regex("Sampling process")),
         spec("later", recorder(later))],
        ready_timeout=30,
    ).run()
    assert time.monotonic() - start < 10
    assert (result.trigger, result.trigger_name, result.exit_code) == (
        "support-exited", "spy", EXIT_START_FAILED)
    spy = result.process("spy")
    assert spy.description == "exited 1 (on its own)" and spy.ready_after is None
    assert spy.stderr_tail == (message,)
    assert result.process("later").outcome == "skipped" and not later.exists()
    assert [s for s, _ in signals(put_log) if s != CONT] == [TERM]


def test_put_gone_before_supporting_start_skips_them(tmp_path: Path) -> None:
    """Checklist 16: a PUT that is already gone means no profiler is started on its pid."""
    s_log = tmp_path / "s.log"
    result = Coordinator(
        spec("put", ["true"], ready=Ready.delay(0.3)), [spec("s", recorder(s_log))],
    ).run()
    assert result.exit_code == 0 and result.trigger == "put-exited"
    assert result.process("s").outcome == "skipped" and not s_log.exists()


def test_readiness_timeout_stops_the_run(tmp_path: Path) -> None:
    """Checklist 17: a readiness regex that never matches stops the run after ready_timeout
    with exit 124 and a distinct message; later processes never start."""
    later = tmp_path / "later.log"
    start = time.monotonic()
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("s", recorder(tmp_path / "s.log"), ready=Ready.regex("never")),
         spec("later", recorder(later))],
        ready_timeout=0.5,
    ).run()
    assert result.exit_code == EXIT_READY_TIMEOUT and result.trigger == "ready-timeout"
    assert result.message == "s not ready after 0.5s"
    assert 0.5 <= time.monotonic() - start < 4
    assert not later.exists()


def test_readiness_orders_the_start(tmp_path: Path) -> None:
    """A supporting process starts only after the previous one printed its ready line."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("a", recorder(a, "--ready-delay", "0.3")), spec("b", recorder(b)),
         trigger(tmp_path, 0.1)],
    ).run()
    ra, rb = result.process("a"), result.process("b")
    assert ra.ready_after is not None and ra.ready_after >= 0.3
    assert ra.start is not None and rb.start is not None and rb.start >= ra.start + 0.3


# -- reaping and resources -----------------------------------------------------------------------


# A PUT that exits 3 as soon as the file named by its argument exists.
EXIT_ON_FILE = (
    "import os, sys, time\n"
    "deadline = time.monotonic() + 30\n"
    "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:\n"
    "    time.sleep(0.01)\n"
    "sys.exit(3)\n"
)
# A supporting process that, on SIGINT, waits until the test creates a file, then exits 0.
HOLD_ON_INT = (
    "import os, signal, sys, time\n"
    "release = sys.argv[1]\n"
    "def stop(signum, frame):\n"
    "    open(release + '.got', 'w').close()\n"
    "    deadline = time.monotonic() + 30\n"
    "    while not os.path.exists(release) and time.monotonic() < deadline:\n"
    "        time.sleep(0.01)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGINT, stop)\n"
    "open(release + '.ready', 'w').close()\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    time.sleep(3600)\n"
)


def test_put_pid_stays_reserved_until_the_supporting_processes_are_gone(tmp_path: Path) -> None:
    """The PUT is reaped last: after it ended on its own, its pid stays a zombie child of the
    coordinator (so it cannot be recycled) while a profiler is still writing its output; it is
    reaped once that profiler is gone."""
    release = tmp_path / "release"
    seen: dict[str, object] = {}
    coordinator = Coordinator(
        # The PUT ends once the holder is ready (has its SIGINT handler).
        spec("put", [sys.executable, "-c", EXIT_ON_FILE, f"{release}.ready"]),
        [spec("holder", [sys.executable, "-c", HOLD_ON_INT, str(release)], ready=READY,
              grace=30)],
    )

    def watch() -> None:
        try:
            wait_until(lambda: Path(f"{release}.got").exists(), timeout=30)
            pid = coordinator.put_pid
            assert pid is not None
            seen["state"], seen["ppid"] = proc_state(pid), _ppid(pid)
        finally:
            release.touch()

    thread = threading.Thread(target=watch)
    thread.start()
    result = coordinator.run()
    thread.join()
    assert seen == {"state": "Z", "ppid": os.getpid()}
    assert result.exit_code == 3 and result.process("put").returncode == 3
    assert result.process("holder").description == "exited 0"
    put_pid = result.process("put").pid
    assert put_pid is not None and proc_state(put_pid) is None  # reaped at the end


def test_no_zombie_and_no_survivor_after_the_run(tmp_path: Path) -> None:
    """Checklist 18-19: grandchildren killed with their group die at the same moment as the
    PUT; they are adopted and must all be reaped before run() returns, so nothing started by a
    run is left, not even as a zombie child of the host program (/proc/PID is gone)."""
    before = children_of_self()
    for i in range(5):
        pids = tmp_path / f"pids{i}"
        script = (f"for i in 1 2 3 4 5 6 7 8; do sleep 1000 & echo $! >> {pids}; done; "
                  "echo ready; wait")
        result = Coordinator(
            spec("put", ["sh", "-c", script], ready=READY), [spec("t", ["sleep", "0.05"])],
        ).run()
        assert result.trigger == "support-exited"
        grandchildren = [int(p) for p in pids.read_text().split()]
        assert len(grandchildren) == 8
        assert [p for p in grandchildren if proc_state(p) is not None] == []
        assert children_of_self() - before == set()
        assert result.process("put").pid not in children_of_self()


def test_orphans_are_reaped_as_subreaper(tmp_path: Path) -> None:
    """Checklist 19-20: an orphaned grandchild of the PUT is reparented to the coordinator and
    reaped within ~0.5 s of its death; the PUT's exit code stays exact (no waitpid(-1) trap)."""
    pidfile = tmp_path / "orphan"
    script = f"(sleep 0.2 & echo $! > {pidfile}); sleep 1; exit 7"
    seen: dict[str, float] = {}

    def watch() -> None:
        wait_until(lambda: pidfile.exists() and pidfile.read_text().strip())
        pid = int(pidfile.read_text())
        wait_until(lambda: _ppid(pid) in (os.getpid(), None), timeout=5)
        seen["reparented"] = 1.0 if _ppid(pid) == os.getpid() else 0.0
        wait_until(lambda: proc_state(pid) is None, timeout=5)
        seen["gone"] = time.monotonic()

    thread = threading.Thread(target=watch)
    thread.start()
    start = time.monotonic()
    result = Coordinator(spec("put", ["sh", "-c", script])).run()
    thread.join()
    assert result.exit_code == 7 and result.process("put").returncode == 7
    assert result.orphans_reaped >= 1
    assert seen["reparented"] == 1.0
    assert seen["gone"] - start < 0.2 + 0.5 + 0.5


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def test_orphan_reaping_negative_controls(tmp_path: Path) -> None:
    """Checklist 19 (negative controls): without the subreaper the orphan's parent is not the
    coordinator; with the reaper disabled by a test hook, a zombie with ppid = coordinator
    appears (so the positive test would fail without the feature)."""
    pidfile = tmp_path / "orphan"
    script = f"(sleep 0.1 & echo $! > {pidfile}); sleep 0.8"
    ppids: list[int | None] = []

    def watch() -> None:
        wait_until(lambda: pidfile.exists() and pidfile.read_text().strip())
        ppids.append(_ppid(int(pidfile.read_text())))

    thread = threading.Thread(target=watch)
    thread.start()
    Coordinator(spec("put", ["sh", "-c", script]), subreaper=False).run()
    thread.join()
    assert ppids and ppids[0] != os.getpid()

    pidfile.unlink()
    coordinator = Coordinator(spec("put", ["sh", "-c", script]))
    # Disable the reaper's reaping itself (the loop's and the final one at the end).
    coordinator._orphans.reap = lambda managed: None  # type: ignore[method-assign]
    coordinator.run()
    orphan = int(pidfile.read_text())
    try:
        assert proc_state(orphan) == "Z" and _ppid(orphan) == os.getpid()
    finally:
        os.waitpid(orphan, 0)


def test_escaped_orphans_are_stopped_at_the_end(tmp_path: Path) -> None:
    """Checklist 18 (tini#236): a grandchild that left the process group with setsid is
    adopted by the coordinator when its parent dies and is stopped before the run ends."""
    pidfile = tmp_path / "escaped"
    script = f"setsid sleep 1000 & echo $! > {pidfile}; echo ready; sleep 1000"
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("sh", ["sh", "-c", script], ready=READY), trigger(tmp_path, 0.2)],
    ).run()
    escaped = int(pidfile.read_text())
    assert not alive(escaped)
    assert proc_state(escaped) is None  # reaped, not left as a zombie of the host program
    assert result.exit_code == 0


def test_children_start_with_clean_signal_state(tmp_path: Path) -> None:
    """Checklist 21: even when the coordinator's thread blocks INT/TERM/QUIT and ignores
    INT/QUIT, children start with an empty mask, nothing ignored, stdin from /dev/null."""
    log = tmp_path / "put.log"
    blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGQUIT}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    old_quit = signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    try:
        Coordinator(spec("put", recorder(log, "--exit-after", "0")), handle_signals=False).run()
    finally:
        signal.signal(signal.SIGQUIT, old_quit)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    status = next(e for e in events(log) if e.kind == "status")
    sig_blk, sig_ign, stdin = status.args
    assert int(sig_blk, 16) == 0
    for sig in blocked:
        assert not int(sig_ign, 16) & (1 << (sig - 1))
    assert stdin == "/dev/null"


def test_large_output_and_an_inherited_pipe_do_not_block(tmp_path: Path) -> None:
    """Checklist 22: 4 MiB of output are drained (written raw to the log) from a PUT that ignores
    SIGTERM; a process whose grandchild keeps stdout open is seen to exit at once (pidfd, not
    pipe EOF), and the grandchild goes with its group."""
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log", "--flood", str(4 << 20), "--ignore", "TERM"),
             grace=0.3),
        [spec("holder", ["sh", "-c", "sleep 30 & echo ready; sleep 0.3; exit 0"], ready=READY)],
        log_dir=tmp_path / "logs",
    ).run()
    assert result.trigger == "support-exited" and result.trigger_name == "holder"
    assert (tmp_path / "logs" / "put.out").stat().st_size >= 4 << 20
    holder = result.process("holder")
    assert holder.duration is not None and holder.duration < 2  # not the 30 s of the sleep
    assert result.process("put").outcome == "killed-after-grace"


def test_summary_json_and_log_files(tmp_path: Path) -> None:
    """Checklist 25: one row per process with pid, start offset, duration, signals and result;
    summary.json matches the schema; a log file per process and stream, and coord.log."""
    logs = tmp_path / "logs"
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log", "--stderr", "warming up")),
        [spec("s", recorder(tmp_path / "s.log")), trigger(tmp_path, 0.1)],
        log_dir=logs,
    ).run()
    data = json.loads((logs / "summary.json").read_text())
    assert data == json.loads(result.to_json())
    schema = {"exit_code": int, "trigger": str, "trigger_name": (str, type(None)),
              "trigger_signal": (str, type(None)), "message": str, "duration": float,
              "orphans_reaped": int, "processes": list}
    assert set(data) == set(schema)
    for key, kind in schema.items():
        assert isinstance(data[key], kind), key
    row_schema = {"name": str, "role": str, "argv": list, "pid": int, "outcome": str,
                  "start": float, "duration": float, "returncode": int, "signals": list,
                  "stop_signal": str, "grace": float, "clean_stop": bool, "on_its_own": bool,
                  "ready_after": (float, type(None)), "error": (str, type(None)),
                  "stderr_tail": list, "description": str}
    assert [p["name"] for p in data["processes"]] == ["put", "s", "trigger"]
    for row in data["processes"]:
        assert set(row) == set(row_schema)
        for key, kind in row_schema.items():
            assert isinstance(row[key], kind), (row["name"], key)
        for sig in row["signals"]:
            assert set(sig) == {"signal", "at"}
    for name in ("put", "s", "trigger"):
        assert (logs / f"{name}.out").read_text().startswith("ready")
        assert (logs / f"{name}.err").exists()
    assert (logs / "put.err").read_text() == "warming up\n"
    assert "sending SIGINT to s" in (logs / "coord.log").read_text()
    text = result.format_text().splitlines()
    assert text[0].split() == ["name", "pid", "start", "duration", "signals", "result"]
    assert len(text) == 1 + 3 + 1  # header, one row per process, the trigger line
    for line, p in zip(text[1:4], result.processes, strict=True):
        assert p.start is not None and p.duration is not None
        cells = line.split(maxsplit=5)
        assert cells[:4] == [p.name, str(p.pid), f"+{p.start:.3f}s", f"{p.duration:.3f}s"]
        assert cells[5] == p.description
    assert text[2].split(maxsplit=5)[4:] == ["INT", "terminated by SIGINT (clean stop)"]
    assert text[1].split(maxsplit=5)[4:] == ["TERM", "terminated by SIGTERM (clean stop)"]
    assert text[3].split(maxsplit=5)[4:] == ["-", "exited 0 (on its own)"]
    assert text[4] == "coord: trigger ended first; exit 0"


def test_escalation_uses_the_monotonic_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """Checklist 26: a wall clock jumping by an hour per call changes no escalation time."""
    jump = iter(range(0, 10**9, 3600))
    monkeypatch.setattr(time, "time", lambda: float(next(jump)))
    result = Coordinator(
        spec("put", recorder(tmp_path / "put.log")),
        [spec("s", recorder(tmp_path / "s.log", "--ignore", "INT"), grace=0.3),
         trigger(tmp_path, 0.1)],
        echo=sys.stdout,
    ).run()
    times = dict(result.process("s").signals)
    assert abs(times["SIGKILL"] - times["SIGINT"] - 0.3) < 0.25


# -- templates, specs, API -----------------------------------------------------------------------


def test_placeholders_and_environment_reach_the_children(tmp_path: Path) -> None:
    """{pid}, {name} and {outdir} are substituted in a supporting command, and every child gets
    EXECUTORS_NAME / EXECUTORS_OUTDIR (plus EXECUTORS_PUT_PID for supporting processes)."""
    logs, outdir = tmp_path / "logs", tmp_path / "out"
    # `{{`/`}}`: literal braces for the shell's own ${VAR-default}.
    show = 'echo "$EXECUTORS_NAME|${{EXECUTORS_PUT_PID-unset}}|$EXECUTORS_OUTDIR|$0"'
    result = Coordinator(
        # Ready once it has printed: the supporting process ends the run at once, and a
        # loaded machine once stopped the process under test before its shell had echoed.
        spec("put", ["sh", "-c", show + "; exec sleep 30", "{name}"],
             ready=Ready.regex(r"^put\|")),
        [spec("s", ["sh", "-c", show, "{pid}:{name}:{outdir}"], ready=Ready.delay(0))],
        log_dir=logs, outdir=outdir,
    ).run()
    put_pid = result.process("put").pid
    assert result.trigger == "support-exited" and result.exit_code == 0
    assert (logs / "put.out").read_text() == f"put|unset|{outdir}|put\n"
    assert (logs / "s.out").read_text() == f"s|{put_pid}|{outdir}|{put_pid}:s:{outdir}\n"


def test_template_substitutes_per_argument_without_a_shell() -> None:
    """Checklist 24: substitution is per argv element; `{{`/`}}` stay literal; unknown
    placeholders and lone braces are errors."""
    argv = split_command("py-spy record -o '{outdir}/a b.svg' -p {pid} '{pid}; echo x' {{pid}}")
    assert render(argv, {"pid": "42", "name": "n", "outdir": "/o"}) == [
        "py-spy", "record", "-o", "/o/a b.svg", "-p", "42", "42; echo x", "{pid}"]
    with pytest.raises(TemplateError, match=r"unknown placeholder \{foo\}"):
        ProcessSpec("s", "tool {foo}")
    with pytest.raises(TemplateError, match="unmatched"):
        ProcessSpec("s", "tool {")
    with pytest.raises(TemplateError, match=r"\{pid\}"):
        Coordinator(ProcessSpec("put", "app {pid}"))


def test_specs_reject_bad_input() -> None:
    """Bad names, graces, signals and readiness are refused at construction, naming the value."""
    with pytest.raises(ValueError, match="name"):
        ProcessSpec("coord", "x")
    with pytest.raises(ValueError, match="grace"):
        ProcessSpec("a", "x", grace=-1)
    with pytest.raises(ValueError, match="grace"):
        ProcessSpec("a", "x", grace=float("nan"))
    with pytest.raises(ValueError, match="empty"):
        ProcessSpec("a", "")
    with pytest.raises(ValueError, match="on_exit"):
        ProcessSpec("a", "x", on_exit="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown signal"):
        parse_signal("NOPE")
    assert parse_signal("int") == parse_signal("SIGINT") == parse_signal(2) == signal.SIGINT
    with pytest.raises(ValueError, match="regex:PATTERN or delay:SECONDS"):
        Ready.parse("soon")
    with pytest.raises(ValueError, match="unique"):
        Coordinator(ProcessSpec("a", "x"), [ProcessSpec("a", "y")])
    with pytest.raises(ValueError, match="ready_timeout"):
        Coordinator(ProcessSpec("a", "x"), ready_timeout=0)
    # Seconds follow executors._validate's one rule: no bool, nothing infinite.
    with pytest.raises(TypeError, match="grace must be a number of seconds"):
        ProcessSpec("a", "x", grace=True)
    with pytest.raises(ValueError, match="ready_timeout must be a finite number"):
        Coordinator(ProcessSpec("a", "x"), ready_timeout=float("inf"))
    with pytest.raises(ValueError, match="ready delay must be >= 0"):
        Ready.delay(-1)


def test_run_twice_and_thread_rules(tmp_path: Path) -> None:
    """A coordinator runs once; handle_signals needs the main thread; repr and statistics
    show the state."""
    coordinator = Coordinator(spec("put", ["true"]))
    assert "new" in repr(coordinator)
    coordinator.run()
    assert "done" in repr(coordinator)
    stats = coordinator.statistics()
    assert (stats.phase, stats.started, stats.exited, stats.running) == ("done", 1, 1, 0)
    with pytest.raises(RuntimeError, match="runs once"):
        coordinator.run()
    errors: list[BaseException] = []

    def in_thread() -> None:
        try:
            Coordinator(spec("put", ["true"])).run()
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join()
    assert errors and "main thread" in str(errors[0])


def test_stop_before_run_stops_right_after_start(tmp_path: Path) -> None:
    """stop() before run() is remembered: the PUT starts, then is stopped in order at once."""
    coordinator = Coordinator(spec("put", recorder(tmp_path / "put.log")),
                              [spec("s", recorder(tmp_path / "s.log"))])
    coordinator.stop()
    result = coordinator.run()
    assert result.trigger == "stop-requested"
    assert result.process("s").outcome == "skipped"


def test_line_buffer_splits_and_bounds_lines() -> None:
    """Partial lines wait for their newline; an endless line is cut, never buffered unbounded."""
    buf = LineBuffer()
    assert buf.feed(b"ab") == []
    assert buf.feed(b"c\nd") == [b"abc"]
    assert buf.flush() == [b"d"]
    assert len(buf.feed(b"x" * (200 * 1024))) == 3


# A program whose main thread calls stop() in a loop while a signal handler calls it too: the
# handler runs between two bytecodes of the main thread, possibly inside stop() itself. Any lock
# on that path would be taken twice by one thread and the program would hang (the reason
# PeriodicExecutor.close() takes none either). It runs in a child so a hang fails the test
# instead of freezing pytest.
_STOP_FROM_HANDLER = """
import os, signal, sys, threading
from executors.coordinator import Coordinator, ProcessSpec

put = ProcessSpec("put", [sys.executable, "-c", "import time; time.sleep(60)"], grace=0)
coordinator = Coordinator(put, handle_signals=False)
handled = 0

def on_usr1(signum, frame):
    global handled
    handled += 1
    coordinator.stop()

signal.signal(signal.SIGUSR1, on_usr1)
main = threading.get_ident()
fired = threading.Event()

def fire():
    for _ in range(int(sys.argv[1])):
        signal.pthread_kill(main, signal.SIGUSR1)
    fired.set()

runner = threading.Thread(target=coordinator.run)
runner.start()
threading.Thread(target=fire).start()
calls = 0
while not fired.is_set() or calls < 1000:
    coordinator.stop()
    calls += 1
runner.join(30)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
stats = coordinator.statistics()
print(calls, handled, stats.stop_requests, stats.phase, runner.is_alive(), flush=True)
"""


@pytest.mark.timeout(120)
def test_stop_is_safe_in_a_signal_handler_that_interrupts_stop() -> None:
    """stop() called from a signal handler that interrupts the same thread's own stop() call
    (thousands of times) never deadlocks; every request is counted, and the run stops."""
    try:
        proc = subprocess.run([sys.executable, "-c", _STOP_FROM_HANDLER, "20000"],
                              capture_output=True, text=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("stop() from a signal handler deadlocked the program")
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls, handled, requests, phase, alive = proc.stdout.split()
    assert int(handled) > 0
    assert int(requests) == int(calls) + int(handled)
    assert (phase, alive) == ("done", "False")
