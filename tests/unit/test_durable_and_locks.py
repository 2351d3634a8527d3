"""gpucli's one durable replace (core/durable.py) and its one lock (core/locks.py)."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from gpucli.core import durable
from gpucli.core.errors import LockedError
from gpucli.core.locks import FileLock


@pytest.fixture
def synced(monkeypatch):
    """What was fsynced, in order: 'file' or 'dir'; and the renames between them."""
    events: list[str] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd: int) -> None:
        events.append("dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file")
        fsync(fd)

    def recording_replace(src, dst) -> None:
        events.append("rename")
        replace(src, dst)

    monkeypatch.setattr(durable.os, "fsync", recording_fsync)
    monkeypatch.setattr(durable.os, "replace", recording_replace)
    return events


def test_a_replace_syncs_the_file_then_renames_it_then_syncs_the_directory(tmp_path, synced):
    target = tmp_path / "meta.json"
    target.write_text("old")
    durable.write_durably(target, '{"new": 1}')
    assert target.read_text() == '{"new": 1}' and sorted(os.listdir(tmp_path)) == ["meta.json"]
    assert synced == ["file", "rename", "dir"]


def test_a_file_another_library_wrote_is_synced_before_its_rename(tmp_path, synced):
    written = tmp_path / ".part.tmp"
    written.write_bytes(b"whole")
    durable.replace_durably(written, tmp_path / "part")
    assert synced == ["file", "rename", "dir"] and (tmp_path / "part").read_bytes() == b"whole"


def test_an_error_while_writing_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "part.parquet"
    target.write_bytes(b"old")
    with pytest.raises(OSError), durable.replacing(target) as file:
        file.write(b"half")
        raise OSError(28, "No space left on device")
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["part.parquet"]


def test_a_held_lock_refuses_another_taker_with_the_holders_note_and_is_free_once_released(tmp_path):
    path = tmp_path / "lock"
    held = FileLock(path).take("unused")
    held.note("pid 1 on host")
    with pytest.raises(LockedError, match=r"held by pid 1 on host"):
        FileLock(path).take(lambda holder: f"held by {holder}")
    with pytest.raises(LockedError, match="^busy$"):
        FileLock(path).take("busy")
    held.release()
    with FileLock(path).take("busy"):
        pass


def test_a_lock_on_a_missing_file_is_not_created_when_asked_not_to(tmp_path):
    with pytest.raises(FileNotFoundError):
        FileLock(tmp_path / "lock", create=False).take("busy")
    assert not (tmp_path / "lock").exists()


def test_a_waiter_gets_the_lock_once_its_holder_lets_go(tmp_path):
    path = tmp_path / "lock"
    held = FileLock(path).take("busy")
    got = threading.Event()
    waiter = FileLock(path)

    def wait() -> None:
        waiter.wait()
        got.set()

    thread = threading.Thread(target=wait)
    thread.start()
    held.release()
    thread.join(30)  # a hang guard
    assert got.is_set()
    with pytest.raises(LockedError):
        FileLock(path).take("busy")  # the waiter holds it now
    waiter.release()
