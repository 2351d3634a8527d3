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
from tests.helpers import ROOT, points, run_fake, storage_released

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
    assert storage_released(storage)  # its Qdrant Edge process saw the run die and ended too
    marked = done_in_ledger(storage / "docs.gpucli" / "ledger.sqlite")
    assert 0 < marked < 300, "killed mid-run"
    present = {p.payload["path"] for p in points(storage, "docs")}
    assert len(present) >= marked  # everything marked done was durable in the shard
    summary = run_fake([root], out, {"sleep_ms": 30}, batch_size=4)
    assert summary.exit_code == 0 and summary.unchanged >= marked
    counts = Counter((p.payload["path"], p.payload["chunk"]) for p in points(storage, "docs"))
    assert set(path for path, _ in counts) == set(files) and max(counts.values()) == 1 and len(counts) == 600


def test_a_run_that_wrote_builds_the_index_once_and_an_unchanged_rerun_builds_none(tree, tmp_path, monkeypatch):
    from gpucli.output.sinks.qdrant.edge import EdgeProcess

    built: list[str] = []
    index = EdgeProcess.index

    def counting(self):
        built.append(self.target.collection)
        return index(self)

    monkeypatch.setattr(EdgeProcess, "index", counting)
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
    ends it at once: the shard loads with every point, searchable, and the next build completes.
    The Ctrl-C lands inside the build: once the child has spent half a second of CPU past loading
    the shard (the build of 40k points takes seconds here; loading ~0.2 s), not after a sleep."""
    import os

    import numpy as np
    import psutil
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
    _building(psutil.Process(child.pid), path / "segments", cpu_s=0.5)
    os.kill(child.pid, signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGINT, f"the build was not stopped inside it ({out.strip()!r})"
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


def _building(child, segments, cpu_s: float, deadline_s: float = 120.0) -> None:
    """Returns once `child` has loaded the shard (a segment of its own appears in `segments`) and
    then spent `cpu_s` more seconds of CPU: it is inside the build. Fails when it ends first."""
    import os

    import psutil

    known, loaded_at = set(os.listdir(segments)), None
    deadline = time.monotonic() + deadline_s  # a hang guard
    while time.monotonic() < deadline:
        if not child.is_running() or child.status() == psutil.STATUS_ZOMBIE:
            pytest.fail("the build ended before it could be stopped inside it: give the test a larger shard")
        used = sum(child.cpu_times()[:2])
        if loaded_at is None and set(os.listdir(segments)) - known:
            loaded_at = used
        if loaded_at is not None and used - loaded_at >= cpu_s:
            return
        time.sleep(0.01)
    pytest.fail(f"the indexer did not get into its build within {deadline_s:g} s")


WRITE_AND_SEARCH = textwrap.dedent("""
    import sys

    import numpy as np

    import gpucli.app.cli
    from gpucli.commands.search.qdrant import QdrantIndex
    from gpucli.commands.snapshot import snapshot
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from gpucli.output.sinks.qdrant import parse_target
    from gpucli.output.sinks.qdrant.edge import EdgeClient
    from gpucli.output.sinks.qdrant.protocol import Rows
    from tests.helpers import qdrant_table

    run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu", progress="off",
                  prune=True))
    client = EdgeClient(parse_target({out!r}))  # the writes a run's Edge process makes, here in this one
    client.upsert(Rows(qdrant_table([("extra.txt", 0), ("extra.txt", 1)]), 4, "fake-model"))
    client.close()
    index = QdrantIndex({out!r})
    hits = index.nearest(np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32), 3)
    index.close()
    snapshot({out!r}, {snapshot_file!r})
    print(len(hits), sorted(name for name in sys.modules if name.split(".")[0] == "qdrant_client"))
""")


def test_embedded_writes_searches_and_snapshots_never_import_qdrant_client(tree, tmp_path):
    """Importing qdrant-client took ~0.7 s of every embedded search (issue 46): a run that writes
    an embedded collection, the writes themselves, a search and a snapshot import none of it."""
    root = tree({f"f{i}.txt": f"line {i}\nanother {i}\n" for i in range(5)})
    code = WRITE_AND_SEARCH.format(src=str(root), out=f"qdrant:{tmp_path / 'qd'}/docs",
                                   snapshot_file=str(tmp_path / "docs.snapshot"))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["3", "[]"], done.stdout


def test_the_collections_metadata_file_is_replaced_durably_with_its_directory(tmp_path, monkeypatch):
    """Written to a temporary file, synced, renamed, and the rename synced with the directory: a
    power cut after the rename must not lose a collection's metadata (gpucli/core/durable.py)."""
    import os

    from gpucli.output.sinks.qdrant.edge.files import write_json

    synced: list[str] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    target = tmp_path / "edge" / "docs.json"
    write_json(target, {"gpucli.model": "m"})
    write_json(target, {"gpucli.model": "n"})
    assert json.loads(target.read_text()) == {"gpucli.model": "n"}
    assert synced == [str(target) + ".tmp", str(target.parent)] * 2  # the file, then its directory


def test_snapshot_prints_the_three_restore_calls_with_the_collections_name(collection, tmp_path):
    out, _ = collection
    result = runner.invoke(app, ["snapshot", out, str(tmp_path / "docs.snapshot"), "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    create, upload, index = said["restore"]
    assert create.startswith("curl -X PUT 'http://localhost:6333/collections/docs' ")
    body = json.loads(create.split(" -d '", 1)[1].rstrip("'"))
    assert body["vectors"] == {"size": 4, "distance": "Cosine"} and body["shard_number"] == 1
    assert body["metadata"]["gpucli.model"] == "fake-model"  # `gpucli search` on the server reads it
    assert upload.startswith("curl -X POST 'http://localhost:6333/collections/docs/shards/0/snapshots/upload?")
    assert f"snapshot=@{tmp_path / 'docs.snapshot'}" in upload
    assert index.startswith("curl -X PUT 'http://localhost:6333/collections/docs/index?wait=true' ")
    assert json.loads(index.split(" -d '", 1)[1].rstrip("'")) == {"field_name": "path", "field_schema": "keyword"}
    assert "COLLECTION" not in result.stdout
    told = runner.invoke(app, ["snapshot", out, str(tmp_path / "again.snapshot")])
    calls = [line.strip() for line in told.stderr.splitlines() if line.strip().startswith("curl ")]
    assert len(calls) == 3 and all("/collections/docs" in call for call in calls) and "COLLECTION" not in told.stderr


def test_a_run_that_finds_no_input_leaves_no_collection_behind(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    storage = tmp_path / "new" / "qd"
    summary = run_fake([empty], f"qdrant:{storage}/docs")
    assert summary.exit_code == 3  # found nothing
    assert not (tmp_path / "new").exists()  # the storage, its lock and the shard went again
    kept = tmp_path / "kept"
    root = tmp_path / "one"
    root.mkdir()
    (root / "a.txt").write_text("one line\n")
    assert run_fake([root], f"qdrant:{kept}/other").exit_code == 0
    assert run_fake([empty], f"qdrant:{kept}/docs").exit_code == 3
    assert sorted(p.name for p in (kept / "edge").iterdir()) == ["other", "other.json"]  # another's stays
    assert (kept / ".lock").exists() and len(points(kept, "other")) == 1


def test_an_error_in_the_edge_process_comes_back_typed_and_its_death_is_one_error(tmp_path):
    from gpucli.core.errors import GpucliError, OutputError
    from gpucli.output.sinks.qdrant import parse_target
    from gpucli.output.sinks.qdrant.edge import EdgeProcess
    from gpucli.output.sinks.qdrant.edge.process import Refusal
    from gpucli.output.sinks.qdrant.protocol import NewCollection, Rows
    from tests.helpers import qdrant_table

    full = Refusal.of(OutputError("/q/edge/docs", "No space left on device [ENOSPC]", "rerun")).error()
    assert isinstance(full, OutputError) and (full.path, full.full, full.exit_code) == ("/q/edge/docs", True, 3)
    target = parse_target(f"qdrant:{tmp_path / 'qd'}/docs")
    process = EdgeProcess(target)
    try:
        process.create(NewCollection(dims=8))
        with pytest.raises(GpucliError, match=r"qdrant:.*/docs: upsert failed") as refused:
            process.upsert(Rows(qdrant_table([("a.txt", 0)]), 4, "m"))  # 4-d vectors into an 8-d collection
        assert not isinstance(refused.value, OutputError)
        assert process.describe().points == 0
        process._child.kill()
        process._child.join()
        with pytest.raises(GpucliError, match="the Qdrant Edge process ended unexpectedly"):
            process.exists()
    finally:
        process.close()
