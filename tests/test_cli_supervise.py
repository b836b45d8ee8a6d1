"""`executors supervise`: the command line, real signals to the coordinator, real profilers."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.coord_tools import (
    RECORDER,
    alive,
    env_with_package,
    events,
    pid_of,
    recorder,
    signals,
    wait_until,
)

INT, TERM, CONT = signal.SIGINT, signal.SIGTERM, signal.SIGCONT
CLI = [sys.executable, "-m", "executors", "supervise"]


def with_(name: str, log: Path, *options: str) -> list[str]:
    """`--with NAME=<recorder>` plus its readiness."""
    command = " ".join([sys.executable, RECORDER, str(log), *options])
    return ["--with", f"{name}={command}", "--ready", f"{name}=regex:^ready$"]


def start(args: list[str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args], env=env_with_package(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, **kw,  # type: ignore[call-overload]
    )


def run(args: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], env=env_with_package(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def started(log: Path) -> bool:
    return any(e.kind == "start" for e in events(log))


def json_summary(stderr: str) -> dict[str, object]:
    data = json.loads(stderr[stderr.index("{"):])
    assert isinstance(data, dict)
    return data


def rows(summary: dict[str, object]) -> dict[str, dict[str, object]]:
    processes = summary["processes"]
    assert isinstance(processes, list)
    return {p["name"]: p for p in processes}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_to_coordinator_stops_in_order_then_dies_by_it(tmp_path: Path,
                                                             sig: signal.Signals) -> None:
    """Checklist 10: SIGTERM/SIGINT/SIGHUP to the coordinator → supporting processes stopped,
    then the PUT, then the coordinator dies by the same signal (returncode -15 / -2 / -1)."""
    put, s1, s2 = tmp_path / "put.log", tmp_path / "s1.log", tmp_path / "s2.log"
    proc = start([*with_("s1", s1), *with_("s2", s2), "--grace", "1", "--summary", "json",
                  "--ready", "put=regex:^ready$", "--", *recorder(put)])
    wait_until(lambda: started(s2))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == -sig
    summary = json_summary(err)
    assert summary["trigger"] == "signal" and summary["trigger_signal"] == sig.name
    assert summary["exit_code"] == 128 + sig
    put_sigs = [(s, t) for s, t in signals(put) if s != CONT]
    assert [s for s, _ in put_sigs] == [TERM]
    for log in (s1, s2):
        assert [s for s, _ in signals(log) if s != CONT] == [INT]
        assert events(log)[-1].at < put_sigs[0][1]
        assert not alive(pid_of(log))
    assert not alive(pid_of(put))


def test_second_signal_kills_at_once(tmp_path: Path) -> None:
    """Checklist 7: a second SIGTERM during a long grace SIGKILLs what is left at once; the
    coordinator still dies by SIGTERM."""
    put = tmp_path / "put.log"
    proc = start(["--grace", "20", "--summary", "json", "--ready", "put=regex:^ready$", "--",
                  *recorder(put, "--ignore", "TERM")])
    wait_until(lambda: started(put))
    t0 = time.monotonic()
    proc.send_signal(TERM)
    wait_until(lambda: TERM in [s for s, _ in signals(put)])
    proc.send_signal(TERM)
    _, err = proc.communicate(timeout=20)
    assert time.monotonic() - t0 < 5
    assert proc.returncode == -TERM
    assert rows(json_summary(err))["put"]["description"] == "terminated by SIGKILL (forced)"


def test_ctrl_c_to_the_process_group(tmp_path: Path) -> None:
    """Checklist 11: Ctrl-C reaches the coordinator's group only; each child gets exactly one
    signal, from the coordinator, in order (supporting first)."""
    put, s1 = tmp_path / "put.log", tmp_path / "s1.log"
    proc = start([*with_("s1", s1), "--ready", "put=regex:^ready$", "--grace", "1", "--",
                  *recorder(put)], process_group=0)
    wait_until(lambda: started(s1))
    os.killpg(proc.pid, signal.SIGINT)
    proc.communicate(timeout=20)
    assert proc.returncode == -INT
    assert [s for s, _ in signals(s1) if s != CONT] == [INT]
    put_sigs = [(s, t) for s, t in signals(put) if s != CONT]
    assert [s for s, _ in put_sigs] == [TERM]
    assert signals(s1)[0][1] < put_sigs[0][1]


def test_signal_during_startup(tmp_path: Path) -> None:
    """Checklist 12: SIGTERM while the 2nd of 3 supporting processes waits for readiness →
    the started ones are stopped in order, the 3rd never starts."""
    put, a, b, c = (tmp_path / f"{n}.log" for n in ("put", "a", "b", "c"))
    proc = start([*with_("a", a), "--with", f"b={sys.executable} {RECORDER} {b}",
                  "--ready", "b=regex:never", *with_("c", c), "--ready", "put=regex:^ready$",
                  "--summary", "json", "--grace", "1", "--", *recorder(put)])
    wait_until(lambda: started(b))
    proc.send_signal(TERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == -TERM
    assert not c.exists()
    table = rows(json_summary(err))
    assert table["c"]["outcome"] == "skipped"
    assert [s for s, _ in signals(a) if s != CONT] == [INT]
    assert [s for s, _ in signals(b) if s != CONT] == [INT]
    assert [s for s, _ in signals(put) if s != CONT] == [TERM]


def test_exit_codes_of_the_command(tmp_path: Path) -> None:
    """Checklist 8, 13: the PUT's code passes through; 127 / 126 for not found / not
    executable, with nothing else started."""
    assert run(["--", "sh", "-c", "exit 3"]).returncode == 3
    assert run(["--", "sh", "-c", "kill -SEGV $$"]).returncode == 139
    s = tmp_path / "s.log"
    assert run([*with_("s", s), "--", "no-such-command-executors"]).returncode == 127
    assert run([*with_("s", s), "--", "/etc/hostname"]).returncode == 126
    assert not s.exists()


def test_supporting_command_not_found_exits_125(tmp_path: Path) -> None:
    """Checklist 14: 125, the PUT stopped, the message names the command."""
    put = tmp_path / "put.log"
    proc = run(["--with", "spy=no-such-profiler-executors -p {pid}", "--ready",
                "put=regex:^ready$", "--", *recorder(put)])
    assert proc.returncode == 125
    assert "no-such-profiler-executors" in proc.stderr
    assert [s for s, _ in signals(put) if s != CONT] == [TERM]
    assert not alive(pid_of(put))


def test_pid_placeholder_never_reaches_a_shell(tmp_path: Path) -> None:
    """Checklist 24: `'{pid}; echo injected'` is one literal argument, `{{pid}}` stays literal;
    an unknown placeholder is a usage error (exit 2) before anything starts."""
    log = tmp_path / "s.log"
    template = f"s={sys.executable} {RECORDER} {log} '{{pid}}; echo injected' {{{{pid}}}} {{name}}"
    proc = run(["--with", template,
                "--ready", "s=regex:^ready$", "--", "sh", "-c", "sleep 0.5"])
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(_argv_line(log))
    assert argv[1:] == [f"{_put_pid(proc.stderr)}; echo injected", "{pid}", "s"]
    assert "injected" not in proc.stdout.replace("echo injected", "")
    marker = tmp_path / "never"
    bad = run(["--with", f"s=touch {marker} {{foo}}", "--", "touch", str(marker)])
    assert bad.returncode == 2 and "unknown placeholder {foo}" in bad.stderr
    assert not marker.exists()


def _argv_line(log: Path) -> str:
    line = next(raw for raw in log.read_text().splitlines() if raw.startswith("argv "))
    return line[len("argv "):line.rindex(" ")]


def _put_pid(stderr: str) -> int:
    for line in stderr.splitlines():
        if line.startswith("put "):
            return int(line.split()[1])
    raise AssertionError(stderr)


# Usage errors: (argv, what stderr must say). One test each, so a parallel run spreads them.
USAGE_ERRORS = [
    (["--", ], "missing -- COMMAND"),
    (["--grace", "nope=1", "--", "true"], "no process named 'nope'"),
    (["--stop-signal", "put=WAT", "--", "true"], "unknown signal"),
    (["--with", "a=true", "--on-exit", "a=maybe", "--", "true"], "stop or ignore"),
    (["--with", "a", "--", "true"], "NAME=COMMAND"),
    (["--ready", "put=soon", "--", "true"], "regex:PATTERN or delay:SECONDS"),
    (["--no-group-kill", "nope", "--", "true"], "no process named 'nope'"),
    # Seconds follow the library's one rule, and the message names the flag as typed.
    (["--grace", "-1", "--", "true"], "--grace must be >= 0 seconds, got -1.0"),
    (["--grace", "nan", "--", "true"], "--grace must be a finite number of seconds"),
    (["--grace", "put=inf", "--", "true"], "--grace put must be a finite number of seconds"),
    (["--grace", "soon", "--", "true"], "--grace 'soon': expected a number of seconds"),
    (["--ready-timeout", "0", "--", "true"], "--ready-timeout must be > 0 seconds, got 0.0"),
    (["--ready-timeout", "inf", "--", "true"], "--ready-timeout must be a finite number"),
    (["--ready", "put=delay:-1", "--", "true"],
     "--ready put=delay:-1: ready delay must be >= 0 seconds"),
]


@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS, ids=[m for _, m in USAGE_ERRORS])
def test_usage_errors(args: list[str], message: str) -> None:
    """Usage errors exit 2 with a message naming the flag: unknown names, bad values (seconds
    by the library's one rule), no command."""
    proc = run(args)
    assert proc.returncode == 2, (args, proc.stderr)
    assert message in proc.stderr, (args, proc.stderr)


def test_per_process_options(tmp_path: Path) -> None:
    """--stop-signal NAME=SIGNAL and --grace NAME=SECONDS apply to that process only; the
    defaults are INT (supporting) / TERM (PUT) and 5 s; --ready-timeout gives 124; a py-spy
    record configured to stop by SIGTERM draws a warning (it would lose its output)."""
    put, s, t = tmp_path / "put.log", tmp_path / "s.log", tmp_path / "t.log"
    proc = run([*with_("s", s), *with_("t", t), "--stop-signal", "s=HUP", "--grace", "s=0.7",
                "--stop-signal", "put=INT", "--with", "end=sleep 0.2", "--summary", "json",
                "--ready", "put=regex:^ready$", "--", *recorder(put)])
    assert proc.returncode == 0, proc.stderr
    table = rows(json_summary(proc.stderr))
    assert (table["s"]["stop_signal"], table["s"]["grace"]) == ("SIGHUP", 0.7)
    assert (table["t"]["stop_signal"], table["t"]["grace"]) == ("SIGINT", 5.0)
    assert (table["put"]["stop_signal"], table["put"]["grace"]) == ("SIGINT", 5.0)
    assert [sg for sg, _ in signals(s) if sg != CONT] == [signal.SIGHUP]
    assert [sg for sg, _ in signals(t) if sg != CONT] == [INT]
    assert [sg for sg, _ in signals(put) if sg != CONT] == [INT]
    assert table["s"]["description"] == "terminated by SIGHUP (clean stop)"

    timeout = run(["--ready", "put=regex:never", "--ready-timeout", "0.3", "--", "sleep", "30"])
    assert timeout.returncode == 124, timeout.stderr
    assert "put not ready after 0.3s" in timeout.stderr

    warned = run(["--with", "spy=/nonexistent/py-spy record -o x.svg -p {pid}",
                  "--stop-signal", "spy=TERM", "--summary", "none", "--", "true"])
    assert "py-spy record writes nothing when stopped by SIGTERM" in warned.stderr
    assert "--stop-signal spy=INT" in warned.stderr


def test_colours_on_a_terminal(tmp_path: Path) -> None:
    """--color auto (the default) colours the labels when stdout is a terminal (and, in
    test_summary_logs_and_colours, not when it is a pipe)."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([*CLI, "--summary", "none", "--", "echo", "hi"],
                                env=env_with_package(), stdout=slave, stderr=subprocess.DEVNULL)
        os.close(slave)
        slave = -1
        out = b""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 4096)  # returns once there is output or EIO at EOF
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=30) == 0
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)
    text = out.decode()
    assert "hi" in text and "\x1b[" in text


def test_summary_logs_and_colours(tmp_path: Path) -> None:
    """Checklist 25: --log-dir holds raw per-stream logs, coord.log and summary.json; the text
    summary has one row per process; no colour codes when stdout is not a terminal."""
    logs = tmp_path / "logs"
    proc = run(["--log-dir", str(logs), "--with", "s=sh -c 'echo out; echo err >&2; exit 0'",
                "--on-exit", "s=ignore", "--", "sh", "-c", "echo hello; sleep 0.3"])
    assert proc.returncode == 0, proc.stderr
    assert (logs / "put.out").read_text() == "hello\n"
    assert (logs / "s.out").read_text() == "out\n" and (logs / "s.err").read_text() == "err\n"
    assert json.loads((logs / "summary.json").read_text())["exit_code"] == 0
    assert "\x1b[" not in proc.stdout
    assert "| hello" in proc.stdout and "s!" in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert lines[0].split()[0] == "name" and lines[-1] == "coord: put ended first; exit 0"
    coloured = run(["--color", "always", "--summary", "none", "--", "echo", "hi"])
    assert "\x1b[" in coloured.stdout and coloured.stderr == ""


def test_children_start_with_clean_signal_state_from_the_cli(tmp_path: Path) -> None:
    """Checklist 21: a coordinator started with INT/TERM/QUIT blocked and INT/QUIT ignored
    (as under nohup or `cmd &`) still starts children with a clean mask and nothing ignored;
    the negative control shows the same launcher passes its state on without the coordinator."""
    launcher = (
        "import os, signal, sys;"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM,"
        " signal.SIGQUIT});"
        "signal.signal(signal.SIGINT, signal.SIG_IGN);"
        "signal.signal(signal.SIGQUIT, signal.SIG_IGN);"
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    direct, managed = tmp_path / "direct.log", tmp_path / "managed.log"
    env = env_with_package()
    subprocess.run([sys.executable, "-c", launcher, *recorder(direct, "--exit-after", "0")],
                   env=env, check=True, timeout=30, capture_output=True)
    subprocess.run([sys.executable, "-c", launcher, *CLI, "--", *recorder(
        managed, "--exit-after", "0")], env=env, check=True, timeout=30, capture_output=True)

    def state(log: Path) -> tuple[int, int]:
        status = next(e for e in events(log) if e.kind == "status")
        return int(status.args[0], 16), int(status.args[1], 16)

    quit_bit = 1 << (signal.SIGQUIT - 1)
    int_bit = 1 << (signal.SIGINT - 1)
    blocked, ignored = state(direct)
    assert blocked & quit_bit and ignored & int_bit and ignored & quit_bit  # negative control
    blocked, ignored = state(managed)
    assert blocked == 0 and not ignored & (int_bit | quit_bit | 1 << (signal.SIGTERM - 1))


def _can_unshare() -> bool:
    if not shutil.which("unshare"):
        return False
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"],
                          capture_output=True, timeout=10, check=False)
    return proc.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="unshare --pid --fork --mount-proc not permitted")
def test_as_pid_1_handles_sigterm_and_reaps_orphans(tmp_path: Path) -> None:
    """Checklist 19, 23: as PID 1 of a namespace SIGTERM is not dropped: ordered shutdown, then
    exit 143 (a PID 1 cannot die by its own default signal); orphans are reaped meanwhile."""
    put, s = tmp_path / "put.log", tmp_path / "s.log"
    orphans = tmp_path / "orphans"
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *CLI, "--summary", "json",
         "--log-dir", str(tmp_path / "logs"),
         *with_("s", s), "--with",
         f"maker=sh -c '(sleep 0.1 &) ; echo ready > {orphans}; sleep 100'",
         "--ready", "put=regex:^ready$", "--grace", "1", "--", *recorder(put)],
        env=env_with_package(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: started(s) and orphans.exists())
    coordinator = _only_child(proc.pid)
    coord_log = tmp_path / "logs" / "coord.log"
    wait_until(lambda: coord_log.exists() and "reaped orphan" in coord_log.read_text())
    os.kill(coordinator, signal.SIGTERM)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 143, err
    summary = json_summary(err)
    assert summary["trigger"] == "signal" and summary["orphans_reaped"] >= 1
    put_sigs = [(sg, t) for sg, t in signals(put) if sg != CONT]
    assert [sg for sg, _ in put_sigs] == [TERM]
    assert signals(s)[0][1] < put_sigs[0][1]


def _only_child(pid: int) -> int:
    def child() -> int | None:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
        except OSError:
            return None
        return int(kids[0]) if kids else None

    wait_until(child)
    found = child()
    assert found is not None
    return found


def _py_spy() -> str | None:
    return shutil.which("py-spy") or shutil.which("py-spy", path=os.path.dirname(sys.executable))


BUSY = (
    "import time\n"
    "end = time.monotonic() + 60\n"
    "while time.monotonic() < end:\n"
    "    sum(range(1000))\n"
)


@pytest.mark.skipif(_py_spy() is None, reason="py-spy is not installed (pip install py-spy)")
def test_py_spy_end_to_end(tmp_path: Path) -> None:
    """A real py-spy record on {pid}, stopped by SIGINT when a timer ends the run, writes its
    flame graph and counts as a clean stop (SIGTERM would have lost it: research note §3)."""
    logs = tmp_path / "logs"
    spy = _py_spy()
    proc = run(["--log-dir", str(logs), "--summary", "json",
                "--with", f"spy={spy} record -r 50 -o {{outdir}}/put.svg -p {{pid}}",
                "--ready", "spy=regex:Sampling process",
                "--with", "timer=sleep 1.5", "--grace", "10",
                "--", sys.executable, "-c", BUSY], timeout=50)
    table = rows(json_summary(proc.stderr))
    tail = " ".join(table["spy"]["stderr_tail"]).lower()  # type: ignore[arg-type]
    if proc.returncode == 125 and ("permission" in tail or "ptrace" in tail):
        pytest.skip(f"py-spy cannot attach here (ptrace not permitted): {tail[-300:]}")
    assert proc.returncode == 0, proc.stderr
    assert table["spy"]["clean_stop"] and table["spy"]["signals"][0]["signal"] == "SIGINT"
    svg = logs / "put.svg"
    assert svg.exists() and svg.stat().st_size > 0 and b"<svg" in svg.read_bytes()[:2000]


def _perf_stat_works() -> bool:
    if not shutil.which("perf"):
        return False
    proc = subprocess.run(["perf", "stat", "-e", "task-clock", "true"], capture_output=True,
                          timeout=20, check=False)
    return proc.returncode == 0


@pytest.mark.skipif(not _perf_stat_works(), reason="perf is not installed or not permitted "
                    "(Debian: linux-perf; kernel.perf_event_paranoid)")
def test_perf_stat_end_to_end(tmp_path: Path) -> None:
    """A real `perf stat -p {pid}`, stopped by SIGINT, prints its counters and re-raises SIGINT:
    reported as "terminated by SIGINT (clean stop)"."""
    logs = tmp_path / "logs"
    proc = run(["--log-dir", str(logs), "--summary", "json",
                "--with", "perf=perf stat -e task-clock -p {pid}", "--ready", "perf=delay:0.3",
                "--with", "timer=sleep 1", "--grace", "10",
                "--", sys.executable, "-c", BUSY], timeout=50)
    assert proc.returncode == 0, proc.stderr
    perf = rows(json_summary(proc.stderr))["perf"]
    assert perf["clean_stop"], perf
    assert "task-clock" in (logs / "perf.err").read_text()
