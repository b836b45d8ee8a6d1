"""How the library starts and joins its threads, for code built on it.

- `new_thread`, `start`, `start_thread`: a daemon thread where the interpreter allows one, a
  non-daemon thread where it refuses daemons (an isolated subinterpreter), with the library's
  exit shutdown moved ahead of the interpreter's join of non-daemon threads, so that such a
  thread never holds up exit.
- `join`, `alive`: one caller at a time joins a thread, the others wait for its result. On
  CPython 3.11 and 3.12, two threads joining the same thread at once (or one joining while
  another asks ``is_alive()``) can corrupt its state (python/cpython#116372, fixed in 3.13).

An adapter whose threads are stopped by the library's exit deadline, or joined from several
threads (a shutdown, an event dispatcher, a store thread), starts and joins them here.

Example:
    >>> from executors.library_threads import join, start_thread
    >>> thread = start_thread(lambda: None, "example")
    >>> join(thread, 5)
    True
"""

from __future__ import annotations

from ._threads import alive as alive
from ._threads import join as join
from ._threads import new_thread as new_thread
from ._threads import start as start
from ._threads import start_thread as start_thread

__all__ = ("new_thread", "start", "start_thread", "join", "alive")
