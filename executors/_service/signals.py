"""Waiting in the main thread for a stop signal, whichever thread the kernel hands it to.

The pattern every service entry point writes first, a handler that sets a `threading.Event`
and a main thread blocked in `Event.wait()`, hangs for two reasons. The kernel delivers a
process-directed signal to any thread that does not block it: when a background thread takes
it, CPython's C handler only flags it for the main thread, which sleeps in a lock acquisition
nothing interrupts (seen here: 5 hangs in 240 processes signalled as soon as they served). And
the handler runs in the main thread between two bytecodes, possibly while `Event.wait` holds
the event's own non-reentrant lock, which `Event.set()` then takes again.

`SignalWait` does neither. Its handlers do nothing; what wakes the main thread is
`signal.set_wakeup_fd`, which the C handler writes the signal's number to from whichever
thread took it, and the main thread reads that socket. Blocking the signals in the other
threads instead (so that only the main thread can take them) would be inherited by every
process a job starts, which could then not be stopped (the coordinator's research note,
"Signal state is inherited").
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Iterable

__all__ = ("DEFAULT_STOP_SIGNALS", "SignalWait", "check_signals")

#: What stops a service by default: a process manager's or container's stop, and Ctrl-C.
DEFAULT_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# Signals a process cannot catch, or that report its own faults (a handler that returns from
# one of those re-runs the faulting instruction for ever).
_UNCATCHABLE = frozenset(
    getattr(signal, name) for name in ("SIGKILL", "SIGSTOP", "SIGSEGV", "SIGBUS", "SIGFPE",
                                       "SIGILL") if hasattr(signal, name))


def check_signals(signals: Iterable[object]) -> tuple[signal.Signals, ...]:
    """`signals` as `signal.Signals`, each a signal this process can wait for.

    Raises:
        TypeError: one is not an int (a bool included).
        ValueError: none given, or one is not a signal of this platform or cannot be caught.
    """
    result: list[signal.Signals] = []
    for value in signals:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"signals must be signal numbers (signal.SIGTERM, ...), got "
                            f"{type(value).__name__} {value!r}")
        if value not in signal.valid_signals():
            raise ValueError(f"signals: {value!r} is not a signal of this platform")
        try:
            sig = signal.Signals(value)
        except ValueError:  # a real-time signal: valid, but without a name
            raise ValueError(f"signals: {value!r} has no name here; pass one of "
                             f"signal.Signals") from None
        if sig in _UNCATCHABLE:
            raise ValueError(f"signals: {sig.name} cannot be waited for")
        if sig not in result:
            result.append(sig)
    if not result:
        raise ValueError("signals: give at least one signal")
    return tuple(result)


def _ignore(signum: int, frame: object) -> None:
    # The wake-up socket carries the signal; the handler only keeps the default action (or
    # KeyboardInterrupt) from running.
    pass


class SignalWait:
    """Holds handlers for `signals` from `__enter__` to `__exit__` (the main thread only);
    `wait()` returns the first of them to reach the process, or None once `wake()` is called.

    A signal that arrives before `wait()` is not lost: its number waits in the socket.
    """

    def __init__(self, signals: tuple[signal.Signals, ...]) -> None:
        self._signals = signals
        self._read, self._write = socket.socketpair()
        self._read.setblocking(True)
        self._write.setblocking(False)  # set_wakeup_fd refuses a blocking one
        self._restore: contextlib.ExitStack | None = None

    def __enter__(self) -> SignalWait:
        if threading.current_thread() is not threading.main_thread():
            self.close()
            raise RuntimeError("waiting for a signal needs the main thread: Python runs signal "
                               "handlers there only")
        with contextlib.ExitStack() as restore:
            for sig in self._signals:
                restore.callback(signal.signal, sig, signal.signal(sig, _ignore))
            old_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
            restore.callback(signal.set_wakeup_fd, old_fd)
            if hasattr(signal, "pthread_sigmask"):  # POSIX
                # A mask inherited with the signals blocked would keep them pending for ever.
                old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, self._signals)
                restore.callback(signal.pthread_sigmask, signal.SIG_SETMASK, old_mask)
            self._restore = restore.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.restore()
        finally:
            self.close()

    def restore(self) -> None:
        """Put back the handlers, wake-up fd and mask found at `__enter__`; idempotent.

        A signal `wait()` returned has had its (empty) handler run by then: CPython flags
        it for the main thread before it writes the byte, and runs it at the start of this
        call. Restored first, the default handler would meet it ("ignored due to race
        condition" on stderr).
        """
        restore, self._restore = self._restore, None
        if restore is not None:
            restore.close()

    def close(self) -> None:
        self._read.close()
        self._write.close()

    def wake(self) -> None:
        """Make `wait()` return None. Takes no lock (safe from destructors and handlers)."""
        with contextlib.suppress(OSError):  # closed, or full: a wake-up is already there
            self._write.send(b"\0")

    def wait(self) -> signal.Signals | None:
        """The first of `signals` to arrive, or None if `wake()` was called first."""
        while True:
            data = self._read.recv(64)
            for number in data:
                if number == 0:
                    return None
                if number in self._signals:
                    return signal.Signals(number)
            if not data:  # the write end was closed
                return None
            # Another handler's signal (the wake-up fd carries every signal Python handles).
