"""A Qdrant server's collection, through qdrant-client: gpucli's calls (protocol.py) as
qdrant-client's models, every call retried within a budget (retry.py).

qdrant-client is imported here only, when a `qdrant://` output or search opens: the embedded
mode (edge/) never imports it.
"""

from __future__ import annotations

import os
import warnings
from typing import Any
from urllib.parse import urlsplit

from gpucli.core.errors import GpucliError
from gpucli.core.keys import ID_COLUMN
from gpucli.output.sinks.qdrant.points import as_points
from gpucli.output.sinks.qdrant.protocol import (
    SPARSE_VECTOR,
    Described,
    Found,
    Hybrid,
    Lexical,
    Nearest,
    NewCollection,
    Rows,
    Search,
    Selection,
    SparseVector,
)
from gpucli.output.sinks.qdrant.retry import Retry, call_with_retries
from gpucli.output.sinks.qdrant.target import API_KEY_ENV, Target
from gpucli.output.sinks.qdrant.vector_types import Storage, stored_type
from gpucli.output.sinks.qdrant.vector_types import storage as vector_storage


class ServerClient:
    """One collection on a server (sync QdrantClient, calls made one at a time: the writer
    awaits each, possibly from different threads of asyncio's pool)."""

    def __init__(self, target: Target, retry: Retry | None = None) -> None:
        from qdrant_client import QdrantClient

        self.target = target
        self.retry = retry or Retry.from_env()
        self.notices: list[str] = []
        key = os.environ.get(API_KEY_ENV) or None
        with warnings.catch_warnings():
            if urlsplit(target.url).hostname in ("localhost", "127.0.0.1", "::1"):  # plain http is fine here
                warnings.filterwarnings("ignore", message="Api key is used with an insecure connection")
            self.client = QdrantClient(url=target.url, api_key=key, timeout=max(1, round(self.retry.timeout_s)),
                                       check_compatibility=False)

    def _call(self, what: str, fn: Any) -> Any:
        return call_with_retries(self.target, self.retry, what, fn)

    @property
    def _name(self) -> str:
        return self.target.collection

    # --- the collection ------------------------------------------------------------------------
    def exists(self) -> bool:
        return self._call("checking the collection", lambda: self.client.collection_exists(self._name))

    def describe(self) -> Described:
        info = self._call("reading the collection", lambda: self.client.get_collection(self._name))
        vectors = info.config.params.vectors
        named = tuple(vectors or {}) if isinstance(vectors, dict) or vectors is None else ()
        quantization = getattr(vectors, "quantization_config", None) or getattr(info.config, "quantization_config",
                                                                                None)
        kind = next((k for k in ("scalar", "binary") if getattr(quantization, k, None) is not None), None)
        datatype = getattr(getattr(vectors, "datatype", None), "value", None)
        return Described(dims=0 if named or vectors is None else int(vectors.size),
                         distance="" if named or vectors is None else str(getattr(vectors.distance, "value",
                                                                                  vectors.distance)),
                         named=named, sparse=tuple(info.config.params.sparse_vectors or {}),
                         vector_type=stored_type(datatype, kind),
                         metadata=dict(getattr(info.config, "metadata", None) or {}),
                         points=int(info.points_count or 0))

    def create(self, new: NewCollection) -> None:
        from qdrant_client import models

        vectors = models.VectorParams(size=new.dims, distance=models.Distance.COSINE,
                                      **_vector_storage(vector_storage(new.vector_type)))
        # --sparse bm25 (issue 30): BM25's IDF is Qdrant's, from the collection (tasks/text/sparse.py)
        sparse = {SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)} if new.sparse else None
        try:
            self._call("creating the collection", lambda: self.client.create_collection(
                self._name, vectors_config=vectors, sparse_vectors_config=sparse, metadata=new.metadata))
        except GpucliError as exc:
            if "metadata" not in str(exc) and "unknown field" not in str(exc):
                raise
            # a server older than collection metadata (1.16): the points' `model` payload suffices
            self._call("creating the collection", lambda: self.client.create_collection(
                self._name, vectors_config=vectors, sparse_vectors_config=sparse))
        # a keyword index on path keeps the stale-chunk and prune deletes cheap
        self._call("indexing path", lambda: self.client.create_payload_index(
            self._name, "path", models.PayloadSchemaType.KEYWORD, wait=True))

    def set_metadata(self, metadata: dict[str, str]) -> None:
        self._call("updating the collection", lambda: self.client.update_collection(self._name, metadata=metadata))

    def drop(self) -> None:
        self._call("recreating the collection", lambda: self.client.delete_collection(self._name))

    # --- points --------------------------------------------------------------------------------
    def upsert(self, rows: Rows) -> None:
        """In batches of `?batch=N` points, each acknowledged before the next."""
        from qdrant_client import models

        points, size = as_points(rows), self.target.batch
        for start in range(0, len(points), size):
            end = start + size
            dense = points.vectors[start:end].tolist()
            vectors: Any = dense if points.sparse is None else {
                "": dense, SPARSE_VECTOR: [_sparse(v) for v in points.sparse[start:end]]}
            batch = models.Batch(ids=points.ids[start:end], payloads=points.payloads[start:end], vectors=vectors)
            self._call("upsert", lambda b=batch: self.client.upsert(self._name, points=b, wait=True))

    def present(self, ids: list[str]) -> set[str]:
        found = self._call("checking for stale chunks", lambda: self.client.retrieve(
            self._name, ids=ids, with_payload=False, with_vectors=False))
        return {str(p.id) for p in found}

    def delete(self, selection: Selection) -> None:
        from qdrant_client import models

        selector = models.FilterSelector(filter=_filter(selection))
        self._call(selection.what, lambda: self.client.delete(self._name, points_selector=selector, wait=True))

    def search(self, search: Search) -> list[Found]:
        from qdrant_client import models

        match search:
            case Nearest(vector=vector, limit=limit, oversampling=oversampling):
                params = None if oversampling is None else models.SearchParams(
                    quantization=models.QuantizationSearchParams(rescore=True, oversampling=oversampling))
                kwargs: dict[str, Any] = {"query": vector, "limit": limit, "search_params": params}
            case Lexical(terms=terms, limit=limit):
                kwargs = {"query": _sparse(terms), "using": SPARSE_VECTOR, "limit": limit}
            case Hybrid(vector=vector, terms=terms, limit=limit, depth=depth, rrf_k=rrf_k):
                kwargs = {"prefetch": [models.Prefetch(query=vector, limit=depth),
                                       models.Prefetch(query=_sparse(terms), using=SPARSE_VECTOR, limit=depth)],
                          "query": models.RrfQuery(rrf=models.Rrf(k=rrf_k)), "limit": limit}
        response = self._call("searching", lambda: self.client.query_points(self._name, with_payload=True, **kwargs))
        return [Found(float(p.score), p.payload or {}) for p in response.points]

    def sample_payload(self, keys: list[str]) -> dict[str, Any] | None:
        found, _ = self._call("reading a point", lambda: self.client.scroll(self._name, limit=1, with_payload=keys))
        return (found[0].payload or {}) if found else None

    def flush(self) -> None:
        """Nothing to do: the server acknowledged each call (`wait=True`)."""

    def index(self) -> bool:
        """Nothing to do: a server builds its indexes itself."""
        return False

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing must not mask the run's own error
            pass


def _vector_storage(storage: Storage) -> dict[str, Any]:
    """`VectorParams` keywords beside size and distance for one --vector-type (vector_types.py)."""
    from qdrant_client import models

    kwargs: dict[str, Any] = {}
    if storage.datatype == "float16":
        kwargs["datatype"] = models.Datatype.FLOAT16
    if storage.on_disk is not None:
        kwargs["on_disk"] = storage.on_disk
    if storage.quantization == "int8":
        kwargs["quantization_config"] = models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(type=models.ScalarType.INT8, quantile=storage.quantile))
    elif storage.quantization == "binary":
        kwargs["quantization_config"] = models.BinaryQuantization(binary=models.BinaryQuantizationConfig())
    return kwargs


def _sparse(vector: SparseVector) -> Any:
    from qdrant_client import models

    return models.SparseVector(indices=vector.indices, values=vector.values)


def _filter(selection: Selection) -> Any:
    from qdrant_client import models

    def match(key: str, values: tuple[str, ...]) -> Any:
        matched = models.MatchValue(value=values[0]) if len(values) == 1 else models.MatchAny(any=list(values))
        return models.FieldCondition(key=key, match=matched)

    must: list[Any] = []
    if selection.paths:
        must.append(match("path", selection.paths))
    if selection.ids:
        must.append(match(ID_COLUMN, selection.ids))
    if selection.from_chunk is not None:
        must.append(models.FieldCondition(key="chunk", range=models.Range(gte=selection.from_chunk)))
    return models.Filter(must=must)
