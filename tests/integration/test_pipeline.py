"""The whole pipeline on the fake task: reader, batching, two workers (threads here, tests/conftest.py;
spawned processes where the test is marked `processes`), writer."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpucli.core.errors import WorkerSetupError
from tests.helpers import read_rows, run_fake

pytestmark = pytest.mark.slow






def corpus(tree, count: int, seed: int = 0) -> tuple[Path, dict[str, list[str]]]:
    rng = random.Random(seed)
    files = {}
    for i in range(count):
        lines = [" ".join(f"w{rng.randint(0, 99)}" * rng.randint(1, 3) for _ in range(rng.randint(1, 12)))
                 for _ in range(rng.randint(1, 5))]
        files[f"d{i % 7}/f{i:04d}.txt"] = lines
    root = tree({k: "\n".join(v) + "\n" for k, v in files.items()})
    return root, files


def test_every_input_exactly_once_with_two_workers(tree, tmp_path):
    root, files = corpus(tree, 300)
    log = tmp_path / "batches.jsonl"
    out = tmp_path / "out.parquet"
    summary = run_fake([root], out, {"batch_log": str(log)}, workers_per_device=2, batch_size=16,
                       max_batch_cost=40)
    assert summary.exit_code == 0
    assert (summary.inputs, summary.succeeded, summary.failed, summary.skipped) == (300, 300, 0, 0)
    rows = read_rows(out)
    got = sorted((r["path"], r["chunk"]) for r in rows)
    want = sorted((path, i) for path, lines in files.items() for i in range(len(lines)))
    assert got == want
    assert summary.rows == len(want)
    for row in rows:
        assert row["text"] == files[row["path"]][row["chunk"]]
        assert row["words"] == len(row["text"].split())
    batches = [json.loads(line) for line in log.read_text().splitlines()]
    assert len({b["worker"] for b in batches}) == 2, "both workers got work"
    for b in batches:
        assert b["size"] <= 16
        assert b["cost"] <= 40 or b["size"] == 1


def test_the_last_batches_are_even_for_the_workers(tree, tmp_path):
    """50 one-line files, batches of 16, two workers: not 16, 16, 16 and a last batch of 2 that
    leaves one worker idle while the other runs a full one, but last batches of even size, as
    many for each worker."""
    root = tree({f"f{i:02d}.txt": f"line {i}\n" for i in range(50)})
    log = tmp_path / "batches.jsonl"
    summary = run_fake([root], tmp_path / "out.parquet", {"batch_log": str(log)}, workers_per_device=2,
                       batch_size=16)
    assert summary.exit_code == 0 and summary.rows == 50
    sizes = [json.loads(line)["size"] for line in log.read_text().splitlines()]
    assert sum(sizes) == 50
    last = [size for size in sizes if size < 16]
    assert len(last) % 2 == 0 and max(last) - min(last) <= 1, sizes


def test_lone_oversized_item_goes_alone(tree, tmp_path):
    root = tree({"big.txt": " ".join(["word"] * 50) + "\n", "small.txt": "a b\nc d\ne f\n"})
    log = tmp_path / "batches.jsonl"
    summary = run_fake([root], tmp_path / "out.parquet", {"batch_log": str(log)}, batch_size=8, max_batch_cost=10)
    assert summary.exit_code == 0 and summary.rows == 4
    batches = [json.loads(line) for line in log.read_text().splitlines()]
    assert {"size": 1, "cost": 50} in [{k: b[k] for k in ("size", "cost")} for b in batches]
    assert all(b["cost"] <= 10 for b in batches if b["size"] > 1)


def test_summary_counts_and_failure_records(tree, tmp_path):
    root = tree({"ok.txt": "fine\n", "empty.txt": "", "latin.txt": b"caf\xe9\n", "blank.txt": "\n\n"})
    os.symlink("/etc/hostname", root / "escape.txt")
    os.symlink(root / "missing.txt", root / "dangling.txt")
    os.mkfifo(root / "pipe.txt")
    out = tmp_path / "out.parquet"
    summary = run_fake([root], out)
    assert summary.exit_code == 1
    assert (summary.succeeded, summary.failed, summary.skipped) == (1, 5, 1)
    assert summary.inputs == 7
    records = {r["path"]: r for r in map(json.loads, Path(summary.failures_file).read_text().splitlines())}
    assert records["escape.txt"]["stage"] == "skip"
    assert records["pipe.txt"]["stage"] == "read" and "FIFO" in records["pipe.txt"]["error"]
    assert records["dangling.txt"]["stage"] == "read" and "dangling" in records["dangling.txt"]["error"]
    assert records["empty.txt"]["stage"] == "read"
    assert records["latin.txt"]["stage"] == "decode"
    assert "blank.txt" in records
    assert Path(summary.failures_file).is_absolute()


def test_failures_file_exists_and_is_empty_on_success(tree, tmp_path):
    summary = run_fake([tree({"a.txt": "x\n"})], tmp_path / "out.parquet")
    assert summary.exit_code == 0
    assert Path(summary.failures_file).read_text() == ""


def test_setup_error_fails_fast_with_the_workers_message(tree, tmp_path):
    with pytest.raises(WorkerSetupError, match="weights are missing"):
        run_fake([tree({"a.txt": "x\n"})], tmp_path / "out.parquet", {"fail_setup": "weights are missing"})


def test_batch_error_isolates_the_bad_item(tree, tmp_path):
    files = {f"f{i:02d}.txt": f"line {i}\n" for i in range(40)}
    files["f17.txt"] = "this one goes BOOM\n"
    summary = run_fake([tree(files)], tmp_path / "out.parquet", batch_size=16)
    assert (summary.succeeded, summary.failed) == (39, 1)
    record = json.loads(Path(summary.failures_file).read_text())
    assert record == {"path": "f17.txt", "stage": "infer", "error": record["error"]}
    assert "BOOM" in record["error"]


def test_out_of_memory_splits_batches_and_every_item_succeeds(tree, tmp_path):
    files = {f"f{i:03d}.txt": f"line {i}\n" for i in range(100)}
    log = tmp_path / "batches.jsonl"
    summary = run_fake([tree(files)], tmp_path / "out.parquet", {"oom_above": 4, "batch_log": str(log)},
                       batch_size=32)
    assert (summary.succeeded, summary.failed) == (100, 0)
    sizes = [json.loads(line)["size"] for line in log.read_text().splitlines()]
    assert max(sizes[-5:]) <= 4, "the caps came down after repeated out-of-memory"


@pytest.mark.processes
def test_native_crash_isolates_the_poison_item(tree, tmp_path):
    files = {f"f{i:02d}.txt": f"line {i}\n" for i in range(64)}
    files["f33.txt"] = "CRASH here\n"
    summary = run_fake([tree(files)], tmp_path / "out.parquet", batch_size=64, max_wait_ms=200)
    assert (summary.succeeded, summary.failed) == (63, 1)
    record = json.loads(Path(summary.failures_file).read_text())
    assert record["path"] == "f33.txt" and record["stage"] == "infer"
    assert "crashed" in record["error"] and "exit code 3" in record["error"]


def test_parquet_parts_are_a_dataset_with_metadata(tree, tmp_path):
    out = tmp_path / "out.parquet"
    root, files = corpus(tree, 50)
    run_fake([root], out, part_rows=20)
    parts = sorted(p.name for p in out.iterdir() if p.name != "_gpucli")
    assert len(parts) > 1 and all(p.startswith("part-") and p.endswith(".parquet") for p in parts)
    meta = pq.read_schema(out / parts[0]).metadata
    assert meta[b"gpucli.model"] == b"fake-model" and b"gpucli.version" in meta
    assert str(pq.read_schema(out / parts[0]).field("embedding").type) == "fixed_size_list<element: float>[4]"


def test_jsonl_output(tree, tmp_path):
    out = tmp_path / "rows.jsonl"
    summary = run_fake([tree({"a.txt": "one two\nthree\n"})], out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary.rows == 2 and {r["text"] for r in rows} == {"one two", "three"}
    assert rows[0]["embedding"] in ([3.0, 3.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0])


def test_paths_are_relative_to_the_common_root(tree, tmp_path):
    a = tree({"x/one.txt": "1\n"}, name="a")
    b = tree({"two.txt": "2\n"}, name="b")
    out = tmp_path / "out.parquet"
    run_fake([a, b / "two.txt"], out)
    assert sorted(r["path"] for r in read_rows(out)) == ["a/x/one.txt", "b/two.txt"]
    run_fake([a], tmp_path / "single.parquet")
    assert [r["path"] for r in read_rows(tmp_path / "single.parquet")] == ["x/one.txt"]


def test_a_first_run_loads_the_model_while_the_tree_is_read_and_a_rerun_loads_none(tree, tmp_path):
    """A first run (nothing done yet) starts its workers at once: here reading waits until the
    model began loading, which a run that spawned workers only after its first block would never
    see. A rerun over the unchanged tree finishes without starting a worker."""
    marker = tmp_path / "loading"
    root = tree({f"f{i}.txt": f"line {i}\n" for i in range(5)})
    options = {"ready_marker": str(marker), "read_waits_for": str(marker)}
    first = run_fake([root], tmp_path / "out.parquet", options)
    assert (first.succeeded, first.failed) == (5, 0)
    marker.unlink()
    again = run_fake([root], tmp_path / "out.parquet", options)
    assert again.unchanged == 5 and not marker.exists()


@pytest.mark.processes
def test_workers_are_processes_and_threads_only_where_the_tests_variable_asks(tree, tmp_path, monkeypatch):
    """A user's run spawns its workers; GPUCLI_TEST_INPROCESS_WORKERS=1 (the tests', set by
    tests/conftest.py) runs the same loop in threads of this process."""
    from gpucli.engines.local.processes import IN_PROCESS_VARIABLE

    root = tree({"a.txt": "one\n", "b.txt": "two\n"})
    pids = {}
    for mode in ("processes", "threads"):
        if mode == "threads":
            monkeypatch.setenv(IN_PROCESS_VARIABLE, "1")
        log = tmp_path / f"{mode}.jsonl"
        summary = run_fake([root], tmp_path / f"{mode}.parquet", {"batch_log": str(log)}, workers_per_device=2)
        assert (summary.exit_code, summary.rows) == (0, 2)
        pids[mode] = {json.loads(line)["pid"] for line in log.read_text().splitlines()}
    assert os.getpid() not in pids["processes"] and pids["threads"] == {os.getpid()}
