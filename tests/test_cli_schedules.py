"""`executors schedules STORE [ACTION NAME]`: list the stored schedules, pause, resume, run now,
remove; the command line's error rules (usage errors exit 2, a store or a name that is not
there exits 1, one line each, passwords hidden)."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.store_urls import corrupt

from executors._cli import main
from executors._service.store import ScheduleDefinition, ScheduleStore, open_store
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
        from executors._service.store import Plan

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
