"""A stored schedule as data: its target as ``"module:qualname"``, its trigger as data, and
the snapshots `BackgroundService.status()` shows of the schedules in a store (private).

Nothing here runs anything: the store loop (`stored`) serves the schedules; this module says
what a schedule is when it is kept in a store, and refuses what cannot be (a lambda, a
closure, a bound method of an object: nothing is pickled).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import importlib
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from executors.stores import ScheduleStore

if TYPE_CHECKING:
    from .wallclock import TriggerLike

__all__ = ("StoreStatus", "StoredSchedule", "check_store", "check_target", "iso", "not_bound_yet",
           "resolve_target", "target_of", "trigger_of")


# -- schedules as data --------------------------------------------------------------------------


def target_of(fn: object) -> str:
    """``"module:qualname"`` of `fn`, refused at once when it can never import back.

    Whether it does import back is `check_target`'s question, asked when the declaration is
    written (`BackgroundService.start`): while a decorator runs, the module-level name it
    decorates is not bound yet.

    Raises:
        TypeError: `fn` cannot be named so (a lambda, a closure or nested function, a bound
            method of an object, a callable object without a qualified name), with the reason.
    """
    if inspect.ismethod(fn) and not isinstance(fn.__self__, type):
        raise TypeError(
            f"fn {fn!r} is a bound method of an object: a stored schedule names its target "
            "as 'module:qualname' and cannot keep the object; schedule a module-level "
            "function (or a classmethod or staticmethod) and pass the object's data as "
            "JSON arguments")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(f"fn {fn!r} has no __module__ and __qualname__: a stored schedule "
                        "needs an importable function as its target")
    if "<lambda>" in qualname:
        raise TypeError(f"fn {module}:{qualname} is a lambda: a stored schedule names its "
                        "target as 'module:qualname', and a lambda cannot be imported; use a "
                        "module-level def")
    if "<locals>" in qualname:
        raise TypeError(f"fn {module}:{qualname} is a closure or a nested function: another "
                        "process cannot import it (nor its enclosing variables); use a "
                        "module-level function with JSON arguments")
    return f"{module}:{qualname}"


def check_target(target: str, fn: object) -> None:
    """Check that `target` imports back to `fn` (or to the `Job` a decorator bound it to).

    Raises:
        TypeError: it does not import, or imports as another object, with the reason.
    """
    try:
        resolved = resolve_target(target)
    except (ImportError, AttributeError, TypeError) as exc:
        raise TypeError(f"fn {target} does not import back ({exc}): a stored schedule's "
                        "target must be a module-level name once its module is imported"
                        ) from None
    if resolved is not fn and resolved != fn:
        raise TypeError(f"fn {target} imports back as a different object ({resolved!r}): "
                        "a decorator that does not keep the function's name, or a name "
                        "rebound since; schedule the module-level object itself")


def not_bound_yet(target: str) -> bool:
    """True if `target`'s module is imported (or being imported) but lacks its first name:
    the case of a decorator running before the name it decorates is bound."""
    module_name, _, qualname = target.partition(":")
    module = sys.modules.get(module_name)
    return module is not None and not hasattr(module, qualname.split(".")[0])


def resolve_target(target: str) -> Callable[..., object]:
    """The object ``"module:qualname"`` names.

    A name bound to a `Job` (``@svc.cron(...)`` returns one) names that job's function.

    Raises:
        ImportError, AttributeError: it does not import.
        ValueError: `target` is not ``module:qualname``.
    """
    module_name, sep, qualname = target.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(f"a target must be 'module:qualname', got {target!r}")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    from .job import Job  # a decorated module-level function's name is bound to its Job
    if isinstance(obj, Job):
        obj = obj.fn
    if not callable(obj):
        raise TypeError(f"{target} is not callable")
    return obj  # type: ignore[no-any-return]


def check_store(store: object) -> ScheduleStore:
    """`store` if it looks like a schedule store; TypeError naming `store` otherwise."""
    needed = ("declare", "claim", "complete", "renew", "next_due", "records", "remove")
    if not all(callable(getattr(store, a, None)) for a in needed):
        raise TypeError("store must be a URL (sqlite:///jobs.db, mongodb://..., "
                        f"postgresql://..., memory:) or a schedule store, got "
                        f"{type(store).__name__}")
    return store  # type: ignore[return-value]


@functools.lru_cache(maxsize=1024)
def _trigger(text: str) -> TriggerLike:
    from executors.triggers import trigger_from_data

    return trigger_from_data(json.loads(text))  # type: ignore[return-value]


def trigger_of(data: Mapping[str, object]) -> TriggerLike:
    """The trigger of a stored definition (cached: records repeat their trigger data)."""
    return _trigger(json.dumps(data, sort_keys=True))


def iso(instant: dt.datetime | None) -> str | None:
    return None if instant is None else instant.isoformat()


# -- status -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class StoredSchedule:
    """One record of the store, as `BackgroundService.status` lists it (ISO strings)."""

    #: The schedule's name.
    name: str
    #: The trigger as people read it.
    trigger: str
    #: ``"module:qualname"``.
    target: str
    #: Whether this process declares it (a schedule no process declares stays listed).
    declared: bool
    #: Paused schedules are not claimed.
    paused: bool
    #: The next fire time (UTC), or None (exhausted).
    next_fire: str | None
    #: Who holds the run in progress (``host:pid:random``), or None.
    owner: str | None
    #: When that run's lease ends, on the store's clock (UTC), or None.
    lease_until: str | None
    #: The store's counters: runs, failures, missed, lost (crashed owner, dropped),
    #: lease_lost.
    counters: Mapping[str, int]
    #: The fire time of the last finished run (UTC), or None.
    last_fire: str | None
    #: Its result: ``"ok"``, ``"error: Type: message"``, ``"lost"`` (its owner died), or None.
    last_result: str | None


@dataclasses.dataclass(frozen=True)
class StoreStatus:
    """The store side of a service (see `BackgroundService.status`)."""

    #: The store's URL, password hidden.
    url: str
    #: This process's owner id in the store (``host:pid:random``).
    owner: str
    #: False while the store cannot be reached (the service keeps running what it claimed),
    #: or while a declaration or a plan of this process fails (`declarations_failing`,
    #: `plans_failing`: a schedule the code declares is not being served).
    healthy: bool
    #: The latest store error (``"Type: message"``), or None; while the store answers and a
    #: declaration or plan fails, that one (``"stored schedule 'name': Type: message"``).
    last_error: str | None
    #: Fire times this process claimed.
    claims: int
    #: Of them, runs whose end was recorded (completion accepted by the store).
    completed: int
    #: Runs whose lease was lost (renewal or completion refused).
    lease_lost: int
    #: Store operations that raised.
    store_errors: int
    #: Completions waiting for the store to come back.
    completions_pending: int
    #: Every record of the store at the latest read (at most `SNAPSHOT_EVERY` old, or 20
    #: times the read when reading them all takes longer: at most 5 % of the loop).
    schedules: tuple[StoredSchedule, ...]
    #: ``(name, reason)`` of each record that could not be read (skipped, the others run;
    #: declaring the name again writes over it).
    corrupt: tuple[tuple[str, str], ...] = ()
    #: Set while a store call has been in progress longer than the renewal period (a third
    #: of the lease, at most 10 s): ``"store call blocked 12 s (claim on svc-store)"``; the
    #: store is then unhealthy (`healthy` is False) though no call has failed yet.
    blocked: str | None = None
    #: Records this process does not declare whose target ``serve=`` refused: each counted
    #: (and logged) once per record and target, never claimed, imported or run here.
    refused: int = 0
    #: ``(name, error)`` of each schedule of this process whose declaration the store refused
    #: (tried again on its own backoff; the other schedules are served meanwhile).
    declarations_failing: tuple[tuple[str, str], ...] = ()
    #: Failed declaration attempts since the service started.
    declaration_errors: int = 0
    #: ``(name, error)`` of each schedule whose plan (next fire time, ``missed`` walk) failed
    #: or took longer than its time budget: the record was left as it was, tried again on its
    #: own backoff.
    plans_failing: tuple[tuple[str, str], ...] = ()
    #: Failed plans since the service started.
    plan_errors: int = 0


# -- a job's link to the store ------------------------------------------------------------------
