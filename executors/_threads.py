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
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from . import registry

__all__ = ("Thread", "daemon_threads_allowed", "new_thread", "start", "start_thread")

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
