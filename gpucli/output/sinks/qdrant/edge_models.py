"""qdrant-client's models as Qdrant Edge's types, and Edge's answers as qdrant-client's models.

The sink, its deletes and `gpucli search` speak qdrant-client's models to a server and to the
embedded store alike (gpucli/output/sinks/qdrant/edge.py): only the few shapes they use are
translated here. Anything else raises TypeError: a new call site must add its translation,
never get a silent approximation.
"""

from __future__ import annotations

from typing import Any

# --- the collection's configuration ---------------------------------------------------------


def edge_vector_params(params: Any) -> Any:
    """A `models.VectorParams` (cosine, a datatype or a quantization: vector_types.py) as Edge's."""
    import qdrant_edge as edge
    from qdrant_client import models

    kwargs: dict[str, Any] = {}
    if params.datatype == models.Datatype.FLOAT16:
        kwargs["datatype"] = edge.VectorStorageDatatype.Float16
    if params.on_disk is not None:
        kwargs["on_disk"] = params.on_disk
    quantization = params.quantization_config
    if isinstance(quantization, models.ScalarQuantization):
        kwargs["quantization_config"] = edge.ScalarQuantizationConfig(
            type=edge.ScalarType.Int8, quantile=quantization.scalar.quantile)
    elif isinstance(quantization, models.BinaryQuantization):
        kwargs["quantization_config"] = edge.BinaryQuantizationConfig()
    elif quantization is not None:
        raise TypeError(f"no Qdrant Edge translation for {type(quantization).__name__}")
    return edge.EdgeVectorParams(size=params.size, distance=_distance(params.distance), **kwargs)


def edge_sparse_params(params: Any) -> Any:
    import qdrant_edge as edge
    from qdrant_client import models

    idf = params.modifier == models.Modifier.IDF
    return edge.EdgeSparseVectorParams(modifier=edge.Modifier.Idf if idf else None)


def _distance(distance: Any) -> Any:
    import qdrant_edge as edge

    name = str(getattr(distance, "value", distance))
    return {"Cosine": edge.Distance.Cosine, "Dot": edge.Distance.Dot, "Euclid": edge.Distance.Euclid,
            "Manhattan": edge.Distance.Manhattan}[name]


def client_params(config: dict) -> tuple[Any, dict[str, Any]]:
    """An Edge shard's `edge_config.json` (Qdrant's own JSON for its vectors) as qdrant-client's
    (VectorParams of the unnamed vector, or a dict of named ones; {name: SparseVectorParams})."""
    from qdrant_client import models

    vectors = {name: models.VectorParams(**raw) for name, raw in (config.get("vectors") or {}).items()}
    sparse = {name: models.SparseVectorParams(**raw) for name, raw in (config.get("sparse_vectors") or {}).items()}
    dense: Any = vectors[""] if set(vectors) == {""} else vectors
    return dense, sparse


# --- points, filters, queries ---------------------------------------------------------------


def edge_points(batch: Any) -> list[Any]:
    """A `models.Batch` (ids, payloads, dense vectors or {"": dense, name: sparse}) as Edge points."""
    import qdrant_edge as edge
    from qdrant_client import models

    if not isinstance(batch, models.Batch):
        raise TypeError(f"no Qdrant Edge translation for {type(batch).__name__}")
    vectors = batch.vectors
    payloads = batch.payloads or [None] * len(batch.ids)
    if isinstance(vectors, dict):
        columns = {name: [edge_vector(v) for v in values] for name, values in vectors.items()}
        rows: list[Any] = [{name: column[i] for name, column in columns.items()} for i in range(len(batch.ids))]
    else:
        rows = vectors
    return [edge.Point(edge_id(pid), vector, payload) for pid, vector, payload in zip(batch.ids, rows, payloads)]


def batch_bytes(batch: Any) -> int:
    """About what a `models.Batch` takes on disk: its dense vectors as float32, its sparse ones,
    its payloads as JSON (a generous estimate: it only decides whether there is room)."""
    import json

    vectors = batch.vectors
    columns = list(vectors.values()) if isinstance(vectors, dict) else [vectors]
    size = 0
    for column in columns:
        for vector in column:
            size += 8 * len(vector.indices) if hasattr(vector, "indices") else 4 * len(vector)
    payloads = batch.payloads or []
    return size + sum(len(json.dumps(p, default=str)) for p in payloads) + 64 * len(batch.ids)


def edge_id(pid: Any) -> Any:
    """Qdrant's ids are unsigned integers or UUIDs: an integer stays one (a collection made by hand)."""
    return pid if isinstance(pid, int) else str(pid)


def edge_vector(vector: Any) -> Any:
    """A dense list as it is; a `models.SparseVector` as Edge's."""
    import qdrant_edge as edge
    from qdrant_client import models

    if isinstance(vector, models.SparseVector):
        return edge.SparseVector(list(vector.indices), [float(v) for v in vector.values])
    return vector


def edge_filter(selected: Any) -> Any:
    """A `models.Filter` of `must` field conditions (MatchValue, MatchAny, Range) as Edge's."""
    import qdrant_edge as edge

    if selected is None:
        return None
    if selected.should or selected.must_not or selected.min_should:
        raise TypeError("no Qdrant Edge translation for should / must_not filters")
    return edge.Filter(must=[_condition(c) for c in (selected.must or [])])


def _condition(condition: Any) -> Any:
    import qdrant_edge as edge
    from qdrant_client import models

    if not isinstance(condition, models.FieldCondition):
        raise TypeError(f"no Qdrant Edge translation for {type(condition).__name__}")
    if isinstance(condition.match, models.MatchValue):
        return edge.FieldCondition(condition.key, match=edge.MatchValue(condition.match.value))
    if isinstance(condition.match, models.MatchAny):
        return edge.FieldCondition(condition.key, match=edge.MatchAny(list(condition.match.any)))
    if condition.range is not None:
        r = condition.range
        return edge.FieldCondition(condition.key, range=edge.RangeFloat(gte=r.gte, gt=r.gt, lte=r.lte, lt=r.lt))
    raise TypeError(f"no Qdrant Edge translation for the condition on {condition.key!r}")


def edge_query(query: Any, using: str | None) -> Any:
    """A dense list, a `models.SparseVector` (`using` its name) or an RRF fusion as Edge's query."""
    import qdrant_edge as edge
    from qdrant_client import models

    if isinstance(query, models.RrfQuery):
        return edge.Fusion.Rrf(k=query.rrf.k) if query.rrf.k is not None else edge.Fusion.Rrf(k=60)
    if isinstance(query, (list, models.SparseVector)):
        return edge.Query.Nearest(edge_vector(query), using=using or None)
    raise TypeError(f"no Qdrant Edge translation for the query {type(query).__name__}")


def edge_prefetch(prefetch: Any) -> Any:
    import qdrant_edge as edge

    return edge.Prefetch(limit=prefetch.limit, query=edge_query(prefetch.query, prefetch.using),
                         filter=edge_filter(prefetch.filter))


def edge_search_params(params: Any, hnsw_ef: int) -> Any:
    """`models.SearchParams` with quantization rescoring (vector_types.search_params), or none, as
    Edge's, with `hnsw_ef` candidates unless the params name their own."""
    import qdrant_edge as edge

    if params is None:
        return edge.SearchParams(hnsw_ef=hnsw_ef)
    quantization = None
    if params.quantization is not None:
        q = params.quantization
        quantization = edge.QuantizationSearchParams(ignore=bool(q.ignore), rescore=q.rescore,
                                                     oversampling=q.oversampling)
    return edge.SearchParams(hnsw_ef=params.hnsw_ef or hnsw_ef, exact=bool(params.exact), quantization=quantization)


def with_payload(value: Any) -> Any:
    return value if isinstance(value, (bool, list)) else bool(value)


# --- answers --------------------------------------------------------------------------------


def client_record(record: Any) -> Any:
    """An Edge record as `models.Record`: the id a string, the unnamed vector alone as a list."""
    from qdrant_client import models

    return models.Record(id=client_id(record.id), payload=record.payload, vector=_client_vector(record.vector))


def client_scored(point: Any) -> Any:
    from qdrant_client import models

    return models.ScoredPoint(id=client_id(point.id), version=point.version, score=point.score, payload=point.payload,
                              vector=_client_vector(point.vector))


def _client_vector(vector: Any) -> Any:
    from qdrant_client import models

    if not vector:
        return None
    if isinstance(vector, dict):
        if set(vector) == {""}:
            return vector[""]
        return {name: models.SparseVector(indices=list(v.indices), values=list(v.values))
                if hasattr(v, "indices") else v for name, v in vector.items()}
    return vector


def client_id(pid: Any) -> Any:
    return pid if isinstance(pid, int) else str(pid)
