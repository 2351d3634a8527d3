"""Sparse lexical vectors (`gpucli embed --sparse bm25`) and their scoring in `gpucli search`.

Each chunk gets BM25 term weights over the model's own tokenizer vocabulary: its terms are the
token ids embed already has (the window's ids, never re-tokenized), less special tokens ([UNK],
[CLS]...) and tokens of pure punctuation or white space ("-", "(", ",", a lone "Ġ" or "▁"; the
subword markers "##", "Ġ", "▁" and byte-level BPE's newline and tab are stripped before looking).
Symbols stay terms ("+" of "C++", "€"). The weight of term t with tf occurrences in a chunk of
len kept tokens is

    w(t) = tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl)),   k1 = 1.2, b = 0.75, avgdl = 256

The IDF is left to the engine that sees the whole corpus: Qdrant's `Modifier.IDF` on the
sparse vector, and `gpucli search` over Parquet or JSON lines counts the document frequency of the
query's terms over the rows it scans, with Qdrant's formula idf = ln((N - df + 0.5) / (df + 0.5) + 1)
(N: rows with a sparse vector). A query weighs each distinct term 1, as Qdrant and fastembed do,
so a chunk scores sum over the query's terms of idf(t) * w(t): BM25 itself.

Where gpucli differs from fastembed's `Qdrant/bm25` (the weighting Qdrant documents):
- terms are the embedding model's token ids, not murmur3 hashes of stemmed words with stop words
  removed: no stemmer or stop-word list per language, any language the tokenizer reads, and the
  query is cut exactly as the documents were. A rare code ("ZX-4471Q") is several subword terms,
  each rare, so it still stands out; common words weigh little once the IDF is applied.
- avgdl is fixed at 256, fastembed's default, but counted in model tokens after the skips above
  (fastembed counts words). A run cannot know the corpus' average length (an incremental run sees
  a few files; rows must not change when others are added), so it is a constant, recorded in the
  output's metadata (`gpucli.sparse`) and so in its fingerprint: rows made with another never mix.
  Chunks are at most the model's window (254 tokens for all-MiniLM-L6-v2), so long documents'
  chunks sit near avgdl and one-sentence files are short ones, as BM25 means.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

import numpy as np

K1 = 1.2
B = 0.75
AVGDL = 256.0
DESCRIPTION = f"bm25 k1={K1} b={B} avgdl={AVGDL:g} terms=tokenizer-ids"  # gpucli.sparse in the metadata
MARKERS = ("##", "Ġ", "Ċ", "ĉ", "▁")  # WordPiece "##"; byte-level BPE space, newline, tab; SentencePiece space


def arrow_type() -> Any:
    """The `sparse` column: struct<indices: list<int32>, values: list<float32>> (indices ascending)."""
    import pyarrow as pa

    return pa.struct([("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float32()))])


def bm25_weights(tf: np.ndarray, length: np.ndarray) -> np.ndarray:
    """BM25's term-frequency part (module docstring), element-wise: tf of a term, length of its chunk."""
    tf = np.asarray(tf, dtype=np.float64)
    norm = K1 * (1.0 - B + B * np.asarray(length, dtype=np.float64) / AVGDL)
    return tf * (K1 + 1.0) / (tf + norm)


def idf(df: np.ndarray, n: int) -> np.ndarray:
    """Qdrant's IDF (its `Modifier.IDF`), so that Parquet, JSON lines and Qdrant score alike."""
    df = np.asarray(df, dtype=np.float64)
    return np.log((n - df + 0.5) / (df + 0.5) + 1.0)


def skipped_token(token: str) -> bool:
    """Whether a vocabulary entry carries no term: nothing but punctuation and white space once the
    subword markers are stripped."""
    for marker in MARKERS:
        token = token.replace(marker, "")
    return all(unicodedata.category(c).startswith(("P", "Z")) or c.isspace() for c in token)


class Terms:
    """A tokenizer's vocabulary as terms: which ids are skipped, as one boolean array."""

    def __init__(self, tokenizer: Any) -> None:
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self.skip = np.zeros(max(vocab.values(), default=0) + 1, dtype=bool)
        for token, token_id in vocab.items():
            if skipped_token(token):
                self.skip[token_id] = True
        for token_id, added in tokenizer.get_added_tokens_decoder().items():
            if added.special and token_id < len(self.skip):
                self.skip[token_id] = True

    def kept(self, ids: np.ndarray) -> np.ndarray:
        """Where `ids` are terms (ids beyond the vocabulary's, which a tokenizer never makes, are)."""
        ids = np.asarray(ids, dtype=np.int64)
        inside = ids < len(self.skip)
        keep = np.ones(len(ids), dtype=bool)
        keep[inside] = ~self.skip[ids[inside]]
        return keep

    def query(self, ids: np.ndarray) -> np.ndarray:
        """A query's distinct terms, ascending (each weighs 1)."""
        ids = np.asarray(ids, dtype=np.int64)
        return np.unique(ids[self.kept(ids)])

    def weigh(self, rows: Any) -> dict[str, np.ndarray]:
        """Every row's (chunk's) sparse vector, for a block of token windows (`records.Ragged`):
        two row columns, `sparse_indices` (int32) and `sparse_values` (float32), one array per row.
        Numpy over the whole block; a loop per row only to hand each its slice."""
        n = len(rows)
        compact = rows.compact() if n else rows
        ids = np.asarray(compact.values, dtype=np.int64)
        row_of = np.repeat(np.arange(n, dtype=np.int64), compact.lengths)
        keep = self.kept(ids)
        ids, row_of = ids[keep], row_of[keep]
        length = np.bincount(row_of, minlength=n)
        width = int(max(len(self.skip), int(ids.max()) + 1 if len(ids) else 0))
        keys, tf = np.unique(row_of * width + ids, return_counts=True)
        row, term = np.divmod(keys, width)
        values = bm25_weights(tf, length[row]).astype(np.float32)
        term = term.astype(np.int32)
        bounds = np.searchsorted(row, np.arange(n + 1))
        indices_column = np.empty(n, dtype=object)
        values_column = np.empty(n, dtype=object)
        for i in range(n):
            indices_column[i] = term[bounds[i]:bounds[i + 1]]
            values_column[i] = values[bounds[i]:bounds[i + 1]]
        return {"sparse_indices": indices_column, "sparse_values": values_column}


def column(indices: np.ndarray, values: np.ndarray) -> Any:
    """The `sparse` Arrow column of a batch's rows, from the two row columns `Terms.weigh` made."""
    import pyarrow as pa

    lengths = np.fromiter((len(a) for a in indices), dtype=np.int64, count=len(indices))
    offsets = np.zeros(len(indices) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat_indices = np.concatenate([*indices, np.empty(0, dtype=np.int32)]).astype(np.int32)
    flat_values = np.concatenate([*values, np.empty(0, dtype=np.float32)]).astype(np.float32)
    offsets = pa.array(offsets, pa.int32())
    return pa.StructArray.from_arrays([pa.ListArray.from_arrays(offsets, pa.array(flat_indices, pa.int32())),
                                       pa.ListArray.from_arrays(offsets, pa.array(flat_values, pa.float32()))],
                                      fields=list(arrow_type()))


# --- search: the query's terms against a batch's sparse column ----------------------------------------------
def matches(sparse: Any, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(row, position of the term in `terms`, stored weight) of every query term a row holds, and
    how many rows have a sparse vector (null rows have none), for a batch's `sparse` column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(sparse, pa.ChunkedArray):
        sparse = sparse.combine_chunks()
    indices, values = sparse.flatten()  # the children as the rows see them (offset and nulls applied)
    parents = pc.list_parent_indices(indices).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(indices).to_numpy(zero_copy_only=False).astype(np.int64)
    weights = pc.list_flatten(values).to_numpy(zero_copy_only=False)
    position = np.searchsorted(terms, flat)
    found = position < len(terms)
    found[found] = terms[position[found]] == flat[found]
    return parents[found], position[found], weights[found], len(sparse) - sparse.null_count


class DocumentFrequencies:
    """The first pass of a sparse search: df of each query term and N, over every batch scanned."""

    def __init__(self, terms: np.ndarray) -> None:
        self.terms = terms
        self.df = np.zeros(len(terms), dtype=np.int64)
        self.n = 0

    def count(self, sparse: Any) -> None:
        _, position, _, n = matches(sparse, self.terms)
        self.df += np.bincount(position, minlength=len(self.terms))
        self.n += n

    def scorer(self) -> Scorer:
        return Scorer(self.terms, idf(self.df, self.n))


class Scorer:
    """The second pass: each row's BM25 score; rows holding none of the query's terms get -inf
    (never a hit, as Qdrant returns only points that share a term with the query)."""

    def __init__(self, terms: np.ndarray, weights: np.ndarray) -> None:
        self.terms, self.weights = terms, weights

    def scores(self, sparse: Any) -> np.ndarray:
        row, position, stored, _ = matches(sparse, self.terms)
        scores = np.bincount(row, weights=stored * self.weights[position], minlength=len(sparse))
        scores[np.bincount(row, minlength=len(sparse)) == 0] = -math.inf
        return scores


# --- hybrid: reciprocal rank fusion ---------------------------------------------------------------------
RRF_K = 60  # score = sum over the lists of 1 / (RRF_K + rank), rank from 1 (Cormack et al., 2009)


def hybrid_depth(k: int) -> int:
    """How many hits of each list (dense, sparse) are fused for a top k."""
    return max(5 * k, 50)


def fuse(lists: list[list[Any]], k: int, key: Any) -> list[tuple[float, Any]]:
    """Reciprocal rank fusion of ranked lists: (score, first item seen for its key), best k first."""
    scores: dict[Any, float] = {}
    first: dict[Any, Any] = {}
    for ranked in lists:
        for rank, item in enumerate(ranked, 1):
            scores[key(item)] = scores.get(key(item), 0.0) + 1.0 / (RRF_K + rank)
            first.setdefault(key(item), item)
    best = sorted(scores, key=lambda name: (-scores[name], name))[:k]
    return [(scores[name], first[name]) for name in best]
