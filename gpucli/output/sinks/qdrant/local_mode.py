"""Collections an earlier gpucli wrote with qdrant-client's local mode
(PATH/collection/NAME/storage.sqlite), moved into a Qdrant Edge shard the first time they are
opened (issue 42): nothing is silently lost, and the old copy stays where it was until the user
deletes it (the notice says so).

The move writes the shard beside its final place and renames it there once complete: a move
that was stopped leaves only a temporary directory, which the next open starts again from.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import gpucli.output.sinks.qdrant.edge_models as convert
from gpucli.core.errors import GpucliError, LockedError
from gpucli.output.sinks.qdrant.edge import meta_file, shard_dir, write_json
from gpucli.output.sinks.qdrant.target import Target

PAGE = 1024  # points per scroll and per upsert while moving


def legacy_storage(target: Target) -> Path:
    return Path(target.path) / "collection" / target.collection / "storage.sqlite"


def move_to_edge(target: Target) -> str | None:
    """Move a local-mode collection into an Edge shard when there is one and no shard yet; the
    notice for the user, or None when there was nothing to move."""
    if not legacy_storage(target).is_file() or (shard_dir(target.path, target.collection) / "edge_config.json").is_file():
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
    from qdrant_client import models

    name = target.collection
    final = shard_dir(target.path, name)
    moving = final.with_name(f".{name}.moving")
    shutil.rmtree(moving, ignore_errors=True)
    vectors = info.config.params.vectors
    dense = ({key: convert.edge_vector_params(p) for key, p in vectors.items()} if isinstance(vectors, dict)
             else convert.edge_vector_params(vectors))
    sparse = {key: convert.edge_sparse_params(p) for key, p in (info.config.params.sparse_vectors or {}).items()}
    moving.parent.mkdir(parents=True, exist_ok=True)
    shard = edge.EdgeShard.create(str(moving), edge.EdgeConfig(vectors=dense, sparse_vectors=sparse or None))
    moved, offset = 0, None
    try:
        while True:
            records, offset = client.scroll(name, limit=PAGE, offset=offset, with_payload=True, with_vectors=True)
            if records:
                batch = models.Batch(ids=[r.id for r in records], payloads=[r.payload for r in records],
                                     vectors=_columns(records))
                shard.update(edge.UpdateOperation.upsert_points(convert.edge_points(batch)))
                moved += len(records)
            if offset is None:
                break
        shard.flush()
    finally:
        shard.close()
    write_json(meta_file(target.path, name), dict(getattr(info.config, "metadata", None) or {}))
    moving.rename(final)
    return moved


def _columns(records: list[Any]) -> Any:
    """The records' vectors as a Batch takes them: a list of dense ones, or {name: [...]}."""
    if not isinstance(records[0].vector, dict):
        return [r.vector for r in records]
    names = records[0].vector.keys()
    return {n: [r.vector[n] for r in records] for n in names}
