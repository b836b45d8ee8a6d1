"""The exception hierarchy: every error executors raises itself derives from ExecutorsError."""

from __future__ import annotations

__all__ = (
    "ExecutorsError",
    "WouldBlock",
    "ClosedError",
    "ChannelClosed",
    "ShutdownError",
    "ThreadCancelled",
    "TransactionRetry",
    "TransactionExpired",
)


class ExecutorsError(Exception):
    """Base class of the exceptions this library defines."""


class WouldBlock(ExecutorsError):
    """Raised by an ``X_nowait()`` operation that cannot complete at once.

    Retry later, or call the blocking ``X()`` form instead.
    """


class ClosedError(ExecutorsError):
    """Raised when an operation is attempted on an object that has been closed."""


class ChannelClosed(ClosedError):
    """Raised by a channel operation once the channel is closed (and, for ``get``, drained)."""


class ShutdownError(ClosedError, RuntimeError):
    """Raised when work is submitted to something that has been shut down.

    Also a `RuntimeError`: `asyncio.TaskGroup` ("is finished"), `concurrent.futures` executors
    ("cannot schedule new futures after shutdown") and ``aiotools.PersistentTaskGroup`` ("has
    already finished") raise `RuntimeError` for the same mistake, and code written for them
    catches that.
    """


class ThreadCancelled(ExecutorsError):
    """Raised in a thread by `CancelToken.raise_if_cancelled()` once its token is cancelled.

    A `ThreadGroup` does not count it as an error when its own token was cancelled: let it
    propagate out of the thread's function to stop cooperatively.
    """


class TransactionRetry(ExecutorsError):
    """Raised by a store adapter when a transaction failed in a way that retrying can fix.

    A conflict, a lost connection, a busy database: `executors.aio.Traversal` rolls back and
    retries from its last committed cursor. Adapters translate their driver's retryable
    errors into this class (keeping the original as ``__cause__``).
    """


class TransactionExpired(TransactionRetry):
    """Raised by a store adapter when a transaction outlived its time budget.

    `executors.aio.Traversal` retries with a smaller budget; give it a larger ``budget`` or a
    smaller ``max_batch`` if this repeats.
    """
