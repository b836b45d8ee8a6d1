"""Tests for run_sync's worker threads at exit, and the names of its limiter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from integrations import bridge


def test_the_limiter_names_say_whose_limit_they_are() -> None:
    """run_sync_limiter/RUN_SYNC_LIMIT are the names; the former ones are the same objects."""
    assert bridge.run_sync_limiter is bridge.default_limiter
    assert bridge.RUN_SYNC_LIMIT == 40


def test_exit_ends_non_daemon_idle_workers_at_once() -> None:
    """Where workers are non-daemon (a refused daemon), exit does not wait for the idle timeout.

    The interpreter's threading shutdown joins non-daemon threads; an idle run_sync worker
    waits 10 s for work before it ends, so without the registry's shutdown hook the process
    would take 10 s to exit. The seam `executors._threads.Thread` makes every library thread
    refuse to be a daemon, as a subinterpreter does.
    """
    script = textwrap.dedent(
        """
        import asyncio, threading
        from executors import _threads

        class NoDaemon(threading.Thread):
            @property
            def daemon(self):
                return False
            @daemon.setter
            def daemon(self, value):
                if value:
                    raise RuntimeError("daemon threads are disabled in this (sub)interpreter")

        _threads.Thread = NoDaemon
        from integrations.bridge import run_sync

        async def main():
            assert await run_sync(sum, [1, 2]) == 3

        asyncio.run(main())
        from executors.testing import wait_until
        from integrations.bridge import _run_sync
        wait_until(lambda: _run_sync._workers._idle, 10)  # the worker parks as idle after its call
        workers = [t for t in threading.enumerate() if t.name.startswith("executors-run_sync")]
        assert workers and not any(t.daemon for t in workers), workers
        print("ok", flush=True)
        """
    )
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30)
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert elapsed < 6, f"exit waited {elapsed:.1f}s for an idle worker"
