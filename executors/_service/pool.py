"""The bounded worker pool of a `BackgroundService`: threads started on demand, never more than
`workers`, shared by shared jobs' runs (`JobSlot`s from the scheduler) and `submit` work."""

from __future__ import annotations

import concurrent.futures
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Protocol, final

from executors import _threads

from .job import JobSlot

__all__ = ("Pool", "Submission", "WorkItem")

# The work queue's stop sentinel: each worker that takes it puts it back for the next one
# (the same trick as concurrent.futures.ThreadPoolExecutor), so stop() needs no worker count.
_STOP = object()


class WorkItem(Protocol):
    """A work item the pool runs (`Submission`, a stored schedule's claim): its `run` never
    raises (it reports what it must itself)."""

    def run(self) -> None: ...


@final
class Submission:
    """One `submit` call queued on the service's own pool."""

    __slots__ = ("args", "fn", "future")

    def __init__(self, future: concurrent.futures.Future[object],
                 fn: Callable[..., object], args: tuple[object, ...]) -> None:
        self.future = future
        self.fn = fn
        self.args = args

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = contextvars.Context().run(self.fn, *self.args)
        except BaseException as exc:
            self.future.set_exception(exc)
            del exc
        else:
            self.future.set_result(result)


@final
class Pool:
    """Up to `workers` threads taking `JobSlot` runs (given to `run_job`) and work items
    (`Submission`s, a store loop's claims)."""

    def __init__(self, name: str, workers: int, run_job: Callable[[JobSlot], None],
                 shutting_down: Callable[[], bool]) -> None:
        self.name = name
        self.workers = workers
        self._run_job = run_job
        self._shutting_down = shutting_down
        self.reset()

    def reset(self) -> None:
        """Everything shared with threads, new (at creation, and after fork: never unlocked)."""
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work, not yet claimed by a put
        self._unclaimed = 0  # queued items no idle thread was reserved for
        self._stopping = False

    def put(self, item: JobSlot | WorkItem) -> None:
        # Each queued item is matched with exactly one taker: an idle thread, a new thread,
        # or (pool full) the next thread that finishes, which then skips going idle.
        spawn = False
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif len(self.threads) < self.workers and not self._stopping:
                spawn = True
                thread = _threads.new_thread(
                    self._run_worker, f"{self.name}-worker-{len(self.threads) + 1}")
                self.threads.append(thread)
            else:
                self._unclaimed += 1
        self._work.put(item)
        if spawn:
            try:
                _threads.start(thread)
            except RuntimeError:
                # "can't create new thread at interpreter shutdown" (cpython#114570).
                with self._lock:
                    self.threads.remove(thread)
                    self._unclaimed += 1
                if not self._shutting_down():
                    raise

    def stop(self) -> None:
        """Ask every worker to exit once the work queued before this is done. Lock-free."""
        self._stopping = True
        self._work.put(_STOP)

    def cancel_leftovers(self) -> None:
        """Cancel submissions queued after the stop (a submit racing with close)."""
        try:
            while True:
                item = self._work.get_nowait()
                if isinstance(item, Submission):
                    item.future.cancel()
        except queue.Empty:
            pass

    def _run_worker(self) -> None:
        work = self._work
        lock = self._lock
        run_job = self._run_job
        while True:
            item = work.get()
            if item is _STOP:
                work.put(_STOP)
                return
            if type(item) is JobSlot:
                run_job(item)
            else:
                item.run()  # type: ignore[attr-defined]
            with lock:
                if self._unclaimed:
                    self._unclaimed -= 1
                else:
                    self._idle += 1

    def __repr__(self) -> str:
        return (f"<Pool {self.name!r} threads={len(self.threads)}/{self.workers}"
                f" idle={self._idle}>")
