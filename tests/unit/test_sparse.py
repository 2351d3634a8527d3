"""BM25 sparse vectors (tasks/text/sparse.py) without processes or models: the weights against a
hand-computed example, the skipped tokens, the Arrow column, IDF and scoring, and RRF."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from gpucli.core.records import Ragged
from gpucli.tasks.text import sparse
from gpucli.tasks.text.sparse import Terms


class AddedToken:
    def __init__(self, special: bool) -> None:
        self.special = special


class Vocab:
    """What Terms reads of a `tokenizers.Tokenizer`."""

    TOKENS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "the": 4, "pump": 5, "##x": 6, "-": 7, ",": 8,
              "Ġ": 9, "▁": 10, "+": 11, "##.": 12, "zx": 13, "44": 14}

    def get_vocab(self, with_added_tokens: bool = True) -> dict[str, int]:
        return dict(self.TOKENS)

    def get_added_tokens_decoder(self) -> dict[int, AddedToken]:
        return {i: AddedToken(True) for i in range(4)}


def test_special_punctuation_and_white_space_tokens_are_no_terms_but_symbols_and_subwords_are():
    terms = Terms(Vocab())
    assert sorted(np.flatnonzero(terms.skip)) == [0, 1, 2, 3, 7, 8, 9, 10, 12]
    assert terms.query(np.array([5, 4, 5, 7, 1, 11, 6])).tolist() == [4, 5, 6, 11]  # distinct, ascending


def test_weights_equal_a_hand_computed_bm25_example():
    # one chunk: "the pump , the zx ##x - 44" -> kept: the x2, pump, zx, ##x, 44 (len 6; "," and "-" skipped)
    # norm = k1 * (1 - b + b * len / avgdl) = 1.2 * (0.25 + 0.75 * 6 / 256) = 0.32109375
    # w(the) = 2 * 2.2 / (2 + 0.32109375) = 1.8956580;  w(once) = 2.2 / (1 + 0.32109375) = 1.6652868
    ids = np.array([4, 5, 8, 4, 13, 6, 7, 14], dtype=np.int32)
    meta = Terms(Vocab()).weigh(Ragged(ids, np.array([0]), np.array([8])))
    assert meta["sparse_indices"][0].tolist() == [4, 5, 6, 13, 14]
    assert meta["sparse_values"][0] == pytest.approx([1.8956580, 1.6652868, 1.6652868, 1.6652868, 1.6652868],
                                                     abs=1e-6)
    assert meta["sparse_values"][0].dtype == np.float32 and meta["sparse_indices"][0].dtype == np.int32


def test_each_window_of_a_block_is_weighed_by_its_own_tokens_and_length():
    ids = np.array([5, 5, 5, 4, 13, 8], dtype=np.int32)  # window 0: ids 0-3, window 1: ids 2-5 (overlap)
    meta = Terms(Vocab()).weigh(Ragged(ids, np.array([0, 2]), np.array([4, 4])))
    norm0, norm1 = (1.2 * (0.25 + 0.75 * n / 256) for n in (4, 3))
    assert meta["sparse_indices"][0].tolist() == [4, 5]
    assert meta["sparse_values"][0] == pytest.approx([2.2 / (1 + norm0), 3 * 2.2 / (3 + norm0)], rel=1e-6)
    assert meta["sparse_indices"][1].tolist() == [4, 5, 13]
    assert meta["sparse_values"][1] == pytest.approx([2.2 / (1 + norm1)] * 3, rel=1e-6)


def test_a_window_of_punctuation_only_has_an_empty_vector():
    meta = Terms(Vocab()).weigh(Ragged(np.array([7, 8, 7], dtype=np.int32), np.array([0]), np.array([3])))
    assert meta["sparse_indices"][0].tolist() == [] and meta["sparse_values"][0].tolist() == []


def test_the_column_is_a_struct_of_indices_and_values():
    meta = Terms(Vocab()).weigh(Ragged(np.array([5, 4, 7], dtype=np.int32), np.array([0, 2]), np.array([2, 1])))
    column = sparse.column(meta["sparse_indices"], meta["sparse_values"])
    assert column.type == sparse.arrow_type()
    rows = column.to_pylist()
    assert [row["indices"] for row in rows] == [[4, 5], []]
    assert sparse.column(np.empty(0, dtype=object), np.empty(0, dtype=object)).to_pylist() == []


def test_idf_is_qdrants():
    assert sparse.idf(np.array([1, 2]), 3) == pytest.approx([math.log(2.5 / 1.5 + 1), math.log(1.5 / 2.5 + 1)])


def test_scores_are_idf_times_stored_weights_over_a_sliced_batch_with_nulls():
    column = pa.array([{"indices": [1, 2], "values": [1.0, 0.5]}, None, {"indices": [2], "values": [1.0]},
                        {"indices": [3], "values": [2.0]}], sparse.arrow_type())
    terms = np.array([1, 2])
    frequencies = sparse.DocumentFrequencies(terms)
    frequencies.count(column)
    assert frequencies.df.tolist() == [1, 2] and frequencies.n == 3
    scores = frequencies.scorer().scores(column)
    idf1, idf2 = math.log(2.5 / 1.5 + 1), math.log(1.5 / 2.5 + 1)
    assert scores[0] == pytest.approx(idf1 + 0.5 * idf2) and scores[2] == pytest.approx(idf2)
    assert scores[1] == -math.inf and scores[3] == -math.inf  # no vector, no shared term: never a hit
    assert frequencies.scorer().scores(column.slice(2, 2)).tolist() == [pytest.approx(idf2), -math.inf]


def test_rrf_sums_one_over_60_plus_rank():
    fused = sparse.fuse([["a", "b", "c"], ["c", "a"]], 2, key=lambda name: name)
    assert fused == [(pytest.approx(1 / 61 + 1 / 62), "a"), (pytest.approx(1 / 63 + 1 / 61), "c")]
