"""The Schedules page's gunicorn recipe, run: its ``gunicorn.conf.py`` taken from the page
verbatim, real gunicorn with 2 workers, one SQLite store, each fire time run once.

The recipe is a file, not a script (tests/test_docs_examples.py runs the page's scripts), so
this test writes it beside a small application (``myapp``: a WSGI app and the jobs module the
recipe imports), starts gunicorn on a free port, lets a per-second schedule fire a few times,
stops gunicorn with SIGTERM (its workers run the recipe's ``worker_exit``) and reads what ran.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from executors.testing import free_port, wait_until

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "content" / "schedules.md"
RECIPE = re.compile(r'^```py title="gunicorn.conf.py"\n(.*?)^```', re.MULTILINE | re.DOTALL)

JOBS = '''
import os

from executors import BackgroundService, current_run

service = BackgroundService("jobs", store=os.environ["JOBS_STORE"])


def tick() -> None:
    run = current_run()
    assert run is not None
    line = f"{run.fire_time.isoformat()} {os.getpid()} {run.attempt}\\n".encode()
    fd = os.open(os.environ["RUNS_FILE"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)  # one write per line: O_APPEND keeps concurrent lines whole
    finally:
        os.close(fd)


service.cron("* * * * * *", tick, tz="UTC", name="tick")
'''

WSGI = '''
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
'''


def test_the_page_has_the_recipe() -> None:
    """The page shows the recipe as a file this test can find (a renamed block fails here)."""
    match = RECIPE.search(PAGE.read_text())
    assert match and "def post_fork(server, worker):" in match.group(1)


@pytest.mark.timeout(90)
def test_gunicorn_workers_run_each_fire_time_once(tmp_path: Path) -> None:
    """Two gunicorn workers started by the recipe's post_fork share one SQLite store: a
    per-second schedule's fire times each ran once (attempt 1), by a worker process, and
    SIGTERM stops gunicorn cleanly (exit 0) through the recipe's worker_exit."""
    pytest.importorskip("gunicorn", reason="the test extra brings gunicorn")
    match = RECIPE.search(PAGE.read_text())
    assert match
    (tmp_path / "gunicorn.conf.py").write_text(match.group(1))
    app = tmp_path / "myapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "jobs.py").write_text(textwrap.dedent(JOBS))
    (app / "wsgi.py").write_text(textwrap.dedent(WSGI))
    runs = tmp_path / "runs.txt"
    env = {**os.environ, "JOBS_STORE": f"sqlite:///{tmp_path / 'jobs.db'}",
           "RUNS_FILE": str(runs),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path),
                                          *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-w", "2",
         "-b", f"127.0.0.1:{free_port()}", "myapp.wsgi:app"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def lines() -> list[str]:
            return runs.read_text().splitlines() if runs.exists() else []

        wait_until(lambda: len(lines()) >= 4 or proc.poll() is not None, 45)
        assert proc.poll() is None, "gunicorn ended early"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    ran = [line.split() for line in lines()]
    fire_times = [fire for fire, _, _ in ran]
    assert len(fire_times) >= 4, ran
    assert len(set(fire_times)) == len(fire_times), f"a fire time ran twice: {ran}"
    assert {attempt for _, _, attempt in ran} == {"1"}, ran
    assert proc.pid not in {int(pid) for _, pid, _ in ran}, "the master ran a job"
