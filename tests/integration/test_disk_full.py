"""A full disk ends the run, it never hangs it (issue 41): on a real, small tmpfs, an output that
runs out of space (Parquet parts, JSON lines, the ledger and failures file beside them, an
embedded Qdrant) exits 3 with one error line naming the path and the cause, prints the `--json`
summary, leaves the lock free and marks nothing done that is not durable. Once there is space
again, a rerun finishes exactly what is missing.

Each run goes through the console script in a process of its own (`python -m gpucli`): the hang
this guards against was in the way the process leaves. The timeout only catches a hang; no test
here asserts how fast anything is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import ROOT, write_tree

HANG_S = 240  # a run that has not left by then hangs: the bug this file is about


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer BERT with the default model's tokenizer: real embed code, fast."""
    from benchmarks.host import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture
def small_fs(tmp_path: Path):
    """A tmpfs of the given size mounted under tmp_path (root, as on CI); `grow` remounts it larger."""
    mounted: list[Path] = []

    def mount(size_kib: int) -> Path:
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(point)],
                                capture_output=True, text=True)
        assert result.returncode == 0, f"this test needs root to mount a tmpfs: {result.stderr}"
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def grow(point: Path, size_kib: int = 256 * 1024) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(point)], check=True)


def documents(root: Path, n: int = 240) -> Path:
    words = "river stone cloud field harbour lantern meadow orchard quarry summit valley willow".split()
    files = {f"d{i % 4}/doc{i:03d}.txt": " ".join(words[(i + j) % len(words)] for j in range(60 + i % 40))
             for i in range(n)}
    files.update({f"bad/binary{i}.txt": bytes(range(256)) * 4 for i in range(3)})
    return write_tree(root, files)


def embed(root: Path, out: str, model: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUCLI_BACKEND": "torch"}
    return subprocess.run([sys.executable, "-m", "gpucli", "embed", str(root), "--out", out, "--model", str(model),
                           "--json", "--progress", "off", "--batch-size", "8", *extra],
                          capture_output=True, text=True, cwd=ROOT, timeout=HANG_S, env=env)


def check_full_disk_run(result: subprocess.CompletedProcess, where: Path) -> dict:
    assert result.returncode == 3, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("gpucli: error:")]
    assert len(errors) == 1, result.stderr[-2000:]
    assert str(where) in errors[0] and ("No space left" in errors[0] or "ENOSPC" in errors[0]), errors[0]
    assert "Traceback" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["exit_code"] == 3
    assert "gpucli: error: " + summary["error"] == errors[0], "--json's summary carries the error line"
    return summary


def parquet_keys(out: Path) -> Counter:
    import pyarrow.dataset as ds

    table = ds.dataset(str(out), format="parquet").to_table(columns=["path", "chunk"])
    return Counter(zip(table.column("path").to_pylist(), table.column("chunk").to_pylist()))


def test_parquet_parts_on_a_full_disk_exit_3_and_a_rerun_with_space_finishes_exactly_once(
        tmp_path, small_fs, tiny_bert):
    root = documents(tmp_path / "in")
    disk = small_fs(160)
    out = disk / "o.parquet"
    summary = check_full_disk_run(embed(root, str(out), tiny_bert), disk)
    assert summary["succeeded"] < 243  # it really ran out of space

    grow(disk)
    again = embed(root, str(out), tiny_bert, "--fail-on", "any")  # known failures count too: the order of writes
    assert again.returncode == 1, again.stderr[-2000:]  # the three binary files fail; nothing else does
    done = json.loads(again.stdout)
    assert done["succeeded"] + done["unchanged"] == 240 and done["failed"] == 3
    keys = parquet_keys(out)
    assert max(keys.values()) == 1  # every (path, chunk) once: nothing marked done was lost or repeated
    assert {path for path, _ in keys} == {f"d{i % 4}/doc{i:03d}.txt" for i in range(240)}


def test_json_lines_on_a_full_disk_exit_3_and_free_the_lock(tmp_path, small_fs, tiny_bert):
    root = documents(tmp_path / "in")
    disk = small_fs(160)
    out = disk / "o.jsonl"
    check_full_disk_run(embed(root, str(out), tiny_bert), disk)
    grow(disk)
    again = embed(root, str(out), tiny_bert, "--fail-on", "any")
    assert again.returncode == 1, again.stderr[-2000:]  # not 75: the lock was released
    rows = Counter((row["path"], row["chunk"]) for row in map(json.loads, out.read_text().splitlines()))
    assert max(rows.values()) == 1 and len({path for path, _ in rows}) == 240


def test_the_ledger_filling_the_disk_mid_run_ends_the_run_and_a_rerun_records_every_input_once(
        tmp_path, small_fs, tiny_bert):
    """Thousands of failures with long names and almost no rows: the ledger and the failures file
    are what fills the disk, after the run has started."""
    bad = {f"bad/{'n' * 150}{i:04d}.txt": bytes(range(256)) for i in range(3000)}
    root = write_tree(tmp_path / "in", {**bad, **{f"ok/doc{i}.txt": f"a short note number {i}" for i in range(20)}})
    disk = small_fs(320)
    out = disk / "o.parquet"
    summary = check_full_disk_run(embed(root, str(out), tiny_bert), disk)
    # the disk filled after the run had started (the ledger was open); how many inputs the fast reader
    # had failed by then depends on the machine: all 3000 on a quick CI run
    assert summary["failed"] > 0

    grow(disk)
    again = embed(root, str(out), tiny_bert, "--fail-on", "any")
    assert again.returncode == 1, again.stderr[-2000:]
    done = json.loads(again.stdout)
    assert (done["failed"], done["succeeded"] + done["unchanged"]) == (3000, 20)
    failures = [json.loads(line)["path"] for line in (disk / "o.failures.jsonl").read_text().splitlines()]
    assert sorted(failures) == sorted(bad)  # each failed input once


def test_an_embedded_qdrant_on_a_full_disk_exits_3(tmp_path, small_fs, tiny_bert):
    root = documents(tmp_path / "in")
    disk = small_fs(200)
    result = embed(root, f"qdrant:{disk}/q/docs", tiny_bert)
    check_full_disk_run(result, disk)
    grow(disk)
    again = embed(root, f"qdrant:{disk}/q/docs", tiny_bert, "--fail-on", "any")
    assert again.returncode == 1, again.stderr[-2000:]
    done = json.loads(again.stdout)
    assert (done["failed"], done["succeeded"] + done["unchanged"]) == (3, 240)


def test_an_embedded_qdrant_whose_disk_fills_between_runs_exits_3_at_its_first_write_not_sigbus(
        tmp_path, small_fs, tiny_bert):
    """Qdrant Edge fills sparse memory-mapped files: a page touched on a full file system is a
    SIGBUS, not an error. A run that finds too little room for what the shard's files may still
    fill refuses its first write with ENOSPC (exit 3, one line), and a rerun with room finishes."""
    root = documents(tmp_path / "in", n=40)
    disk = small_fs(384 * 1024)
    out = f"qdrant:{disk}/q/docs"
    first = embed(root, out, tiny_bert)
    assert first.returncode == 1, first.stderr[-2000:]  # the three binary files fail
    for i in range(40, 80):
        (root / f"more{i}.txt").write_text(f"another document number {i} about the harbour")
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    filler = disk / "filler"
    subprocess.run(["fallocate", "-l", str(free - 24 * 2**20), str(filler)], check=True)
    summary = check_full_disk_run(embed(root, out, tiny_bert), disk)
    assert summary["succeeded"] == 0
    filler.unlink()
    again = embed(root, out, tiny_bert, "--fail-on", "any")
    assert again.returncode == 1, again.stderr[-2000:]
    done = json.loads(again.stdout)
    assert (done["failed"], done["succeeded"] + done["unchanged"]) == (3, 80)


def test_the_mount_helper_is_real(small_fs):
    """Guards the guard: the filesystem really is that small."""
    disk = small_fs(64)
    assert shutil.disk_usage(disk).total <= 64 * 1024
