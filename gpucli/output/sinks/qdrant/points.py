"""Rows as Qdrant points: deterministic ids, dense and sparse vectors, payloads.

Point ids are uuid5(path NUL chunk) (a table's record: uuid5(TABLE//ID NUL chunk)), so a rerun
upserts in place. The payload is the row's columns but the vectors (`?text=false` drops
`text`), then `model`; timestamps (`mtime`) as ISO 8601 text, as in JSON lines.

Built column by column, never row by row through `Table.to_pylist` (which also needs pandas for
a nanosecond timestamp): at a million points the conversions are a good part of an embedded
write (benchmarks/RESULTS-qdrant.md), and the ids are hashed with hashlib directly (the same
uuid5, a quarter of `uuid.uuid5`'s time).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from gpucli.core.keys import row_keys
from gpucli.output.sinks.qdrant.protocol import Rows, SparseVector

# Fixed forever: changing it would change every point id and duplicate every collection.
NAMESPACE = uuid.UUID("6f1c3a0e-8d2b-5b7e-9a41-3c5d2e7f9b10")
_HASHED_NAMESPACE = hashlib.sha1(NAMESPACE.bytes)
NOT_PAYLOAD = ("embedding", "sparse")  # vectors, not payload


def point_id(path: str, chunk: int) -> str:
    """Deterministic id of one chunk of one file: reruns upsert in place."""
    return str(uuid.uuid5(NAMESPACE, f"{path}\x00{chunk}"))


def point_ids(keys: list[str], chunks: Any) -> list[str]:
    """`point_id` of each (key, chunk), as RFC 4122 uuid5 strings."""
    return [_uuid5(f"{key}\x00{chunk}") for key, chunk in zip(keys, chunks)]


def _uuid5(name: str) -> str:
    digest = _HASHED_NAMESPACE.copy()
    digest.update(name.encode("utf-8"))
    raw = bytearray(digest.digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True)
class Points:
    """Rows as points: ids (uuid5 strings), dense vectors (a float32 array, one row a point),
    payloads, and sparse vectors when the collection has them. Batched by the client."""

    ids: list[str]
    vectors: Any  # numpy.ndarray (n, dims), float32
    payloads: list[dict[str, Any]]
    sparse: list[SparseVector] | None = None
    payload_bytes: int = 0  # about what the payloads' values take: for a free-space check

    def __len__(self) -> int:
        return len(self.ids)


def as_points(rows: Rows) -> Points:
    """One write's rows as points."""
    import numpy as np

    table = rows.table
    keys, chunks = row_keys(table).to_pylist(), table.column("chunk").to_pylist()
    column = table.column("embedding").combine_chunks()
    vectors = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
    names = [c for c in table.column_names if c not in NOT_PAYLOAD and (rows.with_text or c != "text")]
    values: list[Any] = [payload_values(table.column(name)) for name in names]
    fields = (*names, "model")
    payloads = [dict(zip(fields, row)) for row in zip(*values, repeat(rows.model))]
    return Points(point_ids(keys, chunks), vectors.reshape(len(table), rows.dims), payloads,
                  sparse_vectors(table) if rows.sparse else None, payload_bytes=table.select(names).nbytes)


def payload_values(column: Any) -> list[Any]:
    """A column's values as JSON takes them: timestamps as ISO 8601 text, the rest as Python's."""
    import pyarrow as pa

    if pa.types.is_timestamp(column.type):
        return list(iso_times(column))
    return column.to_pylist()


def iso_times(column: Any) -> Iterator[str | None]:
    """Timestamps as ISO 8601 text, whatever their unit and without pandas: what pandas'
    `Timestamp.isoformat` gives (9 digits of fraction when the nanoseconds say so, 6 for whole
    microseconds, none for whole seconds, then `+00:00` when zoned), so payloads written with and
    without pandas, and before and after `mtime` became microseconds, read the same. Files share
    their mtime, so each distinct value is formatted once."""
    import pyarrow as pa

    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[column.type.unit]
    zone = "+00:00" if column.type.tz else ""
    known: dict[int | None, str | None] = {None: None}
    for value in column.cast(pa.int64()).to_pylist():
        text = known.get(value)
        if text is None and value is not None:
            text = known[value] = _iso(value * (1_000_000_000 // per_second)) + zone
        yield text


def _iso(ns: int) -> str:
    seconds, fraction = divmod(ns, 10**9)
    text = (dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    if fraction % 1000:
        return f"{text}.{fraction:09d}"
    return f"{text}.{fraction // 1000:06d}" if fraction else text


def sparse_vectors(table: Any) -> list[SparseVector]:
    """The `sparse` column as sparse vectors, one per row (an empty one where a chunk has no term)."""
    return [SparseVector(row["indices"], row["values"]) if row else SparseVector([], [])
            for row in table.column("sparse").to_pylist()]


def chunk_counts(keys: list[str], chunks: list[int]) -> dict[str, int]:
    """key (a file's path, a table's record: path//id) -> number of chunks this write holds for it
    (max chunk + 1)."""
    counts: dict[str, int] = {}
    for key, chunk in zip(keys, chunks):
        if counts.get(key, 0) <= chunk:
            counts[key] = chunk + 1
    return counts
