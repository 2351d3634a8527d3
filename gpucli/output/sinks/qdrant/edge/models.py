"""gpucli's calls (protocol.py) as Qdrant Edge's own types, and a shard's configuration back as
gpucli's `Described`. No qdrant-client: Edge's types are built directly.

The points are the hot path of a write: Edge's binding converts each payload value on its own
(~3 us a string, ~1.5 us an integer, measured here), so nothing else is done per point but
zipping ids, vector lists and payload dicts that points.py built column by column.
"""

from __future__ import annotations

from typing import Any

from gpucli.core.keys import ID_COLUMN
from gpucli.output.sinks.qdrant.points import Points
from gpucli.output.sinks.qdrant.protocol import (
    SPARSE_VECTOR,
    Described,
    Hybrid,
    Lexical,
    Nearest,
    NewCollection,
    Search,
    Selection,
    SparseVector,
)
from gpucli.output.sinks.qdrant.vector_types import Storage, stored_type
from gpucli.output.sinks.qdrant.vector_types import storage as vector_storage

# --- the collection's configuration ---------------------------------------------------------


def config(new: NewCollection, index_from_kb: int) -> Any:
    """An EdgeConfig: one unnamed cosine vector stored as --vector-type asks, the sparse vector
    with IDF, segments indexed from `index_from_kb` KiB of vectors on."""
    import qdrant_edge as edge

    sparse = {SPARSE_VECTOR: edge.EdgeSparseVectorParams(modifier=edge.Modifier.Idf)} if new.sparse else None
    return edge.EdgeConfig(vectors=vector_params(new.dims, "Cosine", vector_storage(new.vector_type)),
                           sparse_vectors=sparse, optimizers=edge.EdgeOptimizersConfig(indexing_threshold=index_from_kb))


def vector_params(size: int, distance: str, storage: Storage) -> Any:
    import qdrant_edge as edge

    kwargs: dict[str, Any] = {}
    if storage.datatype == "float16":
        kwargs["datatype"] = edge.VectorStorageDatatype.Float16
    if storage.on_disk is not None:
        kwargs["on_disk"] = storage.on_disk
    if storage.quantization == "int8":
        kwargs["quantization_config"] = edge.ScalarQuantizationConfig(type=edge.ScalarType.Int8,
                                                                      quantile=storage.quantile)
    elif storage.quantization == "binary":
        kwargs["quantization_config"] = edge.BinaryQuantizationConfig()
    return edge.EdgeVectorParams(size=size, distance=_distance(distance), **kwargs)


def _distance(name: str) -> Any:
    import qdrant_edge as edge

    return {"Cosine": edge.Distance.Cosine, "Dot": edge.Distance.Dot, "Euclid": edge.Distance.Euclid,
            "Manhattan": edge.Distance.Manhattan}[name]


def described(config_json: dict, metadata: dict, points: int) -> Described:
    """A shard's `edge_config.json` (Qdrant's own JSON for its vectors) as gpucli's `Described`."""
    vectors = config_json.get("vectors") or {}
    dense = vectors.get("") if set(vectors) == {""} else None
    if dense is None:
        return Described(dims=0, distance="", named=tuple(vectors), sparse=tuple(config_json.get("sparse_vectors") or {}),
                         metadata=metadata, points=points)
    quantization = dense.get("quantization_config") or config_json.get("quantization_config") or {}
    return Described(dims=int(dense["size"]), distance=str(dense["distance"]),
                     sparse=tuple(config_json.get("sparse_vectors") or {}),
                     vector_type=stored_type(dense.get("datatype"), next(iter(quantization), None)),
                     metadata=metadata, points=points)


# --- points, filters, queries ---------------------------------------------------------------


def edge_points(points: Points, start: int, end: int) -> list[Any]:
    """Points start..end as Edge's: the dense vector alone, or {"": dense, "bm25": sparse}."""
    from qdrant_edge import Point

    ids, payloads = points.ids[start:end], points.payloads[start:end]
    dense = points.vectors[start:end].tolist()
    if points.sparse is None:
        return [Point(pid, vector, payload) for pid, vector, payload in zip(ids, dense, payloads)]
    sparse = [sparse_vector(s) for s in points.sparse[start:end]]
    return [Point(pid, {"": vector, SPARSE_VECTOR: terms}, payload)
            for pid, vector, terms, payload in zip(ids, dense, sparse, payloads)]


def sparse_vector(vector: SparseVector) -> Any:
    import qdrant_edge as edge

    return edge.SparseVector(vector.indices, vector.values)


def edge_filter(selection: Selection) -> Any:
    """The points a Selection names (path, a table's record ids, chunks from a number on)."""
    import qdrant_edge as edge

    def match(key: str, values: tuple[str, ...]) -> Any:
        matched = edge.MatchValue(values[0]) if len(values) == 1 else edge.MatchAny(list(values))
        return edge.FieldCondition(key, match=matched)

    must: list[Any] = []
    if selection.paths:
        must.append(match("path", selection.paths))
    if selection.ids:
        must.append(match(ID_COLUMN, selection.ids))
    if selection.from_chunk is not None:
        must.append(edge.FieldCondition("chunk", range=edge.RangeFloat(gte=selection.from_chunk)))
    return edge.Filter(must=must)


def query(search: Search, hnsw_ef: int) -> Any:
    """A QueryRequest with payloads: nearest dense, sparse with the IDF, or both fused by RRF."""
    import qdrant_edge as edge

    match search:
        case Nearest(vector=vector, limit=limit, oversampling=oversampling):
            quantization = None if oversampling is None else edge.QuantizationSearchParams(
                rescore=True, oversampling=oversampling)
            return edge.QueryRequest(limit=limit, query=edge.Query.Nearest(vector), with_payload=True,
                                     params=edge.SearchParams(hnsw_ef=hnsw_ef, quantization=quantization))
        case Lexical(terms=terms, limit=limit):
            return edge.QueryRequest(limit=limit, query=edge.Query.Nearest(sparse_vector(terms), using=SPARSE_VECTOR),
                                     with_payload=True, params=edge.SearchParams(hnsw_ef=hnsw_ef))
        case Hybrid(vector=vector, terms=terms, limit=limit, depth=depth, rrf_k=rrf_k):
            prefetches = [edge.Prefetch(limit=depth, query=edge.Query.Nearest(vector)),
                          edge.Prefetch(limit=depth, query=edge.Query.Nearest(sparse_vector(terms),
                                                                              using=SPARSE_VECTOR))]
            return edge.QueryRequest(limit=limit, query=edge.Fusion.Rrf(k=rrf_k), prefetches=prefetches,
                                     with_payload=True, params=edge.SearchParams(hnsw_ef=hnsw_ef))
    raise TypeError(f"no Qdrant Edge query for {type(search).__name__}")
