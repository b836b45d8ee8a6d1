"""`executors schedules STORE [ACTION NAME]`: list the stored schedules, pause, resume, run now,
remove; the command line's error rules (usage errors exit 2, a store or a name that is not
there exits 1, one line each, passwords hidden)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.store_urls import corrupt

from executors._cli import main
from executors.stores import (
    Plan,
    ScheduleDefinition,
    ScheduleRecord,
    ScheduleStore,
    open_store,
)
from executors.testing import free_port
from executors.triggers import Cron

NIGHTLY = Cron("30 2 * * *", tz="Europe/Berlin")


def _store_with_nightly(tmp_path: Path) -> tuple[str, ScheduleStore]:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(url)
    store.declare(ScheduleDefinition("nightly", NIGHTLY.to_data(), "app.jobs:report"),
                  NIGHTLY.next_after)
    return url, store


def test_list_shows_trigger_next_fire_in_its_zone_and_utc_last_run_and_counts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The list names the trigger as written, the next fire time in the schedule's zone and in
    UTC, the last run and its result, and the counters."""
    url, store = _store_with_nightly(tmp_path)
    record = store.get("nightly")
    assert record is not None and record.next_fire is not None
    local = record.next_fire.astimezone(NIGHTLY.tz)
    store.close()
    assert main(["schedules", url]) == 0
    out = capsys.readouterr().out
    assert "nightly  [active]  30 2 * * * Europe/Berlin  -> app.jobs:report" in out
    assert f"next fire  {local:%Y-%m-%d} 02:30:00 {local:%Z} ({record.next_fire:%Y-%m-%d %H}:30" \
        in out
    assert "last run   never" in out and "runs 0, failures 0, missed 0, lost 0" in out


def test_list_shows_a_run_in_progress_with_its_owner_and_lease(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A claimed run shows its fire time, owner, attempt and what is left of its lease."""
    url, store = _store_with_nightly(tmp_path)
    record = store.get("nightly")
    assert record is not None
    store.set_next_fire("nightly", store.now() - dt.timedelta(seconds=1))

    def plan(rec: object, now: dt.datetime) -> object:
        from executors.stores import Plan

        return Plan(now - dt.timedelta(seconds=1), NIGHTLY.next_after(now))

    (_claim,) = store.claim("worker-7", lease=120, limit=5, planner=plan,  # type: ignore[arg-type]
                           on_crash=lambda r: "drop")
    store.close()
    assert main(["schedules", url]) == 0
    out = capsys.readouterr().out
    assert "on worker-7 (attempt 1, lease 1" in out and "s left)" in out


def test_pause_resume_run_now_and_remove_change_the_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each action changes the stored record and says what it did."""
    url, store = _store_with_nightly(tmp_path)
    assert main(["schedules", url, "pause", "nightly"]) == 0
    assert store.get("nightly").paused  # type: ignore[union-attr]
    assert main(["schedules", url]) == 0
    assert "nightly  [paused]" in capsys.readouterr().out
    assert main(["schedules", url, "resume", "nightly"]) == 0
    assert not store.get("nightly").paused  # type: ignore[union-attr]
    before = store.now()
    assert main(["schedules", url, "run-now", "nightly"]) == 0
    next_fire = store.get("nightly").next_fire  # type: ignore[union-attr]
    assert next_fire is not None and next_fire - before < dt.timedelta(seconds=5)
    assert main(["schedules", url, "remove", "nightly"]) == 0
    assert store.get("nightly") is None
    assert capsys.readouterr().out.splitlines()[-1] == "remove: nightly"
    assert main(["schedules", url]) == 0
    assert "no schedules in" in capsys.readouterr().out
    store.close()


def test_an_unknown_name_is_one_line_and_exit_1(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Acting on a schedule that is not there says so in one line."""
    url, store = _store_with_nightly(tmp_path)
    store.close()
    assert main(["schedules", url, "pause", "nightly-typo"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("executors schedules: no schedule named 'nightly-typo' in sqlite:")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("action", ["pause", "resume", "run-now"])
def test_acting_on_an_unreadable_record_is_one_line_and_exit_1_and_remove_removes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], action: str) -> None:
    """A record that cannot be read cannot be paused, resumed or run now: one line naming the
    reason and the ways out, no traceback; `remove` removes it."""
    url, store = _store_with_nightly(tmp_path)
    store.close()
    corrupt(url, "nightly", {"trigger": 3})
    assert main(["schedules", url, action, "nightly"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"executors schedules: cannot {action} 'nightly' in sqlite:"), err
    assert "'trigger' must be a dict, got 3; remove it, or declare it again in code" in err
    assert len(err.splitlines()) == 1
    assert main(["schedules", url, "remove", "nightly"]) == 0
    assert main(["schedules", url]) == 0
    assert "no schedules in" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["pause"], "pause needs the NAME of a schedule"),
    (["list", "x"], "list takes no NAME"),
    (["stop", "x"], "invalid choice: 'stop'"),
])
def test_usage_errors_exit_2_on_the_subcommands_usage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        message: str) -> None:
    """A missing or extra NAME and an unknown action are usage errors of `schedules`."""
    url, store = _store_with_nightly(tmp_path)
    store.close()
    with pytest.raises(SystemExit) as info:
        main(["schedules", url, *argv])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: executors schedules" in err and message in err


def test_an_unknown_scheme_is_a_usage_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    """A store URL of no known kind exits 2, naming the scheme and the known ones."""
    with pytest.raises(SystemExit) as info:
        main(["schedules", "redis://localhost/0"])
    assert info.value.code == 2
    assert "STORE: store URL scheme 'redis' is not one of" in capsys.readouterr().err


def test_a_missing_sqlite_file_is_not_created(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Listing a file that does not exist says so instead of creating an empty store."""
    missing = tmp_path / "nope.db"
    assert main(["schedules", f"sqlite:///{missing}"]) == 1
    assert "no SQLite store at" in capsys.readouterr().err
    assert not missing.exists()


def test_an_unreachable_store_is_one_line_with_the_password_hidden(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens at the URL: one line, exit 1, the password replaced by ***."""
    url = f"postgresql://alice:s3cret@127.0.0.1:{free_port()}/db"
    assert main(["schedules", url]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "alice:***@" in err and "s3cret" not in err


def _command(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`executors schedules ARGS` run as a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "executors", "schedules", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("url", ["mongodb://user:a@b@127.0.0.1:{port}/db",
                                 "postgresql://user@127.0.0.1:{port}/db?password=s3cret"])
def test_a_url_with_a_password_shows_it_nowhere_and_no_traceback(url: str) -> None:
    """A URL pymongo cannot read (an unescaped "@" in the password) is a usage error, one
    an unreachable server a one-line error: no traceback, the password hidden."""
    proc = _command(url.format(port=free_port()))
    assert proc.returncode in (1, 2), proc.stderr
    assert "Traceback" not in proc.stderr and "s3cret" not in proc.stderr
    assert "a@b" not in proc.stderr and proc.stdout == ""
    assert "user:***@127.0.0.1" in proc.stderr or "password=***" in proc.stderr


def _schema(path: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return sorted(conn.execute("SELECT type, name FROM sqlite_master"))


def test_a_sqlite_database_that_is_not_a_store_is_listed_and_acted_on_without_a_write(
        tmp_path: Path) -> None:
    """``executors schedules sqlite:///other.db`` on a SQLite database of something else
    adds no table to it: listing and an action are both refused, one line, exit 1."""
    path = tmp_path / "other.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    before = _schema(path)
    for args in ([], ["pause", "nightly"], ["remove", "nightly"]):
        proc = _command(f"sqlite:///{path}", *args)
        assert proc.returncode == 1, proc
        assert "holds no schedule store (a SQLite database but no" in proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
    assert _schema(path) == before


def test_listing_a_store_never_writes_to_it(tmp_path: Path) -> None:
    """The list opens the file read-only: the database file is byte for byte what it was
    (and a file of a newer format is refused before anything is added)."""
    url, store = _store_with_nightly(tmp_path)
    store.close()
    path = tmp_path / "jobs.db"
    content = path.read_bytes()
    proc = _command(url)
    assert proc.returncode == 0 and "nightly  [active]" in proc.stdout, proc
    assert path.read_bytes() == content
    corrupt(url, "nightly", {}, format_version=99)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP INDEX executors_schedules_due")
    before = _schema(path)
    proc = _command(url)
    assert proc.returncode == 1 and "written by store format 99" in proc.stderr, proc
    assert _schema(path) == before


@pytest.mark.parametrize(("url", "named"), [
    ("sqlite:/jobs.db", "has fewer than three slashes"),
    ("sqlite:///jobs.db?mode=ro", "has a query ('?mode=ro')"),
])
def test_a_sqlite_url_of_another_form_is_a_usage_error_and_creates_nothing(
        tmp_path: Path, url: str, named: str) -> None:
    """The command refuses a sqlite: URL it would misread, naming what is wrong and the two
    forms it takes; no file is created (not the root's /jobs.db, not ``jobs.db?mode=ro``)."""
    at_root = os.path.exists("/jobs.db")
    proc = _command(url, cwd=tmp_path)
    assert proc.returncode == 2 and named in proc.stderr, proc
    assert "sqlite:////srv/jobs.db (an absolute path)" in proc.stderr
    assert list(tmp_path.iterdir()) == [] and os.path.exists("/jobs.db") == at_root


def test_stored_names_targets_owners_and_results_are_printed_escaped(tmp_path: Path) -> None:
    """A stored name with an ANSI escape or a newline, and a target, owner and result with
    control characters, are printed escaped: nothing reaches the terminal as a control, no
    line is forged."""
    url = _store_with_a_run(tmp_path, "evil\x1b[2J\nforged  [active]  30 2 * * *",
                            "app\x1b]0;owned\x07:fn\u202e", "host\x1b[31m:1:x",
                            "error: E: \x1b[2J\r\nok")
    proc = _command(url)
    assert proc.returncode == 0, proc
    assert not any(c in proc.stdout for c in "\x1b\x07\r\u202e"), proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("evil\\x1b[2J\\nforged  [active]  30 2 * * *  [active]")
    assert "-> app\\x1b]0;owned\\x07:fn\\u202e" in lines[0]
    assert "error: E: \\x1b[2J\\r\\nok on host\\x1b[31m:1:x" in lines[2]
    assert len(lines) == 5 and lines[-1].startswith("1 schedule in sqlite:")


def _run_due(record: ScheduleRecord, now: dt.datetime) -> Plan:
    """Run the due fire time; the next is NIGHTLY's."""
    assert record.next_fire is not None
    return Plan(record.next_fire, NIGHTLY.next_after(now))


def _store_with_a_run(tmp_path: Path, name: str, target: str, owner: str, result: str) -> str:
    """The URL of a SQLite store holding `name`, whose one run `owner` ran, ending with
    `result`."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(url)
    store.declare(ScheduleDefinition(name, NIGHTLY.to_data(), target),
                  lambda now: now - dt.timedelta(seconds=1))
    (claim,) = store.claim(owner, lease=60, limit=5, planner=_run_due,
                           on_crash=lambda r: "drop")
    assert store.complete(claim, result)
    store.close()
    return url


def test_a_paused_schedule_shows_no_next_fire_and_an_unclaimed_past_one_is_overdue(
        tmp_path: Path) -> None:
    """Paused: the next fire time reads none while paused (the stored one is named, and that
    resuming skips what passed). Active with a next fire time in the past and no run in
    progress: marked OVERDUE by how long."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(url)
    for name in ("late", "resting"):
        store.declare(ScheduleDefinition(name, NIGHTLY.to_data(), "app.jobs:report"),
                      lambda now: now - dt.timedelta(hours=3, minutes=5))
    assert store.set_paused("resting", True)
    store.close()
    proc = _command(url)
    assert proc.returncode == 0, proc
    blocks = {b.split()[0]: b for b in _blocks(proc.stdout)}
    assert "OVERDUE by 3 h 5 min (no process has claimed it)" in blocks["late"]
    assert "next fire  none while paused (stored " in blocks["resting"]
    assert "resuming skips the fire times passed by then" in blocks["resting"]
    assert "OVERDUE" not in blocks["resting"]


def _blocks(out: str) -> list[str]:
    """The listing's schedules, one text each (a block starts at an unindented line)."""
    blocks: list[str] = []
    for line in out.splitlines():
        if line.startswith(" ") and blocks:
            blocks[-1] += "\n" + line
        else:
            blocks.append(line)
    return blocks


def test_the_last_run_names_the_process_that_ran_it(tmp_path: Path) -> None:
    """The last run's line names its owner (the process that ran it)."""
    url = _store_with_a_run(tmp_path, "nightly", "app.jobs:report", "web-1:4242:abcd", "ok")
    proc = _command(url)
    assert proc.returncode == 0, proc
    (last,) = [line for line in proc.stdout.splitlines() if "last run" in line]
    assert last.endswith(": ok on web-1:4242:abcd"), last


def test_a_fire_time_due_within_the_claim_bound_is_due_now_and_later_overdue() -> None:
    """A fire time passed by no more than the service's unwatched bound (5 s: the time a
    serving process takes to claim it) reads "due now"; past it, OVERDUE by how long; a run
    in progress is neither."""
    from executors._cli.schedules import _next_fire
    from executors.stores import new_record

    record = new_record(ScheduleDefinition("n", NIGHTLY.to_data(), "app:f"),
                        dt.datetime(2026, 1, 5, 1, 30, tzinfo=dt.UTC))
    assert record.next_fire is not None
    at = record.next_fire
    assert _next_fire(record, at - dt.timedelta(seconds=1)).endswith("UTC)")
    assert _next_fire(record, at + dt.timedelta(seconds=5)).endswith("(due now)")
    assert _next_fire(record, at + dt.timedelta(seconds=6)).endswith(
        "OVERDUE by 6 s (no process has claimed it)")
    running = dataclasses.replace(record, running_fire=at)
    assert _next_fire(running, at + dt.timedelta(hours=1)).endswith("UTC)")


@pytest.mark.parametrize("action", [[], ["pause", "nightly"]])
def test_a_store_failing_under_the_command_is_one_line_not_a_traceback(
        tmp_path: Path, action: list[str]) -> None:
    """A store that opens but fails under the listing or an action (here a schedules table
    missing a column) is one line naming the store and the error, exit 1, no traceback."""
    url, store = _store_with_nightly(tmp_path)
    store.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "jobs.db")) as conn, conn:
        conn.execute("ALTER TABLE executors_schedules DROP COLUMN state")
    proc = _command(url, *action)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc
    (line,) = proc.stderr.splitlines()
    assert line.startswith("executors schedules: ") and "failed: OperationalError: " in line
    assert "no such column: state" in line
