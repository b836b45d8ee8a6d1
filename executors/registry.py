"""The weakref registry of live executors, their joint shutdown at exit, and the fork hook.

`live_executors` lists what is registered; `shutdown` closes and joins it all under one
deadline (what interpreter exit does); after `fork()` every executor is rebuilt.
"""

from __future__ import annotations

# Depends on the standard library only (and `_validate` and `_clock`, both stdlib-only: the
# one rule for seconds, and the one real clock freezegun cannot stall): every other module
# registers with it, so it imports none of them, not even for the type checker (an arrow
# back up to `periodic` would close the periodic -> registry circle). Registered objects
# follow the `_Registered` protocol; `live_executors` tells executors apart by their
# ``registry_kind`` class attribute and names them by the `LiveExecutor` protocol.
import atexit
import logging
import math
import os
import threading
import weakref
from collections.abc import Callable
from typing import Protocol, cast, final

from . import _validate
from ._clock import SYSTEM_CLOCK

__all__ = (
    "LiveExecutor",
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


@final
class ExitBudget:
    """The exit's one deadline, shared by every exit step, and the state of the exit.

    For the package, not for users: all of our exit work together waits at most `timeout`
    (`exit_timeout`), however many steps it is split into. A step that runs before the
    registry's own (the reapers' early flush, see `executors.deferred`) waits at most `left()`
    and then `charge`s what it waited. Time other atexit handlers take between our steps
    (PyMongo's own shutdown, say) is not charged. `deadline` is the deadline of the latest
    shutdown or exit step (a `time.monotonic` value), which objects closed by it keep to.
    """

    __slots__ = ("_before_join", "_exited", "_spent", "deadline", "shutting_down", "timeout")
    # Real time even under freezegun (see executors._clock.SystemClock).
    now = staticmethod(SYSTEM_CLOCK.monotonic)

    def __init__(self) -> None:
        self.timeout = 1.0
        self.reset()
        self._before_join = False  # survives fork: threading's own list of callbacks does

    def reset(self) -> None:
        """Forget the exit (a forked child starts with none of its parent's exit)."""
        self._spent = 0.0
        self._exited = False
        self.shutting_down = False
        self.deadline: float | None = None

    def left(self) -> float:
        """Seconds of the exit deadline left for the exit steps still to come."""
        return max(0.0, self.timeout - self._spent)

    def charge(self, seconds: float) -> None:
        """Record that an early exit step waited `seconds`."""
        self._spent += max(0.0, seconds)

    def begin_step(self, seconds: float) -> float:
        """Start an exit or shutdown step that may wait `seconds`; its deadline."""
        self.deadline = self.now() + seconds
        return self.deadline

    def __repr__(self) -> str:
        return (f"<ExitBudget timeout={self.timeout:g}s left={self.left():g}s"
                f"{' shutting down' if self.shutting_down else ''}>")


logger = logging.getLogger("executors.registry")
#: The process's exit budget (see `ExitBudget`).
exit_budget = ExitBudget()


def _forget(ref: weakref.ref[_Registered]) -> None:
    _registered.discard(ref)


def register(obj: _Registered) -> None:
    """Track `obj` by weak reference (idempotent: refs to one object compare equal)."""
    _registered.add(weakref.ref(obj, _forget))


class LiveExecutor(Protocol):
    """What `live_executors` lists: an `executors.PeriodicExecutor`, named by what every one
    offers, so that the registry (the floor under the executors) imports none of them.

    ``isinstance(e, executors.PeriodicExecutor)`` narrows one to its class (for the fields of
    its `statistics()`, say); every listed object passes that check.
    """

    @property
    def name(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def wake(self) -> None: ...

    def close(self, dummy: object = None, *, wait: bool = False,
              timeout: float | None = None) -> bool: ...

    def join(self, timeout: float | None = None) -> bool: ...

    def statistics(self) -> object: ...


def live_executors() -> list[LiveExecutor]:
    """The registered `PeriodicExecutor`s still alive (opened at least once, not collected)."""
    # PeriodicExecutor says registry_kind = "executor"; other registered objects say nothing.
    return [cast(LiveExecutor, obj) for obj in _live()
            if getattr(obj, "registry_kind", None) == "executor"]


def _live() -> list[_Registered]:
    return [obj for ref in list(_registered) if (obj := ref()) is not None]


def is_shutting_down() -> bool:
    """True once the exit shutdown has begun; executors then refuse to start threads."""
    return exit_budget.shutting_down


def exit_timeout() -> float:
    """The global deadline, in seconds, that interpreter exit gives all executors together."""
    return exit_budget.timeout


def set_exit_timeout(seconds: float) -> None:
    """Set the global exit deadline (default 1.0 s). 0 closes everything and waits for none."""
    exit_budget.timeout = _validate.seconds(seconds, "seconds")


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


def shutdown(timeout: float | None = 1.0) -> list[_Registered]:
    """Close every live executor, then join them all against **one** deadline.

    PyMongo joins each executor for 1 s in turn, so N busy executors hold up exit for N seconds;
    here the whole shutdown takes at most `timeout` (plus the hooks' own share of it). None
    (or ``math.inf``) waits for all, as every timeout of the library does.

    Returns:
        The executors whose threads were still running at the deadline.
    """
    seconds = _validate.timeout(timeout)
    deadline = exit_budget.begin_step(math.inf if seconds is None else seconds)
    for hook in list(_shutdown_hooks):
        try:
            hook(deadline)
        except Exception:  # a failing hook must not stop the rest of the shutdown
            logger.exception("shutdown hook %r failed", hook)
    live = _live()
    for obj in live:
        obj.close()
    if seconds is None:
        return [obj for obj in live if not obj.join(None)]
    return [obj for obj in live if not obj.join(max(0.0, deadline - exit_budget.now()))]


def stop_before_thread_join() -> None:
    """Make the exit shutdown run before ``threading`` joins non-daemon threads (idempotent).

    For the package (`executors._threads`): where daemon threads are refused, our threads are
    non-daemon, and ``threading._shutdown`` joins those before ``atexit`` handlers run, so
    without this the exit would wait forever for threads only the exit shutdown stops.
    ``threading._register_atexit`` (3.9+, private) runs a callback just before that join, as
    concurrent.futures and PyMongo (subinterpreters, 4.19+) use it; where it is absent, or
    threading's shutdown has begun, the ``atexit`` handler remains.
    """
    if exit_budget._before_join:
        return
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        return
    try:
        register(_at_exit)
    except RuntimeError:  # "can't register atexit after shutdown"
        return
    exit_budget._before_join = True


def _at_exit() -> None:
    # Runs once: from threading's shutdown (see stop_before_thread_join) or from atexit.
    if exit_budget._exited:
        return
    exit_budget._exited = exit_budget.shutting_down = True
    shutdown(exit_budget.left())


def _after_fork_in_child() -> None:
    # The child has one thread: ours are gone. Rebuild each object's internals (fresh locks and
    # queues, never released ones) and let each apply its fork policy.
    exit_budget.reset()
    for obj in _live():
        obj._after_fork_in_child()


atexit.register(_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
