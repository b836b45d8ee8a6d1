"""Every public entry point of the threaded core checks seconds, timeouts and counts by the one
rule of `executors._validate`: bools are refused, NaN and negatives are errors, ``math.inf`` is
an error for a duration and means "no limit" (as None does) for a timeout."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import pytest

from executors import BackgroundService, CancelToken, PeriodicExecutor, registry
from executors.deferred import DeferredQueue, Reaper
from executors.testing import VirtualClock, wait_until


def _noop(*args: object) -> bool:
    return True


def _job() -> object:
    return BackgroundService("v").every(60, _noop)


_reapers: list[Reaper[object, None]] = []
_closers: list[Callable[[], object]] = []


def _reaper(**kwargs: object) -> Reaper[object, None]:
    """A reaper closed after the test (its drainer thread must not outlive it)."""
    reaper: Reaper[object, None] = Reaper(_noop, **kwargs)  # type: ignore[call-overload]
    _reapers.append(reaper)
    return reaper


def _closed_reaper() -> Reaper[object, None]:
    reaper = _reaper()
    reaper.close(5)
    return reaper


# name -> a call taking the value under test.
DURATIONS: dict[str, Callable[[object], object]] = {
    "PeriodicExecutor(interval)": lambda v: PeriodicExecutor(v, 0, _noop),  # type: ignore[arg-type]
    "PeriodicExecutor(min_interval)": lambda v: PeriodicExecutor(60, v, _noop),  # type: ignore[arg-type]
    "PeriodicExecutor.update_interval": lambda v: PeriodicExecutor(60, 0, _noop).update_interval(v),  # type: ignore[arg-type]
    "BackgroundService(inline_below)": lambda v: BackgroundService(inline_below=v),  # type: ignore[arg-type]
    "BackgroundService(slack)": lambda v: BackgroundService(slack=v),  # type: ignore[arg-type]
    "every(interval)": lambda v: BackgroundService().every(v, _noop),  # type: ignore[call-overload]
    "every(min_interval)": lambda v: BackgroundService().every(60, _noop, min_interval=v),  # type: ignore[call-overload]
    "every(jitter)": lambda v: BackgroundService().every(60, _noop, jitter=v),  # type: ignore[call-overload]
    "every(delay)": lambda v: BackgroundService().every(60, _noop, delay=v),  # type: ignore[call-overload]
    "every(backoff_max)": lambda v: BackgroundService().every(60, _noop, backoff_max=v),  # type: ignore[call-overload]
    "Job.update_interval": lambda v: _job().update_interval(v),  # type: ignore[attr-defined]
    "registry.set_exit_timeout": lambda v: registry.set_exit_timeout(v),  # type: ignore[arg-type]
    "Reaper(interval)": lambda v: _reaper(interval=v),  # type: ignore[arg-type]
    "Reaper(min_interval)": lambda v: _reaper(min_interval=v),  # type: ignore[arg-type]
    "Reaper(retry_backoff)": lambda v: _reaper(retry_backoff=v),  # type: ignore[arg-type]
    "Reaper(max_backoff)": lambda v: _reaper(max_backoff=v),  # type: ignore[arg-type]
    "Reaper(close_timeout)": lambda v: _reaper(close_timeout=v),  # type: ignore[arg-type]
    "Reaper.close(timeout)": lambda v: _reaper().close(timeout=v),  # type: ignore[arg-type]
    "VirtualClock.advance": lambda v: VirtualClock().advance(v),  # type: ignore[arg-type]
    "CursorReaper(timeout)": lambda v: _cursor_reaper(timeout=v),
    "CursorReaper(interval)": lambda v: _cursor_reaper(interval=v),
    "CursorReaper.close(timeout)": lambda v: _cursor_reaper().close(v),  # type: ignore[attr-defined]
}

TIMEOUTS: dict[str, Callable[[object], object]] = {
    "PeriodicExecutor.join": lambda v: PeriodicExecutor(60, 0, _noop).join(v),  # type: ignore[arg-type]
    "BackgroundService(shutdown_timeout)":
        lambda v: BackgroundService(shutdown_timeout=v).shutdown(),  # type: ignore[arg-type]
    "BackgroundService.join": lambda v: BackgroundService().join(v),  # type: ignore[arg-type]
    "BackgroundService.shutdown": lambda v: BackgroundService().shutdown(v),  # type: ignore[arg-type]
    "registry.shutdown": lambda v: registry.shutdown(v),  # type: ignore[arg-type]
    "Reaper.flush": lambda v: _reaper().flush(v),  # type: ignore[arg-type]
    "Reaper.join": lambda v: _closed_reaper().join(v),  # type: ignore[arg-type]
    "CancelToken.wait": lambda v: _cancelled().wait(v),  # type: ignore[arg-type]
    "wait_until": lambda v: wait_until(lambda: True, v),  # type: ignore[arg-type]
    "VirtualClock.advance(timeout)": lambda v: VirtualClock().advance(0, timeout=v),  # type: ignore[arg-type]
    "VirtualClock.wait_for_sleepers": lambda v: VirtualClock().wait_for_sleepers(0, v),  # type: ignore[arg-type]
    "CursorReaper.flush": lambda v: _cursor_reaper().flush(v),  # type: ignore[attr-defined]
}

COUNTS: dict[str, Callable[[object], object]] = {
    "BackgroundService(workers)": lambda v: BackgroundService(workers=v),  # type: ignore[arg-type]
    "DeferredQueue(max_pending)": lambda v: DeferredQueue(max_pending=v),  # type: ignore[arg-type]
    "DeferredQueue.drain": lambda v: DeferredQueue().drain(v),  # type: ignore[arg-type]
    "Reaper(wake_threshold)": lambda v: _reaper(wake_threshold=v),  # type: ignore[arg-type]
    "Reaper(max_batch)": lambda v: _reaper(max_batch=v),  # type: ignore[arg-type]
    "Reaper(max_retries)": lambda v: _reaper(max_retries=v),  # type: ignore[arg-type]
    "CursorReaper(max_batch)": lambda v: _cursor_reaper(max_batch=v),
    "VirtualClock.wait_for_sleepers(count)": lambda v: VirtualClock().wait_for_sleepers(v),  # type: ignore[arg-type]
}


def _cursor_reaper(**kwargs: object) -> object:
    """A CursorReaper on a client that never connects (none of these calls sends a command)."""
    pymongo = pytest.importorskip("pymongo", reason="integrations.mongo needs pymongo")
    from integrations.mongo import CursorReaper

    client = pymongo.MongoClient("mongodb://127.0.0.1:1", connect=False)
    reaper = CursorReaper(client, **kwargs)  # type: ignore[arg-type]
    _closers.append(lambda: (reaper.close(5), client.close())[0])
    return reaper


def _cancelled() -> CancelToken:
    token = CancelToken()
    token.cancel()
    return token


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    before = registry.exit_timeout()
    yield
    registry.set_exit_timeout(before)
    while _reapers:
        assert _reapers.pop().close(5)
    while _closers:
        assert _closers.pop()()


@pytest.mark.parametrize(("value", "error"), [
    (True, TypeError), (False, TypeError), ("1", TypeError), (math.nan, ValueError),
    (-1, ValueError), (-0.5, ValueError), (math.inf, ValueError), (-math.inf, ValueError)])
@pytest.mark.parametrize("entry", sorted(DURATIONS))
def test_durations(entry: str, value: object, error: type[Exception]) -> None:
    """A duration refuses bools and strings (TypeError), NaN, negatives and inf (ValueError),
    and the message names the argument."""
    with pytest.raises(error, match=r"interval|seconds|timeout|inline_below|slack|jitter|delay"
                                    r"|backoff"):
        DURATIONS[entry](value)


@pytest.mark.parametrize(("value", "error"), [
    (True, TypeError), ("1", TypeError), (math.nan, ValueError), (-1, ValueError),
    (-math.inf, ValueError)])
@pytest.mark.parametrize("entry", sorted(TIMEOUTS))
def test_timeouts_refuse(entry: str, value: object, error: type[Exception]) -> None:
    """A timeout refuses bools and strings (TypeError), NaN and negatives (ValueError)."""
    with pytest.raises(error, match="timeout"):
        TIMEOUTS[entry](value)


@pytest.mark.parametrize("value", [math.inf, None, 0])
@pytest.mark.parametrize("entry", sorted(TIMEOUTS))
def test_timeouts_accept_inf_as_none(entry: str, value: object) -> None:
    """``math.inf`` is accepted wherever None is, and means the same: no limit (each call here
    has nothing to wait for, so it returns at once either way); 0 is accepted too."""
    TIMEOUTS[entry](value)


@pytest.mark.parametrize(("value", "error"), [
    (True, TypeError), (1.5, TypeError), (math.inf, TypeError), (math.nan, TypeError),
    ("2", TypeError), (-1, ValueError)])
@pytest.mark.parametrize("entry", sorted(COUNTS))
def test_counts(entry: str, value: object, error: type[Exception]) -> None:
    """A count is an int (not a bool, not a float) at or above its minimum."""
    with pytest.raises(error, match=r"workers|max_pending|max_items|wake_threshold|max_batch"
                                    r"|max_retries|count"):
        COUNTS[entry](value)
