"""A JSON lines embed output, searched by brute force, BATCH_ROWS lines at a time. JSON lines has
no file metadata: the model, dims and query prompt are those the ledger beside it recorded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gpucli.commands.search.hits import HIT_COLUMNS, Hit, TopK, fused
from gpucli.commands.search.parquet import BATCH_ROWS
from gpucli.commands.search.stored import ledger_info, number, reading
from gpucli.core.errors import UsageError


class JsonlIndex:
    def __init__(self, where: str) -> None:
        self.display = where
        self.rows_scanned = 0
        info = ledger_info(where)
        self.model = info.get("gpucli.model", "")
        self.query_prompt = info.get("gpucli.query_prompt")
        self.truncate_dims = number(info.get("gpucli.truncate_dims"))
        if not self.model:
            raise UsageError(f"--in {where}: not a gpucli embed output (no ledger beside it names its model); make "
                             "one with `gpucli embed DIR --out OUT.jsonl`")
        self.dims = int(info["gpucli.dims"]) if info.get("gpucli.dims", "").isdigit() else self._first_dims()
        self.reading = reading(where, {**info, "gpucli.dims": str(self.dims)})  # --vector-type
        self.sparse = "gpucli.sparse" in info  # --sparse bm25

    def _first_dims(self) -> int:
        with open(self.display, "rb") as f:
            row = json_row(f.readline()) or {}
        return len(row.get("embedding") or [])

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        best = TopK(k)
        for rows, matrix in self._batches():
            self.rows_scanned += len(rows)
            best.offer(self.reading.scores(self.reading.matrix(matrix), vector), record_batch(rows))
        return best.hits()

    def _batches(self) -> Iterator[tuple[list[dict], Any]]:
        """(rows without their vectors, float32 matrix) per BATCH_ROWS lines; a torn last line
        (a run killed mid-write, before the ledger took the line) is left out."""
        import numpy as np

        rows, vectors = [], []
        with open(self.display, "rb") as f:
            for line in f:
                row = json_row(line)
                if row is None or not isinstance(row.get("embedding"), list):
                    continue
                vectors.append(row.pop("embedding"))
                rows.append(row)
                if len(rows) >= BATCH_ROWS:
                    yield rows, np.asarray(vectors, dtype=np.float32)
                    rows, vectors = [], []
        if rows:
            yield rows, np.asarray(vectors, dtype=np.float32)

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        """BM25 in two passes over the file, as over Parquet."""
        from gpucli.tasks.text.sparse import DocumentFrequencies

        frequencies, rows = DocumentFrequencies(terms), 0
        for _, sparse in self._sparse_batches():
            rows += len(sparse)
            frequencies.count(sparse)
        scorer, best = frequencies.scorer(), TopK(k)
        for batch, sparse in self._sparse_batches():
            best.offer(scorer.scores(sparse), batch)
        self.rows_scanned = max(self.rows_scanned, rows)
        return best.hits()

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        from gpucli.tasks.text.sparse import hybrid_depth

        return fused([self.nearest(vector, hybrid_depth(k)), self.lexical(terms, hybrid_depth(k))], k)

    def _sparse_batches(self) -> Iterator[tuple[Any, Any]]:
        """(hit columns, sparse column) per BATCH_ROWS lines, as `_batches` reads them."""
        import pyarrow as pa

        from gpucli.tasks.text.sparse import arrow_type

        rows: list[dict] = []
        with open(self.display, "rb") as f:
            for line in f:
                row = json_row(line)
                if row is not None and isinstance(row.get("embedding"), list):
                    rows.append(row)
                if len(rows) >= BATCH_ROWS:
                    yield record_batch(rows), pa.array([row.get("sparse") for row in rows], arrow_type())
                    rows = []
        if rows:
            yield record_batch(rows), pa.array([row.get("sparse") for row in rows], arrow_type())

    def close(self) -> None:
        pass


def json_row(line: bytes) -> dict | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def record_batch(rows: list[dict]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pylist([{key: row.get(key) for key in HIT_COLUMNS} for row in rows])
