"""The weakref registry of live executors, their joint shutdown at exit, and the fork hook."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ._clock import SYSTEM_CLOCK

if TYPE_CHECKING:
    from .periodic import PeriodicExecutor

__all__ = (
    "live_executors",
    "shutdown",
    "is_shutting_down",
    "exit_timeout",
    "set_exit_timeout",
    "add_shutdown_hook",
    "remove_shutdown_hook",
)


class _Registered(Protocol):
    def close(self, dummy: object = None) -> object: ...
    def join(self, timeout: float | None = None) -> bool: ...
    def _after_fork_in_child(self) -> None: ...


# weakref.ref objects of live registered objects. The registry never keeps anything alive: an
# executor is kept alive by its thread while it runs, and by its owner; when both are gone the
# ref's callback drops the entry. Set operations are atomic under the GIL; the callback runs in
# whatever thread collected the executor and takes no lock.
_registered: set[weakref.ref[_Registered]] = set()
_shutdown_hooks: list[Callable[[float], object]] = []
_state = {"shutting_down": False, "exit_timeout": 1.0, "exited": False, "before_join": False}
# Seconds of the exit budget already spent by exit steps that run before `_at_exit` (the
# reapers' early flush, see executors.deferred): all of our exit work together waits at most
# `exit_timeout()`, however many steps it is split into. Time other atexit handlers take
# between our steps (PyMongo's own shutdown, say) is not charged to it.
_exit_spent = [0.0]


logger = logging.getLogger("executors.registry")
_now = SYSTEM_CLOCK.monotonic


def _forget(ref: weakref.ref[_Registered]) -> None:
    _registered.discard(ref)


def register(obj: _Registered) -> None:
    """Track `obj` by weak reference (idempotent: refs to one object compare equal)."""
    _registered.add(weakref.ref(obj, _forget))


def live_executors() -> list[PeriodicExecutor]:
    """The registered executors that are still alive (opened at least once, not collected)."""
    from .periodic import PeriodicExecutor

    return [obj for ref in list(_registered)
            if isinstance(obj := ref(), PeriodicExecutor)]


def _live() -> list[_Registered]:
    return [obj for ref in list(_registered) if (obj := ref()) is not None]


def is_shutting_down() -> bool:
    """True once the exit shutdown has begun; executors then refuse to start threads."""
    return bool(_state["shutting_down"])


def exit_timeout() -> float:
    """The global deadline, in seconds, that interpreter exit gives all executors together."""
    return float(_state["exit_timeout"])


def set_exit_timeout(seconds: float) -> None:
    """Set the global exit deadline (default 1.0 s). 0 closes everything and waits for none."""
    from .periodic import check_interval

    _state["exit_timeout"] = check_interval(seconds, "seconds")


def add_shutdown_hook(hook: Callable[[float], object]) -> None:
    """Call ``hook(deadline)`` at the start of `shutdown`, before executors are closed.

    `deadline` is a `time.monotonic()` value (real time, even under freezegun); a hook must
    finish by then. Hooks run in the order they were added. Deferred-cleanup queues use this
    to flush while the resources they need (database clients, say) are still usable.
    """
    if not callable(hook):
        raise TypeError(f"hook must be callable, got {type(hook).__name__}")
    _shutdown_hooks.append(hook)


def remove_shutdown_hook(hook: Callable[[float], object]) -> None:
    """Forget a hook added by `add_shutdown_hook` (no error if it is not there)."""
    try:
        _shutdown_hooks.remove(hook)
    except ValueError:
        pass


def shutdown(timeout: float = 1.0) -> list[_Registered]:
    """Close every live executor, then join them all against **one** deadline.

    PyMongo joins each executor for 1 s in turn, so N busy executors hold up exit for N seconds;
    here the whole shutdown takes at most `timeout` (plus the hooks' own share of it).

    Returns:
        The executors whose threads were still running at the deadline.
    """
    from .periodic import check_interval

    timeout = check_interval(timeout, "timeout")
    deadline = _now() + timeout
    for hook in list(_shutdown_hooks):
        try:
            hook(deadline)
        except Exception:  # a failing hook must not stop the rest of the shutdown
            logger.exception("shutdown hook %r failed", hook)
    live = _live()
    for obj in live:
        obj.close()
    return [obj for obj in live if not obj.join(max(0.0, deadline - _now()))]


def _exit_budget_left() -> float:
    """What is left of the exit deadline for the exit steps still to come, in seconds."""
    return max(0.0, exit_timeout() - _exit_spent[0])


def _charge_exit(seconds: float) -> None:
    """Record that an early exit step waited `seconds` (called from atexit handlers only)."""
    _exit_spent[0] += max(0.0, seconds)


def stop_before_thread_join() -> None:
    """Make the exit shutdown run before ``threading`` joins non-daemon threads (idempotent).

    For the package (`executors._threads`): where daemon threads are refused, our threads are
    non-daemon, and ``threading._shutdown`` joins those before ``atexit`` handlers run, so
    without this the exit would wait forever for threads only the exit shutdown stops.
    ``threading._register_atexit`` (3.9+, private) runs a callback just before that join, as
    concurrent.futures and PyMongo (subinterpreters, 4.19+) use it; where it is absent, or
    threading's shutdown has begun, the ``atexit`` handler remains.
    """
    if _state["before_join"]:
        return
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return
    try:
        register(_at_exit)
    except RuntimeError:  # "can't register atexit after shutdown"
        return
    _state["before_join"] = True


def _at_exit() -> None:
    # Runs once: from threading's shutdown (see stop_before_thread_join) or from atexit.
    if _state["exited"]:
        return
    _state["exited"] = _state["shutting_down"] = True
    shutdown(_exit_budget_left())


def _after_fork_in_child() -> None:
    # The child has one thread: ours are gone. Rebuild each object's internals (fresh locks and
    # queues, never released ones) and let each apply its fork policy.
    _state["shutting_down"] = _state["exited"] = False
    _exit_spent[0] = 0.0
    for obj in _live():
        obj._after_fork_in_child()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
