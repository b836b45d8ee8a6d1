"""The coordinator's engine: `Coordinator`, its event loop and the ordered-stop state machine."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import re
import select
import selectors
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, TextIO, final

from executors._validate import seconds as _seconds

from ._child import Child, Stream
from ._orphans import OrphanReaper
from ._output import Echo
from ._spec import (
    ProcessSpec,
    RunResult,
    signal_name,
)
from ._template import render

# The package re-exports these with the specs, results and templates (executors.coordinator).
__all__ = (
    "Coordinator",
    "CoordinatorStatistics",
    "EXIT_NOT_EXECUTABLE",
    "EXIT_NOT_FOUND",
    "EXIT_READY_TIMEOUT",
    "EXIT_START_FAILED",
)

logger = logging.getLogger("executors.coordinator")

EXIT_READY_TIMEOUT = 124  # coreutils `timeout` uses 124 for "timed out"
EXIT_START_FAILED = 125  # `timeout`/`docker run`: the tool's own failure
EXIT_NOT_EXECUTABLE = 126  # shells and tini: found but cannot execute
EXIT_NOT_FOUND = 127  # shells and tini: command not found

# How long a process may take to disappear after SIGKILL before it is reported as still running
# (a process in uninterruptible sleep, circus#1023: never report "stopped" for a live process).
KILL_WAIT = 5.0
# How often a stopping process's group is checked for members after its leader exited: a group
# has no file descriptor to wait on.
_GROUP_POLL = 0.02
# Without a pidfd (Linux < 5.3) or without signal handling, exits and orphans are checked on
# this tick instead.
_TICK = 0.1

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

Phase = Literal["new", "starting", "running", "stopping-support", "stopping-put",
                "stopping-orphans", "done"]


@dataclass(frozen=True, slots=True)
class CoordinatorStatistics:
    """A snapshot of a coordinator: phase, counts of processes, signals sent and orphans reaped."""

    #: Where the run is: "new" (before `run()`), "starting", "running", "stopping-support",
    #: "stopping-put", "stopping-orphans" or "done".
    phase: str
    #: Managed processes (the process under test and supporting ones) that have been started.
    started: int
    #: Started managed processes that have not exited yet.
    running: int
    #: Managed processes whose exit the coordinator has seen.
    exited: int
    #: Signals the coordinator sent to managed processes, summed (stop signals, SIGCONT and
    #: SIGKILL each count one).
    signals_sent: int
    #: Orphaned descendants adopted by the coordinator (as subreaper or PID 1) and reaped.
    orphans_reaped: int
    #: Stop requests so far: `stop()` calls (those not yet taken by the run included) and
    #: SIGINT/SIGTERM/SIGHUP received.
    stop_requests: int


def _noop_handler(signum: int, frame: object) -> None:
    """Python-level handler: the work happens in the loop, woken through `set_wakeup_fd`."""


def _code_of(returncode: int) -> int:
    """Shell convention (tini, dumb-init): exit status N, or 128+N when killed by signal N."""
    return returncode if returncode >= 0 else 128 - returncode


@final
class Coordinator:
    """Runs a process under test and supporting processes that refer to its pid, then stops them.

    Start order: the process under test (PUT), then each supporting process in order, each
    waiting for the previous one's readiness. The run stops when the PUT exits, when a
    supporting process with `on_exit="stop"` exits, when a readiness check times out, on
    SIGINT/SIGTERM/SIGHUP (with `handle_signals`, also during start-up) or on `stop()`.

    Stop order (guaranteed): every supporting process gets its stop signal and SIGCONT, is
    waited for up to its grace, then SIGKILLed with its process group; only after all of them
    are gone does the PUT get its stop signal, grace and SIGKILL. The PUT is reaped last, so its
    pid cannot be reused while a profiler still points at it. A second stop request skips the
    remaining grace: everything left is SIGKILLed at once.

    Children start in their own process group (a terminal Ctrl-C reaches only the
    coordinator), with stdin from /dev/null, an empty signal mask and default signal
    dispositions. Their output is drained all the time (a child blocked on a full pipe cannot
    act on a signal), echoed line by line with a label to *echo*, and written raw to
    `log_dir/NAME.out` / `NAME.err`. Exit is detected with pidfd/waitid, never from pipe EOF.
    With `subreaper` (or as PID 1) orphaned descendants are reparented to the coordinator,
    reaped as they die without touching managed children's statuses, and stopped at the end.
    Children of the host program that exist before `run()` are left alone, but one that another
    thread starts *during* the run would be taken for an orphan: pass `subreaper=False` then.

    Options: `log_dir` (created; raw logs, `coord.log`, `summary.json`), `outdir` (the value of
    `{outdir}`; default `log_dir`, else the current directory), `echo` (a text stream for the
    labelled live lines; None for silence) with `color`, `ready_timeout` (seconds a process may
    take to become ready), `subreaper`, `env` (the children's base environment; they also get
    EXECUTORS_NAME, EXECUTORS_OUTDIR and, for supporting processes, EXECUTORS_PUT_PID).

    `run()` must be called from the main thread when `handle_signals` is true (Python delivers
    signals there only). With `handle_signals=False` it may run in any thread and is stopped
    with `stop()`. Every deadline uses *clock* (monotonic by default).

    Raises TypeError/ValueError at construction for bad arguments, TemplateError (a ValueError)
    for a placeholder the PUT's command cannot use ({pid} is unknown before it starts).

    Example:
        >>> import sys
        >>> put = ProcessSpec("put", [sys.executable, "-c", "print('hi')"])
        >>> Coordinator(put).run().exit_code
        0
    """

    def __init__(
        self,
        put: ProcessSpec,
        supporting: Sequence[ProcessSpec] = (),
        *,
        log_dir: str | os.PathLike[str] | None = None,
        outdir: str | os.PathLike[str] | None = None,
        echo: TextIO | None = None,
        color: bool = False,
        ready_timeout: float = 30.0,
        handle_signals: bool = True,
        subreaper: bool = True,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(put, ProcessSpec):
            raise TypeError(f"put must be a ProcessSpec, got {put!r}")
        supporting = list(supporting)
        for spec in supporting:
            if not isinstance(spec, ProcessSpec):
                raise TypeError(f"supporting must hold ProcessSpec objects, got {spec!r}")
        names = [put.name, *(s.name for s in supporting)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"process names must be unique; repeated: {', '.join(duplicates)}")
        ready_timeout = _seconds(ready_timeout, "ready_timeout", allow_zero=False)
        if not callable(clock):
            raise TypeError(f"clock must be callable, got {clock!r}")
        self._log_dir = None if log_dir is None else Path(log_dir)
        self._outdir = Path(outdir) if outdir is not None else (self._log_dir or Path.cwd())
        # {pid} of the PUT's own command cannot be known before it starts: refuse it now.
        render(put.argv, {"name": put.name, "outdir": str(self._outdir)})
        self._put = Child(put, "put", put.stop_signal or signal.SIGTERM)
        self._supporting = [Child(s, "support", s.stop_signal or signal.SIGINT)
                            for s in supporting]
        self._children = [self._put, *self._supporting]
        self._echo_stream = echo
        self._color = color
        self._ready_timeout = ready_timeout
        self._handle_signals = handle_signals
        self._subreaper = subreaper
        self._env = dict(os.environ if env is None else env)
        self._clock = clock
        self._phase: Phase = "new"
        self._start_index = 0
        self._trigger: tuple[str, str | None, str | None, int, str] | None = None
        self._force = False
        self._stop_requests = 0
        # stop() may run in a signal handler that interrupted this very thread, even inside
        # another stop(): it must take no lock (a non-reentrant lock taken twice by one thread
        # hangs it). So a request is a SimpleQueue.put (reentrant, documented safe there) and
        # a wake-up byte to the loop's socket; the loop counts the requests from the queue.
        self._stops: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._orphans = OrphanReaper(self._say, KILL_WAIT)
        self._reap_flag = False
        self._t0 = 0.0
        self._wsock: socket.socket | None = None  # set only while run() reads its other end
        self._sel: selectors.BaseSelector | None = None
        self._echo = Echo(None, [], color=False)
        self._coord_log: BinaryIO | None = None
        self._result: RunResult | None = None

    def __repr__(self) -> str:
        running = sum(1 for c in self._children if c.started and not c.exited)
        return (f"<Coordinator {self._phase} put={self._put.name!r} pid={self._put.pid} "
                f"supporting={len(self._supporting)} running={running}>")

    def statistics(self) -> CoordinatorStatistics:
        """A frozen snapshot; safe to call from any thread."""
        return CoordinatorStatistics(
            phase=self._phase,
            started=sum(1 for c in self._children if c.started),
            running=sum(1 for c in self._children if c.started and not c.exited),
            exited=sum(1 for c in self._children if c.exited),
            signals_sent=sum(len(c.signals) for c in self._children),
            orphans_reaped=self._orphans.reaped,
            stop_requests=self._stop_requests + self._stops.qsize(),
        )

    @property
    def put_pid(self) -> int | None:
        """The process under test's pid once started."""
        return self._put.pid

    def stop(self) -> None:
        """Ask the run to stop in order; a second call skips the remaining grace periods.

        Thread-safe and usable from a signal handler, even one that interrupted a `stop()` in
        the same thread: it takes no lock, only puts on a `queue.SimpleQueue` and writes one
        byte to the run's wake-up socket. A stop before `run()` makes the run stop right after
        the process under test starts.
        """
        self._stops.put(None)
        wsock = self._wsock  # one read: run() may clear it at any moment
        if wsock is not None:
            # Closed by a run that just ended (the request stays queued and counted), or a full
            # buffer (the loop has wake-ups to read already): either way nothing is lost.
            with contextlib.suppress(OSError):
                wsock.send(b"\0")

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> RunResult:
        """Start everything, wait for a trigger, stop in order, reap; return the summary.

        Raises RuntimeError if called twice, or with `handle_signals` outside the main thread;
        OSError if the log directory cannot be created. Start failures are not exceptions:
        they are reported in the result (exit codes 127/126/125).
        """
        if self._phase != "new":
            raise RuntimeError("a Coordinator runs once; create a new one")
        if self._handle_signals and threading.current_thread() is not threading.main_thread():
            raise RuntimeError("handle_signals=True needs the main thread; pass "
                               "handle_signals=False and call stop() from elsewhere")
        self._phase = "starting"
        if self._log_dir is not None:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            self._coord_log = open(self._log_dir / "coord.log", "wb")  # noqa: SIM115
        self._echo = Echo(self._echo_stream, [c.name for c in self._children], color=self._color)
        rsock, wsock = socket.socketpair()
        rsock.setblocking(False)
        wsock.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(rsock, selectors.EVENT_READ, None)
        self._sel = sel
        restore: list[Callable[[], object]] = []
        try:
            if self._handle_signals:
                handled = list(_STOP_SIGNALS)
                if self._subreaper or os.getpid() == 1:
                    handled.append(signal.SIGCHLD)
                for sig in handled:
                    old = signal.signal(sig, _noop_handler)
                    restore.append(functools.partial(signal.signal, sig, old))
                old_fd = signal.set_wakeup_fd(wsock.fileno(), warn_on_full_buffer=False)
                restore.append(lambda: signal.set_wakeup_fd(old_fd))
                # An inherited blocked mask would make us deaf to the very signals that stop a
                # run (and children would inherit it: research note, "Signal state is
                # inherited").
                old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)
                restore.append(lambda: signal.pthread_sigmask(signal.SIG_SETMASK, old_mask))
            undo = self._orphans.enable(self._subreaper)
            if undo is not None:
                restore.append(undo)
            # Publish the socket first, then take what is queued: a stop() in between is
            # either taken now or followed by its wake-up byte, never missed.
            self._wsock = wsock
            pending = self._take_stops()
            self._t0 = self._clock()
            result = self._run(rsock, pending)
            self._result = result
            return result
        finally:
            self._wsock = None
            self._emergency_cleanup()
            for undo in reversed(restore):
                undo()
            sel.close()
            rsock.close()
            wsock.close()
            self._phase = "done"
            if self._coord_log is not None:
                self._coord_log.close()

    def _run(self, rsock: socket.socket, pending_stops: int) -> RunResult:
        put = self._put
        try:
            self._spawn(put, {"name": put.name, "outdir": str(self._outdir)})
        except OSError as exc:
            code = EXIT_NOT_FOUND if isinstance(exc, FileNotFoundError) else EXIT_NOT_EXECUTABLE
            what = "command not found" if code == EXIT_NOT_FOUND else "cannot execute"
            put.error = f"{what}: {put.argv[0]} ({exc.strerror})"
            for child in self._supporting:
                child.skipped = "process under test did not start"
            self._say(f"{put.name}: {put.error}")
            self._trigger = ("put-failed", put.name, None, code, put.error)
            self._phase = "done"
            return self._make_result()
        for _ in range(pending_stops):
            self._on_stop_request(None)
        assert self._sel is not None
        while not self._step():
            for key, _ in self._sel.select(self._timeout()):
                if key.data is None:
                    self._drain_wakeups(rsock)
                elif isinstance(key.data, Stream):
                    self._read_stream(key.data)
                # pidfd events need no handling: _step() peeks every live child.
        return self._make_result()

    def _spawn(self, child: Child, values: Mapping[str, str]) -> None:
        argv = render(child.spec.argv, values)
        env = dict(self._env)
        env["EXECUTORS_NAME"] = child.name
        env["EXECUTORS_OUTDIR"] = str(self._outdir)
        if "pid" in values:
            env["EXECUTORS_PUT_PID"] = values["pid"]
        child.start(argv, env, self._log_dir, self._clock())
        assert self._sel is not None
        for stream in child.streams.values():
            self._sel.register(stream.fd, selectors.EVENT_READ, stream)
        if child.pidfd is not None:
            self._sel.register(child.pidfd, selectors.EVENT_READ, child)
        self._say(f"started {child.name} (pid {child.pid}): {' '.join(argv)}")

    # -- events -------------------------------------------------------------------------------

    def _drain_wakeups(self, rsock: socket.socket) -> None:
        while True:
            try:
                data = rsock.recv(4096)
            except (BlockingIOError, InterruptedError):
                return
            if not data:
                return
            for byte in data:
                if byte == 0:
                    for _ in range(self._take_stops()):
                        self._on_stop_request(None)
                elif byte == signal.SIGCHLD:
                    self._reap_flag = True
                elif byte in _STOP_SIGNALS:
                    self._on_stop_request(signal.Signals(byte))

    def _take_stops(self) -> int:
        """How many stop() requests are queued; they are taken off the queue."""
        taken = 0
        while True:
            try:
                self._stops.get_nowait()
            except queue.Empty:
                return taken
            taken += 1

    def _on_stop_request(self, sig: signal.Signals | None) -> None:
        self._stop_requests += 1
        what = f"received {sig.name}" if sig is not None else "stop requested"
        if self._trigger is None:
            if sig is not None:
                self._set_trigger("signal", None, sig.name, 128 + sig, what)
            else:
                self._set_trigger("stop-requested", None, None, 128 + signal.SIGTERM, what)
        elif not self._force:
            self._force = True
            self._say(f"{what} again: killing what is left now")

    def _read_stream(self, stream: Stream) -> None:
        child = stream.child
        for _ in range(16):  # bounded per wake-up, so one chatty child cannot starve the rest
            try:
                chunk = os.read(stream.fd, 65536)
            except (BlockingIOError, InterruptedError):
                return
            if not chunk:
                for line in stream.buffer.flush():
                    self._on_line(child, stream, line)
                self._close_stream(child, stream)
                return
            if stream.log is not None:
                stream.log.write(chunk)
            for line in stream.buffer.feed(chunk):
                self._on_line(child, stream, line)

    def _close_stream(self, child: Child, stream: Stream) -> None:
        assert self._sel is not None
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(stream.fd)
        os.close(stream.fd)
        if stream.log is not None:
            stream.log.close()
        del child.streams[stream.fd]

    def _on_line(self, child: Child, stream: Stream, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        self._echo.line(child.name, text, stderr=stream.is_stderr)
        if stream.is_stderr:
            child.tail.append(text)
        ready = child.spec.ready
        if ready is not None and ready.kind == "regex" and child.ready_at is None and re.search(
            ready.value, text
        ):
            child.ready_at = self._clock()

    def _say(self, text: str) -> None:
        self._echo.line("coord", text)
        logger.debug("%s", text)
        if self._coord_log is not None:
            stamp = f"+{self._clock() - self._t0:.3f}s " if self._t0 else ""
            self._coord_log.write(f"{stamp}{text}\n".encode())
            self._coord_log.flush()

    def _set_trigger(self, kind: str, name: str | None, sig: str | None, code: int,
                     message: str) -> None:
        if self._trigger is not None:
            return
        self._trigger = (kind, name, sig, code, message)
        self._say(f"{message}: stopping")
        for child in self._supporting:
            if not child.started and child.skipped is None and child.error is None:
                child.skipped = "run stopped before it started"
        self._phase = "stopping-support"

    # -- the state machine --------------------------------------------------------------------

    def _step(self) -> bool:
        """Advance the state machine as far as it can go now; True when the run is over."""
        now = self._clock()
        if self._orphans.active:
            self._reap_orphans()
        for child in self._children:
            if child.started and not child.exited and child.peek(now, reap=child.role != "put"):
                self._on_exit(child)
        if self._phase in ("starting", "running"):
            self._check_triggers(now)
        if self._phase == "starting":
            self._advance_start(now)
        if self._phase == "stopping-support" and self._stop_all(self._supporting, now):
            self._phase = "stopping-put"
        if self._phase == "stopping-put" and self._stop_all([self._put], now):
            if self._put.exited:  # not after a SIGKILL that did not work (a D-state process)
                self._put.reap()
            self._phase = "stopping-orphans"
        grace = 0.0 if self._force else self._put.grace
        if self._phase == "stopping-orphans" and self._orphans.stop(self._managed(), now, grace):
            self._phase = "done"
        return self._phase == "done"

    def _on_exit(self, child: Child) -> None:
        if child.pidfd is not None and self._sel is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(child.pidfd)
        rc = child.returncode
        assert rc is not None
        text = f"exited {rc}" if rc >= 0 else f"terminated by {signal_name(-rc)}"
        self._say(f"{child.name} {text}")

    def _check_triggers(self, now: float) -> None:
        put = self._put
        if put.exited:
            assert put.returncode is not None
            self._set_trigger("put-exited", put.name, None, _code_of(put.returncode),
                              f"{put.name} ended first")
            return
        for child in self._supporting:
            if child.exited and child.spec.on_exit == "stop":
                code = 0 if child.returncode == 0 else EXIT_START_FAILED
                self._set_trigger("support-exited", child.name, None, code,
                                  f"{child.name} ended first")
                return

    def _is_ready(self, child: Child, now: float) -> bool:
        ready = child.spec.ready
        if ready is None or child.exited:
            return True
        if ready.kind == "delay":
            assert child.started_at is not None
            if now >= child.started_at + ready.seconds:
                child.ready_at = child.ready_at or now
        return child.ready_at is not None

    def _advance_start(self, now: float) -> None:
        order = self._children  # PUT first: supporting processes wait for its readiness too
        while self._start_index < len(order):
            child = order[self._start_index]
            if not child.started:
                assert self._put.pid is not None
                if self._put.peek(now, reap=False):
                    # Never start a profiler against a pid that may be recycled.
                    self._on_exit(self._put)
                    self._check_triggers(now)
                    return
                try:
                    self._spawn(child, {"pid": str(self._put.pid), "name": child.name,
                                        "outdir": str(self._outdir)})
                except OSError as exc:
                    child.error = f"cannot start {child.argv[0]}: {exc.strerror or exc}"
                    self._say(f"{child.name}: {child.error}")
                    self._set_trigger("start-failed", child.name, None, EXIT_START_FAILED,
                                      f"{child.name} failed to start")
                    return
            if not self._is_ready(child, now):
                assert child.started_at is not None
                if now - child.started_at >= self._ready_timeout:
                    self._set_trigger("ready-timeout", child.name, None, EXIT_READY_TIMEOUT,
                                      f"{child.name} not ready after {self._ready_timeout:g}s")
                return
            if child.spec.ready is not None and child.ready_at is not None:
                assert child.started_at is not None
                self._say(f"{child.name} ready after {child.ready_at - child.started_at:.3f}s")
            self._start_index += 1
        self._phase = "running"

    def _stop_all(self, children: Sequence[Child], now: float) -> bool:
        """Drive each child through stop signal → grace → SIGKILL; True when all are gone."""
        done = True
        for child in children:
            if child.finished:
                continue
            if not child.started:
                child.finished = True
                continue
            if child.stop_sent_at is None:
                if child.exited and child.group_done():
                    child.finished = True
                    continue
                child.stop_sent_at = now
                if self._force or child.grace == 0:
                    self._kill(child, now, after_grace=not self._force)
                else:
                    self._say(f"sending {child.stop_signal.name} to {child.name} "
                              f"(grace {child.grace:g}s)")
                    child.send(child.stop_signal, now)
                    # systemd.kill(5): a stopped process cannot act on the stop signal.
                    child.send(signal.SIGCONT, now)
                    child.deadline = now + child.grace
            elif self._force and child.kill_sent_at is None:
                self._kill(child, now, after_grace=False)
            if child.exited and (now - child.group_checked_at >= _GROUP_POLL):
                child.group_checked_at = now
                if child.group_done():
                    child.finished = True
                    continue
            assert child.deadline is not None
            if now >= child.deadline:
                if child.kill_sent_at is None:
                    self._kill(child, now, after_grace=True)
                else:
                    self._say(f"{child.name} still running {KILL_WAIT:g}s after SIGKILL")
                    child.finished = True
                    continue
            done = False
        return done

    def _kill(self, child: Child, now: float, *, after_grace: bool) -> None:
        if after_grace and not child.exited:
            child.killed_after_grace = True
            self._say(f"{child.name}: SIGKILL after {child.grace:g}s grace")
        elif not after_grace:
            child.forced = not child.exited
            self._say(f"{child.name}: SIGKILL now")
        child.send(signal.SIGKILL, now)
        child.kill_sent_at = now
        child.deadline = now + KILL_WAIT

    # -- orphans ------------------------------------------------------------------------------

    def _managed(self) -> set[int]:
        return {c.pid for c in self._children if c.pid is not None}

    def _reap_orphans(self) -> None:
        self._reap_flag = False
        self._orphans.reap(self._managed())

    def _timeout(self) -> float | None:
        now = self._clock()
        candidates: list[float] = []
        if self._reap_flag:
            return 0.0
        stopping = [c for c in self._children if c.stop_sent_at is not None and not c.finished]
        for child in stopping:
            if child.deadline is not None:
                candidates.append(child.deadline - now)
            if child.exited:
                candidates.append(_GROUP_POLL)
        if self._phase == "starting" and self._start_index < len(self._children):
            child = self._children[self._start_index]
            if child.started_at is not None:
                candidates.append(child.started_at + self._ready_timeout - now)
                if child.spec.ready is not None and child.spec.ready.kind == "delay":
                    candidates.append(child.started_at + child.spec.ready.seconds - now)
        if self._phase == "stopping-orphans":
            candidates.append(_GROUP_POLL)
        if any(c.started and not c.exited and c.pidfd is None for c in self._children) or (
            self._orphans.active and not self._handle_signals
        ):
            candidates.append(_TICK)
        return max(0.0, min(candidates)) if candidates else None

    # -- the end ------------------------------------------------------------------------------

    def _drain_all(self) -> None:
        for child in self._children:
            for stream in list(child.streams.values()):
                self._read_stream(stream)

    def _emergency_cleanup(self) -> None:
        """Whatever happened (an exception included), leave no child running and no zombie."""
        self._drain_all()
        for child in self._children:
            if child.started and not child.reaped:
                if not child.exited:
                    child.send(signal.SIGKILL, self._clock())
                    if child.pidfd is not None:
                        select.select([child.pidfd], [], [], KILL_WAIT)
                if child.peek(self._clock(), reap=False):
                    child.reap()
            for stream in list(child.streams.values()):
                with contextlib.suppress(OSError):
                    self._close_stream(child, stream)
            child.close()

    def _make_result(self) -> RunResult:
        self._drain_all()
        assert self._trigger is not None
        kind, name, sig, code, message = self._trigger
        result = RunResult(
            exit_code=code,
            trigger=kind,
            trigger_name=name,
            trigger_signal=sig,
            message=message,
            duration=self._clock() - self._t0,
            orphans_reaped=self._orphans.reaped,
            processes=tuple(c.result(self._t0) for c in self._children),
        )
        if self._log_dir is not None:
            (self._log_dir / "summary.json").write_text(result.to_json() + "\n")
        return result

