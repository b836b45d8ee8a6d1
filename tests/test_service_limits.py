"""A job's name and a stored schedule's arguments are checked at the call, each refusal naming
the argument, before anything is stored: what some store would refuse later never reaches it."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from helpers import stored_jobs

from executors import BackgroundService, Date, Interval
from executors._service.limits import (
    ARGS_DEPTH_MAX,
    ARGS_SIZE_MAX,
    NAME_MAX,
    check_arguments,
)
from executors.stores import SQLiteScheduleStore
from executors.testing import wait_until


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


BAD_NAMES = [
    ("", "name must not be empty"),
    ("\ud800", "name must be valid UTF-8: a lone surrogate '\\ud800' at position 0"),
    ("a\x00b", "name must not contain control characters: '\\x00' at position 1"),
    ("line\nforged", "name must not contain control characters: '\\n' at position 4"),
    ("\x1b[2J", "name must not contain control characters: '\\x1b' at position 0"),
    ("n" * (NAME_MAX + 1), f"name must be at most {NAME_MAX} characters, got {NAME_MAX + 1}"),
    ("n" * 100_000, f"name must be at most {NAME_MAX} characters, got 100,000"),
]


@pytest.mark.parametrize(("name", "message"), BAD_NAMES)
def test_a_bad_name_is_refused_at_schedule_and_cron_and_nothing_is_stored(
        tmp_path: Path, name: str, message: str) -> None:
    """An empty name, a lone surrogate, a control character (NUL, newline, escape) or a name
    past NAME_MAX is a ValueError naming `name` from schedule() and cron() on a service with a
    store, raised before the store is written: the store holds no record afterwards."""
    db = tmp_path / "jobs.db"
    with BackgroundService(store=f"sqlite:///{db}") as svc:
        with pytest.raises(ValueError, match=re.escape(message)):
            svc.schedule(Interval(60), stored_jobs.seen, "a", name=name)
        with pytest.raises(ValueError, match="name must"):
            svc.cron("* * * * *", stored_jobs.seen, tz="UTC", name=name)
        assert svc.jobs == ()
    store = SQLiteScheduleStore(str(db))
    try:
        assert store.records() == []
    finally:
        store.close()


@pytest.mark.parametrize(("name", "message"), BAD_NAMES[:4])
def test_the_name_rule_is_the_same_for_jobs_kept_in_memory(name: str, message: str) -> None:
    """Without a store, schedule(), cron() and every() refuse the same names (a name is
    printed in the same logs and status), so a program that adds a store later meets no new
    rule."""
    with BackgroundService() as svc:
        for add in (lambda: svc.schedule(Interval(60), print, name=name),
                    lambda: svc.cron("* * * * *", print, tz="UTC", name=name),
                    lambda: svc.every(60, print, name=name)):
            with pytest.raises(ValueError, match="name must"):
                add()
        assert svc.jobs == ()


def test_memory_schedules_keep_any_arguments_and_the_longest_name_runs(tmp_path: Path) -> None:
    """The argument bounds are for what a store keeps: a memory-only schedule still takes any
    Python object, a NUL in a string and a deep value as arguments, and runs with them; a name
    of NAME_MAX characters (4-byte ones) is accepted with or without a store."""
    deep = _nested(1_500)
    marker = object()
    got: list[tuple[object, ...]] = []
    longest = "\U0001f600" * NAME_MAX
    when = dt.datetime.now(dt.UTC) + dt.timedelta(milliseconds=50)
    with BackgroundService() as svc:
        svc.schedule(Date(when), lambda *a: got.append(a), marker, "a\x00b", deep, name=longest)
        wait_until(lambda: bool(got), 5)
    assert got == [(marker, "a\x00b", deep)]
    with BackgroundService(store=f"sqlite:///{tmp_path / 'jobs.db'}") as svc:
        job = svc.schedule(Interval(60), stored_jobs.seen, "a", name=longest)
        assert job.name == longest


@pytest.mark.parametrize(("args", "error", "message"), [
    (("a\x00b",), ValueError, (r"args\[0\] of stored schedule 'x' must not contain NUL "
                              r"\(at position 1\)")),
    (({"k\x00": 1},), ValueError, (r"a key of args\[0\] of stored schedule 'x' must not "
                                  "contain NUL")),
    ((["ok", {"deep": "\udc80"}],), ValueError, (r"args\[0\]\[1\]\['deep'\] of stored "
                                               "schedule 'x' must be valid UTF-8")),
    ((1, _nested(1_500)), ValueError, (rf"args\[1\] of stored schedule 'x' nests deeper than "
                                      rf"{ARGS_DEPTH_MAX} lists")),
    ((_nested(ARGS_DEPTH_MAX + 1),), ValueError, "nests deeper"),
    (("x" * ARGS_SIZE_MAX,), ValueError, (f"take 1,048,585 bytes of JSON; at most "
                                         f"{ARGS_SIZE_MAX:,}")),
    (({1: 2},), TypeError, r"args of stored schedule 'x' must be JSON: args\[0\] has the key 1"),
    ((float("inf"),), TypeError, r"must be JSON: args\[0\] is inf"),
    (({1, 2},), TypeError, r"must be JSON \(nothing is pickled\): args\[0\] is a set"),
])
def test_stored_arguments_a_store_would_refuse_are_refused_at_schedule(
        tmp_path: Path, args: tuple[object, ...], error: type[Exception], message: str) -> None:
    """Arguments of a stored schedule holding NUL (in a string or a key), a lone surrogate,
    nesting past ARGS_DEPTH_MAX (1,500 levels: a ValueError, not a RecursionError), JSON past
    ARGS_SIZE_MAX bytes, or what JSON cannot say, are refused at schedule(), naming the
    argument (its path), with nothing stored."""
    db = tmp_path / "jobs.db"
    with BackgroundService(store=f"sqlite:///{db}") as svc:
        with pytest.raises(error, match=message):
            svc.schedule(Interval(60), stored_jobs.seen, *args, name="x")
        assert svc.jobs == ()
    store = SQLiteScheduleStore(str(db))
    try:
        assert store.get("x") is None
    finally:
        store.close()


def test_arguments_at_the_bounds_are_accepted_and_kwargs_are_checked_alike() -> None:
    """ARGS_DEPTH_MAX levels and ARGS_SIZE_MAX bytes exactly pass; keyword arguments (names
    and values) are held to the same rules, named as ``kwargs[...]``; a depth of a million
    is refused without recursion."""
    check_arguments([_nested(ARGS_DEPTH_MAX)], {}, "x")
    check_arguments(["x" * (ARGS_SIZE_MAX - 9)], {}, "x")  # [["..."],{}]: 9 more bytes
    with pytest.raises(ValueError, match=r"kwargs\['k'\] of stored schedule 'x' must not "
                                         "contain NUL"):
        check_arguments([], {"k": "\x00"}, "x")
    with pytest.raises(ValueError, match="the keyword 'a\\\\x00' of stored schedule"):
        check_arguments([], {"a\x00": 1}, "x")
    with pytest.raises(ValueError, match=r"kwargs\['k'\] of stored schedule 'x' nests"):
        check_arguments([], {"k": _nested(1_000_000)}, "x")


def _long_named() -> None:
    """A module-level function given a name longer than NAME_MAX (below)."""


LONG_NAME = "f" * NAME_MAX
_long_named.__name__ = _long_named.__qualname__ = LONG_NAME
globals()[LONG_NAME] = _long_named  # it imports back as "tests...:fff..." (the target rule)


def test_the_default_name_of_a_stored_schedule_is_checked_too(tmp_path: Path) -> None:
    """Unnamed, a stored schedule is named after its target ("module:qualname"); that name is
    held to the same rule: a function whose target is longer than NAME_MAX characters must be
    given a name, and is stored under the one given."""
    with BackgroundService(store=f"sqlite:///{tmp_path / 'jobs.db'}") as svc:
        with pytest.raises(ValueError, match=rf"the name of an unnamed stored schedule \(its "
                                             rf"target; give it a name\) must be at most "
                                             rf"{NAME_MAX} characters"):
            svc.schedule(Interval(60), _long_named)
        job = svc.schedule(Interval(60), _long_named, name="short")
    assert job.name == "short"
