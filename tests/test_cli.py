"""The `executors` command: `bench` runs areas with progress and renders reports; `demo` runs."""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from executors import _cli
from executors._cli import _bench_report, _demo_app, _demo_server
from executors._cli import bench as _bench
from executors.testing import wait_until

ROOT = Path(__file__).resolve().parent.parent


def _result(area: str = "toy", *, quick: bool = False) -> dict[str, object]:
    """A results file as benchmarks/_harness.py writes it."""
    return {
        "area": area, "quick": quick, "rounds": 3, "python": "3.11.7", "machine": "x86_64",
        "started": 1_795_000_000.0, "seconds": 12.5,
        "metrics": [
            {"name": "hand-off", "unit": "ms", "better": "lower", "note": "one producer",
             "floor": "floor", "medians": {"executors": 0.2, "peer-a": 2.0, "floor": 0.1},
             "samples": {"executors": [0.2, 0.25, 0.19], "peer-a": [2.0, 2.2, 1.9],
                         "floor": [0.1, 0.1, 0.11]},
             "unavailable": ["peer-b"], "best_peer": "peer-a", "advantage_over_best_peer": 10.0},
            {"name": "idle wake-ups", "unit": "1/s", "better": "lower", "note": "",
             "floor": None, "medians": {"peer-a": 2.0, "executors": 0.0},
             "samples": {"peer-a": [2.0], "executors": [0.0]}, "unavailable": [],
             "best_peer": "peer-a", "advantage_over_best_peer": float("inf")},
        ],
    }


def test_render_writes_a_page_and_a_chart_per_area(tmp_path: Path) -> None:
    """Each results file becomes a page (ours first, ratio column second) and a PNG chart."""
    results, out = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    (results / "toy.json").write_text(json.dumps(_result()))
    written = _bench_report.render_all(results, out)
    assert {p.name for p in written} == {"toy.md", "toy.png", "index.md"}
    page = (out / "toy.md").read_text()
    header = next(line for line in page.splitlines() if line.startswith("| metric"))
    assert header == "| metric | advantage | of floor | executors | peer-a | peer-b | floor |"
    # Ranges are min to max over the rounds (peer-a / ours, ours / floor, round by round);
    # a file written before the spreads were stored gets them computed from its samples.
    row = ("| hand-off (ms, lower is better) | **10.0x** vs peer-a (8.80 to 10.00) | "
           "2.00x (1.73 to 2.50) | **0.200** | 2.000 | unavailable | 0.100 |")
    assert row in page
    assert "| idle wake-ups (1/s, lower is better) | **∞x** vs peer-a | — |" in page
    assert "**∞x** vs peer-a" in page
    assert "![toy: ours beside the peers](toy.png)" in page
    assert "full run, 3 rounds, Python 3.11.7" in page
    assert (out / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    index = (out / "index.md").read_text()
    assert "| [toy](toy.md) | hand-off (ms) | **10.0x** vs peer-a | full, Python 3.11.7 |" in index


def test_bench_counts_rounds_in_proper_english(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A quick run says "1 round", a page of one round says "1 round", never "1 rounds" or
    "round(s)" (issue 24: `executors bench periodic --quick` printed "(quick, 1 rounds, ...)")."""
    from benchmarks import _harness

    metric = _harness.Metric("noop", "ms", "lower", {_bench_report.OURS: lambda: 1.0})
    _harness.run_area("toy", lambda quick: [metric], argv=["--quick", "--no-write"])
    heading = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("##"))
    assert heading.startswith("## toy (quick, 1 round, Python "), heading
    results, out = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    (results / "toy.json").write_text(json.dumps({**_result(quick=True), "rounds": 1}))
    _bench_report.render_all(results, out)
    page = (out / "toy.md").read_text()
    assert "quick run, 1 round, Python 3.11.7" in page and "round(s)" not in page, page


def test_results_carry_the_machine_state_and_the_page_shows_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run records two threads' raw-lock ping-pong before and after its metrics (issue 23: a
    figure that depends on the machine's state is published with that state); the page says
    it, and a file written before the state was recorded renders without it."""
    from benchmarks import _harness

    metric = _harness.Metric("noop", "ms", "lower", {_bench_report.OURS: lambda: 1.0})
    written = tmp_path / "toy.json"
    _harness.run_area("toy", lambda quick: [metric], argv=["--quick", "--json", str(written)])
    before, after = json.loads(written.read_text())["thread_wake_us"]
    assert 0 < before < 1e6 and 0 < after < 1e6
    heading = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("##"))
    assert f"thread ping-pong {before:.1f} us before, {after:.1f} us after" in heading, heading
    results, out = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    (results / "toy.json").write_text(json.dumps({**_result(), "thread_wake_us": [151.7, 67.4]}))
    (results / "old.json").write_text(json.dumps({**_result(), "area": "old"}))
    _bench_report.render_all(results, out, charts=False)
    assert ("two threads' raw-lock ping-pong 152 us per round trip before, 67 us after"
            in (out / "toy.md").read_text())
    assert "ping-pong" not in (out / "old.md").read_text()



def test_ratios_are_the_median_of_the_round_by_round_ratios(tmp_path: Path) -> None:
    """Advantage and "of floor" compare the contenders round by round, and publish the median of
    those ratios, not the ratio of the medians (issue 23: a paired round compares one state of
    the machine; the two medians may come from rounds the machine ran at different speeds)."""
    from benchmarks import _harness

    # Ours, the peer and the floor per round: ours pays 1.1x, 1.1x and 1.5x the floor's time
    # and is 2x, 2x and 1.2x better than the peer. The machine's speed changed between rounds,
    # so the medians come from different rounds: their ratios would say 1.5x and 1.2x.
    rounds = iter([(1.1, 2.2, 1.0), (4.4, 8.8, 4.0), (3.0, 3.6, 2.0)])
    current: list[tuple[float, float, float]] = []

    def sample(index: int) -> float:
        if index == 0:
            current[:] = [next(rounds)]
        return current[0][index]

    metric = _harness.Metric("hand-off", "ms", "lower",
                             {_bench_report.OURS: lambda: sample(0), "peer": lambda: sample(1),
                              "bare": lambda: sample(2)}, floor="bare")
    summary = _harness.measure(metric, 3)
    assert summary["medians"] == {"executors": 3.0, "peer": 3.6, "bare": 2.0}
    assert summary["advantage_over_best_peer"] == pytest.approx(2.0)
    assert summary["floor_multiple"] == pytest.approx(1.1)
    results, out = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    (results / "toy.json").write_text(json.dumps({**_result(), "metrics": [summary]}))
    _bench_report.render_all(results, out, charts=False)
    assert ("| **2.0x** vs peer (1.20 to 2.00) | 1.10x (1.10 to 1.50) | **3.000** | 3.600 | 2.000 |"
            in (out / "toy.md").read_text())

def test_render_removes_pages_of_areas_without_results(tmp_path: Path) -> None:
    """With prune (the repository's docs), a page whose results file is gone is deleted, so the
    docs never show a stale area; without it (a user's folder) nothing of theirs is."""
    results, out = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    out.mkdir()
    (out / "old.md").write_text("# old\n")
    (out / "old.png").write_bytes(b"x")
    (results / "toy.json").write_text(json.dumps(_result()))
    _bench_report.render_all(results, out, charts=False)
    assert sorted(p.name for p in out.iterdir()) == ["index.md", "old.md", "old.png", "toy.md"]
    assert "toy.png" not in (out / "toy.md").read_text()  # no chart, no dangling image
    _bench_report.render_all(results, out, charts=False, prune=True)
    assert sorted(p.name for p in out.iterdir()) == ["index.md", "toy.md"]


FAKE_AREA = textwrap.dedent("""
    import sys
    for name in ("first metric", "second metric"):
        print(f"[fake] {name} ...", file=sys.stderr, flush=True)
    print("a warning the area wants seen", file=sys.stderr)
    print("| metric | advantage | executors |")
""")


def test_run_areas_reports_progress_and_passes_tables_through(tmp_path: Path) -> None:
    """Progress lines become plain progress on a non-terminal; the table reaches stdout."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "fake.py").write_text(FAKE_AREA)
    (tmp_path / "benchmarks" / "broken.py").write_text("raise SystemExit(3)\n")
    out, err = io.StringIO(), io.StringIO()
    runs = _bench.run_areas(["fake", "broken"], quick=True, write=False, root=tmp_path,
                            results_dir=tmp_path / "results", stdout=out, stderr=err)
    assert [(r.area, r.returncode, r.metrics_done) for r in runs] == [
        ("fake", 0, 2), ("broken", 3, 0)]
    assert out.getvalue() == "| metric | advantage | executors |\n"
    log = err.getvalue()
    assert "[1/2] fake: first metric" in log and "[1/2] fake: second metric" in log
    assert "a warning the area wants seen" in log
    assert "[1/2] fake: ok, 2 metrics" in log
    assert "[2/2] broken: FAILED (exit 3)" in log


RECORDING_AREA = textwrap.dedent("""
    import json, pathlib, sys
    pathlib.Path("argv.json").write_text(json.dumps(sys.argv[1:]))
    print("[rec] only metric ...", file=sys.stderr, flush=True)
""")


def test_run_areas_full_mode_writes_results_quick_mode_does_not(tmp_path: Path) -> None:
    """A full run asks the area for no --quick and a results file in results_dir; a quick run
    that writes nothing asks for --quick --no-write."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "rec.py").write_text(RECORDING_AREA)
    results = tmp_path / "results"
    for quick, write, expected in (
            (False, True, ["--json", str(results / "rec.json")]),
            (True, False, ["--quick", "--no-write"]),
            (True, True, ["--quick", "--json", str(results / "rec.json")])):
        runs = _bench.run_areas(["rec"], quick=quick, write=write, results_dir=results,
                                root=tmp_path, stdout=io.StringIO(), stderr=io.StringIO())
        assert [(r.returncode, r.metrics_done) for r in runs] == [(0, 1)]
        assert json.loads((tmp_path / "argv.json").read_text()) == expected


@pytest.mark.timeout(60)
def test_run_areas_draws_a_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal (a real pty) progress is one line redrawn in place, with a bar sized by
    the area's previous results file; the area's end is a plain line."""
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "__init__.py").write_text("")
    (tmp_path / "benchmarks" / "fake.py").write_text(FAKE_AREA)
    results = tmp_path / "results"
    results.mkdir()
    (results / "fake.json").write_text(json.dumps(_result("fake")))  # 2 metrics expected
    leader, follower = os.openpty()
    chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: chunks.append(_read_all(leader)),
                              name="pty-reader")
    reader.start()
    try:
        with open(follower, "w", closefd=True) as terminal:
            assert terminal.isatty()
            runs = _bench.run_areas(["fake"], quick=True, write=False, results_dir=results,
                                    root=tmp_path, stdout=io.StringIO(), stderr=terminal)
        reader.join(30)
    finally:
        os.close(leader)
    assert [r.returncode for r in runs] == [0]
    shown = b"".join(chunks).decode()
    assert "\r\x1b[K[1/1] fake [" in shown
    assert "] 1/2 " in shown and "second metric" in shown, shown
    assert "[1/1] fake: ok, 2 metrics" in shown


@pytest.mark.timeout(150)
def test_a_real_area_writes_json_that_renders_a_table_and_a_chart(tmp_path: Path) -> None:
    """A real area's results file (quick, into a temporary folder) has every field the
    renderer needs, and becomes a page with our column first and a PNG chart."""
    area = "taskgroups" if "taskgroups" in _bench.areas() else _bench.areas()[0]
    results, out = tmp_path / "results", tmp_path / "docs"
    runs = _bench.run_areas([area], quick=True, write=True, results_dir=results,
                            stdout=io.StringIO(), stderr=io.StringIO())
    assert [r.returncode for r in runs] == [0]
    data = json.loads((results / f"{area}.json").read_text())
    assert data["area"] == area and data["quick"] is True and data["metrics"]
    for metric in data["metrics"]:
        assert _bench_report.OURS in metric["medians"]
        assert set(metric) >= set(_bench_report.MetricResult.__annotations__)
    written = {p.name for p in _bench_report.render_all(results, out)}
    assert written == {f"{area}.md", f"{area}.png", "index.md"}
    page = (out / f"{area}.md").read_text()
    assert "| metric | advantage | " in page and "executors |" in page
    assert "quick run" in page
    assert (out / f"{area}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_refuses_unknown_areas(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown area is refused with exit code 2 and the list of areas to choose from."""
    assert _cli.main(["bench", "no-such-area"]) == 2
    err = capsys.readouterr().err
    assert "unknown area(s) no-such-area" in err and "periodic" in err


def test_bench_render_takes_no_areas(capsys: pytest.CaptureFixture[str]) -> None:
    """`--render` re-renders everything; combining it with areas is an error, not a guess."""
    assert _cli.main(["bench", "--render", "periodic"]) == 2
    assert "--render takes no areas" in capsys.readouterr().err


def _executors(*args: str) -> list[str]:
    """The real command, as a user runs it: a fresh interpreter, `python -m executors`."""
    return [sys.executable, "-m", "executors", *args]


def _tracked_bench_files() -> dict[Path, tuple[int, int]]:
    """The repository's results files and docs pages, with their modification time and size."""
    files = [*_bench.REPO_RESULTS_DIR.iterdir(), *_bench.REPO_DOCS_DIR.iterdir()]
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.is_file()}


def _stderr_on_a_terminal(cmd: list[str]) -> tuple[int, str]:
    """Run *cmd* with its stderr on a terminal (a real pty); its exit status and what it drew."""
    leader, follower = os.openpty()
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=follower)
        os.close(follower)
        follower = -1
        drawn = _read_all(leader).decode()
        return proc.wait(timeout=100), drawn
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)


QUICK_AREA = "taskgroups"  # the quickest area: about a second in quick mode


@pytest.mark.timeout(120)
def test_bench_writes_to_the_output_folder_never_to_tracked_files(tmp_path: Path) -> None:
    """A user's `executors bench AREA --quick`, run in some folder, writes its results, report
    pages and chart into ./bench-results there, prints that path at the end, and leaves the
    repository's results files and docs pages untouched; its progress on a pipe is plain lines
    (--output and the progress on a terminal: the next test, with the same area)."""
    assert QUICK_AREA in _bench.areas()
    before = _tracked_bench_files()
    proc = subprocess.run(_executors("bench", QUICK_AREA, "--quick"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| metric | advantage | " in proc.stdout and "executors" in proc.stdout
    assert f"[1/1] {QUICK_AREA}: ok" in proc.stderr
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    output = tmp_path / "bench-results"
    assert sorted(p.name for p in output.iterdir()) == [
        "index.md", f"{QUICK_AREA}.json", f"{QUICK_AREA}.md", f"{QUICK_AREA}.png"]
    assert json.loads((output / f"{QUICK_AREA}.json").read_text())["quick"] is True
    assert str(output) in proc.stderr.splitlines()[-1]
    assert _tracked_bench_files() == before


def test_bench_without_an_area_starts_nothing(tmp_path: Path) -> None:
    """`executors bench` (with or without --quick) names no area: it runs nothing, exits 2 and
    says to name areas or `all`, with the full run's duration; the removed `--write` flag is a
    usage error, not an 11-minute run."""
    for args in (("bench",), ("bench", "--quick")):
        proc = subprocess.run(_executors(*args), cwd=tmp_path, capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "name the areas to run, or 'all'" in proc.stderr
        assert re.search(r"a full run of all takes ~\d+ min", proc.stderr), proc.stderr
        assert "[1/" not in proc.stderr and not (tmp_path / "bench-results").exists()
    proc = subprocess.run(_executors("bench", "--write"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--write" in proc.stderr
    assert not (tmp_path / "bench-results").exists()


def test_bench_help_lists_the_areas_with_their_durations() -> None:
    """`executors bench --help` lists every area, then `all`, each with its approximate
    duration in quick mode and in a full run (the full one from the area's results file)."""
    proc = subprocess.run(_executors("bench", "--help"), capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    duration = r"~\d+ (s|min)"
    for area in [*_bench.areas(), "all"]:
        assert re.search(rf"^  {area} +{duration} +{duration}$", proc.stdout, re.MULTILINE), (
            area, proc.stdout)
    seconds = json.loads((_bench.REPO_RESULTS_DIR / "locks.json").read_text())["seconds"]
    assert re.search(rf"^  locks +~\d+ s +~{seconds:.0f} s$", proc.stdout, re.MULTILINE)


def test_update_repo_needs_a_checkout_and_a_full_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """--update-repo refuses --quick (a quick run's figures never replace a full run's), and
    where the package is not a source checkout it says so and points to --output; nothing runs
    and nothing is written either way."""
    before = _tracked_bench_files()
    assert _cli.main(["bench", QUICK_AREA, "--update-repo", "--quick"]) == 2
    assert "never replace a full run's" in capsys.readouterr().err
    assert _tracked_bench_files() == before
    # An installed package: its folder has no checkout around it.
    monkeypatch.setattr(_bench, "ROOT", tmp_path)
    monkeypatch.setattr(_bench, "REPO_RESULTS_DIR", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(_bench, "REPO_DOCS_DIR", tmp_path / "docs" / "content" / "benchmarks")
    assert _cli.main(["bench", "all", "--update-repo"]) == 2
    err = capsys.readouterr().err
    assert "is not one" in err and "--output DIR" in err
    assert list(tmp_path.iterdir()) == []


def _processes_with(text: str) -> list[int]:
    """The pids of live processes whose command line contains *text*."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile
                pass
    return found


@pytest.mark.timeout(120)
def test_bench_ctrl_c_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    """SIGINT to `executors bench` while an area measures: one line saying so (no traceback),
    exit status 130, and the area's own process is killed, not left measuring."""
    output = tmp_path / "out"
    with subprocess.Popen(_executors("bench", "periodic", "--quick", "--output", str(output)),
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # "[1/1] periodic: starting": the area is running
        assert first.startswith("[1/1] periodic"), first
        wait_until(lambda: _processes_with(str(output / "periodic.json")), timeout=30)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.strip()][-1:] == [
        f"executors bench: interrupted; the areas that finished are in {output}"], err
    wait_until(lambda: not _processes_with(str(output / "periodic.json")), timeout=10)


@pytest.mark.timeout(120)
def test_bench_progress_redraws_on_a_terminal_only() -> None:
    """The real command draws its progress with carriage returns on a terminal (a pty) (plain
    lines on a pipe: the test above); --output chooses the folder it writes to, and the
    repository's results files and docs pages stay untouched."""
    before = _tracked_bench_files()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = _executors("bench", QUICK_AREA, "--quick", "--output", tmp)
        returncode, tty = _stderr_on_a_terminal(cmd)
        assert returncode == 0, tty[-3000:]
        assert (Path(tmp) / f"{QUICK_AREA}.json").is_file() and tmp in tty
    assert f"\r\x1b[K[1/1] {QUICK_AREA} [" in tty, tty[-3000:]
    assert _tracked_bench_files() == before


# -- executors demo ---------------------------------------------------------------------------


def _demo(*args: str) -> list[str]:
    # MONGODB_URI points the demo at a real deployment instead of the embedded server.
    uri = os.environ.get("MONGODB_URI")
    return [sys.executable, "-m", "executors", "demo", "--plain", *args,
            *(["--uri", uri] if uri else [])]


def _number(pattern: str, text: str) -> int:
    # The report wraps its entries: match across the joined lines.
    match = re.search(pattern, " ".join(text.split()))
    assert match, f"{pattern!r} not in:\n{text}"
    return int(match.group(1).replace(",", ""))


@pytest.mark.timeout(120)
def test_demo_runs_against_the_embedded_server_with_no_leaks() -> None:
    """A short demo serves requests, kills every abandoned cursor (server-confirmed), exits 0."""
    proc = subprocess.run(_demo("--seconds", "4", "--seed", "7"), cwd=ROOT, capture_output=True,
                          text=True, timeout=110, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    if not os.environ.get("MONGODB_URI"):
        assert "nx-27017 (embedded) on 127.0.0.1:" in out
    assert _number(r"leaks: (\d+)", out) == 0
    served = _number(r"requests: ([\d,]+) served", out)
    assert served > 0
    assert _number(r"the asyncio task received ([\d,]+) results", out) == served
    abandoned = _number(r"([\d,]+) abandoned mid-iteration", out)
    assert abandoned > 0
    assert _number(r"([\d,]+) of them killed", out) == abandoned
    assert _number(r"([\d,]+) times by the task", out) > 0, "the task never took a db slot"
    # The fair semaphore's cap holds for threads and the task together (4 slots by default).
    assert 1 <= _number(r"at most (\d+) in use at once", out) <= 4
    assert _number(r"([\d,]+) times a thread found every slot busy", out) >= 0
    assert re.search(r"median [\d.]+ ms, 99th percentile [\d.]+ ms", " ".join(out.split()))
    wakeups = _number(r"ran [\d,]+ times and woke ([\d,]+) times", out)
    assert wakeups > 0
    # The service's jobs (the snapshot, the owner-weakref server monitor and a cron job) ran;
    # the monitor's job was cancelled when its owner went (otherwise the report lists an error).
    assert _number(r"background service: (\d+) jobs", out) == 3
    assert _number(r"(\d+) periodic jobs and a cron schedule", out) == 2
    # The report counts the cron schedule's runs, the same count as the live view's last frame.
    cron_runs = _number(r"a cron schedule \(every 5 s of UTC\) that ran (\d+) time", out)
    # The live view says what the 6-field expression means, and its next fire time reads as
    # a time (after shutdown: the last one that ran, never "none").
    assert re.search(r"cron every 5 s \('\*/5 \* \* \* \* \*': 6 fields, the first is seconds\), "
                     r"UTC: \d+ runs?, next \d\d:\d\d:\d\d UTC", out)
    assert re.search(rf"UTC: {cron_runs} runs?, (last \d\d:\d\d:\d\d UTC, )?stopped", out)
    assert "next none" not in out
    assert _number(r"pinged the server (\d+) time", out) > 0
    assert _number(r"shutdown: (\d+) ms", out) < 15_000
    assert "errors:" not in out, out
    assert proc.stderr == "", proc.stderr[-3000:]


@pytest.mark.timeout(120)
def test_demo_uses_a_given_uri_and_drops_its_database() -> None:
    """`--uri` runs against that deployment (here a server the test started), starts no
    embedded server, reports no leaks, and leaves no executors_demo database behind."""
    import pymongo

    DATABASE, EmbeddedServer = _demo_app.DATABASE, _demo_server.EmbeddedServer

    with EmbeddedServer() as server:
        cmd = [sys.executable, "-m", "executors", "demo", "--plain", "--seconds", "2",
               "--uri", server.uri]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=110,
                              check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "(embedded)" not in proc.stdout
        assert f"127.0.0.1:{server.port}" in proc.stdout.splitlines()[0]
        assert _number(r"leaks: (\d+)", proc.stdout) == 0
        assert _number(r"requests: ([\d,]+) served", proc.stdout) > 0
        client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
            server.uri, serverSelectionTimeoutMS=5000)
        try:
            assert DATABASE not in client.list_database_names()
        finally:
            client.close()


def _read_all(fd: int) -> bytes:
    """Everything written to a pty until its last writer closed (Linux: EIO at the end)."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _demo_command(seconds: str) -> list[str]:
    """`executors demo --seconds SECONDS`, against $MONGODB_URI when it is set."""
    uri = os.environ.get("MONGODB_URI")
    return [sys.executable, "-m", "executors", "demo", "--seconds", seconds,
            *(["--uri", uri] if uri else [])]


def _on_a_terminal(cmd: list[str]) -> str:
    """What *cmd*, run with its stdout on a real pty, wrote there; it must exit 0."""
    leader, follower = os.openpty()
    try:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=follower,
                                stderr=subprocess.PIPE)
        os.close(follower)
        follower = -1
        tty = _read_all(leader).decode()
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert proc.returncode == 0, tty[-3000:] + err.decode()[-3000:]
    return tty


@pytest.mark.timeout(120)
def test_demo_draws_a_live_view_on_a_terminal_and_plain_lines_otherwise() -> None:
    """On a terminal (a real pty) the view is redrawn in place with ANSI sequences; on a pipe,
    without --plain, it prints plain progress lines and no escape sequence."""
    cmd = _demo_command("1.5")
    tty = _on_a_terminal(cmd)
    assert "\x1b[2Kexecutors demo [" in tty, tty[-3000:]
    assert "\x1b[6F" in tty, "the live view is not redrawn in place"
    assert _number(r"leaks: (\d+)", tty) == 0

    piped = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=110,
                           check=False)
    assert piped.returncode == 0, piped.stdout[-3000:] + piped.stderr[-3000:]
    assert "\x1b" not in piped.stdout
    assert re.search(r"^executors demo \[[#-]+\] .* \| requests ", piped.stdout, re.MULTILINE)


def _last_frame(screen: str) -> str:
    """The live view's last frame in what a terminal received: its lines, joined."""
    lines = [line.partition("\x1b[2K")[2] for line in screen.splitlines() if "\x1b[2K" in line]
    starts = [i for i, line in enumerate(lines) if line.startswith("executors demo [")]
    assert starts, screen[-3000:]
    return " | ".join(lines[starts[-1]:])


@pytest.mark.timeout(120)
def test_demo_last_frame_and_report_agree() -> None:
    """The numbers on screen add up (issue 24): the live view's last frame shows the report's
    final counts (requests served and consumed, cursors abandoned and killed, slot queueing,
    wait p99, monitor checks), and the cursors opened are the requests served plus those the
    end of the run stopped in flight, which the report names."""
    screen = _on_a_terminal(_demo_command("2.5"))
    frame = _last_frame(screen)
    report = screen[screen.index("executors demo: finished after"):]
    served = _number(r"requests: ([\d,]+) served", report)
    pairs = {
        "requests served": (_number(r"requests ([\d,]+) \(", frame), served),
        "results consumed": (_number(r"consumed ([\d,]+)", frame),
                             _number(r"the asyncio task received ([\d,]+) results", report)),
        "cursors abandoned": (_number(r"cursors abandoned ([\d,]+)", frame),
                              _number(r"([\d,]+) abandoned mid-iteration", report)),
        "cursors killed": (_number(r"killed ([\d,]+)", frame),
                           _number(r"([\d,]+) of them killed", report)),
        "slot queueing": (_number(r"([\d,]+) queued so far", frame),
                          _number(r"([\d,]+) times a thread found every slot busy", report)),
        "monitor checks": (_number(r"monitor (\d+) checks", frame),
                           _number(r"pinged the server (\d+) time", report)),
    }
    differ = {name: pair for name, pair in pairs.items() if pair[0] != pair[1]}
    assert not differ, f"last frame vs report: {differ}\n{frame}\n{report}"
    assert _number(r"pending (\d+)", frame) == 0 and "0 waiting now" in frame, frame
    p99 = re.search(r"wait p99 ([\d.]+) ms", frame)
    assert p99 and f"99th percentile {p99.group(1)} ms" in " ".join(report.split()), frame
    opened = _number(r"cursors: ([\d,]+) opened on the server", report)
    joined = " ".join(report.split())
    in_flight = 0
    if opened != served:  # the difference is named, and is what it says
        in_flight = _number(r"([\d,]+) more requests? in flight when the run ended", report)
        said = (f"{opened - in_flight:,} by requests served and {in_flight:,} by the requests "
                "stopped in flight")
        assert said in joined, report
    assert opened == served + in_flight, report


def test_demo_exit_code_is_non_zero_when_something_leaked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The command exits 1 when the report counts a leak, 0 otherwise. (A real leak cannot be
    provoked on demand, so run_demo is replaced by one returning a given report.)"""

    def report(leaked_cursors: int) -> _demo_app.DemoReport:
        return _demo_app.DemoReport(
            server="test", seconds=1.0, interrupted=False, requests=1, documents_read=1,
            results_consumed=1, cursors_opened=1, cursors_abandoned=1,
            cursors_killed=1 - leaked_cursors, cursors_not_found=0, kill_commands=1,
            leaked_cursors=leaked_cursors, leaked_threads=(), db_acquisitions_threads=1,
            db_acquisitions_tasks=0, db_waits=0, db_slots=4, db_peak=1, db_wait_p50_ms=0.0,
            db_wait_p99_ms=0.0, executors=1, executor_runs=1, executor_wakeups=1,
            monitor_checks=1, service_jobs=2, shutdown_seconds=0.01, errors=())

    for leaked, code in ((1, 1), (0, 0)):
        monkeypatch.setattr(_demo_app, "run_demo", lambda *a, leaked=leaked, **k: report(leaked))
        assert _cli.main(["demo", "--plain", "--seconds", "1"]) == code
        assert f"leaks: {leaked}" in capsys.readouterr().out


@pytest.mark.timeout(120)
def test_demo_ctrl_c_stops_cleanly_with_the_same_report() -> None:
    """SIGINT during the run stops it cleanly: the report says interrupted, no leaks, and the
    exit status is 130, as after any Ctrl-C."""
    with subprocess.Popen(_demo("--seconds", "60"), cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        lines = []
        for line in proc.stdout:  # the first progress line: the workers are serving
            lines.append(line)
            if line.startswith("executors demo ["):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    text = "".join(lines) + out
    assert proc.returncode == 130, text[-3000:] + err[-3000:]
    assert "interrupted after" in text
    assert _number(r"leaks: (\d+)", text) == 0
    assert _number(r"([\d,]+) abandoned mid-iteration", text) == _number(
        r"([\d,]+) of them killed", text)


def test_demo_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """Bad settings are refused before anything starts, with exit code 2 and the reason
    naming the flag (tests/test_cli_newcomer.py checks every option in a subprocess)."""
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(["demo", "--seconds", "0"])
    assert exit_info.value.code == 2
    assert "--seconds must be > 0 seconds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        _cli.main(["demo", "--abandon-rate", "2"])
    assert exit_info.value.code == 2
    assert "--abandon-rate must be a share within [0, 1]" in capsys.readouterr().err


def test_demo_report_puts_leaks_first_and_counts_threads() -> None:
    """A report's leaks are unkilled cursors plus leftover threads, and it says so up front."""
    report = _demo_app.DemoReport(
        server="test", seconds=2.0, interrupted=False, requests=10, documents_read=100,
        results_consumed=10, cursors_opened=10, cursors_abandoned=4, cursors_killed=2,
        cursors_not_found=0, kill_commands=2, leaked_cursors=2,
        leaked_threads=("demo-worker-1",), db_acquisitions_threads=10,
        db_acquisitions_tasks=1, db_waits=3, db_slots=4, db_peak=4, db_wait_p50_ms=1.0,
        db_wait_p99_ms=2.0,
        executors=2, executor_runs=5, executor_wakeups=5, monitor_checks=2, service_jobs=2,
        shutdown_seconds=0.05, errors=(),
    )
    assert report.leaks == 3
    lines = report.render().splitlines()
    assert lines[1].split()[:6] == ["leaks:", "3", "(2", "cursors;", "threads:",
                                    "demo-worker-1)."]


# -- the whole command ------------------------------------------------------------------------


def test_version_comes_from_the_package_metadata() -> None:
    """`executors --version` prints the installed distribution's version."""
    proc = subprocess.run(_executors("--version"), capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"executors {importlib.metadata.version('executors')}\n"


SUBCOMMAND_NAMES = ["bench", "demo", "schedules", "supervise", "traverse"]


def test_help_lists_every_subcommand_in_plain_text() -> None:
    """The top-level help lists every subcommand (traverse included) with its one-line help,
    and shows no markup (RST or Markdown backticks)."""
    proc = subprocess.run(_executors("--help"), capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(command.NAME for command in _cli.SUBCOMMANDS) == SUBCOMMAND_NAMES
    listed = " ".join(proc.stdout.split())
    for command in _cli.SUBCOMMANDS:
        assert f"{command.NAME} {' '.join(command.HELP.split())}" in listed, listed
    assert "`" not in proc.stdout


@pytest.mark.parametrize("name", SUBCOMMAND_NAMES)
def test_subcommand_help_is_plain_text(name: str) -> None:
    """Each subcommand's help shows no markup (RST or Markdown backticks)."""
    sub = subprocess.run(_executors(name, "--help"), capture_output=True, text=True,
                         timeout=60, check=False)
    assert sub.returncode == 0, sub.stderr
    assert "`" not in sub.stdout, (name, sub.stdout)


def _tree_db(path: Path, directories: int, files: int) -> str:
    """A SQLite tree of directories x files nodes; its STORE argument."""
    from integrations.traversal_stores.sqlite import SQLiteStore

    store = SQLiteStore(path)
    store.add_tree(f"d{i}/f{j}" for i in range(directories) for j in range(files))
    store.close()
    return f"sqlite:///{path}"


@pytest.mark.timeout(120)
def test_traverse_ctrl_c_prints_one_line_and_exits_130(tmp_path: Path) -> None:
    """SIGINT to `executors traverse` in the middle of a traversal: one line saying so, no
    traceback, exit status 130. (Its --print output goes to a pipe nobody reads until the
    signal is sent, so the traversal cannot finish first.)"""
    store = _tree_db(tmp_path / "tree.db", 200, 200)
    with subprocess.Popen(_executors("traverse", store, "--print"), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("/")  # it is visiting
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.splitlines()[-1] == "executors traverse: interrupted", err[-3000:]
    assert len(out.splitlines()) < 40_000  # it stopped before the end


@pytest.mark.timeout(120)
def test_traverse_progress_redraws_on_a_terminal_only(tmp_path: Path) -> None:
    """On a terminal (a pty) traverse redraws its progress bar with carriage returns; on a
    pipe it prints plain lines, with none."""
    cmd = _executors("traverse", _tree_db(tmp_path / "tree.db", 30, 30), "--budget", "0.01")
    returncode, tty = _stderr_on_a_terminal(cmd)
    assert returncode == 0, tty[-3000:]
    assert "\r[" in tty and "931/931 nodes" in tty, tty[-3000:]
    piped = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert piped.returncode == 0, piped.stderr[-3000:]
    assert "\r" not in piped.stderr
    assert re.search(r"^\[#+\] 931/931 nodes", piped.stderr, re.MULTILINE), piped.stderr


@pytest.mark.timeout(120)
def test_demo_ctrl_c_while_starting_exits_130_and_leaves_no_server(tmp_path: Path) -> None:
    """SIGINT while the demo is still starting its embedded nx-27017 server (which runs in its
    own session, out of a terminal's Ctrl-C): one line, no traceback, exit status 130, and the
    server is stopped, not left running."""
    if os.environ.get("MONGODB_URI"):
        pytest.skip("MONGODB_URI is set: the demo starts no embedded server")
    marker = str(tmp_path)  # the server's files live in a temporary folder under TMPDIR
    env = {**os.environ, "TMPDIR": marker}
    with subprocess.Popen(_executors("demo", "--plain", "--seconds", "30"), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        wait_until(lambda: _processes_with(marker), timeout=30)  # the server is starting
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert [line for line in err.splitlines() if line.strip()] == [
        "executors demo: interrupted"], err
    wait_until(lambda: not _processes_with(marker), timeout=10,
               message="the embedded nx-27017 server outlived the demo")


def test_a_run_of_some_metrics_only_merges_them_into_the_results_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--only TEXT`` measures the metrics whose name holds TEXT and writes them over their
    rows of the results file, the others kept as they were; the page names the later run.
    A filter that matches nothing is an error naming it, and writes nothing."""
    from benchmarks import _harness

    written = tmp_path / "toy.json"
    first = [_harness.Metric(name, "ms", "lower", {_bench_report.OURS: lambda: 1.0})
             for name in ("alpha", "beta one", "beta two")]
    _harness.run_area("toy", lambda quick: first, argv=["--quick", "--json", str(written)])
    again = [_harness.Metric(m.name, "ms", "lower", {_bench_report.OURS: lambda: 2.0})
             for m in first]
    _harness.run_area("toy", lambda quick: again,
                      argv=["--quick", "--json", str(written), "--only", "beta"])
    merged = json.loads(written.read_text())
    assert [(m["name"], m["medians"][_bench_report.OURS]) for m in merged["metrics"]] == [
        ("alpha", 1.0), ("beta one", 2.0), ("beta two", 2.0)]
    assert merged["partial_runs"][0]["metrics"] == ["beta one", "beta two"]
    # A later run of "beta two" leaves the "beta" run named (one of its rows is still its
    # own); a run of "beta" again measures all its rows, and only the latest is named.
    for text in ("beta two", "beta"):
        _harness.run_area("toy", lambda quick: again,
                          argv=["--quick", "--json", str(written), "--only", text])
        if text == "beta two":
            assert [p["only"] for p in json.loads(written.read_text())["partial_runs"]] == [
                "beta", "beta two"]
    merged = json.loads(written.read_text())
    assert [p["only"] for p in merged["partial_runs"]] == ["beta"]
    with pytest.raises(SystemExit, match="'gamma'"):
        _harness.run_area("toy", lambda quick: again,
                          argv=["--quick", "--json", str(written), "--only", "gamma"])
    assert json.loads(written.read_text()) == merged
    results, out = tmp_path / "results", tmp_path / "docs"
    results.mkdir()
    (results / "toy.json").write_text(json.dumps(merged))
    _bench_report.render_all(results, out, charts=False)
    assert 'the 2 rows named with "beta" measured in a later run' in (
        out / "toy.md").read_text()
    capsys.readouterr()
