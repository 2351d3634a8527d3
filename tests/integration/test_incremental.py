"""Cron-style reruns: the ledger, the lock, pruning, and recovery after a kill."""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucli.core.errors import LockedError, UsageError
from gpucli.output.lock import RunLock
from tests.helpers import read_rows, run_fake, sigkill_after_parts

pytestmark = pytest.mark.slow


def batches(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_second_run_does_nothing_and_a_changed_file_is_replaced(tree, tmp_path):
    root = tree({f"f{i:02d}.txt": f"line {i}\nsecond {i}\n" for i in range(30)})
    out, log = tmp_path / "out.parquet", tmp_path / "b.jsonl"
    first = run_fake([root], out, {"batch_log": str(log)})
    assert first.succeeded == 30 and first.rows == 60

    before = batches(log)
    again = run_fake([root], out, {"batch_log": str(log)})
    assert batches(log) == before, "an unchanged tree runs no batch"
    assert (again.succeeded, again.skipped, again.unchanged, again.exit_code) == (0, 30, 30, 0)

    (root / "f07.txt").write_text("changed content only one line\n")
    (root / "f08.txt").touch()  # new mtime, same content: hashed, not redone
    os.utime(root / "f08.txt", ns=(time.time_ns(), time.time_ns() + 10**9))
    third = run_fake([root], out, {"batch_log": str(log)})
    assert (third.succeeded, third.unchanged) == (1, 29)
    rows = read_rows(out)
    assert len(rows) == 59
    assert [r["text"] for r in rows if r["path"] == "f07.txt"] == ["changed content only one line"]
    assert Counter(r["path"] for r in rows)["f08.txt"] == 2


def test_new_renamed_and_deleted_files_with_prune(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    (root / "b.txt").rename(root / "b2.txt")
    (root / "c.txt").unlink()
    (root / "d.txt").write_text("delta\n")
    kept = run_fake([root], out)
    assert kept.succeeded == 2 and kept.pruned == 0
    assert sorted(r["path"] for r in read_rows(out)) == ["a.txt", "b.txt", "b2.txt", "c.txt", "d.txt"]
    pruned = run_fake([root], out, prune=True)
    assert pruned.pruned == 2 and pruned.succeeded == 0
    assert sorted(r["path"] for r in read_rows(out)) == ["a.txt", "b2.txt", "d.txt"]


def test_failures_are_retried(tree, tmp_path):
    root = tree({"ok.txt": "fine\n", "bad.txt": b"\xff\xfe\xfa not utf8"})
    out = tmp_path / "out.parquet"
    assert run_fake([root], out).failed == 1
    (root / "bad.txt").write_text("fixed now\n")
    second = run_fake([root], out)
    assert (second.succeeded, second.failed, second.unchanged) == (1, 0, 1)
    assert sorted(r["path"] for r in read_rows(out)) == ["bad.txt", "ok.txt"]


def paths_in(out: Path) -> list[str]:
    """The rows' paths, sorted, of a Parquet or JSON lines output."""
    if out.suffix == ".jsonl":
        return sorted(json.loads(line)["path"] for line in out.read_text().splitlines())
    import pyarrow.dataset as ds

    return sorted(ds.dataset(str(out), format="parquet").to_table(columns=["path"]).column("path").to_pylist())


@pytest.mark.parametrize("name", ["out.parquet", "rows.jsonl"])
def test_a_changed_file_that_now_fails_loses_its_old_rows_and_is_then_a_known_failure(tree, tmp_path, name):
    root = tree({"ok.txt": "fine\n", "doc.txt": "first version\nsecond line\n"})
    out = tmp_path / name
    assert run_fake([root], out).rows == 3
    (root / "doc.txt").write_bytes(b"\xff\xfe\xfa binary now")
    changed = run_fake([root], out)
    assert (changed.failed, changed.failed_known, changed.exit_code) == (1, 0, 1)
    assert paths_in(out) == ["ok.txt"], "no stale rows beside the failure record"
    records = [json.loads(line) for line in Path(changed.failures_file).read_text().splitlines()]
    assert [r["path"] for r in records] == ["doc.txt"]
    again = run_fake([root], out)
    assert (again.failed, again.failed_known, again.exit_code) == (1, 1, 0)
    (root / "doc.txt").write_text("fixed\n")
    fixed = run_fake([root], out)
    assert (fixed.succeeded, fixed.failed, fixed.exit_code) == (1, 0, 0)
    assert paths_in(out) == ["doc.txt", "ok.txt"]


def test_other_settings_need_full(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    with pytest.raises(UsageError, match="--full"):
        run_fake([root], out, {"sleep_ms": 1})
    rebuilt = run_fake([root], out, {"sleep_ms": 1}, incremental=False)
    assert rebuilt.succeeded == 1 and len(read_rows(out)) == 1


def test_jsonl_rerun_replaces_a_changed_file(tree, tmp_path):
    root = tree({"a.txt": "one\ntwo\n", "b.txt": "three\n"})
    out = tmp_path / "rows.jsonl"
    run_fake([root], out)
    (root / "a.txt").write_text("uno\n")
    run_fake([root], out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["text"] for r in rows) == ["three", "uno"]


def test_second_concurrent_run_exits_75(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    holder = RunLock(Path(f"{out}.gpucli"))  # beside the dataset directory
    holder.acquire(str(out))
    try:
        with pytest.raises(LockedError, match=f"pid {os.getpid()}"):
            run_fake([root], out)
        from gpucli.app.cli import app

        result = CliRunner().invoke(app, ["embed", str(root), "--out", str(out)])
        assert result.exit_code == 75 and "lock" in result.stderr
    finally:
        holder.release()
    assert run_fake([root], out).succeeded == 1


def test_stale_lock_of_a_dead_holder_is_taken_over(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    Path(f"{out}.gpucli").mkdir(parents=True)
    Path(f"{out}.gpucli", "lock").write_text("pid 999999 on elsewhere, started long ago\n")
    assert run_fake([root], out).succeeded == 1


KILLED_RUN = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu", progress="off",
                  task_options={{"sleep_ms": 30}}, batch_size=4, part_rows=12, flush_s=0.2))
""")


def test_sigkill_of_the_command_then_rerun_gives_every_input_once(tree, tmp_path):
    files = {f"f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(400)}
    root = tree(files)
    out = tmp_path / "out.parquet"
    script = KILLED_RUN.format(root=str(Path(__file__).resolve().parents[2]), src=str(root), out=str(out))
    sigkill_after_parts(script, out)
    done_before = {r["path"] for r in read_rows(out)}
    assert 0 < len(done_before) < 400
    summary = run_fake([root], out, {"sleep_ms": 30}, batch_size=4)  # the same settings as the killed run
    assert summary.exit_code == 0 and summary.unchanged >= len(done_before) - 12
    counts = Counter((r["path"], r["chunk"]) for r in read_rows(out))
    assert set(p for p, _ in counts) == set(files)
    assert max(counts.values()) == 1 and len(counts) == 800


def test_an_earlier_runs_output_inside_the_tree_is_not_read_by_a_later_run(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    first = run_fake([root], root / "vectors.jsonl")
    assert first.succeeded == 2
    later = run_fake([root], root / "vectors.parquet", include=("*.txt", "*.jsonl"))
    assert (later.succeeded, later.failed, later.exit_code) == (2, 0, 0)
    assert paths_in(root / "vectors.parquet") == ["a.txt", "b.txt"]
    again = run_fake([root], root / "other.parquet", include=("*",))  # nor the second's, nor the state
    assert paths_in(root / "other.parquet") == ["a.txt", "b.txt"]
    assert run_fake([root / "vectors.jsonl"], tmp_path / "explicit.parquet", include=("*",)).succeeded == 1
    assert again.exit_code == 0


def test_a_file_that_became_a_link_leaving_the_root_loses_its_old_rows(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    outside = tree({"x.txt": "outside\n"}, name="elsewhere")
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    (root / "b.txt").unlink()
    (root / "b.txt").symlink_to(outside / "x.txt")
    skipped = run_fake([root], out)
    assert (skipped.skipped, skipped.failed, skipped.exit_code) == (2, 0, 0)  # a.txt unchanged, b.txt skipped
    assert paths_in(out) == ["a.txt"]
