"""One embedded collection on Qdrant Edge (issue 42): the real Qdrant engine in this process,
answering gpucli's calls (protocol.py) with Edge's own types (models.py).

Why Edge: qdrant-client's local mode loaded every point into memory when it opened, persisted
point by point and searched by brute force (13.5 s for one `gpucli search` at 50,000 points).
An Edge shard keeps on-disk segments that open without reading every point, a WAL, HNSW and
payload indexes, sparse vectors with IDF, and quantization, as a server does. Where it lives on
disk: files.py; the free-space check before every write: space.py.

Indexes: points land in the shard's appendable segment as they are written (on disk, memory
stays flat); `index` builds the HNSW index once, at the end of a run (sink.py), in a child
process (indexer.py). A shard that was never optimized is still searched, exactly.

Errors are final (no retries): the file system's (a full disk, a read-only one) become
OutputError (exit 3, the path named, a rerun resumes), anything else a GpucliError naming the
output and the call.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpucli.core.errors import RERUN_HINT, GpucliError, LockedError, OutputError, os_error, sqlite_error
from gpucli.core.locks import FileLock
from gpucli.output.sinks.qdrant.edge import files, models
from gpucli.output.sinks.qdrant.edge.space import allocated, room
from gpucli.output.sinks.qdrant.points import Points, as_points
from gpucli.output.sinks.qdrant.protocol import Described, Found, NewCollection, Rows, Search, Selection
from gpucli.output.sinks.qdrant.target import Target

# A segment gets its HNSW index once its vectors pass this many KiB (Qdrant's `indexing_threshold`);
# below it a full scan answers as fast: measured here, 1M 32-d vectors (122 MiB) in 34 ms, 100k 384-d
# (147 MiB) in 10 ms, while building an index of 100k 32-d vectors took 16 s of a 23 s run
# (benchmarks/RESULTS-qdrant.md). Qdrant's own default is 10,000 (a server indexes in the background).
INDEX_FROM_KB = 128 * 1024
SEARCH_EF = 512  # HNSW candidates per search (Qdrant's hnsw_ef): recall@10 with an index of 1M 32-d vectors 0.865
# at 128, 0.977 at 512 (1.7 ms a query); 0.932 at Edge's default on 100k (benchmarks/RESULTS-qdrant.md)
KEY_BYTES = 16  # per payload key of a point, in the free-space estimate


def move_local_mode(target: Target) -> list[str]:
    """A collection an earlier gpucli left in qdrant-client's local mode, moved into Edge
    (local_mode.py): the notice for the user, if one moved."""
    from gpucli.output.sinks.qdrant.edge.local_mode import move_to_edge

    with _errors(target, "moving the local-mode collection"):
        moved = move_to_edge(target)
    return [moved] if moved else []


class EdgeClient:
    """The collection `target.collection` of the storage `target.path`, locked while open (one
    process at a time). A collection an earlier gpucli left in qdrant-client's local mode is
    moved into Edge first (local_mode.py), with a notice."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.storage = Path(target.path)
        self.shard_dir = files.shard_dir(self.storage, target.collection)
        self._shard: Any = None
        self.notices = move_local_mode(target)  # local mode takes the same lock: before it is taken
        try:
            with self._errors("opening the storage"):
                self.storage.mkdir(parents=True, exist_ok=True)
                self._lock: FileLock | None = files.lock_storage(self.storage)
        except LockedError as exc:
            raise LockedError(f"{target.display}: {exc}") from None

    @property
    def _meta_file(self) -> Path:
        return files.meta_file(self.storage, self.target.collection)

    def shard(self) -> Any:
        """The open Edge shard (loaded on first use)."""
        import qdrant_edge as edge

        if self._shard is None:
            if not self.exists():
                raise GpucliError(f"{self.target.display}: no such collection")
            room(self.storage, self.shard_dir, 0)  # opening replays the WAL and may start a new file
            self._shard = edge.EdgeShard.load(str(self.shard_dir))
        return self._shard

    # --- the collection ------------------------------------------------------------------------
    def exists(self) -> bool:
        return files.is_shard(self.shard_dir)

    def describe(self) -> Described:
        with self._errors("reading the collection"):
            points = self.shard().info().points_count
            return models.described(files.read_json(self.shard_dir / files.CONFIG), files.read_json(self._meta_file),
                                    points)

    def create(self, new: NewCollection) -> None:
        import qdrant_edge as edge

        with self._errors("creating the collection"):
            room(self.storage, self.storage, 0)
            files.write_json(self._meta_file, new.metadata)
            self.shard_dir.parent.mkdir(parents=True, exist_ok=True)
            self._shard = edge.EdgeShard.create(str(self.shard_dir), models.config(new, INDEX_FROM_KB))
        with self._errors("indexing path"):  # the stale-chunk and prune deletes filter on it
            self._shard.update(edge.UpdateOperation.create_field_index("path", edge.PayloadSchemaType.Keyword))

    def set_metadata(self, metadata: dict[str, str]) -> None:
        with self._errors("updating the collection"):
            files.write_json(self._meta_file, metadata)

    def drop(self) -> None:
        with self._errors("recreating the collection"):
            self.release()
            shutil.rmtree(self.shard_dir, ignore_errors=True)
            self._meta_file.unlink(missing_ok=True)

    # --- points --------------------------------------------------------------------------------
    def upsert(self, rows: Rows) -> None:
        """In batches of `?batch=N` points, after one free-space check for them all."""
        from qdrant_edge import UpdateOperation

        with self._errors("upsert"):
            shard, points = self.shard(), as_points(rows)
            room(self.storage, self.shard_dir, _bytes(points))
            for start in range(0, len(points), self.target.batch):
                batch = models.edge_points(points, start, start + self.target.batch)
                shard.update(UpdateOperation.upsert_points(batch))

    def present(self, ids: list[str]) -> set[str]:
        with self._errors("checking for stale chunks"):
            return {str(r.id) for r in self.shard().retrieve(ids, with_payload=False, with_vector=False)}

    def delete(self, selection: Selection) -> None:
        from qdrant_edge import UpdateOperation

        with self._errors(selection.what):
            shard = self.shard()
            room(self.storage, self.shard_dir, 0)
            shard.update(UpdateOperation.delete_points_by_filter(models.edge_filter(selection)))

    def search(self, search: Search) -> list[Found]:
        with self._errors("searching"):
            return [Found(float(p.score), p.payload or {}) for p in self.shard().query(models.query(search, SEARCH_EF))]

    def sample_payload(self, keys: list[str]) -> dict[str, Any] | None:
        import qdrant_edge as edge

        with self._errors("reading a point"):
            found, _ = self.shard().scroll(edge.ScrollRequest(limit=1, with_payload=keys, with_vector=False))
            return (found[0].payload or {}) if found else None

    # --- durability and indexes ----------------------------------------------------------------
    def flush(self) -> None:
        if self._shard is not None:
            with self._errors("syncing the storage"):
                self._shard.flush()

    def index(self) -> bool:
        """Build the indexes (HNSW) of what was written since the last time: blocks until done,
        in a child process (indexer.py: Edge holds the GIL while it builds), the storage locked
        meanwhile. The new segments are written beside the old ones before these go: room for
        a copy. False when nothing changed, or a signal stopped the build (the index waits for
        the next run that writes; the points are all there)."""
        from gpucli.output.sinks.qdrant.edge.indexer import IndexingStopped, build_indexes

        with self._errors("indexing the collection"):
            room(self.storage, self.shard_dir, allocated(self.shard_dir))
            self.release()
            try:
                return build_indexes(self.shard_dir)
            except IndexingStopped:
                return False

    def release(self) -> None:
        """Flush and close the shard, keeping the storage locked: its files are then complete on
        disk and nobody writes them (`gpucli snapshot` packs them)."""
        shard, self._shard = self._shard, None
        if shard is not None:
            shard.close()

    def close(self) -> None:
        try:
            self.release()
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    def _errors(self, what: str) -> contextlib.AbstractContextManager[None]:
        return _errors(self.target, what)


def _bytes(points: Points) -> int:
    """About what these points take on disk (a generous estimate: it only decides whether there
    is room): dense vectors as float32, sparse ones, payloads with their keys."""
    keys = len(points.payloads[0]) if points.payloads else 0
    sparse = sum(8 * len(s.indices) for s in points.sparse) if points.sparse is not None else 0
    return int(points.vectors.nbytes) + sparse + points.payload_bytes + (64 + KEY_BYTES * keys) * len(points)


@contextlib.contextmanager
def _errors(target: Target, what: str) -> Iterator[None]:
    """Embedded errors are final: the file system's as OutputError (exit 3), the rest naming the
    output and the call."""
    try:
        yield
    except GpucliError:
        raise
    except OSError as exc:  # the storage's files: a full disk, a read-only one, named (exit 3)
        raise os_error(exc, target.path) from None
    except Exception as exc:  # noqa: BLE001 - embedded errors are final; name the output
        stored = _storage_error(exc, target) or _edge_error(exc, target)
        if stored is not None:
            raise stored from None
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise GpucliError(f"{target.display}: {what} failed: {type(exc).__name__}" + (f": {text}" if text else "")) \
            from None


def _storage_error(exc: Exception, target: Target) -> OutputError | None:
    """Local mode (read once, to move a collection to Edge: local_mode.py) keeps points in SQLite:
    a file system that is full, read-only or failing is the output side failing (OutputError:
    exit 3, the path named, a rerun resumes), not one batch's upsert; None for any other error."""
    import sqlite3

    if not isinstance(exc, sqlite3.Error):
        return None
    return sqlite_error(exc, os.path.join(target.path, "collection", target.collection, "storage.sqlite"))


def _edge_error(exc: Exception, target: Target) -> OutputError | None:
    """Qdrant Edge reports a failing file system in its message (`No space left on device (os
    error 28)`): the output side failing, as an OutputError (exit 3, the path named, a rerun
    resumes); None for any other error."""
    found = re.search(r"\(os error (\d+)\)", str(exc))
    if found is None:
        return None
    number = int(found.group(1))
    name = errnos.errorcode.get(number, "")
    return OutputError(str(files.shard_dir(target.path, target.collection)),
                       f"{os.strerror(number)}" + (f" [{name}]" if name else ""), RERUN_HINT)
