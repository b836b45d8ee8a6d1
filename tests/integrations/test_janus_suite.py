"""janus 2.0.0's own test suite, run against `integrations.bridge.Queue`.

The suite is taken from janus's sdist at test time (``pip download``), never copied into this
repository. ``import janus`` resolves to a shim module holding janus's every public name, taken
from `integrations.bridge` (LifoQueue and PriorityQueue included);
coroutine tests run under ``asyncio.run`` through a small hook (what janus gets from
pytest-asyncio). Each test that cannot apply is skipped with the API difference it depends on.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

JANUS_VERSION = "2.0.0"
#: janus 2.0.0's ``__all__`` (janus/__init__.py), the names the shim module takes from the bridge.
JANUS_ALL = ("Queue", "PriorityQueue", "LifoQueue", "SyncQueue", "SyncQueueEmpty", "SyncQueueFull",
             "SyncQueueShutDown", "AsyncQueue", "AsyncQueueEmpty", "AsyncQueueFull",
             "AsyncQueueShutDown", "BaseQueue")

#: Test name (substring of the node id) -> the API difference that makes it inapplicable.
SKIPS: dict[str, str] = {
    "test_benchmarks.py": "benchmarks need pytest-codspeed's fixture; not API behaviour",
    "test_get_loop_": "calls janus's private Queue._get_loop(); the async side binds to its "
                      "first loop all the same (RuntimeError on another)",
    "_notifies_": "polls janus's private condition-waiter counters (_sync_not_empty_waiting, "
                  "...); SharedChannel.statistics() counts parked parties instead",
    "test_shrinking_queue": "assigns janus's private _maxsize on the sync proxy at run time",
    "test_put_cancelled_race": "asserts the putter task already ran when its item is got; "
                               "Queue hands the item over directly (the put has completed, its "
                               "task resumes at the loop's next iteration)",
    "TestFailingQueue": "overrides janus's private _put/_get storage hooks, which Queue (a "
                        "SharedChannel inside) does not have",
}

CONFTEST = '''
"""Generated: janus -> integrations.bridge.Queue, and coroutine tests under asyncio.run."""
import asyncio
import inspect
import sys
import types

import pytest

import integrations.bridge

# janus's every public name, taken from integrations.bridge under the same name (a name
# missing there fails here, at collection).
shim = types.ModuleType("janus")
shim.__all__ = {names!r}
for name in shim.__all__:
    setattr(shim, name, getattr(integrations.bridge, name))
shim.__version__ = "{version}"
sys.modules["janus"] = shim

SKIPS = {skips!r}


def pytest_configure(config):
    config.addinivalue_line("markers", "asyncio: run the coroutine under asyncio.run")


def pytest_collection_modifyitems(config, items):
    for item in items:
        for needle, reason in SKIPS.items():
            if needle in item.nodeid:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


@pytest.fixture(autouse=True)
def _close_helper(request, monkeypatch):
    """janus's test_async.close() polls janus's private _sync_mutex before aclose(); Queue has
    no such lock (its mutex is the channel's, held only inside short sections): close only."""
    module = request.module
    if module.__name__.endswith("test_async") and hasattr(module, "close"):
        async def close(_q):
            await _q.aclose()
            assert _q.closed
            assert _q.sync_q.closed
            assert _q.async_q.closed
        monkeypatch.setattr(module, "close", close)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        names = pyfuncitem._fixtureinfo.argnames
        asyncio.run(pyfuncitem.obj(**{{n: pyfuncitem.funcargs[n] for n in names}}))
        return True
    return None
'''

PYTEST_INI = """
[pytest]
filterwarnings =
    error
    ignore:unclosed event loop:ResourceWarning
    ignore:unclosed <socket.socket.+>:ResourceWarning
"""


def _janus_tests(tmp: Path) -> Path:
    """Download janus's sdist into `tmp` and extract its tests/; skip if it cannot be had."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--dest", str(tmp), f"janus=={JANUS_VERSION}"],
        capture_output=True, text=True, timeout=120, check=False)
    sdists = list(tmp.glob("janus-*.tar.gz"))
    if result.returncode or not sdists:
        pytest.skip(f"janus {JANUS_VERSION} sdist unavailable (offline?): {result.stderr[-300:]}")
    with tarfile.open(sdists[0]) as tar:
        members = [m for m in tar.getmembers() if "/tests/" in m.name and m.isfile()]
        tar.extractall(tmp, members=members, filter="data")
    tests = next(tmp.glob("janus-*/tests"))
    tests.joinpath("conftest.py").write_text(textwrap.dedent(
        CONFTEST.format(version=JANUS_VERSION, skips=SKIPS, names=JANUS_ALL)))
    tests.parent.joinpath("pytest.ini").write_text(PYTEST_INI)
    return tests


@pytest.mark.timeout(300)
def test_janus_suite_passes_against_queue(tmp_path: Path) -> None:
    """janus's own tests (sync, async and mixed) pass against `integrations.bridge.Queue`,
    `LifoQueue` and `PriorityQueue`, except the skips listed in SKIPS, each naming the API
    difference."""
    tests = _janus_tests(tmp_path)
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-rA", str(tests)],
        cwd=tests.parent, capture_output=True, text=True, timeout=280, check=False,
        env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
    # LifoQueue and PriorityQueue run too: janus's order, join and blocking tests for each.
    for kind in ("LifoQueue", "PriorityQueue"):
        ran = [line for line in result.stdout.splitlines()
               if line.startswith("PASSED") and f"Test{kind}" in line]
        assert len(ran) >= 3, (kind, result.stdout[-3000:])
