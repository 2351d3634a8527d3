"""Embedded Qdrant on Qdrant Edge (issue 42): the real Qdrant engine in this process, behind the
calls gpucli makes of a `QdrantClient`.

Why Edge: qdrant-client's local mode loaded every point into memory when it opened, persisted
point by point and searched by brute force (13.5 s for one `gpucli search` at 50,000 points).
An Edge shard keeps on-disk segments that open without reading every point, a WAL, HNSW and
payload indexes, sparse vectors with IDF, and quantization, as a server does.

Layout of `qdrant:PATH/COLLECTION`:
    PATH/edge/COLLECTION/        the Edge shard (wal/, segments/, edge_config.json)
    PATH/edge/COLLECTION.json    the collection's metadata (gpucli.model, prompts...): a shard has none
    PATH/.lock                   held while the storage is open: one process at a time. The same
                                 file and lock (flock) as qdrant-client's local mode, so the two
                                 never open one directory together.

Space: Qdrant Edge keeps its data in memory-mapped files, made sparse and filled as points
arrive; a page touched on a full file system kills the process with SIGBUS rather than raising.
So every write first makes sure the file system holds what the shard's files may still fill plus
what the write adds (`room`), and says ENOSPC (exit 3, a rerun resumes) when it does not.

Indexes: points land in the shard's appendable segment as they are written (on disk, memory
stays flat); `optimize` builds the HNSW index once, at the end of a run (sink.py). A shard
that was never optimized is still searched, exactly.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import gpucli.output.sinks.qdrant.edge_models as convert
from gpucli.core.errors import LockedError

LOCK_FILE = ".lock"
# A segment gets its HNSW index once its vectors pass this many KiB (Qdrant's `indexing_threshold`);
# below it a full scan answers as fast: measured here, 1M 32-d vectors (122 MiB) in 34 ms, 100k 384-d
# (147 MiB) in 10 ms, while building an index of 100k 32-d vectors took 16 s of a 23 s run
# (benchmarks/RESULTS-qdrant.md). Qdrant's own default is 10,000 (a server indexes in the background).
INDEX_FROM_KB = 128 * 1024
SEARCH_EF = 512  # HNSW candidates per search (Qdrant's hnsw_ef): recall@10 with an index of 1M 32-d vectors 0.865
# at 128, 0.977 at 512 (1.7 ms a query); 0.932 at Edge's default on 100k (benchmarks/RESULTS-qdrant.md)
EDGE_DIR = "edge"


class EdgeClient:
    """The calls of `QdrantClient` that gpucli makes, on Edge shards under one storage directory
    (one shard per collection), with qdrant-client's models in and out (edge_models.py)."""

    def __init__(self, storage: str) -> None:
        self.storage = Path(storage)
        self.storage.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.storage)
        self._shards: dict[str, Any] = {}

    # --- collections ------------------------------------------------------------------------
    def shard_dir(self, name: str) -> Path:
        return shard_dir(self.storage, name)

    def _meta_file(self, name: str) -> Path:
        return meta_file(self.storage, name)

    def collection_exists(self, name: str) -> bool:
        return (self.shard_dir(name) / "edge_config.json").is_file()

    def shard(self, name: str) -> Any:
        import qdrant_edge as edge

        if name not in self._shards:
            if not self.collection_exists(name):
                raise ValueError(f"Collection {name} not found")
            room(self.storage, self.shard_dir(name), 0)  # opening replays the WAL and may start a new file
            self._shards[name] = edge.EdgeShard.load(str(self.shard_dir(name)))
        return self._shards[name]

    def get_collection(self, name: str) -> Any:
        """What `QdrantClient.get_collection` answers, as far as gpucli reads it."""
        shard = self.shard(name)
        config = json.loads((self.shard_dir(name) / "edge_config.json").read_text())
        vectors, sparse = convert.client_params(config)
        metadata = json.loads(self._meta_file(name).read_text()) if self._meta_file(name).is_file() else {}
        params = SimpleNamespace(vectors=vectors, sparse_vectors=sparse or None)
        return SimpleNamespace(config=SimpleNamespace(params=params, metadata=metadata, quantization_config=None),
                               points_count=shard.info().points_count)

    def create_collection(self, name: str, vectors_config: Any, sparse_vectors_config: dict | None = None,
                          metadata: dict | None = None) -> None:
        import qdrant_edge as edge

        room(self.storage, self.storage, 0)
        sparse = {key: convert.edge_sparse_params(p) for key, p in (sparse_vectors_config or {}).items()}
        config = edge.EdgeConfig(vectors=convert.edge_vector_params(vectors_config), sparse_vectors=sparse or None,
                                 optimizers=edge.EdgeOptimizersConfig(indexing_threshold=INDEX_FROM_KB))
        write_json(self._meta_file(name), metadata or {})
        path = self.shard_dir(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._shards[name] = edge.EdgeShard.create(str(path), config)

    def update_collection(self, name: str, metadata: dict | None = None) -> None:
        if metadata is not None:
            write_json(self._meta_file(name), metadata)

    def delete_collection(self, name: str) -> None:
        shard = self._shards.pop(name, None)
        if shard is not None:
            shard.close()
        shutil.rmtree(self.shard_dir(name), ignore_errors=True)
        self._meta_file(name).unlink(missing_ok=True)

    def create_payload_index(self, name: str, field_name: str, field_schema: Any, wait: bool = True) -> None:
        import qdrant_edge as edge

        kind = str(getattr(field_schema, "value", field_schema)).lower()
        schema = {"keyword": edge.PayloadSchemaType.Keyword, "integer": edge.PayloadSchemaType.Integer}[kind]
        self.shard(name).update(edge.UpdateOperation.create_field_index(field_name, schema))

    # --- points -----------------------------------------------------------------------------
    def upsert(self, name: str, points: Any, wait: bool = True) -> None:
        import qdrant_edge as edge

        converted = convert.edge_points(points)
        room(self.storage, self.shard_dir(name), convert.batch_bytes(points))
        self.shard(name).update(edge.UpdateOperation.upsert_points(converted))

    def delete(self, name: str, points_selector: Any, wait: bool = True) -> None:
        import qdrant_edge as edge
        from qdrant_client import models

        if isinstance(points_selector, models.FilterSelector):
            operation = edge.UpdateOperation.delete_points_by_filter(convert.edge_filter(points_selector.filter))
        elif isinstance(points_selector, models.PointIdsList):
            operation = edge.UpdateOperation.delete_points([convert.edge_id(p) for p in points_selector.points])
        else:
            raise TypeError(f"no Qdrant Edge translation for {type(points_selector).__name__}")
        room(self.storage, self.shard_dir(name), 0)
        self.shard(name).update(operation)

    def retrieve(self, name: str, ids: list, with_payload: Any = True, with_vectors: Any = False) -> list[Any]:
        found = self.shard(name).retrieve([convert.edge_id(i) for i in ids], with_payload=convert.with_payload(with_payload),
                                          with_vector=bool(with_vectors))
        return [convert.client_record(r) for r in found]

    def scroll(self, name: str, limit: int = 10, offset: Any = None, with_payload: Any = True,
               with_vectors: Any = False, scroll_filter: Any = None) -> tuple[list[Any], Any]:
        import qdrant_edge as edge

        request = edge.ScrollRequest(offset=convert.edge_id(offset) if offset is not None else None, limit=limit,
                                     filter=convert.edge_filter(scroll_filter),
                                     with_payload=convert.with_payload(with_payload), with_vector=bool(with_vectors))
        records, following = self.shard(name).scroll(request)
        return [convert.client_record(r) for r in records], (convert.client_id(following) if following is not None else None)

    def count(self, name: str, count_filter: Any = None, exact: bool = True) -> Any:
        import qdrant_edge as edge

        request = edge.CountRequest(filter=convert.edge_filter(count_filter), exact=exact)
        return SimpleNamespace(count=self.shard(name).count(request))

    def query_points(self, name: str, query: Any = None, using: str | None = None, prefetch: Any = None,
                     limit: int = 10, with_payload: Any = True, search_params: Any = None,
                     query_filter: Any = None) -> Any:
        import qdrant_edge as edge

        prefetches = [convert.edge_prefetch(p) for p in ([prefetch] if prefetch is not None and
                                                         not isinstance(prefetch, list) else prefetch or [])]
        request = edge.QueryRequest(limit=limit, query=convert.edge_query(query, using) if query is not None else None,
                                    prefetches=prefetches or None, filter=convert.edge_filter(query_filter),
                                    params=convert.edge_search_params(search_params, SEARCH_EF),
                                    with_payload=convert.with_payload(with_payload))
        return SimpleNamespace(points=[convert.client_scored(p) for p in self.shard(name).query(request)])

    # --- durability and indexes ------------------------------------------------------------------
    def flush(self, name: str) -> None:
        """Everything written so far is on disk when this returns."""
        if name in self._shards:
            self._shards[name].flush()

    def optimize(self, name: str) -> bool:
        """Build the indexes (HNSW) of what was written since the last time: blocks until done,
        in a child process (indexer.py: Edge holds the GIL while it builds), the storage locked
        meanwhile. The new segments are written beside the old ones before these go: room for
        a copy. False when nothing changed, or a signal stopped the build (the index waits for
        the next run that writes; the points are all there)."""
        from gpucli.output.sinks.qdrant.indexer import IndexingStopped, build_indexes

        room(self.storage, self.shard_dir(name), allocated(self.shard_dir(name)))
        self.release(name)
        try:
            return build_indexes(self.shard_dir(name))
        except IndexingStopped:
            return False

    def release(self, name: str) -> None:
        """Flush and close the collection's shard, keeping the storage locked: its files are then
        complete on disk and nobody writes them (`gpucli snapshot` packs them)."""
        shard = self._shards.pop(name, None)
        if shard is not None:
            shard.close()

    def close(self) -> None:
        try:
            for shard in self._shards.values():
                shard.close()
        finally:
            self._shards.clear()
            if self._lock is not None:
                self._lock.close()  # releases the flock
                self._lock = None


def _lock(storage: Path) -> Any:
    """Take PATH/.lock as qdrant-client's local mode does (portalocker: flock, exclusive, not
    waiting): one process at a time has the storage open, whichever client it uses."""
    path = storage / LOCK_FILE
    if not path.exists():
        path.write_text("tmp lock file")
    handle = open(path, "r+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise LockedError(f"the embedded Qdrant storage {storage} is in use by another process or client "
                          "(embedded mode allows one at a time; use a Qdrant server for concurrent access)") from None
    return handle


MARGIN_BYTES = 64 << 20  # kept free beyond what a write may fill: a new WAL file (32 MiB) and then some


def room(storage: Path, shard: Path, adding: int) -> None:
    """Raise ENOSPC unless the file system holds what the shard's sparse files may still fill,
    twice what this write adds (the WAL, then the segment) and a margin (see "Space" above)."""
    need = unbacked(shard) + 2 * adding + MARGIN_BYTES
    stats = os.statvfs(storage)
    free = stats.f_bavail * stats.f_frsize
    if free < need:
        raise OSError(errno.ENOSPC, f"No space left on device: Qdrant Edge needs {need / 2**20:.0f} MiB free for "
                      f"its memory-mapped files and this write, and {free / 2**20:.1f} MiB are", str(shard))


def unbacked(shard: Path) -> int:
    """Bytes the shard's files address but the file system has not allocated yet (sparse files)."""
    total = 0
    for root, _, files in os.walk(shard):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


def allocated(shard: Path) -> int:
    """Bytes the shard's files take on the file system."""
    return sum(os.stat(os.path.join(root, name)).st_blocks * 512 for root, _, files in os.walk(shard)
               for name in files)


def shard_dir(storage: str | Path, name: str) -> Path:
    return Path(storage) / EDGE_DIR / name


def meta_file(storage: str | Path, name: str) -> Path:
    return Path(storage) / EDGE_DIR / f"{name}.json"


def write_json(target: Path, data: dict) -> None:
    """Written whole to a temporary file, synced, then renamed: a crash leaves the old or the new."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, target)
