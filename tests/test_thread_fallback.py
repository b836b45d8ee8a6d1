"""Where daemon threads are refused, every thread the library starts is a non-daemon one instead,
and the registry still stops and joins it at exit (issue: subinterpreters, PyMongo parity)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

from executors import BackgroundService, PeriodicExecutor, ThreadGroup, _threads, registry
from executors.deferred import Reaper
from executors.testing import wait_until
from integrations.bridge import Portal, _run_sync, run_sync

# A real thread whose start refuses daemons, as a subinterpreter made with
# allow_daemon_threads=False does (the message is CPython's). Shared with the subprocess tests.
REFUSES_DAEMON = textwrap.dedent("""
    import threading

    class RefusesDaemon(threading.Thread):
        made: "list[threading.Thread]" = []

        def start(self) -> None:
            if self not in RefusesDaemon.made:
                RefusesDaemon.made.append(self)
            if self.daemon:
                raise RuntimeError("daemon threads are disabled in this (sub)interpreter")
            super().start()
""")
namespace: dict[str, object] = {}
exec(REFUSES_DAEMON, namespace)
RefusesDaemon: type[threading.Thread] = namespace["RefusesDaemon"]  # type: ignore[assignment]


@pytest.fixture
def refusing(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[threading.Thread]]:
    """Make `executors._threads` (the documented seam) create threads that refuse daemons."""
    made: list[threading.Thread] = []
    monkeypatch.setattr(RefusesDaemon, "made", made)
    monkeypatch.setattr(_threads, "Thread", RefusesDaemon)
    yield made


def test_start_falls_back_to_a_non_daemon_thread(refusing: list[threading.Thread]) -> None:
    """`_threads.start` retries a refused daemon as a non-daemon thread, which runs."""
    ran = threading.Event()
    thread = _threads.start_thread(ran.set, "probe")
    assert refusing == [thread]
    assert ran.wait(5)
    assert thread.daemon is False
    thread.join(5)


def test_daemon_setter_refusal_leaves_a_non_daemon_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """PyMongo's test_open_non_daemon_thread, for ours: when setting `Thread.daemon` raises
    RuntimeError, `open()` still starts the executor, on a non-daemon thread."""
    def refuse(self: threading.Thread, value: bool) -> None:
        raise RuntimeError("daemon threads are disabled in this (sub)interpreter")

    getter = threading.Thread.daemon.fget  # type: ignore[attr-defined]
    monkeypatch.setattr(threading.Thread, "daemon", property(getter, refuse))
    ran = threading.Event()
    executor = PeriodicExecutor(interval=60, min_interval=0.01, target=lambda: ran.set() or True)
    executor.open()
    thread = executor._thread
    monkeypatch.undo()
    try:
        assert ran.wait(10)
        assert thread is not None and thread.daemon is False
    finally:
        assert executor.close(wait=True, timeout=10)


def test_other_start_errors_are_not_retried() -> None:
    """Only the daemon refusal is retried: a thread started twice still raises."""
    thread = _threads.start_thread(lambda: None, "twice")
    thread.join(5)
    with pytest.raises(RuntimeError, match="once"):
        _threads.start(thread)


def test_every_library_thread_falls_back_and_is_stopped_by_the_registry(
        refusing: list[threading.Thread]) -> None:
    """PeriodicExecutor, the service's scheduler, pool and dedicated jobs, reapers, a thread
    group's threads, the portal's loop thread and run_sync's workers all start non-daemon
    where daemons are refused; the registry's shutdown stops and joins the registered ones."""
    ran = threading.Event()
    executor = PeriodicExecutor(interval=60, min_interval=0.01, target=lambda: True,
                                name="fallback-executor")
    executor.open()
    svc = BackgroundService("fallback-service").start()
    svc.every(60, ran.set, name="shared")
    svc.every(60, lambda: None, name="dedicated", dedicated=True)
    assert svc.submit(sum, [1, 2]).result(10) == 3
    reaper: Reaper[int, None] = Reaper(lambda key, items: None, name="fallback-reaper")
    reaper.put(1)
    with ThreadGroup(name="fallback-group") as group:
        assert group.start(sum, [2, 3]).result(10) == 5
    portal = Portal(name="fallback-portal").open()

    async def in_thread() -> int:
        return await run_sync(sum, [3, 4])

    assert portal.call(in_thread) == 7
    assert ran.wait(10)
    names = {t.name for t in refusing}
    for expected in ("fallback-executor", "fallback-service-scheduler",
                     "fallback-service-worker-1", "fallback-service:dedicated",
                     "fallback-group-1", "fallback-portal", "executors-run_sync-"):
        assert any(n.startswith(expected) for n in names), (expected, names)
    assert any("reaper" in n for n in names), names
    assert all(not t.daemon for t in refusing)
    assert not registry.shutdown(10), "a fallback thread outlived the registry's shutdown"
    registered = [t for t in refusing if not t.name.startswith(("executors-run_sync-",
                                                                "fallback-group"))]
    assert all(not t.is_alive() for t in registered), [t for t in registered if t.is_alive()]
    # run_sync's worker goes idle just after its call returned, maybe after the shutdown's
    # stop_idle ran: end it once idle, rather than let the leak check wait out its 10 s timeout.
    workers = [t for t in refusing if t.name.startswith("executors-run_sync-")]

    def workers_ended() -> bool:
        _run_sync._workers.stop_idle()
        return not any(t.is_alive() for t in workers)

    wait_until(workers_ended, 5)


def test_interpreter_exit_stops_non_daemon_fallback_threads() -> None:
    """At exit, fallback threads are stopped before `threading` joins non-daemon threads.

    Without `registry.stop_before_thread_join` the join would wait for ever for an executor
    only the registry's exit shutdown stops.
    """
    script = REFUSES_DAEMON + textwrap.dedent("""
        from executors import BackgroundService, PeriodicExecutor, _threads
        _threads.Thread = RefusesDaemon
        PeriodicExecutor(interval=60, min_interval=0.01, target=lambda: True).open()
        svc = BackgroundService("exit").start()
        svc.every(60, lambda: None)
        assert svc.submit(sum, [1]).result(10) == 1
        assert all(not t.daemon for t in RefusesDaemon.made), RefusesDaemon.made
        print("ok", len(RefusesDaemon.made), flush=True)
    """)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ok"), proc.stdout
    assert time.monotonic() - t0 < 30


def _subinterpreters() -> str | None:
    """The low-level subinterpreter module's name, if this Python has one that can refuse
    daemon threads (3.13's `_interpreters` with `new_config`)."""
    try:
        import _interpreters  # type: ignore[import-not-found]
    except ImportError:
        return None
    return "_interpreters" if hasattr(_interpreters, "new_config") else None


@pytest.mark.skipif(_subinterpreters() is None,
                    reason="no _interpreters.new_config (3.13+) to create a subinterpreter "
                           "with allow_daemon_threads=False; 3.12's _xxsubinterpreters is not "
                           "used: after an isolated interpreter's thread waits in "
                           "SimpleQueue.get(timeout=...), 3.12.1 aborts the process at exit "
                           "(free(): invalid pointer), reproduced with the stdlib alone")
def test_real_subinterpreter_without_daemon_threads() -> None:
    """In a real subinterpreter that refuses daemon threads, executors, the service's threads,
    a thread group and a reaper start as non-daemon threads, and ending the subinterpreter
    stops and joins them (before: `RuntimeError: daemon threads are disabled`)."""
    inner = textwrap.dedent("""
        import threading
        assert not threading._daemon_threads_allowed()
        from executors import BackgroundService, PeriodicExecutor, ThreadGroup
        from executors.deferred import Reaper
        PeriodicExecutor(interval=60, min_interval=0.01, target=lambda: True, name="pe").open()
        svc = BackgroundService("svc").start()
        svc.every(60, lambda: None, name="job")
        svc.every(60, lambda: None, name="ded", dedicated=True)
        assert svc.submit(sum, [1, 2]).result(10) == 3
        Reaper(lambda key, items: None, name="reaper").put(1)
        with ThreadGroup(name="group") as g:
            assert g.start(sum, [2]).result(10) == 2
        threads = [t for t in threading.enumerate() if t is not threading.main_thread()]
        assert threads and all(not t.daemon for t in threads), threads
        print("inside:", sorted(t.name for t in threads), flush=True)
    """)
    outer = textwrap.dedent(f"""
        import _interpreters, time
        config = _interpreters.new_config("isolated", allow_daemon_threads=False)
        interp = _interpreters.create(config)
        error = _interpreters.run_string(interp, {inner!r})
        assert error is None, error
        t0 = time.monotonic()
        _interpreters.destroy(interp)
        print("destroyed in", round(time.monotonic() - t0, 3), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", outer], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "inside:" in proc.stdout and "svc-scheduler" in proc.stdout, proc.stdout
    assert "destroyed in" in proc.stdout, proc.stdout
    assert float(proc.stdout.split("destroyed in")[1]) < 10
