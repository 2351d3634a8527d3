"""A Qdrant collection (a server, or embedded mode on disk), searched by Qdrant itself: dense,
sparse with Qdrant's IDF modifier, or both prefetched and fused by RRF. The model and query
prompt are the collection's metadata, else the `model` payload of a point. An embedded
collection is searched without importing qdrant-client (gpucli/output/sinks/qdrant/edge/)."""

from __future__ import annotations

from typing import Any

from gpucli.commands.search.hits import Hit, fused
from gpucli.commands.search.stored import number
from gpucli.core.errors import GpucliError, RunFailedError, UsageError
from gpucli.core.notes import note
from gpucli.output.sinks.qdrant import (
    SPARSE_VECTOR,
    Found,
    Hybrid,
    Lexical,
    Nearest,
    SparseVector,
    connect,
    parse_target,
)
from gpucli.output.sinks.qdrant.vector_types import oversampling


class QdrantIndex:
    def __init__(self, where: str) -> None:
        self.target = parse_target(where)
        self.display = self.target.display
        self.rows_scanned = None
        self.client = connect(self.target)
        for moved in self.client.notices:  # a collection an earlier gpucli wrote in local mode, now on Qdrant Edge
            note(moved)
        try:
            self._describe()
        except BaseException:
            self.client.close()
            raise

    def _describe(self) -> None:
        if not self.client.exists():
            raise UsageError(f"--in {self.display}: no such collection")
        info = self.client.describe()
        self.dims = info.size(self.display)
        self.sparse = SPARSE_VECTOR in info.sparse  # --sparse bm25
        self.model = info.metadata.get("gpucli.model", "")
        self.query_prompt = info.metadata.get("gpucli.query_prompt")  # None: not recorded (older output)
        self.truncate_dims = number(info.metadata.get("gpucli.truncate_dims"))
        # int8, binary: Qdrant rescores with the originals, embedded (Qdrant Edge) too
        self.oversampling = oversampling(info.metadata.get("gpucli.vector_type", ""))
        if not self.model:  # a collection made by hand or by an older server: ask a point
            self.model = (self.client.sample_payload(["model"]) or {}).get("model", "")
        if not self.model:
            raise UsageError(f"--in {self.display}: not a gpucli embed output (no model in its metadata or "
                             "payloads)" + ("; the collection is empty" if info.points == 0 else ""))

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        return _hits(self.client.search(Nearest(vector.tolist(), k, self.oversampling)))

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        """BM25: the collection's sparse vectors against the query's terms, with Qdrant's IDF modifier."""
        return _hits(self.client.search(Lexical(_terms(terms), k)))

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        """Both lists prefetched and fused by Qdrant (RRF with its k = 61: Qdrant's rank counts from
        0, so its 1 / (k + rank0) is gpucli's 1 / (60 + rank)). A server that refuses a parametrised
        RRF (an older version) gets the two queries and gpucli's own fusion."""
        from gpucli.tasks.text.sparse import RRF_K, hybrid_depth

        depth = hybrid_depth(k)
        try:
            return _hits(self.client.search(Hybrid(vector.tolist(), _terms(terms), k, depth, RRF_K + 1)))
        except RunFailedError:
            raise
        except GpucliError:
            if self.target.local:
                raise
            return fused([self.nearest(vector, depth), self.lexical(terms, depth)], k)

    def close(self) -> None:
        self.client.close()


def _hits(found: list[Found]) -> list[Hit]:
    hits = []
    for point in found:
        p = point.payload
        hits.append(Hit(point.score, str(p.get("path", "")), int(p.get("chunk") or 0), str(p.get("text") or ""),
                        p.get("char_start"), p.get("char_end"), p.get("page"), p.get("modality")))
    return hits


def _terms(terms: Any) -> SparseVector:
    """The query's terms as a sparse vector, each weighing 1 (as fastembed's BM25 queries)."""
    return SparseVector([int(t) for t in terms], [1.0] * len(terms))
