"""Embedded Qdrant on Qdrant Edge (issue 42): what a user relies on beyond the sink's own tests
(test_qdrant.py): a run killed with SIGKILL leaves every point it marked done and a rerun
finishes exactly what is missing; the index is built once per run that wrote; `gpucli
snapshot` packs the collection as a shard snapshot that Qdrant Edge unpacks and loads again
with every point; the CLI refuses what it cannot pack."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from tests.helpers import ROOT, points, run_fake

runner = CliRunner()

KILLED_RUN = textwrap.dedent("""
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu", progress="off",
                  task_options={{"sleep_ms": 30}}, batch_size=4, part_rows=12, flush_s=0.2))
""")


def done_in_ledger(ledger: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{ledger}?mode=ro", uri=True, timeout=0.1)
        try:
            return db.execute("select count(*) from files").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def test_sigkill_mid_run_then_rerun_gives_every_chunk_once(tree, tmp_path):
    files = {f"f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(300)}
    root = tree(files)
    storage = tmp_path / "qd"
    out = f"qdrant:{storage}/docs"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN.format(src=str(root), out=out)], cwd=ROOT,
                            start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and done_in_ledger(storage / "docs.gpucli" / "ledger.sqlite") < 40:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    marked = done_in_ledger(storage / "docs.gpucli" / "ledger.sqlite")
    assert 0 < marked < 300, "killed mid-run"
    present = {p.payload["path"] for p in points(storage, "docs")}
    assert len(present) >= marked  # everything marked done was durable in the shard
    summary = run_fake([root], out, {"sleep_ms": 30}, batch_size=4)
    assert summary.exit_code == 0 and summary.unchanged >= marked
    counts = Counter((p.payload["path"], p.payload["chunk"]) for p in points(storage, "docs"))
    assert set(path for path, _ in counts) == set(files) and max(counts.values()) == 1 and len(counts) == 600


def test_a_run_that_wrote_builds_the_index_once_and_an_unchanged_rerun_builds_none(tree, tmp_path, monkeypatch):
    from gpucli.output.sinks.qdrant.edge import EdgeClient

    built: list[str] = []
    index = EdgeClient.index

    def counting(self):
        built.append(self.target.collection)
        return index(self)

    monkeypatch.setattr(EdgeClient, "index", counting)
    root = tree({f"f{i}.txt": f"line {i}\nanother {i}\n" for i in range(30)})
    out = f"qdrant:{tmp_path / 'qd'}/docs"
    assert run_fake([root], out, batch_size=4, part_rows=8).exit_code == 0
    assert built == ["docs"]  # not per write, not per point
    assert run_fake([root], out).unchanged == 30
    assert built == ["docs"]


@pytest.fixture
def collection(tree, tmp_path) -> tuple[str, Path]:
    root = tree({f"f{i}.txt": f"line {i} about rivers\nanother {i} about stones\n" for i in range(50)})
    storage = tmp_path / "qd"
    assert run_fake([root], f"qdrant:{storage}/docs").exit_code == 0
    return f"qdrant:{storage}/docs", storage


def test_snapshot_packs_a_shard_that_qdrant_edge_restores_with_every_point(collection, tmp_path):
    import qdrant_edge as edge

    out, storage = collection
    result = runner.invoke(app, ["snapshot", out, str(tmp_path / "docs.snapshot"), "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    assert (said["points"], said["dims"], said["sparse"]) == (100, 4, False)
    assert "shards/0/snapshots/upload" in said["restore"][1]  # how to restore it on a server
    told = runner.invoke(app, ["snapshot", out, str(tmp_path / "again.snapshot")])
    assert told.exit_code == 0 and "shards/0/snapshots/upload" in told.stderr and "100 points" in told.stderr
    restored = tmp_path / "restored"
    edge.EdgeShard.unpack_snapshot(str(tmp_path / "docs.snapshot"), str(restored))
    shard = edge.EdgeShard.load(str(restored))
    try:
        assert shard.count(edge.CountRequest(exact=True)) == 100
        records, _ = shard.scroll(edge.ScrollRequest(limit=1000, with_payload=True))
        assert Counter(r.payload["path"] for r in records) == Counter({f"f{i}.txt": 2 for i in range(50)})
    finally:
        shard.close()
    assert runner.invoke(app, ["search", "q", "--in", out]).exit_code != 75  # the lock was released


def test_snapshot_refuses_a_server_a_missing_collection_and_a_directory(collection, tmp_path):
    out, storage = collection
    server = runner.invoke(app, ["snapshot", "qdrant://localhost:6333/docs", str(tmp_path / "s")])
    assert server.exit_code == 2 and "POST /collections/COLLECTION/snapshots" in server.output
    missing = runner.invoke(app, ["snapshot", f"qdrant:{storage}/other", str(tmp_path / "s")])
    assert missing.exit_code == 2 and "no such collection" in missing.output
    directory = runner.invoke(app, ["snapshot", out, str(tmp_path)])
    assert directory.exit_code == 2 and "is a directory" in directory.output
    assert not list(tmp_path.glob("*.partial")) and not (tmp_path / "s").exists()


def test_an_index_build_stopped_by_ctrl_c_leaves_every_point_and_builds_next_time(tmp_path):
    """The build runs in a child (Edge holds the GIL while it builds); Ctrl-C reaches it too and
    ends it at once: the shard loads with every point, searchable, and the next build completes."""
    import os

    import numpy as np
    import qdrant_edge as edge

    from gpucli.output.sinks.qdrant.edge.indexer import IndexingStopped, build_indexes

    path = tmp_path / "shard"
    config = edge.EdgeConfig(vectors=edge.EdgeVectorParams(size=32, distance=edge.Distance.Cosine),
                             optimizers=edge.EdgeOptimizersConfig(indexing_threshold=1))
    shard = edge.EdgeShard.create(str(path), config)
    vectors = np.random.default_rng(0).standard_normal((40_000, 32)).astype("float32").tolist()
    for start in range(0, 40_000, 4000):
        shard.update(edge.UpdateOperation.upsert_points(
            [edge.Point(i, vectors[i], {"n": i}) for i in range(start, start + 4000)]))
    shard.close()
    child = subprocess.Popen([sys.executable, "-m", "gpucli.output.sinks.qdrant.edge.indexer", str(path)], cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # loaded and building (40k points take seconds here)
    os.kill(child.pid, signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGINT or out.strip() in ("optimized", "optimal")  # a fast machine may finish
    shard = edge.EdgeShard.load(str(path))
    try:
        assert shard.count(edge.CountRequest(exact=True)) == 40_000
        assert len(shard.query(edge.QueryRequest(limit=5, query=edge.Query.Nearest(vectors[7])))) == 5
    finally:
        shard.close()
    try:
        build_indexes(path)
    except IndexingStopped:
        pytest.fail("nothing stopped this build")
    shard = edge.EdgeShard.load(str(path))
    try:
        assert shard.info().indexed_vectors_count == 40_000 and shard.count(edge.CountRequest(exact=True)) == 40_000
    finally:
        shard.close()
