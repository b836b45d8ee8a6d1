"""Every thread the library starts goes through here: a daemon where the interpreter allows it.

Our threads are daemons so that a forgotten executor never holds up interpreter exit; the
registry closes and joins them at exit within one deadline. A subinterpreter created with
``allow_daemon_threads=False`` (the default of an isolated one, PEP 554/734) refuses them:
on 3.12 and 3.13 ``threading.Thread(daemon=True)`` and the ``daemon`` setter raise
``RuntimeError("daemon threads are disabled in this (sub)interpreter")``, and the start of a
thread may raise it too. PyMongo meets the same restriction (pymongo/periodic_executor.py,
4.19+: ``_daemon_threads_allowed()``, then a retry of ``start()`` as a non-daemon thread); we do
the same, once, for every thread:

- `new_thread` makes a daemon thread, or a non-daemon one where daemons are refused
  (``threading._daemon_threads_allowed``, 3.12+; absent before, where daemons are always
  allowed);
- `start` starts it, and if the start refuses a daemon, makes it non-daemon and starts it again
  (the seam the tests use: a `threading.Thread` subclass whose start refuses daemons);
- a non-daemon thread would be joined by ``threading._shutdown`` *before* ``atexit`` handlers
  run, so the registry's exit shutdown, which stops it, would never come: the first
  non-daemon start moves that shutdown ahead of the join (`registry.stop_before_thread_join`).

`Thread` is the class `new_thread` instantiates; tests replace it (``monkeypatch``) with a
subclass that refuses daemons, to run the fallback on every interpreter.

**One joiner at a time.** On CPython 3.11 and 3.12, two threads that join the same thread at
once (or one joins while another asks ``is_alive()``, which takes the same lock) can corrupt
its state: ``AssertionError`` in the joiner, "release unlocked lock", a thread reported ended
that is not (python/cpython#116372, fixed in 3.13). A service's threads are waited for by the
caller of ``shutdown()``, by the event dispatcher and by the store thread; so every wait goes
through `join` and `alive` here: one caller at a time joins a thread, the others wait for its
result (a per-thread lock), and once it has ended nobody touches it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from . import registry

__all__ = ("Thread", "alive", "daemon_threads_allowed", "join", "new_thread", "start",
           "start_thread")

#: The thread class of `new_thread` (a seam for tests of the non-daemon fallback).
Thread: type[threading.Thread] = threading.Thread

_REFUSAL = "daemon threads are disabled"


def daemon_threads_allowed() -> bool:
    """Whether this interpreter allows daemon threads (always, before Python 3.12)."""
    check: Callable[[], bool] | None = getattr(threading, "_daemon_threads_allowed", None)
    return True if check is None else check()


def new_thread(target: Callable[..., object], name: str, args: tuple[object, ...] = ()
               ) -> threading.Thread:
    """A thread running ``target(*args)``: a daemon where allowed, else a non-daemon one."""
    thread = Thread(target=target, name=name, args=args)
    try:
        # Through the setter, as PyMongo does: where it refuses (subinterpreters, or PyMongo's
        # test_open_non_daemon_thread, which makes it raise), the thread stays non-daemon.
        thread.daemon = daemon_threads_allowed()
    except RuntimeError:
        pass
    return thread


def start(thread: threading.Thread) -> None:
    """Start `thread`; if the interpreter refuses it as a daemon, start it as a non-daemon.

    Raises:
        RuntimeError: any other refusal (at interpreter shutdown, say), unchanged.
    """
    try:
        thread.start()
    except RuntimeError as exc:
        if not thread.daemon or _REFUSAL not in str(exc):
            raise
        thread.daemon = False  # the setter refuses daemons only
        thread.start()
    if not thread.daemon:
        registry.stop_before_thread_join()


def start_thread(target: Callable[..., object], name: str, args: tuple[object, ...] = ()
                 ) -> threading.Thread:
    """`new_thread` then `start`: the started thread."""
    thread = new_thread(target, name, args)
    start(thread)
    return thread


# -- joining (see the module docstring) -------------------------------------------------------

_JOIN = "_executors_join"


class _Joined:
    """A thread's join state: `lock` is held by its one joiner; `ended` once it is seen ended."""

    __slots__ = ("ended", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ended = False


def _joined(thread: threading.Thread) -> _Joined:
    state: _Joined | None = thread.__dict__.get(_JOIN)
    if state is None:
        # setdefault is atomic: two first callers agree on one state.
        state = thread.__dict__.setdefault(_JOIN, _Joined())
    return state


def join(thread: threading.Thread, timeout: float | None = None) -> bool:
    """Wait up to `timeout` seconds (None: no limit) for `thread` to end; True if it has (or
    was never started). From any number of threads at once: one of them joins, the others
    wait for its result. False at once for the calling thread itself."""
    if thread.ident is None:
        return True
    state = _joined(thread)
    if state.ended:
        return True
    if thread is threading.current_thread():
        return False
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    if not state.lock.acquire(True, -1 if timeout is None else max(0.0, timeout)):
        return False
    try:
        if not state.ended:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            state.ended = not thread.is_alive()
    finally:
        state.lock.release()
    return state.ended


def alive(thread: threading.Thread) -> bool:
    """Whether `thread` was started and has not been seen ended; never waits (a thread that
    another caller is joining right now counts as alive)."""
    if thread.ident is None:
        return False
    state = _joined(thread)
    if state.ended:
        return False
    if not state.lock.acquire(False):
        return True
    try:
        if not state.ended:
            state.ended = not thread.is_alive()
    finally:
        state.lock.release()
    return not state.ended
