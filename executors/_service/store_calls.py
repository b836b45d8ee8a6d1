"""A service's store, watched: which calls are in progress and since when, and cutting them.

The store loop (`executors._service.stored`) talks to its store through a `WatchedStore`.
Every method call made through it, from any thread (the store loop, the snapshot thread, a
pool thread completing its run, the caller of ``schedule()``), is noted with the instant it
began and forgotten when it returns. So `status()` can tell a store that hangs from one that
answers without waiting for the hung call to return (a PostgreSQL server stopped by SIGSTOP
answers nothing and reports no error: the kernel still acknowledges its TCP traffic, so no
keepalive or socket timeout notices), and ``shutdown()`` can interrupt the calls in progress
at its deadline: the store's own ``interrupt()`` (PostgreSQL and MongoDB cut their
connections, SQLite stops retrying its write lock and interrupts its statements), after which
every new call is refused at once instead of blocking again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, final

from executors import stores
from executors._clock import SYSTEM_CLOCK
from executors.stores import ScheduleStore

__all__ = ("WatchedStore",)

# Calls that still work after `interrupt`: what releases the store's connections.
_ALWAYS = frozenset({"close", "interrupt"})
# The calls a claimed run makes (its renewals, its completion), watched from the start: the
# first run takes the path every later one takes, with no `__getattr__` on it.
_EVERY_RUN = ("renew", "complete")


@final
class WatchedStore:
    """`store` with its calls in progress noted (see the module docstring).

    Attributes that are not methods (``display_url``, a store's ``channel``) and a method the
    store lacks (``complete_many``) read as on the store itself.
    """

    def __init__(self, store: ScheduleStore) -> None:
        self.inner = store
        self.display_url = store.display_url
        self._lock = threading.Lock()
        # thread ident -> (method, real monotonic instant it began, thread name)
        self._calls: dict[int, tuple[str, float, str]] = {}
        self.interrupted = False
        for name in _EVERY_RUN:
            method = getattr(store, name, None)
            if callable(method):
                self.__dict__[name] = self._watch(name, method)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.inner, name)
        if name.startswith("_") or not callable(value):
            return value
        watched = self._watch(name, value)
        self.__dict__[name] = watched  # made once per method
        return watched

    def _watch(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        calls = self._calls
        lock = self._lock
        monotonic = SYSTEM_CLOCK.monotonic
        always = name in _ALWAYS

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.interrupted and not always:
                raise ConnectionError(f"the schedule store {self.display_url} was interrupted "
                                      "at shutdown (it did not answer by the deadline)")
            ident = threading.get_ident()
            with lock:
                outer = calls.get(ident)
                if outer is None:  # a call made from inside another is part of it
                    calls[ident] = (name, monotonic(), threading.current_thread().name)
            try:
                return method(*args, **kwargs)
            finally:
                if outer is None:
                    with lock:
                        calls.pop(ident, None)

        return call

    def blocked(self) -> tuple[str, float, str] | None:
        """``(method, seconds, thread name)`` of the oldest call in progress, or None."""
        with self._lock:
            calls = list(self._calls.values())
        if not calls:
            return None
        name, began, thread = min(calls, key=lambda c: c[1])
        return name, SYSTEM_CLOCK.monotonic() - began, thread

    def interrupt(self) -> bool:
        """Interrupt the calls in progress and refuse every call from now on (but `close`).
        True if some call was in progress."""
        self.interrupted = True
        with self._lock:
            busy = bool(self._calls)
        interruptible = stores.offered(self.inner, stores.SupportsInterrupt)
        if interruptible is not None:
            interruptible.interrupt()
        return busy

    def __repr__(self) -> str:
        return f"<WatchedStore {self.inner!r} calls={len(self._calls)}>"
