"""Collections an earlier gpucli wrote with qdrant-client's local mode
(PATH/collection/NAME/storage.sqlite), moved into a Qdrant Edge shard the first time they are
opened (issue 42): nothing is silently lost, and the old copy stays where it was until the user
deletes it (the notice says so).

The move writes the shard beside its final place and renames it there once complete: a move
that was stopped leaves only a temporary directory, which the next open starts again from.
Reading the old collection is the one embedded path that imports qdrant-client, and only when
such a collection is there.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from gpucli.core.durable import fsync_dir
from gpucli.core.errors import GpucliError, LockedError
from gpucli.output.sinks.qdrant.edge.files import LOCAL_MODE_DIR, is_shard, meta_file, shard_dir, write_json
from gpucli.output.sinks.qdrant.edge.models import vector_params
from gpucli.output.sinks.qdrant.target import Target
from gpucli.output.sinks.qdrant.vector_types import Storage

PAGE = 1024  # points per scroll and per upsert while moving


def legacy_storage(target: Target) -> Path:
    return Path(target.path) / LOCAL_MODE_DIR / target.collection / "storage.sqlite"


def move_to_edge(target: Target) -> str | None:
    """Move a local-mode collection into an Edge shard when there is one and no shard yet; the
    notice for the user, or None when there was nothing to move."""
    if not legacy_storage(target).is_file() or is_shard(shard_dir(target.path, target.collection)):
        return None
    client = _open_local(target)
    try:
        name = target.collection
        if not client.collection_exists(name):
            return None
        info = client.get_collection(name)
        moved = _copy(client, info, target)
    finally:
        client.close()
    old = legacy_storage(target).parent
    return (f"moved {moved} point(s) of {target.display} from qdrant-client's local mode ({old}) to Qdrant Edge "
            f"({shard_dir(target.path, name)}); gpucli no longer reads the old copy: delete {old} once you "
            "no longer need it")


def _open_local(target: Target) -> Any:
    from qdrant_client import QdrantClient

    try:
        return QdrantClient(path=target.path, force_disable_check_same_thread=True)
    except RuntimeError as exc:
        if "already accessed" in str(exc):
            raise LockedError(f"{target.display}: the embedded Qdrant storage {target.path} is in use by another "
                              "process or client (embedded mode allows one at a time; use a Qdrant server for "
                              "concurrent access)") from None
        raise GpucliError(f"{target.display}: cannot open the local-mode storage to move it: {exc}") from None


def _copy(client: Any, info: Any, target: Target) -> int:
    import qdrant_edge as edge

    name = target.collection
    final = shard_dir(target.path, name)
    moving = final.with_name(f".{name}.moving")
    shutil.rmtree(moving, ignore_errors=True)
    vectors = info.config.params.vectors
    dense = ({key: _vector_params(p) for key, p in vectors.items()} if isinstance(vectors, dict)
             else _vector_params(vectors))
    sparse = {key: _sparse_params(p) for key, p in (info.config.params.sparse_vectors or {}).items()}
    moving.parent.mkdir(parents=True, exist_ok=True)
    shard = edge.EdgeShard.create(str(moving), edge.EdgeConfig(vectors=dense, sparse_vectors=sparse or None))
    moved, offset = 0, None
    try:
        while True:
            records, offset = client.scroll(name, limit=PAGE, offset=offset, with_payload=True, with_vectors=True)
            if records:
                shard.update(edge.UpdateOperation.upsert_points([_point(r) for r in records]))
                moved += len(records)
            if offset is None:
                break
        shard.flush()
    finally:
        shard.close()
    write_json(meta_file(target.path, name), dict(getattr(info.config, "metadata", None) or {}))
    moving.rename(final)
    fsync_dir(final.parent)
    return moved


def _vector_params(params: Any) -> Any:
    """qdrant-client's `VectorParams` (cosine; a datatype or a quantization) as Edge's."""
    quantization = params.quantization_config
    kind = next((k for k in ("scalar", "binary") if getattr(quantization, k, None) is not None), None)
    if quantization is not None and kind is None:
        raise GpucliError(f"no Qdrant Edge translation for {type(quantization).__name__}")
    datatype = getattr(params.datatype, "value", params.datatype)
    storage = Storage(datatype="float16" if datatype == "float16" else None, on_disk=params.on_disk,
                      quantization={"scalar": "int8", "binary": "binary"}.get(kind or ""),
                      quantile=getattr(getattr(quantization, "scalar", None), "quantile", None) or 0.99)
    return vector_params(params.size, str(getattr(params.distance, "value", params.distance)), storage)


def _sparse_params(params: Any) -> Any:
    import qdrant_edge as edge

    idf = str(getattr(params.modifier, "value", params.modifier)).lower() == "idf"
    return edge.EdgeSparseVectorParams(modifier=edge.Modifier.Idf if idf else None)


def _point(record: Any) -> Any:
    """A local-mode record as Edge's point: an integer id stays one (a collection made by hand),
    sparse vectors as Edge's."""
    import qdrant_edge as edge

    vector = record.vector
    if isinstance(vector, dict):
        vector = {name: edge.SparseVector(list(v.indices), [float(x) for x in v.values]) if hasattr(v, "indices")
                  else v for name, v in vector.items()}
    pid = record.id if isinstance(record.id, int) else str(record.id)
    return edge.Point(pid, vector, record.payload)
