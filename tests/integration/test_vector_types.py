"""--vector-type (issue 30), end to end with the default model: each type through Parquet, JSON
lines and embedded Qdrant, where `gpucli search` ranks the document whose own text is the query
first; pandas, polars and DuckDB read the Parquet outputs; int8's calibration stays the same over
an incremental run; a setting other than the output's is refused (exit 2 naming --full)."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.commands.search import search
from gpucli.core.vectors import INT8_KEY, LEDGER_KEY
from tests.helpers import write_tree

pytestmark = pytest.mark.model

TEXTS = {"cheese.txt": "Cheese is made by curdling milk and separating the curds from the whey.",
         "bread.txt": "Sourdough bread rises with a starter of wild yeasts and lactic acid bacteria.",
         "moon.txt": "The Moon's gravity raises the tides of the Earth's oceans twice a day.",
         "bees.txt": "Bees make honey from the nectar of flowers and store it in wax combs.",
         "rust.txt": "Iron rusts when it meets water and oxygen, forming hydrated iron oxides."}
WIDTH = {"float32": 384, "float16": 384, "int8": 384, "binary": 48}
runner = CliRunner()


def embed(tree, out, *args) -> object:
    return runner.invoke(app, ["embed", str(tree), "--out", str(out), "--progress", "off", "--devices", "cpu",
                               "--workers-per-device", "1", *args])


@pytest.fixture(autouse=True)
def queries_embedded_once(monkeypatch):
    """The real query vectors, each embedded once for the module (loading the model per search cost
    ~1 s a query)."""
    import gpucli.commands.search as searching

    real = searching.embed_queries
    monkeypatch.setattr(searching, "embed_queries", lambda model, queries, prompt=None, dims=0: [
        _query(real, model, query, prompt, dims) for query in queries])


QUERIES: dict[tuple, np.ndarray] = {}


def _query(real, model: str, query: str, prompt: str | None, dims: int) -> np.ndarray:
    key = (model, query, prompt, dims)
    if key not in QUERIES:
        QUERIES[key] = real(model, [query], prompt, dims)[0]
    return QUERIES[key]


def ranks_own_text_first(out) -> None:
    for name in ("bread.txt", "rust.txt"):
        hits = search(str(out), TEXTS[name], k=3).hits
        assert hits[0].path == name, [(h.path, h.score) for h in hits]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_tree(tmp_path_factory.mktemp("vt") / "tree", TEXTS)


@pytest.mark.parametrize("vector_type", ["float16", "binary"])  # int8: in the incremental test below
def test_parquet_stores_each_type_readers_open_it_and_search_finds_the_own_text(tree, tmp_path, vector_type):
    out = tmp_path / "out.parquet"
    assert embed(tree, out, "--vector-type", vector_type).exit_code == 0
    read_alike(out, vector_type)


def read_alike(out, vector_type: str) -> None:
    """The output's type and dims in its metadata; pandas, polars and DuckDB read it; search finds."""
    part = sorted(out.glob("part-*.parquet"))[0]
    schema = pq.read_schema(part)
    assert schema.metadata[b"gpucli.vector_type"] == vector_type.encode() and schema.metadata[b"gpucli.dims"] == b"384"
    assert schema.field("embedding").type.list_size == WIDTH[vector_type]
    lengths = {"pandas": {len(v) for v in pd.read_parquet(out)["embedding"]},
               "polars": {len(v) for v in pl.read_parquet(out).get_column("embedding").to_list()},
               "duckdb": {n for (n,) in duckdb.sql(f"select len(embedding) from '{out}/*.parquet'").fetchall()}}
    assert lengths == {reader: {WIDTH[vector_type]} for reader in lengths}
    ranks_own_text_first(out)


def test_int8_in_parquet_keeps_its_calibration_over_an_incremental_run(tree, tmp_path):
    out = tmp_path / "int8.parquet"
    assert embed(tree, out, "--vector-type", "int8").exit_code == 0
    read_alike(out, "int8")
    (tree / "salt.txt").write_text("Salt is mined from ancient sea beds or evaporated from brine.")
    try:
        assert embed(tree, out, "--vector-type", "int8").exit_code == 0
        (tree / "bees again.txt").write_text(TEXTS["bees.txt"])  # a copy: its rows read back (dedup), no model
        assert embed(tree, out, "--vector-type", "int8").exit_code == 0
    finally:
        (tree / "salt.txt").unlink()
        (tree / "bees again.txt").unlink(missing_ok=True)
    parts = sorted(out.glob("part-*.parquet"))
    # every part decodes alone, the one that holds only the copy's rows read back too
    calibrations = {pq.read_schema(p).field("embedding").metadata[INT8_KEY.encode()] for p in parts}
    assert len(parts) == 3 and len(calibrations) == 1
    import sqlite3

    with sqlite3.connect(out.parent / "int8.parquet.gpucli" / "ledger.sqlite") as db:
        kept = db.execute("select value from meta where key=?", (LEDGER_KEY,)).fetchone()[0]
    assert kept.encode() == calibrations.pop()
    codes = ds.dataset(str(out), format="parquet").to_table().column("embedding").combine_chunks()
    assert codes.type.value_type.bit_width == 8 and np.abs(codes.flatten().to_numpy()).max() <= 127


@pytest.mark.parametrize("vector_type", ["float16", "int8", "binary"])
def test_json_lines_hold_each_type_and_search_finds_the_own_text(tree, tmp_path, vector_type):
    out = tmp_path / "out.jsonl"
    assert embed(tree, out, "--vector-type", vector_type).exit_code == 0
    vectors = [json.loads(line)["embedding"] for line in out.read_text().splitlines()]
    assert {len(v) for v in vectors} == {WIDTH[vector_type]}
    values = [x for v in vectors for x in v]
    if vector_type == "float16":
        assert all(float(np.float16(x)) == x for x in values)  # half floats, written exactly
    else:
        assert all(isinstance(x, int) for x in values)
        assert all(0 <= x <= 255 for x in values) if vector_type == "binary" else all(-127 <= x <= 127 for x in values)
    ranks_own_text_first(out)


def test_qdrant_gets_its_own_datatype_and_quantization_and_full_makes_the_collection_again(tree, tmp_path):
    from gpucli.output.sinks.qdrant import parse_target
    from gpucli.output.sinks.qdrant.edge import EdgeClient

    storage = tmp_path / "q"
    for vector_type in ("float16", "int8"):
        assert embed(tree, f"qdrant:{storage}/{vector_type}", "--vector-type", vector_type).exit_code == 0
        ranks_own_text_first(f"qdrant:{storage}/{vector_type}")
    refused = embed(tree, f"qdrant:{storage}/int8", "--vector-type", "binary")
    assert refused.exit_code == 2 and "--full" in refused.output
    assert embed(tree, f"qdrant:{storage}/int8", "--vector-type", "binary", "--full").exit_code == 0
    ranks_own_text_first(f"qdrant:{storage}/int8")
    described = {}
    for name in ("float16", "int8"):
        client = EdgeClient(parse_target(f"qdrant:{storage}/{name}"))
        try:
            described[name] = client.describe()
        finally:
            client.close()
    half, binary = described["float16"], described["int8"]
    assert half.vector_type == "float16" and half.metadata["gpucli.vector_type"] == "float16"
    assert binary.vector_type == "binary" and binary.metadata["gpucli.vector_type"] == "binary"
    config = json.loads((storage / "edge" / "int8" / "edge_config.json").read_text())
    assert config["vectors"][""]["quantization_config"] == {"binary": {}}  # Qdrant's own quantization


def test_a_float32_output_refuses_another_vector_type_naming_full(tree, tmp_path):
    out = tmp_path / "f32.parquet"
    assert embed(tree, out).exit_code == 0
    assert b"gpucli.vector_type" not in pq.read_schema(sorted(out.glob("part-*.parquet"))[0]).metadata
    refused = embed(tree, out, "--vector-type", "int8")
    assert refused.exit_code == 2 and "--full" in refused.output and "vector_type" in refused.output


def test_an_image_text_model_stores_its_vectors_as_text_models_do(tmp_path):
    pytest.importorskip("PIL.Image")
    from tests.helpers import SAMPLE
    from tests.image_text_models import save_tiny_clip

    model = save_tiny_clip(tmp_path / "clip")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "astronaut.jpg").write_bytes((SAMPLE / "images" / "astronaut.jpg").read_bytes())
    out = tmp_path / "clip.parquet"
    assert embed(tree, out, "--model", str(model), "--vector-type", "binary").exit_code == 0
    schema = pq.read_schema(sorted(out.glob("part-*.parquet"))[0])
    assert schema.field("embedding").type.list_size == 2  # 16 dims packed in 2 bytes
    assert schema.metadata[b"gpucli.vector_type"] == b"binary"
