"""DeferredQueue (a destructor-safe, lock-free queue) and Reaper (drains it on an executor)."""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, final, overload

from . import _validate, registry
from ._clock import SYSTEM_CLOCK, Clock
from ._deferred_queue import DeferredQueue, DeferredQueueStatistics  # public here
from .periodic import PeriodicExecutor

__all__ = ("DeferredQueue", "DeferredQueueStatistics", "Reaper", "ReaperStatistics")

logger = logging.getLogger("executors.deferred")

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass(frozen=True)
class ReaperStatistics:
    """A snapshot of a `Reaper` (see `Reaper.statistics`)."""

    #: "open", "closing" or "closed".
    state: str
    #: Items queued or waiting for a retry.
    pending: int
    #: Items waiting for a retry (included in `pending`).
    retrying: int
    #: Items whose batch the handler completed.
    processed: int
    #: Items given up after the retry limit, or refused by `retryable` (logged each time).
    failed: int
    #: Batches re-attempted after a failure.
    retried: int
    #: Items the queue refused (full, or the reaper was closed).
    dropped: int
    #: Handler calls that returned normally.
    batches: int
    #: Handler calls that raised.
    errors: int
    #: ``"ExceptionType: message"`` of the latest handler call that raised, or None if none has.
    last_error: str | None
    #: Drain passes run by the background thread.
    runs: int


@dataclasses.dataclass
class _Batch(Generic[T, K]):
    key: K
    items: list[T]
    attempts: int = 0
    due: float = 0.0


# Live reapers, for the exit flush. A WeakSet: it never keeps a reaper alive.
_reapers: weakref.WeakSet[Reaper[Any, Any]] = weakref.WeakSet()


def _flush_all(deadline: float) -> None:
    """Flush every live reaper against one deadline (a registry shutdown hook).

    The registry's shutdown records that deadline (`registry.exit_budget.deadline`) before it
    calls its hooks; the close() it calls next keeps to it.
    """
    _flush_on_drainers(list(_reapers), deadline)


def _flush_on_drainers(reapers: list[Reaper[Any, Any]], deadline: float) -> None:
    """Have each reaper's own thread flush, all at once, and wait for them until `deadline`.

    A flush runs handlers on the thread that calls it; at exit that would be the main thread,
    and one stuck handler (a server that does not answer) would hold the process up forever.
    The drainer threads are daemons that already run (3.12+ refuses to start threads in atexit
    handlers: PyMongo PYTHON-4147, cpython#113964), so the exit waits for them only until the
    deadline.
    """
    now = SYSTEM_CLOCK.monotonic
    waiting = [(reaper, reaper._request_flush()) for reaper in reapers if reaper.pending]
    for reaper, done in waiting:
        if done is None:  # no drainer thread: flush here, best effort
            reaper._flush_quietly(deadline)
        elif not done.wait(max(0.0, deadline - now())):
            logger.warning("%r: exit flush did not finish by the deadline (%d item(s) queued"
                           " or in the handler)", reaper, reaper._unfinished())


def _flush_at_exit() -> None:
    # Registered with atexit again each time a Reaper is made: atexit runs handlers last-in
    # first-out, so this runs before every handler registered before the newest reaper, such as
    # PyMongo's `_shutdown_resources` (registered when pymongo is imported): the flush then
    # finds the clients its handlers need still working. The time it waits is charged to the
    # registry's exit budget, so that this flush and the registry's shutdown that follows wait
    # one exit deadline in all, not one each.
    budget = registry.exit_budget
    start = SYSTEM_CLOCK.monotonic()
    try:
        _flush_all(budget.begin_step(budget.left()))
    finally:
        budget.charge(SYSTEM_CLOCK.monotonic() - start)


registry.add_shutdown_hook(_flush_all)


@final
class Reaper(Generic[T, K]):
    """Drain a `DeferredQueue` on a background thread: ``handler(key, items)`` per batch.

    The pattern behind PyMongo's kill-cursors thread, as a facility: destructors and weakref
    callbacks `put` (no lock), and the reaper's own thread groups the items by
    ``batch_key(item)`` and calls ``handler(key, items)``, where taking locks, doing I/O and
    logging are allowed.

    Timing: the drainer is a `PeriodicExecutor` that never polls. When the queue reaches
    `wake_threshold` items it is woken at once (served no sooner than `min_interval` after its
    previous run, which is what batches a burst); otherwise items wait for the next run, every
    `interval` seconds. With the default threshold of 1 an idle reaper costs no wake-ups and a
    lone item is handled within microseconds.

    Failures: a batch whose handler raises an `Exception` is retried after `retry_backoff`
    seconds, doubling each time up to `max_backoff`, at most `max_retries` times; then (or at
    once, if ``retryable(exc)`` is false) its items are counted as failed, logged on
    ``executors.deferred`` with the error, and passed to ``on_give_up(key, items, exc)`` if
    given. Nothing is dropped silently.

    Lifetime: the reaper starts its thread at once and keeps itself alive until `close()`
    (its thread holds it). `close()` flushes, then stops the thread. At interpreter exit pending
    items are flushed within the registry's exit deadline (`executors.registry.exit_timeout`),
    before handlers registered with `atexit` before the reaper was made run (so clients that
    PyMongo shuts down at exit still work). After ``os.fork()`` the child's reaper starts empty,
    with a thread of its own: the parent's items belong to the parent.

    Thread-safety: `put`, `track` and the callbacks `track` installs take no lock. `flush`
    and `close` may be called from any thread except from inside the handler.

    Args:
        handler: ``handler(key, items)``, called on the reaper's thread (or the thread calling
            `flush`/`close`), one batch at a time, never concurrently with itself.
        batch_key: ``batch_key(item)`` gives the batch an item belongs to; omitted, every item
            goes to one batch with key None.
        interval: seconds between scheduled drains (finite, > 0).
        min_interval: the least time between the start of a drain and a woken one.
        wake_threshold: wake the drainer when this many items are pending (>= 1), or None to
            drain on the schedule only.
        max_pending: bound on queued items (see `DeferredQueue`), or None.
        max_batch: split batches larger than this, or None.
        max_retries: re-attempts of a failed batch before giving up (>= 0).
        retry_backoff: delay before the first retry; doubles each time (finite, >= 0).
        max_backoff: cap on the retry delay.
        retryable: ``retryable(exc)`` false gives a batch up at once (default: all are).
        on_give_up: ``on_give_up(key, items, exc)``, called when a batch is given up.
        name: the drainer thread's name.
        clock: time source (tests pass `executors.testing.VirtualClock`).
        close_timeout: how long `close()` flushes when given no timeout.

    Raises:
        TypeError: a callable argument is not callable, or a number is of the wrong type.
        ValueError: a number is out of range.

    Example:
        >>> closed = []
        >>> reaper = Reaper(lambda key, items: closed.extend(items), name="cleanup")
        >>> reaper.put("handle-1")
        True
        >>> reaper.flush(5)
        True
        >>> closed
        ['handle-1']
        >>> reaper.close()
        True
    """

    @overload
    def __init__(
        self: Reaper[T, None],
        handler: Callable[[None, list[T]], object],
        *,
        batch_key: None = None,
        interval: float = 60.0,
        min_interval: float = 0.0,
        wake_threshold: int | None = 1,
        max_pending: int | None = None,
        max_batch: int | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        max_backoff: float = 30.0,
        retryable: Callable[[Exception], bool] | None = None,
        on_give_up: Callable[[None, list[T], Exception], object] | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        close_timeout: float = 5.0,
    ) -> None: ...

    @overload
    def __init__(
        self,
        handler: Callable[[K, list[T]], object],
        *,
        batch_key: Callable[[T], K],
        interval: float = 60.0,
        min_interval: float = 0.0,
        wake_threshold: int | None = 1,
        max_pending: int | None = None,
        max_batch: int | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        max_backoff: float = 30.0,
        retryable: Callable[[Exception], bool] | None = None,
        on_give_up: Callable[[K, list[T], Exception], object] | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        close_timeout: float = 5.0,
    ) -> None: ...

    def __init__(
        self,
        handler: Callable[[Any, list[T]], object],
        *,
        batch_key: Callable[[T], Any] | None = None,
        interval: float = 60.0,
        min_interval: float = 0.0,
        wake_threshold: int | None = 1,
        max_pending: int | None = None,
        max_batch: int | None = None,
        max_retries: int = 3,
        retry_backoff: float = 0.5,
        max_backoff: float = 30.0,
        retryable: Callable[[Exception], bool] | None = None,
        on_give_up: Callable[[Any, list[T], Exception], object] | None = None,
        name: str | None = None,
        clock: Clock | None = None,
        close_timeout: float = 5.0,
    ) -> None:
        for arg, label in ((handler, "handler"), (batch_key, "batch_key"),
                           (retryable, "retryable"), (on_give_up, "on_give_up")):
            if arg is not None and not callable(arg):
                raise TypeError(f"{label} must be callable, got {type(arg).__name__}")
        if handler is None:
            raise TypeError("handler must be callable, got NoneType")
        interval = _validate.seconds(interval, "interval", allow_zero=False)
        min_interval = _validate.seconds(min_interval, "min_interval")
        for count, label in ((wake_threshold, "wake_threshold"), (max_batch, "max_batch")):
            if count is not None:  # None: no threshold, no limit
                _validate.count(count, label)
        _validate.count(max_retries, "max_retries", minimum=0)
        self._retry_backoff = _validate.seconds(retry_backoff, "retry_backoff")
        self._max_backoff = _validate.seconds(max_backoff, "max_backoff")
        self._close_timeout = _validate.seconds(close_timeout, "close_timeout")
        self._handler = handler
        self._batch_key = batch_key
        self._max_batch = max_batch
        self._max_retries = max_retries
        self._retryable = retryable
        self._on_give_up = on_give_up
        self._interval = interval
        self._clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._queue: DeferredQueue[T] = DeferredQueue(max_pending=max_pending)
        self._tracked: dict[int, weakref.ref[object]] = {}
        self._closed = False
        self._reset_internals()
        self._processed = 0
        self._failed = 0
        self._retried = 0
        self._batches = 0
        self._errors = 0
        self._runs = 0
        self._last_error: str | None = None
        self._dropped_logged = 0
        self._pid = os.getpid()
        # "eager": a forked child gets a running drainer from the fork hook, so no put() (from a
        # destructor, say) ever has to start a thread.
        self._executor = PeriodicExecutor(
            interval, min_interval, self._run, name or "executors-reaper",
            clock=self._clock, fork_policy="eager",
        )
        self._queue._set_waker(
            self._executor.wake if wake_threshold is not None else None, wake_threshold or 1
        )
        registry.register(self)
        _reapers.add(self)
        atexit.unregister(_flush_at_exit)
        atexit.register(_flush_at_exit)
        self._executor.open()

    def _reset_internals(self) -> None:
        self._lock = threading.Lock()  # one drain pass at a time; held while the handler runs
        self._retry: list[_Batch[T, K]] = []
        self._handler_thread: int | None = None
        # Items of the batch the handler holds now: no longer queued, not yet done.
        self._in_handler = 0
        self._flush_requested = False
        self._flush_waiters: list[threading.Event] = []
        self._sleep_q: queue.SimpleQueue[None] = queue.SimpleQueue()

    # -- enqueue: lock-free ---------------------------------------------------------------

    def put(self, item: T) -> bool:
        """Enqueue `item` for the handler; False if dropped (full or closed). Takes no lock.

        Safe from ``__del__``, weakref callbacks, signal handlers and any thread.
        """
        return self._queue.put(item)

    def track(self, owner: object, item: T) -> Callable[[], bool]:
        """Enqueue `item` when `owner` is garbage-collected. Returns a `cancel()` function.

        The weak reference lives in the reaper, not on `owner`, so its callback runs even when
        `owner` dies in a reference cycle; the callback only does `put` (no lock). ``cancel()``
        forgets the tracking and returns True if it was still armed (exactly one of cancel and
        collection wins).

        Raises:
            ClosedError: the reaper is closed.
            TypeError: `owner` does not support weak references.
        """
        if self._closed:
            from .errors import ClosedError

            raise ClosedError("this Reaper is closed; make a new one to track more objects")
        tracked = self._tracked
        put = self._queue.put

        def collected(ref: weakref.ref[object]) -> None:
            # dict.pop is atomic: exactly one of this callback and cancel() sees the entry.
            if tracked.pop(id(ref), None) is not None:
                put(item)

        try:
            ref = weakref.ref(owner, collected)
        except TypeError:
            raise TypeError(
                f"owner must support weak references, got {type(owner).__name__}"
            ) from None
        tracked[id(ref)] = ref

        def cancel() -> bool:
            return tracked.pop(id(ref), None) is not None

        return cancel

    # -- draining -------------------------------------------------------------------------

    def _run(self) -> bool:
        """The executor's target: one drain pass, then schedule the next due retry."""
        if self._pid != os.getpid():
            # A forked child, and the executor's fork hook restarted this thread before ours
            # emptied the queue (the registry runs them in no set order): skip this run, or
            # it would handle the parent's items.
            return True
        start = self._clock.monotonic()
        with self._lock:
            self._runs += 1
            if self._flush_requested:
                self._flush_requested = False
                for batch in self._retry:
                    batch.due = min(batch.due, start)
            self._process(start)
            next_due = min((b.due for b in self._retry), default=None)
            if next_due is None and not len(self._queue) and self._flush_waiters:
                waiters, self._flush_waiters = self._flush_waiters, []
                for done in waiters:
                    done.set()
        if not self._closed:
            wanted = self._interval
            if next_due is not None:
                wanted = min(wanted, max(next_due - start, self._executor.min_interval))
            if wanted != self._executor.interval:
                self._executor.update_interval(wanted)
        return True

    def _batches_of(self, items: list[T], now: float) -> list[_Batch[T, K]]:
        groups: dict[K, list[T]] = {}
        key_of = self._batch_key
        for item in items:
            key: K = key_of(item) if key_of is not None else None  # type: ignore[assignment]
            groups.setdefault(key, []).append(item)
        size = self._max_batch
        out: list[_Batch[T, K]] = []
        for key, group in groups.items():
            if size is None:
                out.append(_Batch(key, group, 0, now))
            else:
                out.extend(_Batch(key, group[i:i + size], 0, now)
                           for i in range(0, len(group), size))
        return out

    def _process(self, now: float) -> None:
        """Handle new items and the retries that are due. Caller holds `_lock`."""
        dropped = self._queue.statistics().dropped
        if dropped > self._dropped_logged:
            logger.warning("%r dropped %d item(s) (queue full or reaper closed)",
                           self, dropped - self._dropped_logged)
            self._dropped_logged = dropped
        due = [b for b in self._retry if b.due <= now]
        if due:
            self._retry = [b for b in self._retry if b.due > now]
        work = due + self._batches_of(self._queue.drain(), now)
        for i, batch in enumerate(work):
            try:
                self._attempt(batch)
            except BaseException:
                # KeyboardInterrupt/SystemExit inside the handler: keep what was not done.
                self._retry.extend(work[i:])
                raise

    def _attempt(self, batch: _Batch[T, K]) -> None:
        self._handler_thread = threading.get_ident()
        self._in_handler = len(batch.items)
        try:
            self._handler(batch.key, batch.items)
        except Exception as exc:
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"
            batch.attempts += 1
            retry = batch.attempts <= self._max_retries and (
                self._retryable is None or self._retryable(exc)
            )
            if retry:
                self._retried += 1
                delay = min(self._retry_backoff * 2 ** (batch.attempts - 1), self._max_backoff)
                batch.due = self._clock.monotonic() + delay
                self._retry.append(batch)
                logger.info("%r: batch %r (%d items) failed, retry %d in %.3gs: %s", self,
                            batch.key, len(batch.items), batch.attempts, delay, self._last_error)
            else:
                self._give_up(batch, exc)
            del exc  # the traceback pins the handler's frames (PyMongo PYTHON-2433)
        else:
            self._processed += len(batch.items)
            self._batches += 1
        finally:
            self._handler_thread = None
            self._in_handler = 0

    def _give_up(self, batch: _Batch[T, K], exc: Exception) -> None:
        self._failed += len(batch.items)
        logger.error("%r: gave up on batch %r (%d items) after %d attempt(s): %s", self,
                     batch.key, len(batch.items), batch.attempts, self._last_error,
                     exc_info=(type(exc), exc, exc.__traceback__))
        if self._on_give_up is not None:
            try:
                self._on_give_up(batch.key, batch.items, exc)
            except Exception:
                logger.exception("%r: on_give_up raised", self)

    def flush(self, timeout: float | None = None) -> bool:
        """Handle everything pending now, on this thread; True if nothing is left pending.

        Batches waiting for a retry are attempted at once; those that fail again are retried
        with their backoff until `timeout` (None: until done, which with a persistent failure
        ends when the retry limit gives them up).

        Raises:
            RuntimeError: called from inside the handler.
            ValueError: `timeout` is negative or NaN (``math.inf`` means None).
        """
        timeout = _validate.timeout(timeout)
        if self._handler_thread == threading.get_ident():
            raise RuntimeError("Reaper.flush() called from inside its own handler")
        clock = self._clock
        deadline = None if timeout is None else clock.monotonic() + timeout
        # The lock is waited for in real time: the holder is the drainer running a handler.
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            now = clock.monotonic()
            for batch in self._retry:
                batch.due = min(batch.due, now)
            while True:
                self._process(now)
                if not self._retry:
                    if not len(self._queue):
                        return True
                    now = clock.monotonic()
                    continue
                now = clock.monotonic()
                if deadline is not None and now >= deadline:
                    return False
                wait = min(b.due for b in self._retry) - now
                if deadline is not None:
                    wait = min(wait, deadline - now)
                if wait > 0:
                    try:
                        clock.wait(self._sleep_q, wait)
                    except queue.Empty:
                        pass
                now = clock.monotonic()
        finally:
            self._lock.release()

    def _request_flush(self) -> threading.Event | None:
        """Ask the drainer thread for a flush; the event is set once nothing is pending."""
        if not self._executor.statistics().thread_alive:
            return None
        done = threading.Event()
        self._flush_waiters.append(done)
        self._flush_requested = True
        self._executor.wake()
        return done

    def _flush_quietly(self, deadline: float) -> None:
        try:
            if not self.flush(max(0.0, deadline - SYSTEM_CLOCK.monotonic())):
                logger.warning("%r: exit flush did not finish by the deadline (%d item(s) queued"
                               " or in the handler)", self, self._unfinished())
        except Exception:  # one broken reaper must not disturb the others' flush at exit
            logger.exception("exit flush of %r failed", self)

    def close(self, dummy: object = None, *, timeout: float | None = None) -> bool:
        """Flush (at most `timeout`, default `close_timeout`), then stop the thread.

        Idempotent. Items put after `close()` are dropped and counted. During an exit shutdown
        the flush also ends by the registry's global deadline. `dummy` is ignored (the
        registry's protocol); this is not a destructor-safe call: it flushes.

        Returns:
            True if nothing was left pending and the thread has exited.
        """
        if timeout is not None:  # None: close_timeout (a close always has a deadline)
            timeout = _validate.seconds(timeout, "timeout")
        budget = self._close_timeout if timeout is None else timeout
        exit_deadline = registry.exit_budget.deadline
        now = SYSTEM_CLOCK.monotonic()
        # A registry shutdown (at exit, or called by hand) runs its hooks, then closes us:
        # keep to its deadline. A deadline long past is a stale one, unless we are exiting.
        if exit_deadline is not None and (registry.is_shutting_down() or exit_deadline > now):
            budget = max(0.0, min(budget, exit_deadline - now))
        self._closed = True
        # Owners still tracked stay armed: if collected later, their items are counted as
        # dropped (visible in statistics) rather than forgotten.
        self._queue.close()
        inside = self._handler_thread == threading.get_ident()
        if inside:
            flushed = False
        elif exit_deadline is not None and registry.is_shutting_down():
            _flush_on_drainers([self], SYSTEM_CLOCK.monotonic() + budget)
            flushed = not self.pending
        else:
            flushed = self.flush(budget)
        if not flushed:
            logger.warning("%r closed before its flush finished (%d item(s) queued or in the"
                           " handler)", self, self._unfinished())
        self._executor.close()
        if inside:
            return False
        return self._executor.join(budget) and flushed

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the drainer thread to exit (after `close()`)."""
        return self._executor.join(timeout)

    def __enter__(self) -> Reaper[T, K]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- introspection --------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def _unfinished(self) -> int:
        """Pending items plus those of the batch in the handler (for warnings)."""
        return self.pending + self._in_handler

    @property
    def pending(self) -> int:
        """Items queued or waiting for a retry (read without a lock)."""
        return len(self._queue) + sum(len(b.items) for b in list(self._retry))

    @property
    def queue(self) -> DeferredQueue[T]:
        """The underlying destructor-safe queue."""
        return self._queue

    def _state(self) -> str:
        if not self._closed:
            return "open"
        return "closed" if self._executor.join(0) else "closing"

    def statistics(self) -> ReaperStatistics:
        """A snapshot read without a lock (counters only grow)."""
        retrying = sum(len(b.items) for b in list(self._retry))
        return ReaperStatistics(
            state=self._state(),
            pending=len(self._queue) + retrying,
            retrying=retrying,
            processed=self._processed,
            failed=self._failed,
            retried=self._retried,
            dropped=self._queue.statistics().dropped,
            batches=self._batches,
            errors=self._errors,
            last_error=self._last_error,
            runs=self._runs,
        )

    def __repr__(self) -> str:
        parts = [f"<Reaper {self._executor.name!r} {self._state()} pending={self.pending}",
                 f"processed={self._processed}"]
        if self._retry:
            parts.append(f"retrying={sum(len(b.items) for b in list(self._retry))}")
        if self._failed:
            parts.append(f"failed={self._failed}")
        return " ".join(parts) + ">"

    # -- fork -----------------------------------------------------------------------------

    def _after_fork_in_child(self) -> None:
        """Registry fork hook: the child starts empty; the parent's items are the parent's."""
        self._reset_internals()
        self._queue._reset()
        self._dropped_logged = 0
        if self._closed:
            self._queue.close()
        self._tracked.clear()
        self._pid = os.getpid()  # last: the drainer trusts the queue once it sees this
