"""gpucli/core/vectors.py: each stored type's encoding and its reading back, no processes, no model."""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpucli.core.vectors import (
    INT8_KEY,
    LEDGER_KEY,
    Int8Scale,
    Reading,
    Stored,
    bytes_per_vector,
    calibrate,
    dequantize,
    flat_values,
    hamming,
    pack_bits,
    parquet_dictionary,
    quantize,
)


def unit_rows(n: int, dims: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dims)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


class FakeLedger:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def meta(self, key: str) -> str | None:
        return self.values.get(key)

    def set_meta(self, key: str, value: str) -> None:
        self.values[key] = value


def through_parquet(table: pa.Table) -> pa.Table:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return pq.read_table(io.BytesIO(buffer.getvalue()))


def stored_table(stored: Stored, matrix: np.ndarray) -> pa.Table:
    return stored.tag(pa.table({"chunk": pa.array(range(len(matrix)), pa.int32()),
                                "embedding": stored.column(matrix)}))


@pytest.mark.parametrize("vector_type, value", [("float32", pa.float32()), ("float16", pa.float16()),
                                                 ("int8", pa.int8()), ("binary", pa.uint8())])
def test_each_type_has_its_arrow_field_type_and_width(vector_type, value):
    stored = Stored(vector_type, 20)
    assert stored.field_type() == pa.list_(value, 3 if vector_type == "binary" else 20)


def test_bytes_per_vector_of_384_dims():
    assert [bytes_per_vector(t, 384) for t in ("float32", "float16", "int8", "binary")] == [1536, 768, 384, 48]


def test_float16_round_trips_through_parquet_to_the_nearest_half_float():
    matrix = unit_rows(5, 16)
    table = through_parquet(stored_table(Stored("float16", 16), matrix))
    assert table.schema.field("embedding").type == pa.list_(pa.float16(), 16)
    back = Reading.of({"gpucli.dims": "16"}, table.schema.field("embedding")).from_column(table.column("embedding"))
    np.testing.assert_array_equal(back, matrix.astype(np.float16).astype(np.float32))


def test_int8_codes_read_back_within_half_a_step_per_dimension():
    matrix = unit_rows(200, 32)
    scale = calibrate(matrix)
    codes = quantize(matrix, scale)
    assert codes.dtype == np.int8 and np.abs(codes).max() <= 127
    assert np.all(np.abs(dequantize(codes, scale) - matrix) <= scale.scale / 2 + 1e-7)


def test_int8_calibration_leaves_room_for_later_vectors_and_clips_beyond():
    scale = calibrate(np.array([[-0.1, 0.0], [0.1, 0.2]] * 32, np.float32))  # 64 rows: a range per dimension
    np.testing.assert_allclose(scale.offset, [0.0, 0.1])
    np.testing.assert_allclose(scale.scale * 127, [0.2, 0.2])  # twice the half-range: MARGIN
    assert quantize(np.array([[0.2, 0.15], [5.0, -5.0]], np.float32), scale).tolist() == [[127, 32], [127, -127]]


def test_int8_calibration_of_a_small_first_batch_is_one_symmetric_scale():
    scale = calibrate(np.array([[0.5, -0.25]], np.float32))  # too few rows for a range per dimension
    np.testing.assert_array_equal(scale.offset, [0, 0])
    np.testing.assert_allclose(scale.scale * 127, [1.0, 1.0])  # MARGIN x the largest magnitude
    np.testing.assert_allclose(dequantize(quantize(np.array([[0.5, -0.25]]), scale), scale), [[0.5, -0.25]], atol=1e-2)


def test_int8_calibration_is_made_once_from_the_first_batch_and_kept_in_the_ledger():
    ledger = FakeLedger()
    first, second = unit_rows(64, 8, seed=1), unit_rows(64, 8, seed=2)
    stored = Stored("int8", 8, ledger=lambda: ledger)
    stored.column(first)
    kept = ledger.values[LEDGER_KEY]
    stored.column(second)
    assert ledger.values[LEDGER_KEY] == kept
    np.testing.assert_array_equal(Int8Scale.from_json(kept).scale, calibrate(first).scale)


def test_a_later_run_uses_the_calibration_its_ledger_kept_not_its_own_data():
    ledger = FakeLedger()
    Stored("int8", 8, ledger=lambda: ledger).column(unit_rows(64, 8, seed=1))
    later = Stored("int8", 8, ledger=lambda: ledger)
    table = stored_table(later, unit_rows(3, 8, seed=9))
    assert table.schema.field("embedding").metadata[INT8_KEY.encode()].decode() == ledger.values[LEDGER_KEY]


def test_int8_round_trips_through_parquet_with_its_calibration_in_the_field_metadata():
    matrix = unit_rows(50, 24)
    table = through_parquet(stored_table(Stored("int8", 24), matrix))
    field = table.schema.field("embedding")
    assert field.type == pa.list_(pa.int8(), 24) and INT8_KEY.encode() in field.metadata
    back = Reading.of({"gpucli.vector_type": "int8", "gpucli.dims": "24"}, field).from_column(table.column("embedding"))
    assert np.abs(back - matrix).max() < 0.02


def test_int8_without_a_calibration_cannot_be_read():
    with pytest.raises(ValueError, match="calibration"):
        Reading.of({"gpucli.vector_type": "int8", "gpucli.dims": "4"})


def test_binary_packs_one_bit_per_dimension_in_numpy_packbits_order():
    # dimension 0 is the first byte's highest bit; the last byte is padded with zero bits
    row = np.array([[0.3, -0.1, 0.0, 0.2, -1, -1, -1, 0.5, 0.9, -0.2]], np.float32)
    assert pack_bits(row).tolist() == [[0b10010001, 0b10000000]]


def test_binary_round_trips_through_parquet_and_scores_by_hamming_distance():
    matrix = unit_rows(20, 16)
    table = through_parquet(stored_table(Stored("binary", 16), matrix))
    reading = Reading.of({"gpucli.vector_type": "binary", "gpucli.dims": "16"}, table.schema.field("embedding"))
    packed = reading.from_column(table.column("embedding"))
    np.testing.assert_array_equal(packed, pack_bits(matrix))
    scores = reading.scores(packed, matrix[7])
    assert scores[7] == 1.0 and int(np.argmax(scores)) == 7
    np.testing.assert_allclose(scores, 1 - 2 * hamming(packed, pack_bits(matrix[7])) / 16)


def test_hamming_counts_differing_bits():
    assert hamming(np.array([[0b1111_0000, 0b1]], np.uint8), np.array([0b0000_0000, 0b11], np.uint8)).tolist() == [5]


@pytest.mark.parametrize("vector_type", ["float32", "float16", "int8"])
def test_each_float_like_type_ranks_a_rows_own_vector_first(vector_type):
    matrix = unit_rows(100, 32)
    table = through_parquet(stored_table(Stored(vector_type, 32), matrix))
    reading = Reading.of({"gpucli.vector_type": vector_type, "gpucli.dims": "32"}, table.schema.field("embedding"))
    values = reading.from_column(table.column("embedding"))
    assert all(int(np.argmax(reading.scores(values, matrix[i]))) == i for i in range(0, 100, 9))


@pytest.mark.parametrize("value", [pa.float32(), pa.float16(), pa.int8(), pa.uint8()])
def test_flat_values_are_the_vectors_of_a_slice_as_pyarrow_gives_them(value):
    """Read from arrow's buffer without to_numpy (which imports pandas): a batch sliced out of a
    larger one starts at its own first vector, not the buffer's, in the column's own type."""
    matrix = (np.arange(60).reshape(12, 5) % 100).astype(value.to_pandas_dtype())
    column = pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel(), value), 5)
    shifted = pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel(), value).slice(5), 5)  # the values' own offset
    for piece in (column, column.slice(3, 4), pa.RecordBatch.from_arrays([column], ["e"]).slice(7).column(0),
                  shifted, shifted.slice(2)):
        got = flat_values(piece)
        assert got.dtype == matrix.dtype
        np.testing.assert_array_equal(got, piece.flatten().to_numpy(zero_copy_only=False))


def test_flat_values_of_a_vector_with_a_missing_value_or_of_variable_lists_are_as_pyarrow_gives_them():
    column = pa.FixedSizeListArray.from_arrays(pa.array([1.0, None, 3.0, 4.0], pa.float32()), 2)
    got = flat_values(column)
    assert got[0] == 1 and np.isnan(got[1]) and got[2:].tolist() == [3, 4]
    lists = pa.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], pa.list_(pa.float32())).slice(1)
    assert flat_values(lists).tolist() == [3, 4, 5, 6]


def test_a_qdrant_output_keeps_float32_rows_but_names_its_type():
    stored = Stored("binary", 8, keeps_floats=True)
    assert stored.field_type() == pa.list_(pa.float32(), 8)
    assert stored.info() == {"gpucli.vector_type": "binary"}
    assert Stored("float32", 8).info() == {}  # outputs made before --vector-type keep their metadata


def test_an_unknown_type_is_refused():
    with pytest.raises(ValueError, match="--vector-type"):
        Stored("int4", 8)


@pytest.mark.parametrize("vector_type, most", [("int8", 1.05 * 384), ("binary", 1.05 * 48)])
def test_int8_and_bits_are_dictionary_encoded_to_about_a_byte_a_value_in_parquet(vector_type, most):
    table = pa.table({"embedding": Stored(vector_type, 384).column(unit_rows(2000, 384))})
    assert parquet_dictionary(table.schema) == ["embedding.list.element"]
    buffer = io.BytesIO()
    pq.write_table(table, buffer, use_dictionary=parquet_dictionary(table.schema))
    assert pq.ParquetFile(io.BytesIO(buffer.getvalue())).metadata.row_group(0).column(0).total_compressed_size < most * 2000
    assert parquet_dictionary(pa.table({"embedding": Stored("float16", 8).column(unit_rows(2, 8))}).schema) == []


@pytest.mark.parametrize("vector_type", ["float32", "float16", "int8", "binary"])
def test_qdrant_params_make_a_collection_that_reports_its_type_back(vector_type):
    """A server's `VectorParams` and Qdrant Edge's configuration, made for each type, read back as it."""
    from qdrant_client import models

    import gpucli.output.sinks.qdrant.edge.models as edge_models
    from gpucli.output.sinks.qdrant.protocol import NewCollection
    from gpucli.output.sinks.qdrant.server import _vector_storage
    from gpucli.output.sinks.qdrant.vector_types import oversampling, storage, stored_type

    vectors = models.VectorParams(size=8, distance=models.Distance.COSINE, **_vector_storage(storage(vector_type)))
    datatype = getattr(vectors.datatype, "value", None)
    kind = next((k for k in ("scalar", "binary") if getattr(vectors.quantization_config, k, None) is not None), None)
    assert stored_type(datatype, kind) == vector_type
    vectors_json = json.dumps({"vectors": {"": vectors.model_dump(mode="json", exclude_none=True)}})  # Qdrant's JSON
    edge_config = json.loads(vectors_json)
    assert edge_models.described(edge_config, {}, 0).vector_type == vector_type, vectors_json
    assert edge_models.config(NewCollection(8, vector_type=vector_type), 1024) is not None
    assert (oversampling(vector_type) is not None) == (vector_type in ("int8", "binary"))
