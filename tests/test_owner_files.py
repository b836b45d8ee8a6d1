"""The SQLite store's owners' liveness: a lock each owner holds on a file of its own."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import quote

import pytest
from helpers.forking import in_forked_child

from executors.stores._owner_files import OwnerFiles

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="flock and fork are POSIX")

HOST = socket.gethostname()


def _die(files: OwnerFiles, owner: str) -> None:
    """What the kernel does to the owner's lock when its process dies: the descriptor goes
    (and the file stays)."""
    os.close(files._held.pop(owner))


def test_an_owner_is_gone_only_once_its_lock_is_free(tmp_path: Path) -> None:
    """An owner that holds its file's lock is alive to another holder (of the same process:
    flock locks belong to open file descriptions); once the lock is free it is gone. An owner
    with no file (an older version, one that closed cleanly) or of another machine is not
    known, so never gone: it is waited for by its lease."""
    database = str(tmp_path / "jobs.db")
    owner, other = f"{HOST}:1:a", f"{HOST}:2:b"
    holder, checker = OwnerFiles(database), OwnerFiles(database)
    holder.hold(owner)
    holder.hold(other)
    assert repr(holder) == f"<OwnerFiles {str(tmp_path / 'jobs.db-owners')!r} held=2 usable=True>"
    assert (tmp_path / "jobs.db-owners").stat().st_mode & 0o777 == 0o700
    assert checker.gone([owner, other, f"{HOST}:3:never", "elsewhere:1:a"]) == frozenset()
    _die(holder, owner)
    assert checker.gone([owner, other]) == {owner}
    checker.sweep(busy=[owner])  # it still holds a run: its file stays
    assert checker.gone([owner]) == {owner}
    checker.sweep(busy=[])
    assert checker.gone([owner]) == frozenset()  # swept: not known any more
    holder.release()  # a clean close: its file goes, its runs wait for their leases
    assert checker.gone([other]) == frozenset()
    assert os.listdir(tmp_path / "jobs.db-owners") == []


def test_a_forked_child_does_not_keep_its_parent_s_owner_alive(tmp_path: Path) -> None:
    """A forked child closes its copies of the parent's lock descriptors (it is another
    owner): a child still running cannot keep a dead parent looking alive."""
    files = OwnerFiles(str(tmp_path / "jobs.db"))
    files.hold(f"{HOST}:1:parent")
    fd = files._held[f"{HOST}:1:parent"]

    def child() -> list[object]:
        try:
            os.fstat(fd)
        except OSError:
            closed = True
        else:
            closed = False
        return [closed, len(files._held)]

    assert in_forked_child(child) == [True, 0]
    assert OwnerFiles(str(tmp_path / "jobs.db")).gone([f"{HOST}:1:parent"]) == frozenset()
    files.release()


def test_the_lock_folder_of_a_relative_store_is_found_after_a_change_of_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store opened by a relative path keeps its owners' files beside that database even
    after the process changes its working folder (the check and the clean close go to the
    same files)."""
    monkeypatch.chdir(tmp_path)
    files = OwnerFiles("jobs.db")
    files.hold(f"{HOST}:1:a")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    checker = OwnerFiles(str(tmp_path / "jobs.db"))
    checker.hold(f"{HOST}:2:b")
    assert files.gone([f"{HOST}:2:b"]) == frozenset()
    files.release()
    assert os.listdir(tmp_path / "jobs.db-owners") == [quote(f"{HOST}:2:b", safe="") + ".lock"]
    checker.release()
