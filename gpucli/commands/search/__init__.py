"""`gpucli search`: the chunks of an embed output nearest to a query, by cosine similarity.

The query is embedded in this process with the model the output names (query.py), on ONNX
Runtime where the model's graph is cached, else torch (runtime.py). A Parquet dataset (parquet.py,
parts.py) or a JSON lines file (jsonl.py) is scanned in batches with a running top-k (memory
bounded by one batch, whatever the output's size); a Qdrant collection is asked with
`query_points` (qdrant.py).

`--mode sparse` and `--mode hybrid` (an output made with `--sparse bm25`) score BM25 over
the rows' sparse vectors (tasks/text/sparse.py): the query's distinct terms, cut by the output's
model's tokenizer, each weighing 1. Over Parquet and JSON lines two passes: the document
frequency of the query's terms (memory: one counter per query term), then the scores; Qdrant
applies its IDF modifier itself. Hybrid fuses the dense and the sparse top lists by reciprocal
rank fusion, score = sum 1 / (60 + rank), in Qdrant by `query_points` with both prefetched.

    hits      Hit, SearchResult, the running top-k, the fusion, the Index every output offers
    stored    what an output says about itself in its ledger; how its vectors read back
    parquet   the Parquet index; parts: its part files, read without pyarrow.dataset
    jsonl     the JSON lines index
    qdrant    the Qdrant index
    postgres  a PostgreSQL table, searched by the server (pgvector)
    lance     a LanceDB table, searched by Lance
    query     the query's vector (words or an image) and its BM25 terms
    runtime   which runtime embeds the query
    printing  the hits on stdout, one line about the search on stderr

Here: the search itself, checked and timed, and the names `gpucli search`'s callers use.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpucli.commands.search.hits import Hit, Index, SearchResult
from gpucli.commands.search.jsonl import JsonlIndex
from gpucli.commands.search.parquet import ParquetIndex
from gpucli.commands.search.printing import render
from gpucli.commands.search.qdrant import QdrantIndex
from gpucli.commands.search.query import embed_image_query, embed_queries, embed_query, query_terms
from gpucli.core.errors import GpucliError, RunFailedError, UsageError
from gpucli.core.notes import library_notes
from gpucli.output.sinks.lancedb.target import is_lancedb
from gpucli.output.sinks.postgres.target import is_postgres
from gpucli.output.sinks.qdrant import is_qdrant

__all__ = ["MODES", "Hit", "JsonlIndex", "ParquetIndex", "QdrantIndex", "SearchResult", "embed_image_query",
           "embed_queries", "embed_query", "open_index", "query_terms", "render", "search"]

MODES = ("dense", "sparse", "hybrid")  # --mode


def search(where: str, query: str, k: int = 10, image: str = "", mode: str = "dense") -> SearchResult:
    """Open the output, embed the query with its model (the words of `query`, or the image file
    `image` for an output of an image-text model), and return the k nearest chunks. A server
    that stays unreachable is the search's failure (exit 1, `search --help`), not a run's (the
    sinks' RunFailedError, exit 3). A library's warning is one `gpucli: note:` line (notes.py)."""
    try:
        with library_notes():
            return _search(where, query, k, image, mode)
    except RunFailedError as exc:
        raise GpucliError(str(exc)) from None


def open_index(where: str) -> Index:
    if is_qdrant(where):
        return QdrantIndex(where)
    if is_postgres(where):
        from gpucli.commands.search.postgres import PostgresIndex  # psycopg: the postgres extra

        return PostgresIndex(where)
    if is_lancedb(where):
        from gpucli.commands.search.lance import LanceIndex  # lancedb: the lancedb extra

        return LanceIndex(where)
    if where.lower().endswith(".jsonl") and Path(where).is_file():
        return JsonlIndex(where)
    return ParquetIndex(where)


def _search(where: str, query: str, k: int, image: str = "", mode: str = "dense") -> SearchResult:
    _check_request(query, k, image, mode)
    data = _image_bytes(image) if image else b""
    index = open_index(where)
    try:
        if mode != "dense" and not index.sparse:
            raise UsageError(f"--mode {mode}: {index.display} holds no sparse vectors (it was made without "
                             "--sparse bm25); search it with --mode dense, or embed again with --sparse bm25 --full")
        t0 = time.perf_counter()
        vector = None if mode == "sparse" else _query_vector(index, query, image, data)
        terms = None if mode == "dense" else query_terms(index.model, query)  # --mode sparse, hybrid
        t1 = time.perf_counter()
        hits = _hits(index, mode, vector, terms, k)
        t2 = time.perf_counter()
    finally:
        index.close()
    return SearchResult(index.display, index.model, hits, index.rows_scanned, t1 - t0, t2 - t1)


def _check_request(query: str, k: int, image: str, mode: str) -> None:
    if k < 1:
        raise UsageError("-k must be at least 1")
    if mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}")
    if mode != "dense" and image:
        raise UsageError(f"--mode {mode} matches words; search by --image is dense only")
    if image and query.strip():
        raise UsageError("give a QUERY in words or --image FILE, not both")
    if not image and not query.strip():
        raise UsageError("the query is empty; give some words to look for (or --image FILE)")


def _query_vector(index: Index, query: str, image: str, data: bytes) -> Any:
    """The query's unit vector by the output's model, cut as the output's --dims cut its rows;
    a model that now makes vectors of another width than the output's is a usage error."""
    cut = {"dims": index.truncate_dims} if index.truncate_dims else {}  # --dims
    if image:
        vector = embed_image_query(index.model, data, image, **cut)
    else:
        vector = embed_queries(index.model, [query], index.query_prompt, **cut)[0]
    if vector.shape[0] != index.dims:
        raise UsageError(f"--in {index.display}: model {index.model!r} now makes {vector.shape[0]}-d vectors, "
                         f"but the output holds {index.dims}-d ones")
    return vector


def _hits(index: Index, mode: str, vector: Any, terms: Any, k: int) -> list[Hit]:
    if mode == "sparse":
        return index.lexical(terms, k)
    if mode == "hybrid":
        return index.hybrid(vector, terms, k)
    return index.nearest(vector, k)


def _image_bytes(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--image {path}: cannot read it ({exc.strerror or type(exc).__name__})") from None
