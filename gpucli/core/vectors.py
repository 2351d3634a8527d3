"""How an embed output stores its vectors, and how `gpucli search` reads them back.

`--vector-type`:

- `float32` (the default): `fixed_size_list<float>[dims]`, 4 bytes a dimension.
- `float16`: `fixed_size_list<halffloat>[dims]`, 2 bytes a dimension; numpy's round-to-nearest
  float16. pandas, polars (`f16`), DuckDB (as `FLOAT[]`) and pyarrow read it.
- `int8`: `fixed_size_list<int8>[dims]`, 1 byte a dimension. Per dimension d, an affine code
  `code = round((x - offset[d]) / scale[d])` clipped to -127..127, read back as
  `offset[d] + code * scale[d]`. The calibration comes from the data: the output's first batch of
  vectors (its per-dimension min and max: `offset` the midpoint, `scale` MARGIN times the
  half-range over 127, so that later vectors up to twice as far out still fit; beyond that they
  clip; a first batch of fewer than MIN_ROWS rows gets one symmetric scale: see `calibrate`). One calibration per output, never per part, so that rows copied or rewritten between
  parts (dedup, reruns, --prune) stay right: it is kept in the output's ledger (meta key
  `vectors.int8`), which later runs read, and written beside every part's vectors, in the
  `embedding` field's metadata (`gpucli.int8`: JSON `{"offset": [...], "scale": [...]}`), so a
  part file is decodable alone. `--full` (or other settings with it) empties the ledger and so
  calibrates anew.
- `binary`: packed bits, `fixed_size_list<uint8>[ceil(dims / 8)]`, bit = x > 0, in numpy's
  `packbits` order (big-endian within a byte: dimension 0 is the byte's highest bit; the last
  byte padded with zero bits). Search ranks by Hamming distance to the query's bits; no float
  vectors are kept, so there is no rescoring: the score is `1 - 2 * hamming / dims`.

Qdrant keeps float vectors and applies the type its own way (gpucli/output/sinks/qdrant/vector_types.py),
so for a Qdrant output the rows keep float32 (`Stored.keeps_floats`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

VECTOR_TYPES = ("float32", "float16", "int8", "binary")
TYPE_KEY = "gpucli.vector_type"  # output metadata (only for a type other than float32)
INT8_KEY = "gpucli.int8"  # the embedding field's metadata: the int8 calibration
LEDGER_KEY = "vectors.int8"  # the ledger's meta: the output's int8 calibration, for later runs
MARGIN = 2.0  # int8 range: this many times the calibration batch's half-range, per dimension
MIN_ROWS = 64  # rows a calibration batch needs for a range per dimension (calibrate)
LIMIT = 127  # int8 codes -127..127 (symmetric: -128 unused)
POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


# --- int8 ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Int8Scale:
    """Per-dimension offset and scale of an int8 output (see the module doc)."""

    offset: np.ndarray
    scale: np.ndarray

    def to_json(self) -> str:
        return json.dumps({"offset": self.offset.astype(np.float32).tolist(),
                           "scale": self.scale.astype(np.float32).tolist()})

    @classmethod
    def from_json(cls, text: str | bytes) -> Int8Scale:
        data = json.loads(text)
        return cls(np.asarray(data["offset"], np.float32), np.asarray(data["scale"], np.float32))


def calibrate(matrix: np.ndarray) -> Int8Scale:
    """Offset and scale from a calibration batch: per dimension, the midpoint and MARGIN x the
    half-range. A batch of fewer than MIN_ROWS rows cannot tell each dimension's range (on 1000 real
    paragraphs, minilm: calibrated on 2 to 16 rows, 55 % to 1.4 % of values clipped and recall@10
    fell to 0.78-0.96; on 64 rows 0.04 %, 0.992): it gets one symmetric scale for every dimension,
    offset 0 and MARGIN x its largest magnitude (0.99 from a single row)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    dims = matrix.shape[1]
    if len(matrix) < MIN_ROWS:
        half = np.full(dims, max(float(np.abs(matrix).max()), 1e-6), np.float32)
        return Int8Scale(np.zeros(dims, np.float32), (MARGIN * half / LIMIT).astype(np.float32))
    low, high = matrix.min(axis=0), matrix.max(axis=0)
    half = np.maximum((high - low) / 2, 1e-6)
    return Int8Scale(((low + high) / 2).astype(np.float32), (MARGIN * half / LIMIT).astype(np.float32))


def quantize(matrix: np.ndarray, scale: Int8Scale) -> np.ndarray:
    codes = np.rint((np.asarray(matrix, np.float32) - scale.offset) / scale.scale)
    return np.clip(codes, -LIMIT, LIMIT).astype(np.int8)


def dequantize(codes: np.ndarray, scale: Int8Scale) -> np.ndarray:
    return (scale.offset + np.asarray(codes, np.float32) * scale.scale).astype(np.float32)


# --- binary -------------------------------------------------------------------------------------
def pack_bits(matrix: np.ndarray) -> np.ndarray:
    """One bit a dimension (x > 0), numpy packbits order: [n, ceil(dims / 8)] uint8."""
    return np.packbits(np.asarray(matrix) > 0, axis=-1)


def hamming(packed: np.ndarray, query_bits: np.ndarray) -> np.ndarray:
    """Bits that differ between each packed row and the packed query."""
    return POPCOUNT[np.bitwise_xor(packed, query_bits)].sum(axis=-1, dtype=np.int64)


# --- Arrow --------------------------------------------------------------------------------------
def width(vector_type: str, dims: int) -> int:
    """Values a stored vector holds: dims, or bytes of packed bits."""
    return -(-dims // 8) if vector_type == "binary" else dims


def bytes_per_vector(vector_type: str, dims: int) -> int:
    return width(vector_type, dims) * {"float32": 4, "float16": 2}.get(vector_type, 1)


def value_type(vector_type: str):
    import pyarrow as pa

    return {"float32": pa.float32(), "float16": pa.float16(), "int8": pa.int8(), "binary": pa.uint8()}[vector_type]


def field_type(vector_type: str, dims: int):
    import pyarrow as pa

    return pa.list_(value_type(vector_type), width(vector_type, dims))


class Stored:
    """How one output stores its vectors, in the parent: the `embedding` column's type, and the
    column itself from a batch's float32 matrix (int8: calibrated once, see the module doc).
    `ledger`: a callable giving the output's ledger (meta/set_meta), or None (no calibration kept)."""

    def __init__(self, vector_type: str, dims: int, keeps_floats: bool = False, ledger: Any = None) -> None:
        if vector_type not in VECTOR_TYPES:
            raise ValueError(f"--vector-type must be one of {', '.join(VECTOR_TYPES)}")
        self.vector_type = vector_type
        self.kind = "float32" if keeps_floats else vector_type  # what the rows hold
        self.dims = dims
        self._ledger = ledger
        self.int8: Int8Scale | None = None

    def info(self) -> dict[str, str]:
        """Output metadata: the type, when not float32 (outputs made before it stay as they were)."""
        return {} if self.vector_type == "float32" else {TYPE_KEY: self.vector_type}

    def field_type(self):
        return field_type(self.kind, self.dims)

    def column(self, matrix: np.ndarray):
        """The `embedding` column of a batch's float32 matrix, as stored."""
        import pyarrow as pa

        matrix = np.asarray(matrix, dtype=np.float32)
        if self.kind == "float16":
            values = matrix.astype(np.float16)
        elif self.kind == "binary":
            values = pack_bits(matrix)
        elif self.kind == "int8":
            values = quantize(matrix, self._scale(matrix))
        else:
            values = matrix
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), value_type(self.kind)),
                                                 width(self.kind, self.dims))

    def tag(self, table: Any) -> Any:
        """`table` with the int8 calibration in its `embedding` field's metadata (other types: as it is)."""
        if self.kind == "int8" and self.int8 is None and self._ledger is not None:  # a part of copies only
            ledger = self._ledger()
            kept = ledger.meta(LEDGER_KEY) if ledger is not None else None
            self.int8 = Int8Scale.from_json(kept) if kept else None
        if self.kind != "int8" or self.int8 is None:
            return table
        i = table.schema.get_field_index("embedding")
        field = table.schema.field(i).with_metadata({INT8_KEY: self.int8.to_json()})
        return table.set_column(i, field, table.column(i))

    def _scale(self, matrix: np.ndarray) -> Int8Scale:
        """The output's calibration: kept in its ledger, else made from this first batch and kept."""
        if self.int8 is None:
            ledger = self._ledger() if self._ledger is not None else None
            kept = ledger.meta(LEDGER_KEY) if ledger is not None else None
            self.int8 = Int8Scale.from_json(kept) if kept else calibrate(matrix)
            if len(self.int8.scale) != self.dims:
                raise ValueError(f"the output's int8 calibration has {len(self.int8.scale)} dims, not {self.dims}. "
                                 "This is a bug.")
            if ledger is not None and not kept:
                ledger.set_meta(LEDGER_KEY, self.int8.to_json())
        return self.int8


# --- reading back -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Reading:
    """How search reads one output's (or one part's) vectors: the type, dims and int8 calibration."""

    vector_type: str
    dims: int
    int8: Int8Scale | None = None

    @classmethod
    def of(cls, metadata: dict[str, str], field: Any = None, int8_json: str | None = None) -> Reading:
        """From an output's metadata (`gpucli.vector_type`, `gpucli.dims`) and, for int8, the
        `embedding` field's metadata or the calibration the ledger keeps (`int8_json`)."""
        import pyarrow as pa

        vector_type = metadata.get(TYPE_KEY, "float32")
        dims = int(metadata["gpucli.dims"]) if str(metadata.get("gpucli.dims", "")).isdigit() else 0
        if field is not None and pa.types.is_fixed_size_list(field.type):
            vector_type = _type_of(field.type.value_type)
            dims = dims or field.type.list_size * (8 if vector_type == "binary" else 1)
            int8_json = (field.metadata or {}).get(INT8_KEY.encode(), int8_json)
        if vector_type == "int8" and not int8_json:
            raise ValueError("an int8 output without its calibration (gpucli.int8 in the embedding field's metadata)")
        return cls(vector_type, dims, Int8Scale.from_json(int8_json) if vector_type == "int8" and int8_json else None)

    def matrix(self, values: np.ndarray) -> np.ndarray:
        """Stored values [n, width] -> what scoring takes: float32 rows, or packed bits."""
        if self.vector_type == "int8":
            if self.int8 is None:
                raise ValueError("int8 vectors to read without their calibration. This is a bug.")
            return dequantize(values, self.int8)
        if self.vector_type == "binary":
            return np.asarray(values, np.uint8)
        return np.asarray(values, np.float32)

    def from_column(self, column: Any) -> np.ndarray:
        if hasattr(column, "combine_chunks"):  # a table's column; a record batch's is one array
            column = column.combine_chunks()
        return self.matrix(flat_values(column).reshape(-1, width(self.vector_type, self.dims)))

    def scores(self, matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Cosine with the (unit, float32) query; binary: 1 - 2 * Hamming / dims to its bits."""
        if self.vector_type == "binary":
            return 1.0 - 2.0 * hamming(matrix, pack_bits(query)) / max(self.dims, 1)
        norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))  # no n x d temporary, unlike linalg.norm
        return (matrix @ np.asarray(query, np.float32)) / np.maximum(norms, 1e-12)


def flat_values(column: Any) -> np.ndarray:
    """A list array's values as one flat numpy array; for fixed-size lists without nulls (every
    output gpucli writes) read-only, straight from arrow's buffer. Not `flatten().to_numpy()`: in
    pyarrow 26 `flatten` imports pyarrow.compute and `to_numpy` pandas, ~0.2 s of a `gpucli search`
    that takes ~1 s in all; anything else (a vector with a missing value: numpy has no nulls) still
    goes that way."""
    size = getattr(column.type, "list_size", None)  # only fixed-size lists have one
    values = column.values if size else None  # the whole child, whatever the column's own offset
    if not size or values is None or column.null_count or values.null_count:
        return np.asarray(column.flatten().to_numpy(zero_copy_only=False))
    dtype = np.dtype(values.type.to_pandas_dtype())  # numpy's type for arrow's: no pandas involved
    first = values.offset + column.offset * size
    return np.frombuffer(values.buffers()[1], dtype=dtype, count=len(column) * size, offset=first * dtype.itemsize)


def _type_of(value_type: Any) -> str:
    import pyarrow as pa

    if pa.types.is_float16(value_type):
        return "float16"
    if pa.types.is_int8(value_type):
        return "int8"
    if pa.types.is_uint8(value_type):
        return "binary"
    return "float32"


def parquet_dictionary(schema: Any) -> list[str]:
    """Parquet columns to dictionary-encode beside `path`: int8 codes and packed bits. Parquet has
    no 8-bit type, so they are written as INT32; a dictionary of their <= 256 values brings them back
    to about a byte a value (100k x 384 int8: 385 bytes a row against 766, written as fast, read
    2.5x faster; binary 48 against 103)."""
    import pyarrow as pa

    index = schema.get_field_index("embedding")
    if index < 0 or not pa.types.is_fixed_size_list(schema.field(index).type):
        return []
    value = schema.field(index).type.value_type
    return ["embedding.list.element"] if pa.types.is_int8(value) or pa.types.is_uint8(value) else []
