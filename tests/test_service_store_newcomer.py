"""BackgroundService with a store, used as the docs show a newcomer: the decorator forms on
module-level functions, ``every()`` made explicit, ``__main__`` targets, the name-clash error."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from executors import BackgroundService, Interval
from executors._service.schedule_data import resolve_target
from executors.stores import SQLiteScheduleStore
from executors.testing import wait_until


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[Path]:
    """A folder on sys.path for module files written by a test; its modules are forgotten
    afterwards."""
    folder = tmp_path / "mods"
    folder.mkdir()
    sys.path.insert(0, str(folder))
    before = set(sys.modules)
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        for name in set(sys.modules) - before:
            if name.startswith("newcomer_"):
                del sys.modules[name]


def _write(folder: Path, name: str, text: str) -> types.ModuleType:
    (folder / f"{name}.py").write_text(textwrap.dedent(text))
    importlib.invalidate_caches()
    return importlib.import_module(name)


def test_the_cron_and_schedule_decorators_work_on_module_level_functions_with_a_store(
        modules: Path, tmp_path: Path) -> None:
    """``@svc.cron(...)`` and ``@svc.schedule(...)`` on module-level functions of a real module
    file, with a store set: the decorator no longer fails (the name is not bound while it
    runs); the targets are checked at start(), declared, and the one due runs."""
    db = tmp_path / "jobs.db"
    module = _write(modules, "newcomer_jobs", f"""
        from executors import BackgroundService, Interval
        svc = BackgroundService("jobs", store={f"sqlite:///{db}"!r})
        RAN = []

        @svc.cron("30 2 * * *", tz="Europe/Berlin", name="nightly")
        def nightly() -> None:
            RAN.append("nightly")

        @svc.schedule(Interval(0.05))
        def often() -> None:
            RAN.append("often")
        """)
    svc = module.svc
    try:
        svc.start()
        assert resolve_target("newcomer_jobs:nightly") is module.nightly.fn
        wait_until(lambda: "often" in module.RAN, 5)
    finally:
        svc.shutdown()
    store = SQLiteScheduleStore(str(db))
    try:
        assert sorted(r.name for r in store.records()) == ["newcomer_jobs:often", "nightly"]
        nightly = store.get("nightly")
        assert nightly is not None and nightly.definition.target == "newcomer_jobs:nightly"
    finally:
        store.close()


def test_a_decorator_applied_after_start_is_declared_by_the_store_loop(
        modules: Path, tmp_path: Path) -> None:
    """A module imported after start() that decorates its functions: the declaration waits
    for the store loop's next pass (the name is bound by then), is checked there, and runs."""
    with BackgroundService("late", store=f"sqlite:///{tmp_path / 'jobs.db'}") as svc:
        holder = types.ModuleType("newcomer_holder")
        holder.svc = svc  # type: ignore[attr-defined]
        sys.modules["newcomer_holder"] = holder
        module = _write(modules, "newcomer_late", """
            from executors import Interval
            from newcomer_holder import svc
            RAN = []

            @svc.schedule(Interval(0.05), name="late")
            def late() -> None:
                RAN.append(1)
            """)
        wait_until(lambda: module.RAN, 5)
        assert svc.status().healthy


def test_a_target_that_does_not_import_back_fails_at_start_naming_the_schedule(
        modules: Path, tmp_path: Path) -> None:
    """The check the decorator cannot make is made at start(): a decorated name rebound
    since (it imports back as something else) is a TypeError there, naming the schedule."""
    module = _write(modules, "newcomer_rebound", f"""
        from executors import BackgroundService
        svc = BackgroundService("rebound", store={f"sqlite:///{tmp_path / 'jobs.db'}"!r})

        @svc.cron("30 2 * * *", tz="UTC", name="nightly")
        def nightly() -> None: ...

        nightly = None
        """)
    svc = module.svc
    try:
        with pytest.raises(TypeError, match="stored schedule 'nightly': fn "
                                            "newcomer_rebound:nightly does not import back"):
            svc.start()
    finally:
        svc.shutdown()


def _tick() -> None:
    """A module-level function to add as a job."""


def test_every_on_a_service_with_a_store_must_say_per_process(tmp_path: Path) -> None:
    """With a store, ``every()`` (in memory, run by each process) is refused unless
    ``per_process=True`` is said, with an error naming the keyword and the shared form
    (``schedule(Interval(...))``); the decorator form too. ``per_process=True`` keeps every()'s
    in-memory job, nothing written to the store."""
    db = tmp_path / "jobs.db"
    with BackgroundService(store=f"sqlite:///{db}") as svc:
        with pytest.raises(ValueError, match=r"every\(\) without per_process=True on a service "
                                             r"with a store.*schedule\(Interval\(60\)"):
            svc.every(60, _tick, name="refresh")
        with pytest.raises(ValueError, match="per_process=True"):
            svc.every(60, name="refresh")
        with pytest.raises(ValueError, match=r"every\(\) per_process=False"):
            svc.every(60, _tick, name="refresh", per_process=False)
        with pytest.raises(TypeError, match="per_process must be True, False or None"):
            svc.every(60, _tick, name="refresh", per_process=1)  # type: ignore[call-overload]
        assert svc.jobs == ()
        job = svc.every(60, _tick, name="refresh", per_process=True)
        assert job.statistics().interval == 60
    store = SQLiteScheduleStore(str(db))
    try:
        assert list(store.records()) == []
    finally:
        store.close()


def test_every_without_a_store_needs_no_keyword() -> None:
    """Without a store nothing changes: every() is per-process anyway (per_process=True is
    accepted); per_process=False, a shared job, cannot be had there and is refused."""
    with BackgroundService() as svc:
        svc.every(60, _tick, name="a")
        svc.every(60, _tick, name="b", per_process=True)
        with pytest.raises(ValueError, match="per_process=False on a service without a store"):
            svc.every(60, _tick, name="c", per_process=False)
        assert [j.name for j in svc.jobs] == ["a", "b"]


def test_a_script_s_target_is_named_in_a_warning_with_what_to_do(tmp_path: Path) -> None:
    """A program run as a script stores its targets as ``__main__:fn``, which another process
    resolves to its own main program: a WARNING says so when the schedule is declared, with
    the fix (an importable module); a target in an importable module gets none."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(f"""
        import logging, sys
        from executors import BackgroundService, Interval
        from executors._service.schedule_data import resolve_target
        logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="%(message)s")

        def report() -> None: ...

        svc = BackgroundService("script", store={f"sqlite:///{tmp_path / 'jobs.db'}"!r})
        svc.schedule(Interval(3600), report, name="report")
        svc.schedule(Interval(3600), resolve_target, "os:getcwd", name="imported")
        svc.start()
        svc.shutdown()
        """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert lines == [(
        "script: stored schedule 'report' has the target __main__:report: this program runs "
        "as a script, and another process serving the store (or `executors schedules`) "
        "imports its own __main__ instead; put the function in an importable module and "
        "import it from the script")], done.stderr


def _other() -> None:
    """Another module-level function to add as a job."""


def test_a_name_clash_says_the_name_is_taken_and_by_which_schedule(tmp_path: Path) -> None:
    """Two stored schedules given one name: the error says the name is taken and by which
    schedule (its target and trigger), not "give each stored schedule a name" (they had one);
    unnamed, it still says to name them. A stored name taken by an every() job says so too."""
    with BackgroundService("svc", store=f"sqlite:///{tmp_path / 'jobs.db'}") as svc:
        svc.cron("30 2 * * *", _tick, tz="UTC", name="nightly")
        svc.every(60, _other, name="cache", per_process=True)
        with pytest.raises(ValueError) as named:
            svc.schedule(Interval(60), _other, name="nightly")
        assert str(named.value) == (
            "the name 'nightly' is taken in svc by the stored schedule "
            f"{__name__}:_tick (30 2 * * * UTC): give this one another name")
        with pytest.raises(ValueError, match="the name 'cache' is taken in svc by the job "
                                             r"_other \(every 60s\)"):
            svc.schedule(Interval(60), _other, name="cache")
        svc.schedule(Interval(60), _other)
        with pytest.raises(ValueError, match=f"the name '{__name__}:_other' is taken .* give "
                                             f"each stored schedule of {__name__}:_other a name"):
            svc.schedule(Interval(120), _other)
