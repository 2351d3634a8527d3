"""A Qdrant collection (a server, or embedded mode on disk), searched by Qdrant itself with
`query_points`: dense, sparse with Qdrant's IDF modifier, or both prefetched and fused by RRF.
The model and query prompt are the collection's metadata, else the `model` payload of a point."""

from __future__ import annotations

from typing import Any

from gpucli.commands.search.hits import Hit, fused
from gpucli.commands.search.stored import number
from gpucli.core.errors import GpucliError, RunFailedError, UsageError
from gpucli.core.notes import note
from gpucli.output.sinks.qdrant import SPARSE_VECTOR, Connection, parse_target, vector_params


class QdrantIndex:
    def __init__(self, where: str) -> None:
        self.target = parse_target(where)
        self.display = self.target.display
        self.rows_scanned = None
        self.conn = Connection(self.target)
        for moved in self.conn.notices:  # a collection an earlier gpucli wrote in local mode, now on Qdrant Edge
            note(moved)
        try:
            self._describe()
        except BaseException:
            self.conn.close()
            raise

    def _describe(self) -> None:
        from gpucli.output.sinks.qdrant.vector_types import search_params

        client, name = self.conn.client, self.target.collection
        if not self.conn.call("checking the collection", lambda: client.collection_exists(name)):
            raise UsageError(f"--in {self.display}: no such collection")
        info = self.conn.call("reading the collection", lambda: client.get_collection(name))
        self.dims, _ = vector_params(info, self.display)
        self.sparse = SPARSE_VECTOR in (info.config.params.sparse_vectors or {})  # --sparse bm25 (issue 30)
        metadata = getattr(info.config, "metadata", None) or {}
        self.model = metadata.get("gpucli.model", "")
        self.query_prompt = metadata.get("gpucli.query_prompt")  # None: not recorded (older output)
        self.truncate_dims = number(metadata.get("gpucli.truncate_dims"))
        # int8, binary (issue 30): Qdrant rescores with the originals, embedded (Qdrant Edge) too
        self.search_params = search_params(metadata.get("gpucli.vector_type", ""))
        if not self.model:  # a collection made by hand or by an older server: ask a point
            points, _ = self.conn.call("reading a point", lambda: client.scroll(name, limit=1, with_payload=["model"]))
            self.model = (points[0].payload or {}).get("model", "") if points else ""
        if not self.model:
            raise UsageError(f"--in {self.display}: not a gpucli embed output (no model in its metadata or "
                             "payloads)" + ("; the collection is empty" if info.points_count == 0 else ""))

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        client, name = self.conn.client, self.target.collection
        response = self.conn.call("searching", lambda: client.query_points(
            name, query=vector.tolist(), limit=k, with_payload=True, search_params=self.search_params))
        return _hits(response)

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        """BM25: the collection's sparse vectors against the query's terms, with Qdrant's IDF modifier."""
        client, name = self.conn.client, self.target.collection
        response = self.conn.call("searching", lambda: client.query_points(
            name, query=_sparse_query(terms), using=SPARSE_VECTOR, limit=k, with_payload=True))
        return _hits(response)

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        """Both lists prefetched and fused by Qdrant (RRF with its k = 61: Qdrant's rank counts from
        0, so its 1 / (k + rank0) is gpucli's 1 / (60 + rank)). A server that refuses a parametrised
        RRF (an older version) gets the two queries and gpucli's own fusion."""
        from qdrant_client import models

        from gpucli.tasks._sparse import RRF_K, hybrid_depth

        client, name, depth = self.conn.client, self.target.collection, hybrid_depth(k)
        prefetch = [models.Prefetch(query=vector.tolist(), limit=depth),
                    models.Prefetch(query=_sparse_query(terms), using=SPARSE_VECTOR, limit=depth)]
        try:
            response = self.conn.call("searching", lambda: client.query_points(
                name, prefetch=prefetch, query=models.RrfQuery(rrf=models.Rrf(k=RRF_K + 1)), limit=k,
                with_payload=True))
        except RunFailedError:
            raise
        except GpucliError:
            if self.target.local:
                raise
            return fused([self.nearest(vector, depth), self.lexical(terms, depth)], k)
        return _hits(response)

    def close(self) -> None:
        self.conn.close()


def _hits(response: Any) -> list[Hit]:
    hits = []
    for point in response.points:
        p = point.payload or {}
        hits.append(Hit(float(point.score), str(p.get("path", "")), int(p.get("chunk") or 0),
                        str(p.get("text") or ""), p.get("char_start"), p.get("char_end"), p.get("page"),
                        p.get("modality")))
    return hits


def _sparse_query(terms: Any) -> Any:
    """The query's terms as Qdrant's sparse vector, each weighing 1 (as fastembed's BM25 queries)."""
    from qdrant_client import models

    return models.SparseVector(indices=[int(t) for t in terms], values=[1.0] * len(terms))
