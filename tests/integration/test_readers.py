"""A Parquet output opens in every common reader as the docs show it: pyarrow, pandas, polars
(`read_parquet` and `scan_parquet` on the directory) and DuckDB (`'DIR/*.parquet'`), on a fresh
output and on one an earlier gpucli made with its ledger inside the directory, which the next
run moves out (docs/outputs-and-columns.md)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pytest

from tests.helpers import run_fake

TREE = {"a.txt": "one two\nthree four five\n", "sub/b.txt": "six\n", "c.txt": "seven eight nine ten\n"}
DIMS = 4  # the fake task's vectors (tests/fake_task.py)


def by_key(rows: list[dict]) -> dict[tuple[str, int], list[float]]:
    return {(row["path"], int(row["chunk"])): [float(x) for x in row["embedding"]] for row in rows}


def every_reader(out: Path) -> dict[str, dict[tuple[str, int], list[float]]]:
    """(path, chunk) -> vector, as each reader gives it (the calls the docs show)."""
    glob = f"{out}/*.parquet"
    return {
        "pyarrow": by_key(ds.dataset(str(out), format="parquet").to_table().to_pylist()),
        "pandas": by_key(pd.read_parquet(out).to_dict("records")),
        "polars read_parquet": by_key(pl.read_parquet(out).to_dicts()),
        "polars scan_parquet": by_key(pl.scan_parquet(out).collect().to_dicts()),
        "duckdb": by_key([{"path": path, "chunk": chunk, "embedding": vector} for path, chunk, vector in
                          duckdb.sql(f"select path, chunk, embedding from '{glob}'").fetchall()]),
    }


def assert_read_alike(out: Path, inputs: int) -> None:
    assert all(name.startswith("part-") and name.endswith(".parquet") for name in os.listdir(out)), os.listdir(out)
    read = every_reader(out)
    reference = read["pyarrow"]
    assert len({path for path, _ in reference}) == inputs
    for name, vectors in read.items():
        assert vectors == reference, name  # the same rows and the same float32 vectors, exactly


@pytest.fixture
def output(tree, tmp_path) -> tuple[Path, Path]:
    root = tree(TREE)
    out = tmp_path / "embed.parquet"
    assert run_fake([root], out).exit_code == 0
    return root, out


def test_a_fresh_output_opens_whole_in_pyarrow_pandas_polars_and_duckdb(output):
    _, out = output
    assert Path(f"{out}.gpucli", "ledger.sqlite").is_file()  # the ledger is beside the directory
    assert_read_alike(out, inputs=3)


def test_an_output_with_its_ledger_inside_is_moved_out_by_its_next_run_and_then_opens_whole(output):
    root, out = output
    os.rename(f"{out}.gpucli", out / "_gpucli")  # where an earlier gpucli kept it
    (root / "d.txt").write_text("eleven\n")
    again = run_fake([root], out)
    assert (again.exit_code, again.unchanged, again.succeeded) == (0, 3, 1)
    assert not (out / "_gpucli").exists()
    assert_read_alike(out, inputs=4)


def test_duckdb_reads_the_vectors_as_a_list_and_the_documented_cast_makes_them_an_array(output):
    """Parquet has no fixed-size list: pyarrow keeps `fixed_size_list<float>[dims]` in the
    Arrow schema it stores beside the Parquet one, which DuckDB does not read, so DuckDB sees
    `FLOAT[]` (it does the same with its own FLOAT[n] written to Parquet); its array functions
    take the cast the docs show, `embedding::FLOAT[dims]`."""
    _, out = output
    glob = f"{out}/*.parquet"
    name, kind = duckdb.sql(f"describe select embedding from '{glob}'").fetchall()[0][:2]
    assert (name, kind) == ("embedding", "FLOAT[]")
    query = [1.0, 0.0, 0.0, 0.0]
    scores = duckdb.sql(f"select path, chunk, array_cosine_similarity(embedding::FLOAT[{DIMS}], "
                        f"{query}::FLOAT[{DIMS}]) as score from '{glob}'").fetchall()
    vectors = every_reader(out)["pyarrow"]
    for path, chunk, score in scores:
        vector = np.asarray(vectors[(path, chunk)])
        assert score == pytest.approx(float(vector[0] / np.linalg.norm(vector)), rel=1e-6)
    assert pl.read_parquet(out).schema["embedding"] == pl.Array(pl.Float32, DIMS)  # polars keeps the size
