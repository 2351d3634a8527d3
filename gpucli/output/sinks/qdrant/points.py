"""Rows as Qdrant points, and their upserts.

Point ids are uuid5(path NUL chunk) (a table's record: uuid5(TABLE//ID NUL chunk)), so a rerun
upserts in place. Every upsert waits for the acknowledgement (`wait=True`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from gpucli.core.keys import row_key, row_keys
from gpucli.output.sinks.qdrant.collection import SPARSE_VECTOR, Wanted
from gpucli.output.sinks.qdrant.connection import Connection

# Fixed forever: changing it would change every point id and duplicate every collection.
NAMESPACE = uuid.UUID("6f1c3a0e-8d2b-5b7e-9a41-3c5d2e7f9b10")


def point_id(path: str, chunk: int) -> str:
    """Deterministic id of one chunk of one file: reruns upsert in place."""
    return str(uuid.uuid5(NAMESPACE, f"{path}\x00{chunk}"))


@dataclass(frozen=True)
class Points:
    """One table's rows as points: ids, dense vectors, payloads, and sparse vectors (--sparse bm25)."""

    ids: list[str]
    vectors: list[list[float]]
    payloads: list[dict[str, Any]]
    sparse: list[Any] | None = None

    @classmethod
    def of(cls, table: Any, wanted: Wanted, with_text: bool) -> Points:
        import numpy as np

        column = table.column("embedding").combine_chunks()
        vectors = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        keep = [c for c in table.column_names if c not in ("embedding", "sparse") and (with_text or c != "text")]
        payloads = table.select(keep).to_pylist()
        for row in payloads:
            row["model"] = wanted.model
            if row.get("mtime") is not None:  # payloads are JSON: ISO 8601, as in JSON lines
                row["mtime"] = row["mtime"].isoformat()
        ids = [point_id(row_key(row), row["chunk"]) for row in payloads]  # a table's record: uuid5 of table//id, chunk
        return cls(ids, vectors.reshape(len(table), wanted.dims).tolist(), payloads,
                   sparse_vectors(table) if wanted.sparse else None)

    def batch(self, start: int, end: int) -> Any:
        """Points start..end as one `models.Batch`; "" names the unnamed dense vector beside the sparse one."""
        from qdrant_client import models

        dense = self.vectors[start:end]
        vectors = dense if self.sparse is None else {"": dense, SPARSE_VECTOR: self.sparse[start:end]}
        return models.Batch(ids=self.ids[start:end], payloads=self.payloads[start:end], vectors=vectors)


def upsert(conn: Connection, points: Points) -> None:
    """Upsert in batches of `?batch=N` points, each acknowledged before the next."""
    name, size = conn.target.collection, conn.target.batch
    for start in range(0, len(points.ids), size):
        batch = points.batch(start, start + size)
        conn.call("upsert", lambda b=batch: conn.client.upsert(name, points=b, wait=True))


def sparse_vectors(table: Any) -> list[Any]:
    """The `sparse` column as Qdrant's sparse vectors, one per row (an empty one where a chunk has no term)."""
    from qdrant_client import models

    return [models.SparseVector(indices=row["indices"] if row else [], values=row["values"] if row else [])
            for row in table.column("sparse").to_pylist()]


def chunk_counts(table: Any) -> dict[str, int]:
    """path (a table's record: path//id) -> number of chunks this write holds for it (max chunk + 1)."""
    counts: dict[str, int] = {}
    for path, chunk in zip(row_keys(table).to_pylist(), table.column("chunk").to_pylist()):
        counts[path] = max(counts.get(path, 0), int(chunk) + 1)
    return counts
