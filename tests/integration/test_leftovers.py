"""What a SIGKILLed run leaves (shared-memory blocks, a private Ray's temp directory) is swept
at the next start; what a live run holds is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpucli.core import leftovers
from gpucli.tasks.images import batches

SHM = Path("/dev/shm")
needs_shm = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm on this system")


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not leftovers.pid_alive(proc.pid)
    return proc.pid


@pytest.fixture
def segments():
    """Files made in /dev/shm by the test (on Linux a file there is a POSIX shm segment)."""
    made: list[Path] = []

    def make(pid: int) -> Path:
        path = SHM / f"gpucli_{pid}_{os.urandom(6).hex()}"
        path.write_bytes(b"\0" * 64)
        made.append(path)
        return path

    yield make
    for path in made:
        path.unlink(missing_ok=True)


def test_pid_alive_tells_a_running_process_from_an_exited_one(dead_pid):
    assert leftovers.pid_alive(os.getpid())
    assert leftovers.pid_alive(1), "another user's process counts as alive"
    assert not leftovers.pid_alive(dead_pid)


@needs_shm
def test_segments_of_a_dead_process_are_unlinked_and_a_live_ones_survive(segments, dead_pid):
    dead, live = segments(dead_pid), segments(os.getpid())
    removed = leftovers.sweep_shm()
    assert dead.name in removed and not dead.exists()
    assert live.exists() and live.name not in removed


def test_the_shm_sweep_leaves_other_names_alone(tmp_path, dead_pid):
    for name in (f"gpucli_{dead_pid}_abc123", f"psm_{dead_pid}", f"gpucli_{dead_pid}", f"gpucli_x_{dead_pid}"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / f"gpucli_{dead_pid}_ffff").mkdir()
    assert leftovers.sweep_shm(tmp_path) == [f"gpucli_{dead_pid}_abc123"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"psm_{dead_pid}", f"gpucli_{dead_pid}", f"gpucli_x_{dead_pid}", f"gpucli_{dead_pid}_ffff"])


@needs_shm
def test_the_first_pack_of_an_image_batch_sweeps_dead_segments(segments, dead_pid, monkeypatch):
    monkeypatch.setattr(batches, "_swept", False)
    dead = segments(dead_pid)
    pool = batches.ShmPool()
    batch = pool.pack([np.zeros((2, 2, 3), np.uint8)])
    try:
        assert not dead.exists()
        assert (SHM / batch.name).exists(), "the new block is this live process's"
    finally:
        pool.release_all()
    later = segments(dead_pid)
    pool.release(pool.pack([np.zeros((1,), np.uint8)]))
    assert later.exists(), "once per process: later packs do not list /dev/shm again"


def test_a_dead_runs_ray_directory_is_removed_and_a_live_ones_kept(tmp_path, dead_pid):
    dead = tmp_path / f"gpucli-ray-{dead_pid}-k2j4h5g6"
    live = tmp_path / f"{leftovers.ray_temp_prefix()}a1b2c3d4"
    for d in (dead, live):
        (d / "session_1" / "logs").mkdir(parents=True)
        (d / "session_1" / "logs" / "raylet.out").write_text("log")
    assert leftovers.sweep_ray_temp(str(tmp_path)) == [dead.name]
    assert not dead.exists() and (live / "session_1" / "logs" / "raylet.out").exists()


def test_the_ray_sweep_follows_no_link_and_leaves_other_names_alone(tmp_path, dead_pid):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("x")
    (tmp_path / f"gpucli-ray-{dead_pid}-linkname").symlink_to(target)
    others = [tmp_path / "gpucli-ray-test-abcdefgh", tmp_path / f"ray-{dead_pid}-abc", tmp_path / "gpucli-ray-"]
    for d in others:
        d.mkdir()
    (tmp_path / f"gpucli-ray-{dead_pid}-afile").write_text("not a directory")
    assert leftovers.sweep_ray_temp(str(tmp_path)) == []
    assert (target / "keep.txt").exists() and all(d.exists() for d in others)


def test_an_old_unnamed_ray_directory_goes_only_when_old_and_named_by_no_process(tmp_path):
    orphan, in_use, young = (tmp_path / f"gpucli-ray-{s}" for s in ("orphan01", "inuse_02", "young_03"))
    for d in (orphan, in_use, young):
        d.mkdir()
    old = time.time() - 2 * leftovers.LEGACY_MIN_AGE_S
    os.utime(orphan, (old, old))
    os.utime(in_use, (old, old))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--temp-dir={in_use}"])
    try:
        cmdline = Path(f"/proc/{holder.pid}/cmdline")
        while str(in_use).encode() not in cmdline.read_bytes():  # until the child has exec'd
            time.sleep(0.01)
        removed = leftovers.sweep_ray_temp(str(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    assert removed == [orphan.name]
    assert not orphan.exists() and in_use.exists() and young.exists()
