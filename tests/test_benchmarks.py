"""Every benchmark script runs end to end in quick mode (a smoke check, never a speed assertion)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
AREAS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.stem.startswith("_"))


# The first tier runs every area's quick mode but the scheduler's: that one starts processes
# claiming from PostgreSQL and nx-27017 (a multi-process race, the second tier), and runs in
# the test after this one.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("area", [a for a in AREAS if a != "scheduler"])
def test_benchmark_runs_in_quick_mode(area: str) -> None:
    """`python -m benchmarks.<area> --quick` completes and prints its table with our column."""
    proc = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{area}", "--quick", "--no-write"],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| metric |" in proc.stdout
    assert "executors" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_scheduler_benchmark_measures_both_schedulers_and_every_walk(tmp_path: Path) -> None:
    """The scheduler area in quick mode prints its table, and every service metric has a value
    for ours and for APScheduler, runs happened, the schedules kept in SQLite files were
    checked for double runs (none of ours, said in the note), processes claiming from one
    PostgreSQL and one nx-27017 store claimed each fire time once, and the next-fire walks time
    ours, APScheduler and cronsim (aware and naive), with the fire times each found in the
    metric's note; and the stored W1 and W2 rows have ours's figures on PostgreSQL (1 and 2
    processes) and SQLite (2), no duplicate of ours, APScheduler beside ours on SQLite and
    pgqueuer said to be left out of quick mode (its fire times fall on whole minutes)."""
    out = tmp_path / "scheduler.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.scheduler", "--quick", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "| metric |" in proc.stdout and "executors" in proc.stdout
    metrics = {m["name"]: m for m in json.loads(out.read_text())["metrics"]}
    claims = {name: m for name, m in metrics.items()
              if name.startswith(("store ", "service start-up"))}
    workload = {name: m for name, m in metrics.items() if name.startswith("stored W")}
    service = [m for name, m in metrics.items()
               if "fire times" not in name and name not in claims and name not in workload]
    walks = [m for name, m in metrics.items() if "fire times" in name]
    stored = [m for name, m in metrics.items() if "in a SQLite file" in name]
    assert len(service) == 13 and len(stored) == 4 and len(walks) == 2, sorted(metrics)
    for metric in service:
        assert set(metric["medians"]) == {"executors", "APScheduler"}, metric["name"]
        if metric["name"].startswith("runs done"):
            assert all(v > 0 for v in metric["medians"].values()), metric
    for metric in stored:
        assert "double runs" in metric["note"] and "executors 0 of " in metric["note"], metric
    # Many processes claiming from one PostgreSQL and one nx-27017 store: 7 rows each, every
    # (name, fire time) claimed once.
    assert len(claims) >= 14, sorted(claims)
    for name, metric in claims.items():
        assert set(metric["medians"]) == {"executors"}, name
        if name.startswith("store double runs"):
            assert metric["medians"]["executors"] == 0, metric
        else:
            assert metric["medians"]["executors"] > 0, metric
    # 2 workloads x 3 configurations: 6 figures each (no server CPU on SQLite), memory and
    # start-up for W2's.
    assert len(workload) == 2 * (3 * 6 - 1) + 3 * 2, sorted(workload)
    for name, metric in workload.items():
        assert metric["medians"]["executors"] >= 0, metric
        if "duplicates" in name:
            assert metric["medians"]["executors"] == 0, metric
        if "runs done" in name:
            assert metric["medians"]["executors"] > 0, metric
        if "SQLite" in name:
            assert set(metric["medians"]) == {"executors", "APScheduler"}, metric
        else:
            assert metric["unavailable"] == ["pgqueuer"] and "quick mode" in metric["note"]
    for metric in walks:
        assert set(metric["medians"]) == {"executors", "APScheduler", "cronsim",
                                          "cronsim (naive)"}
        assert metric["floor"] == "cronsim (naive)"
        assert "executors " in metric["note"] and "cronsim " in metric["note"], metric["note"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"),
                    reason="pins threads through Linux's /proc/self/task and sched_setaffinity")
@pytest.mark.timeout(120)
def test_one_cpu_contention_pins_every_thread_then_puts_them_back() -> None:
    """The one-CPU semaphore row runs every thread of the process, the portal's loop thread
    included, on one CPU while it measures, and gives each thread its CPUs back after."""
    from benchmarks import _bridge_permits
    from integrations.bridge import Portal

    def affinities(only: Iterable[int] | None = None) -> dict[int, set[int]]:
        tids = [int(tid) for tid in os.listdir("/proc/self/task")] if only is None else only
        return {tid: os.sched_getaffinity(tid) for tid in tids}

    with Portal() as portal:
        before = affinities()
        seen: list[set[int]] = []

        async def loop_cpus() -> None:
            seen.append(os.sched_getaffinity(0))  # on the portal's loop thread

        with _bridge_permits._one_cpu():
            portal.call(loop_cpus)
            assert len({frozenset(cpus) for cpus in affinities().values()}) == 1
            assert len(seen[0]) == 1 and all(len(c) == 1 for c in affinities().values())
        # (A thread started elsewhere while they were pinned, a harness's timer say, keeps
        # the one CPU: the benchmark's process is its own.)
        assert affinities(before) == before
        samples = _bridge_permits.contention(lambda: portal, 50, one_cpu=True)
        assert samples["executors"]() > 0 and samples["floor"]() > 0
        assert affinities(before) == before


@pytest.mark.timeout(120)
def test_contention_starts_with_every_party_in_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The semaphore rows measure contention from the first acquisition: the permits are held
    until the 4 threads and 4 tasks all wait, then released. (Started one by one, a thread ran
    its whole loop alone before the tasks came, and a round measured no contention.)"""
    from benchmarks import _bridge_permits
    from integrations.bridge import Portal

    first_release: list[int] = []

    class Recording(_bridge_permits.FloorSemaphore):
        def release(self) -> None:
            if not first_release:
                first_release.append(len(self._line))
            super().release()

    monkeypatch.setattr(_bridge_permits, "FloorSemaphore", Recording)
    with Portal() as portal:
        seconds, acquisitions, _ = _bridge_permits._run_contention(portal, "floor", 50)
        for kind in ("ours", "aiologic", "culsans"):  # each kind's count of waiting parties
            assert _bridge_permits._run_contention(portal, kind, 50)[0] > 0, kind
        switches, _, _ = _bridge_permits._run_contention(portal, "floor", 50, clock="switches")
    assert first_release == [_bridge_permits.THREADS + _bridge_permits.TASKS]
    assert seconds > 0 and acquisitions == 8 * 50
    switches /= acquisitions
    # Strict FIFO: a thread that releases while others wait must wait its turn to acquire
    # again, so the 4 threads block (and are woken) on most of their acquisitions.
    assert switches > 0.1, switches


@pytest.mark.timeout(120)
def test_message_rows_count_the_process_thread_switches() -> None:
    """The "thread switches" rows divide the process's context switches by the messages: a
    task and a thread that pass 2,000 values through a SharedChannel(64) block and wake each
    other (at least once: the getter starts on an empty channel), far less than once per
    message (the buffer lets each side run a burst)."""
    from benchmarks import bridge

    assert "switches" in bridge.CLOCKS
    per_message = bridge.task_to_thread_peer("SharedChannel", 2_000, 64, "switches")()
    assert 0 < per_message < 1, per_message


def test_paired_contenders_run_block_by_block_in_alternation() -> None:
    """`paired` measures its contenders together: the first one sampled in a round runs every
    block of all of them, in an order reversed every other block, with `before` ahead of each
    block; each contender's sample is its own total, kept for its call in that round."""
    from benchmarks._harness import paired

    log: list[str] = []

    def block(name: str, amount: float) -> Callable[[], tuple[float, float]]:
        def one() -> tuple[float, float]:
            log.append(name)
            return amount, 2.0

        return one

    samples = paired(3, lambda amount, work: amount / work,
                     {"a": block("a", 1.0), "b": block("b", 3.0)},
                     before=lambda: log.append("|"))
    assert samples["b"]() == 1.5  # finish(3 blocks of 3.0, 3 blocks of 2.0 work)
    assert log == ["|", "a", "b", "|", "b", "a", "|", "a", "b"]
    assert samples["a"]() == 0.5  # kept from the same round: nothing ran again
    assert len(log) == 9
    assert samples["a"]() == 0.5  # a new round
    assert len(log) == 18


def test_paired_blocks_pool_what_adds_up() -> None:
    """A block may return any amount that adds up, not only a float: the loop-lag row's blocks
    return their delays, and the round's sample is the p99 of them pooled, not a mean of short
    runs' p99s (each is its run's few slowest ticks)."""
    from benchmarks._harness import paired

    runs = iter([[1.0, 9.0], [2.0], [3.0, 4.0], [5.0]])
    samples = paired(2, lambda delays, runs: max(delays) * 10 + runs,
                     {"a": lambda: (next(runs), 1.0), "b": lambda: (next(runs), 1.0)})
    assert samples["a"]() == 92.0  # [1, 9] + [5] pooled (a runs first, then last): max 9, 2 runs
    assert samples["b"]() == 42.0  # [2] + [3, 4] pooled: max 4, 2 runs


def test_loop_lag_pools_every_run_of_a_round() -> None:
    """The loop-lag row runs each contender `BLOCKS` times in alternation and takes the p99 of
    all their ticks: a real, positive delay for every contender."""
    from benchmarks import _bridge_permits
    from integrations.bridge import Portal

    with Portal() as portal:
        samples = _bridge_permits.loop_lag(lambda: portal, 2 * _bridge_permits.BLOCKS)
        lags = {name: sample() for name, sample in samples.items()}
    assert set(lags) == set(_bridge_permits.LAG_KINDS)
    assert all(0 < lag < 10e6 for lag in lags.values()), lags


def test_bytecode_row_counts_every_party_and_leaves_no_tracer_behind() -> None:
    """The bytecodes row counts the Python work of an acquisition in the loop's thread and the
    parties' threads (hundreds of bytecodes each: a park, a hand-off, a wake-up), and removes
    its trace functions afterwards, from new threads and from the loop's thread."""
    from benchmarks import _bridge_permits
    from integrations.bridge import Portal

    async def loop_tracer() -> object:
        return sys.gettrace()

    with Portal() as portal:
        counts = {name: sample()
                  for name, sample in _bridge_permits.bytecodes(lambda: portal, 20).items()}
        assert portal.call(loop_tracer) is None
    assert threading.gettrace() is None
    assert set(counts) == set(_bridge_permits.KINDS)
    assert all(100 < count < 10_000 for count in counts.values()), counts


@pytest.mark.timeout(120)
def test_two_processes_serving_one_sqlite_file_run_each_fire_time_once(tmp_path: Path) -> None:
    """Issue 35's workload harness: two serving processes (programs of their own) serving W1
    (schedules due every second) from one SQLite file run every fire time of the window, none
    twice (counted over both processes' records), and the run reports its CPU, memory and
    start-up; with a profile folder, py-spy writes a file of collapsed stacks per serving
    process there."""
    from benchmarks import _stored_workload as w

    workload = w.Workload("W1", 5, True)
    config = next(c for c in w.CONFIGS if c.store == "sqlite")
    spied = tmp_path / "spied"
    spied.mkdir()
    outcome = w.run("executors", workload, config, str(tmp_path / "w1.db"),
                    w.Timing(0.5, 1.5, 3.0), profile=str(spied))
    assert outcome.processes == 2 and outcome.duplicates == 0, outcome
    # A benchmark, not a timed test: the grace lets a loaded machine start every run of the
    # window late; lateness is reported, and only checked to be a reading.
    assert outcome.due >= 5 and outcome.done == outcome.due, outcome
    assert outcome.records >= outcome.done and 0 <= outcome.p99_ms < 3000, outcome
    assert outcome.rss_mib > 0 and outcome.startup_s > 0 and outcome.server_cpu_us is None
    # One file per serving process (py-spy samples the GIL's holder only: a second of this
    # light load may hold it at no sample, and leave a file empty).
    assert len(list(spied.glob("*.txt"))) == 2


def test_profile_samples_go_to_the_innermost_part() -> None:
    """A sample counts for the part its innermost recognised frame names: the plan made
    inside a claim is the plan's, the target run by the run's bookkeeping is the target's, the
    driver's frames under a completion are the completion's; unrecognised stacks are "other"."""
    from benchmarks._stored_profile import part_of

    loop = ["Thread.run (threading.py:982)", "StoreLoop._run (stored.py:390)",
            "StoreLoop._serve (stored.py:460)"]
    claim = [*loop, "PostgresStore.claim (postgres.py:380)", "settle_claim (_transitions.py:9)"]
    assert part_of(claim) == "claim"
    assert part_of([*claim, "LoopPlanner.__call__ (stored_plan.py:171)",
                    "Cron.next_after (cron.py:200)", "_match (cron.py:90)"]) == "plan"
    run = ["Thread.run (threading.py:982)", "Pool._run_worker (pool.py:120)",
           "StoredRun.run (stored_run.py:129)", "run_claim (stored_run.py:95)"]
    assert part_of(run) == "run bookkeeping"
    assert part_of([*run, "Job._run_once (job.py:300)", "record_ours (_stored_jobs.py:36)"]) \
        == "target"
    assert part_of([*run, "StoreLoop.complete (stored.py:560)",
                    "PostgresStore.complete (postgres.py:453)", "Cursor.execute (cursor.py:9)"]) \
        == "completion write"
    assert part_of(["Thread.run (threading.py:982)", "Pool._run_worker (pool.py:118)",
                    "Queue.get (queue.py:171)"]) == "hand-off to the pool"
    assert part_of(["<module> (bench.py:1)", "sleep (time.py:1)"]) == "other"


def test_workload_counts_due_fire_times_per_second_and_per_minute() -> None:
    """W1's schedules are each due at every whole second of a window, W2's schedule k at the
    seconds t with t % 60 == k % 60, and pgqueuer's (a minute's granularity) at whole minutes."""
    from benchmarks._stored_workload import Workload

    assert Workload("W1", 10, True).due(119.5, 122.5) == 30  # seconds 120, 121, 122
    spread = Workload("W2", 120, False)
    assert spread.due(120.0, 180.0) == 120  # a whole minute: each schedule once
    assert spread.due(120.0, 121.0) == 2  # second 0: schedules 0 and 60
    assert spread.due(100.0, 181.0, minutely=True) == 240  # minutes 120 and 180


def test_pgqueuer_window_holds_one_whole_minute_and_its_burst() -> None:
    """pgqueuer's window (61 s) opens before a whole minute, wherever the warm-up ended and
    however late the wake-up (up to half a second): it holds exactly one whole minute (its
    fire times, due together) and the 15 s after it (their burst of runs), never the next
    minute's start (whose fire times would count as done, their CPU not)."""
    from benchmarks._stored_workload import MINUTE_LEAD, Workload, minute_wait, timing

    window = timing(False).window
    workload = Workload("W2", 10_000, False)
    for tenth in range(1200):
        now = 1_764_000_000.0 + tenth / 10
        for late in (0.0, 0.001, 0.5):
            w0 = now + minute_wait(now) + late
            minutes = [t for t in range(int(w0), int(w0 + window) + 1)
                       if t % 60 == 0 and w0 <= t < w0 + window]
            assert len(minutes) == 1, (now, late, minutes)
            assert minutes[0] - w0 >= MINUTE_LEAD - late - 1e-6
            assert w0 + window > minutes[0] + 15  # the burst's end is inside
            assert workload.due(w0, w0 + window, minutely=True) == 10_000
