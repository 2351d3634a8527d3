"""An output's rows as a PostgreSQL table: its columns from the Arrow schema, and the rows of a
part as one `COPY ... FROM STDIN (FORMAT BINARY)` stream, encoded column by column with Arrow's
and numpy's vector kernels (no Python object per row or per value).

Columns keep the Parquet rows' names and types: text, int2/int4/int8, real, double precision,
boolean, timestamptz (the schema's timestamp with its time zone; microseconds, PostgreSQL's
resolution), `embedding vector(D)` (pgvector), and jsonb for anything nested (a list, a struct).

COPY's binary format (PostgreSQL docs, "COPY", File Formats): a signature, then per row an int16
field count and per field an int32 byte length (-1: NULL) and the value in the type's binary
send format, big-endian; then an int16 -1. A vector's is int16 dims, int16 0, then float4s.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"
NULL = b"\xff\xff\xff\xff"
PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 UTC in microseconds since 1970
VECTOR_COLUMN = "embedding"
NUMBERS = {"int8": ("smallint", ">i2"), "int16": ("smallint", ">i2"), "int32": ("integer", ">i4"),
           "int64": ("bigint", ">i8"), "uint8": ("smallint", ">i2"), "uint16": ("integer", ">i4"),
           "uint32": ("bigint", ">i8"), "float": ("real", ">f4"), "double": ("double precision", ">f8")}


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # as created: `vector(384)`, `text`, ...
    kind: str  # how its values are encoded: number, bool, timestamp, vector, text, json
    code: str = ""  # numpy's big-endian dtype of a number

    @property
    def quoted(self) -> str:
        return quote(self.name)


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns_of(schema: Any) -> list[Column]:
    """The table's columns, in the schema's order."""
    import pyarrow as pa

    columns = []
    for field in schema:
        t = field.type
        if field.name == VECTOR_COLUMN and pa.types.is_fixed_size_list(t) and pa.types.is_float32(t.value_type):
            columns.append(Column(field.name, f"vector({t.list_size})", "vector"))
        elif str(t) in NUMBERS:
            columns.append(Column(field.name, NUMBERS[str(t)][0], "number", NUMBERS[str(t)][1]))
        elif pa.types.is_boolean(t):
            columns.append(Column(field.name, "boolean", "bool"))
        elif pa.types.is_timestamp(t):
            columns.append(Column(field.name, "timestamptz" if t.tz else "timestamp", "timestamp"))
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            columns.append(Column(field.name, "text", "text"))
        else:
            columns.append(Column(field.name, "jsonb", "json"))
    return columns


def create_table_sql(qualified: str, columns: list[Column]) -> str:
    return f"create table {qualified} ({', '.join(f'{c.quoted} {c.sql_type}' for c in columns)})"


def copy_sql(qualified: str, columns: list[Column]) -> str:
    return f"copy {qualified} ({', '.join(c.quoted for c in columns)}) from stdin (format binary)"


def copy_data(table: Any, columns: list[Column]) -> bytes:
    """The part's rows as one binary COPY stream (signature and trailer included)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = table.num_rows
    if n == 0:
        return SIGNATURE + TRAILER
    count = _fixed(np.full((n, 1), len(columns), dtype=">i2").view(np.uint8).reshape(n, 2))
    fields = [count] + [_field(table.column(c.name).combine_chunks(), c) for c in columns]
    rows = pc.binary_join_element_wise(*fields, pa.scalar(b"", pa.large_binary()))
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64, count=n + 1, offset=rows.offset * 8)
    body = memoryview(rows.buffers()[2])[offsets[0]:offsets[-1]]
    return b"".join((SIGNATURE, body, TRAILER))


def _field(array: Any, column: Column) -> Any:
    """One column's fields: each row's int32 length and value bytes, as a large_binary array."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(array)
    if column.kind in ("text", "json"):
        values = array.cast(pa.large_string()) if column.kind == "text" else _json_text(array)
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False)
        lengths = np.where(array.is_null().to_numpy(zero_copy_only=False), -1, lengths).astype(">i4")
        prefix = _fixed(lengths.view(np.uint8).reshape(n, 4))
        data = pc.fill_null(values.cast(pa.large_binary()), pa.scalar(b"", pa.large_binary()))
        return pc.binary_join_element_wise(prefix, data, pa.scalar(b"", pa.large_binary()))
    body = _fixed_values(array, column)
    width = body.shape[1]
    block = np.empty((n, 4 + width), dtype=np.uint8)
    block[:, :4] = np.frombuffer(np.array(width, dtype=">i4").tobytes(), dtype=np.uint8)
    block[:, 4:] = body
    encoded = _fixed(block)
    if array.null_count:
        encoded = pc.if_else(array.is_valid(), encoded, pa.scalar(NULL, pa.large_binary()))
    return encoded


def _fixed_values(array: Any, column: Column) -> np.ndarray:
    """(rows, bytes) of a fixed-width type's binary send format; nulls hold zeros (masked after)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(array)
    if column.kind == "vector":
        dims = array.type.list_size
        flat = array.values.slice(array.offset * dims, n * dims) if array.null_count == 0 else \
            pc.fill_null(array, pa.scalar([0.0] * dims, array.type)).values
        values = np.asarray(flat.to_numpy(zero_copy_only=False), dtype=">f4").reshape(n, dims)
        head = np.zeros((n, 4), dtype=np.uint8)
        head[:, :2] = np.frombuffer(np.array(dims, dtype=">i2").tobytes(), dtype=np.uint8)
        return np.concatenate([head, values.view(np.uint8).reshape(n, 4 * dims)], axis=1)
    if column.kind == "bool":
        return pc.fill_null(array, False).to_numpy(zero_copy_only=False).astype(np.uint8).reshape(n, 1)
    if column.kind == "timestamp":
        unit = array.type.unit
        raw = pc.fill_null(array.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
        micros = {"s": raw * 1_000_000, "ms": raw * 1_000, "us": raw, "ns": raw // 1_000}[unit]
        return (micros - PG_EPOCH_US).astype(">i8").view(np.uint8).reshape(n, 8)
    width = np.dtype(column.code).itemsize
    raw = pc.fill_null(array, 0).to_numpy(zero_copy_only=False)
    return raw.astype(column.code).view(np.uint8).reshape(n, width)


def _fixed(block: np.ndarray) -> Any:
    """A (rows, width) uint8 matrix as a large_binary array of its rows (no copy per row)."""
    import pyarrow as pa

    n, width = block.shape
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(np.ascontiguousarray(block))])
    return fixed.cast(pa.large_binary())


def _json_text(array: Any) -> Any:
    """Nested values as jsonb's binary format: version 1, then the JSON text."""
    import pyarrow as pa

    return pa.array([None if v is None else "\x01" + json.dumps(v, ensure_ascii=False, default=str)
                     for v in array.to_pylist()], pa.large_string())
