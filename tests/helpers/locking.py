"""Hold a lock on another thread while a test does what must not need it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Protocol

__all__ = ("held_by_another_thread",)


class _Lock(Protocol):
    def __enter__(self) -> object: ...
    def __exit__(self, *exc: object) -> object: ...


@contextlib.contextmanager
def held_by_another_thread(lock: _Lock) -> Iterator[None]:
    """Within the block, `lock` is held by a helper thread (taken before the block starts);
    leaving the block releases it and joins the thread."""
    locked, unlock = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            locked.set()
            unlock.wait(30)

    holder = threading.Thread(target=hold, name="lock-holder")
    holder.start()
    try:
        assert locked.wait(5), "the helper thread could not take the lock"
        yield
    finally:
        unlock.set()
        holder.join(5)
