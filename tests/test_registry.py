"""The registry: weak tracking, one global shutdown deadline, quiet exit, fork rebuild."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest
from helpers.forking import in_forked_child
from helpers.locking import held_by_another_thread

from executors import PeriodicExecutor, registry
from executors.testing import wait_until


def run_python(code: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run `code` in a fresh interpreter; return the result and the wall time to exit."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, check=False)
    return proc, time.perf_counter() - t0


def test_registry_tracks_opened_executors_weakly() -> None:
    """Opened executors are listed; one collected after its thread ended leaves the registry."""
    ex = PeriodicExecutor(60, 0, lambda: True, name="tracked")
    assert ex not in registry.live_executors()  # not opened yet
    ex.open()
    assert ex in registry.live_executors()
    ex.close(wait=True)
    entries = len(registry._registered)
    ref = weakref.ref(ex)
    del ex
    gc.collect()
    assert ref() is None  # the registry did not keep it alive
    assert len(registry._registered) < entries  # and its entry went with it
    assert not any(e.name == "tracked" for e in registry.live_executors())


def test_shutdown_when_empty_is_quick() -> None:
    """shutdown() with nothing registered (or all already closed) returns at once."""
    t0 = time.perf_counter()
    assert registry.shutdown(timeout=1.0) == []
    assert time.perf_counter() - t0 < 0.5


@pytest.mark.serial  # an elapsed-time bound
def test_shutdown_joins_busy_executors_against_one_deadline() -> None:
    """Five executors busy in their targets hold shutdown for ~timeout, not 5 x timeout."""
    release = threading.Event()
    started = threading.Barrier(6)

    def busy() -> bool:
        started.wait(5)
        release.wait(10)
        return True

    execs = [PeriodicExecutor(60, 0, busy, name=f"busy-{i}") for i in range(5)]
    for ex in execs:
        ex.open()
    started.wait(5)
    try:
        t0 = time.perf_counter()
        stragglers = registry.shutdown(timeout=0.3)
        elapsed = time.perf_counter() - t0
        assert set(stragglers) >= set(execs)
        assert 0.25 <= elapsed < 1.0, elapsed
    finally:
        release.set()
    for ex in execs:
        assert ex.join(5)


def test_shutdown_hooks_run_first_with_the_deadline() -> None:
    """Hooks run before executors are closed, with the shared deadline; a failing one is logged."""
    seen: list[tuple[str, float, bool]] = []
    ex = PeriodicExecutor(60, 0, lambda: True)
    ex.open()

    def good(deadline: float) -> None:
        seen.append(("good", deadline, ex.closed))

    def bad(deadline: float) -> None:
        raise RuntimeError("hook failed")

    registry.add_shutdown_hook(bad)
    registry.add_shutdown_hook(good)
    try:
        t0 = time.monotonic()
        registry.shutdown(timeout=2)
    finally:
        registry.remove_shutdown_hook(bad)
        registry.remove_shutdown_hook(good)
    assert seen and seen[0][0] == "good" and not seen[0][2]
    assert t0 + 1.5 < seen[0][1] <= t0 + 2.5
    assert ex.join(5)
    with pytest.raises(TypeError, match="hook"):
        registry.add_shutdown_hook("nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seconds"):
        registry.set_exit_timeout(-1)


@pytest.mark.serial  # an elapsed-time bound
def test_interpreter_exit_is_bounded_and_quiet() -> None:
    """300 idle and 5 busy executors: exit within the 1 s global deadline, no stderr, code 0."""
    proc, elapsed = run_python(EXIT_TIMER + textwrap.dedent("""
        import threading, time
        from executors import PeriodicExecutor
        keep = []
        for i in range(300):
            ex = PeriodicExecutor(60, 0.5, lambda: True, name=f"idle-{i}")
            ex.open()
            keep.append(ex)
        started = threading.Barrier(6)
        def busy():
            started.wait()
            time.sleep(30)
            return True
        for i in range(5):
            ex = PeriodicExecutor(60, 0.5, busy, name=f"busy-{i}")
            ex.open()
            keep.append(ex)
        started.wait()
        print("ready", flush=True)
        T[0] = time.monotonic()
    """))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ready")
    assert proc.stderr == ""
    # One deadline of 1 s for all; PyMongo's joins 1 s per busy executor (5 s here).
    assert 0.8 <= exit_wait(proc.stdout) < 1.5
    # 1 s deadline for the busy ones plus interpreter start-up; PyMongo's takes 5+ s here.
    assert elapsed < 4.0, elapsed


# Registered before executors is imported, so (atexit being LIFO) it runs after the registry's
# exit shutdown and prints how long that took.
EXIT_TIMER = """
import atexit, time
T = [0.0]
atexit.register(lambda: print(f"exit-wait {time.monotonic() - T[0]:.3f}", flush=True))
"""


def exit_wait(stdout: str) -> float:
    return float(stdout.split("exit-wait")[1].split()[0])


@pytest.mark.serial  # an elapsed-time bound
@pytest.mark.parametrize("timeout", [0.2, 0.6])
def test_exit_timeout_is_configurable(timeout: float) -> None:
    """set_exit_timeout(t) bounds the exit wait for busy executors to about t in all."""
    proc, _ = run_python(EXIT_TIMER + f"""
import threading, time
from executors import PeriodicExecutor, registry
registry.set_exit_timeout({timeout})
started = threading.Barrier(4)
def busy():
    started.wait()
    time.sleep(30)
    return True
keep = [PeriodicExecutor(60, 0.5, busy) for _ in range(3)]
for ex in keep:
    ex.open()
started.wait()
T[0] = time.monotonic()
""")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    waited = exit_wait(proc.stdout)
    assert timeout * 0.8 <= waited < timeout + 0.5, waited


@pytest.mark.serial  # an elapsed-time bound
def test_open_during_shutdown_is_refused_quietly() -> None:
    """An executor opened from a target while the interpreter exits starts no thread, no error."""
    proc, elapsed = run_python("""
        from executors import PeriodicExecutor
        late = PeriodicExecutor(60, 0, lambda: True, name="late")
        def opener():
            late.open()   # keeps trying to open another executor as the process exits
            return True
        ex = PeriodicExecutor(0.001, 0, opener)
        ex.open()
    """)
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert elapsed < 5


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("policy", ["lazy", "eager", "stop"])
def test_fork_rebuilds_executor_in_child(policy: str) -> None:
    """In a forked child an open executor gets fresh internals and runs again per its policy."""
    runs = [0]
    running = threading.Event()

    def target() -> bool:
        runs[0] += 1
        running.set()
        return True

    ex = PeriodicExecutor(60, 0, target, name=f"forked-{policy}", fork_policy=policy)  # type: ignore[arg-type]
    ex.open()
    assert running.wait(5)
    before = runs[0]

    def in_child() -> str:
        stats = ex.statistics()
        ok = stats.generation == 1
        if policy == "eager":
            wait_until(lambda: runs[0] > before, timeout=5)
        elif policy == "lazy":
            ok = ok and not ex.statistics().thread_alive
            ex.wake()
            wait_until(lambda: runs[0] > before, timeout=5)
        else:
            ok = ok and ex.closed and not ex.statistics().thread_alive
            ex.open()
            wait_until(lambda: runs[0] > before, timeout=5)
        ok = ok and ex.close(wait=True, timeout=5)
        return "ok" if ok else f"bad {stats!r}"

    assert in_forked_child(in_child) == "ok"
    # The parent's executor is untouched.
    assert ex.statistics().generation == 0 and ex.statistics().thread_alive
    assert ex.close(wait=True, timeout=5)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_while_the_target_runs_and_the_lock_is_held() -> None:
    """Fork while the target is mid-run and another thread holds the executor's lock: the
    child's executor has a fresh lock (the parent's held one is never "released"), no thread,
    and open() there ("lazy" policy) runs it again; the parent carries on untouched."""
    parent = os.getpid()
    in_run, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def target() -> bool:
        runs.append(os.getpid())
        if os.getpid() == parent and len(runs) == 1:
            in_run.set()
            release.wait(10)
        return True

    ex = PeriodicExecutor(60, 0, target, name="forked-mid-run")
    ex.open()
    assert in_run.wait(5)

    def in_child() -> str:
        stats = ex.statistics()
        fresh = ex._lock.acquire(blocking=False)  # not the parent's held lock
        if fresh:
            ex._lock.release()
        ok = (stats.generation == 1 and not stats.thread_alive and fresh
              and stats.state == "open")
        ex.open()
        wait_until(lambda: os.getpid() in runs, timeout=5)
        ok = ok and ex.close(wait=True, timeout=5)
        return "ok" if ok else f"bad {stats!r} {fresh}"

    try:
        with held_by_another_thread(ex._lock):
            assert in_forked_child(in_child) == "ok"
            assert ex.statistics().generation == 0 and ex.statistics().state == "running"
    finally:
        release.set()
    wait_until(lambda: ex.statistics().state == "open", 5)
    assert runs == [parent]
    assert ex.close(wait=True, timeout=5)


def test_shutdown_of_an_empty_registry_in_a_fresh_interpreter() -> None:
    """With nothing ever opened, shutdown() returns [] at once; a bad timeout names itself."""
    proc, _ = run_python("""
        import time
        from executors import registry
        assert registry.live_executors() == []
        t0 = time.perf_counter()
        assert registry.shutdown() == []
        assert time.perf_counter() - t0 < 0.5
        try:
            registry.shutdown(timeout=-1)
        except ValueError as exc:
            assert "timeout" in str(exc)
        else:
            raise AssertionError("shutdown(-1) accepted")
        print("ok")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n" and proc.stderr == ""
