"""The Qdrant sink: points in a collection, on a server or in embedded storage.

Point ids are uuid5(path NUL chunk), so a rerun upserts in place. Before a file's points are
written, nothing is deleted; after, points of that file numbered at or above its new chunk
count (left by an older, longer version) are removed. Every call waits for the server's
acknowledgement (`wait=True`): `write` returns only once its points are durable.

All rows live in one place (the collection), so `write` names it as the location: a redone
file is upserted in place (never stale), a pruned file's points are deleted by `supersede`.

Server and embedded mode differ in three places only: where the state lives (state_dir.py),
how calls fail and are retried (connection.py), and how writes are made durable (embedded
mode syncs its SQLite once per write, embedded.py; a server acknowledges each call).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, ClassVar

import gpucli.output.sinks.qdrant.state_dir as places
from gpucli.core.errors import GpucliError, UsageError
from gpucli.core.keys import row_key, row_keys
from gpucli.output.sinks.base import Sink
from gpucli.output.sinks.qdrant.connection import Connection
from gpucli.output.sinks.qdrant.embedded import group_commits
from gpucli.output.sinks.qdrant.filters import qdrant_conditions, qdrant_filters
from gpucli.output.sinks.qdrant.target import is_qdrant, parse_target
from gpucli.output.sinks.qdrant.vector_types import params as vector_type_params
from gpucli.output.sinks.qdrant.vector_types import stored_type

# Fixed forever: changing it would change every point id and duplicate every collection.
NAMESPACE = uuid.UUID("6f1c3a0e-8d2b-5b7e-9a41-3c5d2e7f9b10")
PROBE_IDS = 1024
SPARSE_VECTOR = "bm25"  # the named sparse vector of --sparse bm25, beside the unnamed dense one (issue 30)


def point_id(path: str, chunk: int) -> str:
    """Deterministic id of one chunk of one file: reruns upsert in place."""
    return str(uuid.uuid5(NAMESPACE, f"{path}\x00{chunk}"))
# How the vectors were made (issue 14): `gpucli search` embeds queries with the recorded query prompt.
PROMPT_KEYS = ("gpucli.pooling", "gpucli.normalize", "gpucli.prompt", "gpucli.prompt_name", "gpucli.query_prompt",
               "gpucli.query_prompt_name")


class QdrantSink(Sink):
    name = "qdrant"
    help = ("qdrant://HOST:PORT/COLLECTION (server; qdrants:// for TLS; key from QDRANT_API_KEY) or "
            "qdrant:PATH/COLLECTION (embedded, small collections)")

    takes_state_dir: ClassVar[bool] = True  # open_sink passes --state-dir (server mode uses it)

    def __init__(self, target: str, state_dir: str = "") -> None:
        super().__init__(target)
        self.parsed = parse_target(target)
        self.state_root = places.state_root(state_dir)
        self.notices: list[str] = []  # for the user, once open returns (a ledger moved)
        self.conn: Connection | None = None
        self.model = ""
        self.dims = 0
        self.sparse = False  # --sparse bm25 (issue 30): a named sparse vector beside the dense one
        self.metadata: dict[str, str] = {}
        self._other_model = ""
        self._without_sparse = False  # the collection has no sparse vector: created before --sparse
        self.vector_type = "float32"  # --vector-type (issue 30): Qdrant's way for each (vector_types.py)
        self._other_type = ""  # the vector type the collection was made for, when another
        self._db = None

    @classmethod
    def accepts(cls, target: str) -> bool:
        return is_qdrant(target)

    @property
    def display(self) -> str:
        return self.parsed.display

    @property
    def failures_path(self) -> str:
        if self.parsed.local:
            return str(Path(self.parsed.path) / f"{self.parsed.collection}.failures.jsonl")
        return str(self.state_dir / places.FAILURES)

    @property
    def state_dir(self) -> Path:
        """Beside the storage in embedded mode; per user, server and collection in server mode."""
        if self.parsed.local:
            return places.embedded_state_dir(self.parsed)
        return places.server_state_dir(self.parsed, self.state_root)

    # --- open: check the collection before any work -------------------------------------------
    def open(self, schema, metadata: dict[str, str]) -> None:
        """Called with the run lock held and before the ledger opens: a ledger an earlier
        version left in the current directory moves into the state directory first."""
        if not self.parsed.local:
            self._adopt_legacy_ledger()
        self.dims = _dims(schema, metadata)
        self.sparse = schema.get_field_index("sparse") >= 0
        self.model = metadata.get("gpucli.model", "")
        self.vector_type = metadata.get("gpucli.vector_type", "float32")
        self.metadata = {k: v for k, v in metadata.items() if k in ("gpucli.model", "gpucli.dims", "gpucli.version",
                                                                      "gpucli.task", "gpucli.vector_type", "gpucli.truncate_dims",
                                                                      "gpucli.full_dims") + PROMPT_KEYS}
        self.conn = Connection(self.parsed)
        name = self.parsed.collection
        try:
            if self.conn.call("checking the collection", lambda: self.conn.client.collection_exists(name)):
                self._check_existing()
            else:
                self._create()
            self._db = group_commits(self.conn.client, name) if self.parsed.local else None
        except BaseException:
            self.close()  # the pipeline calls close only after a successful open; free the storage lock
            raise

    def earlier_state_dirs(self) -> list[Path]:
        """Where an earlier gpucli kept this output's ledger (open moves it from there): what an
        output was made with is read from there until then (Output.made_with)."""
        return [] if self.parsed.local else [places.legacy_state_dir(self.parsed)]

    def _adopt_legacy_ledger(self) -> None:
        legacy = places.legacy_state_dir(self.parsed)
        if legacy.absolute() != self.state_dir.absolute() and places.adopt_legacy(legacy, self.state_dir):
            self.notices.append(f"moved the ledger of {self.display} from {legacy.absolute()} to {self.state_dir}: "
                                "gpucli now keeps it per user, server and collection, whatever directory it runs "
                                "from (--state-dir chooses another place)")

    def _check_existing(self) -> None:
        name = self.parsed.collection
        info = self.conn.call("reading the collection", lambda: self.conn.client.get_collection(name))
        size, distance = vector_params(info, self.display)
        if size != self.dims:
            raise UsageError(f"{self.display} holds {size}-d vectors; model {self.model!r} makes {self.dims}-d ones. "
                             "Write to another collection, use the model the collection was made with, or delete "
                             "the collection")
        if distance != "Cosine":
            raise UsageError(f"{self.display} uses {distance} distance; gpucli writes to Cosine collections. "
                             "Write to another collection")
        stored = (getattr(info.config, "metadata", None) or {}).get("gpucli.model")
        # Another model of the same dims: refused at the first write unless `reset` emptied the
        # collection first (--full, or a new ledger), so vectors of two models never mix.
        self._other_model = stored if stored and self.model and stored != self.model else ""
        # A collection's vectors are fixed when it is made: `reset` (--full) makes it again with the sparse one
        self._without_sparse = self.sparse and SPARSE_VECTOR not in (info.config.params.sparse_vectors or {})
        self._other_type = "" if stored_type(info) == self.vector_type else stored_type(info)  # made again by reset

    def _create(self) -> None:
        from qdrant_client import models

        name, client = self.parsed.collection, self.conn.client
        vectors = models.VectorParams(size=self.dims, distance=models.Distance.COSINE,
                                      **vector_type_params(self.vector_type))  # --vector-type (issue 30)
        # --sparse bm25 (issue 30): BM25's IDF is Qdrant's, from the collection (tasks/_sparse.py)
        sparse = {SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)} if self.sparse else None
        try:
            self.conn.call("creating the collection", lambda: client.create_collection(
                name, vectors_config=vectors, sparse_vectors_config=sparse, metadata=self.metadata))
        except GpucliError as exc:
            if "metadata" not in str(exc) and "unknown field" not in str(exc):
                raise
            # a server older than collection metadata (1.16): the points' `model` payload suffices
            self.conn.call("creating the collection", lambda: client.create_collection(
                name, vectors_config=vectors, sparse_vectors_config=sparse))
        if not self.parsed.local:  # a keyword index on path keeps the stale-chunk and prune deletes cheap
            self.conn.call("indexing path", lambda: client.create_payload_index(
                name, "path", models.PayloadSchemaType.KEYWORD, wait=True))

    # --- write: upsert, then drop chunks a shorter new version no longer has -------------------
    def write(self, table) -> str:
        from qdrant_client import models

        if self._other_model:
            raise UsageError(f"{self.display} holds vectors of model {self._other_model!r}, not {self.model!r}: "
                             f"mixing models makes search meaningless. Use --model {self._other_model}, another "
                             "collection, or --full to empty this one and rebuild it")
        if self._without_sparse:
            raise UsageError(f"{self.display} was made without --sparse and has no sparse vector {SPARSE_VECTOR!r}; "
                             "use --full to make it again with one, or another collection")
        if self._other_type:
            raise UsageError(f"{self.display} was made for --vector-type {self._other_type}, not {self.vector_type}; "
                             "use --full to make it again, or another collection")
        ids, vectors, payloads = self._points(table)
        sparse = _sparse_vectors(table) if self.sparse else None
        name = self.parsed.collection
        for start in range(0, len(ids), self.parsed.batch):
            end = start + self.parsed.batch
            batch = models.Batch(ids=ids[start:end], payloads=payloads[start:end],  # "": the unnamed dense vector
                                 vectors={"": vectors[start:end], SPARSE_VECTOR: sparse[start:end]} if self.sparse
                                 else vectors[start:end])
            self.conn.call("upsert", lambda b=batch: self.conn.client.upsert(name, points=b, wait=True))
        self._remove_stale(chunk_counts(table))
        self._sync()
        return self.parsed.collection

    def _sync(self) -> None:
        """Embedded mode with group commits: make everything written so far durable."""
        if self._db is not None:
            busy = self._db.execute("PRAGMA wal_checkpoint(FULL)").fetchone()[0]
            if busy:
                raise GpucliError(f"{self.display}: the embedded storage could not be synced (busy). This is a bug.")

    def _points(self, table) -> tuple[list[str], list[list[float]], list[dict[str, Any]]]:
        import numpy as np

        column = table.column("embedding").combine_chunks()
        vectors = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        vectors = vectors.reshape(len(table), self.dims).tolist()
        keep = [c for c in table.column_names if c not in ("embedding", "sparse") and (self.parsed.text or c != "text")]
        rows = table.select(keep).to_pylist()
        for row in rows:
            row["model"] = self.model
            if row.get("mtime") is not None:  # payloads are JSON: ISO 8601, as in JSON lines
                row["mtime"] = row["mtime"].isoformat()
        ids = [point_id(row_key(row), row["chunk"]) for row in rows]  # a table's record: uuid5 of table//id, chunk
        return ids, vectors, rows

    def _remove_stale(self, counts: dict[str, int]) -> None:
        """Chunks of one file are always numbered 0..n-1 with no gaps (every write covers a file
        whole, in order), so a file has stale points exactly when chunk n exists: probe those ids
        (cheap everywhere), and filter-delete only for files that shrank."""
        from qdrant_client import models

        name = self.parsed.collection
        shrunk: list[str] = []
        probes = [(path, point_id(path, n)) for path, n in counts.items()]
        for start in range(0, len(probes), PROBE_IDS):
            group = probes[start:start + PROBE_IDS]
            found = self.conn.call("checking for stale chunks", lambda g=group: self.conn.client.retrieve(
                name, ids=[pid for _, pid in g], with_payload=False, with_vectors=False))
            present = {str(p.id) for p in found}
            shrunk.extend(path for path, pid in group if pid in present)
        for path in shrunk:
            selector = models.FilterSelector(filter=models.Filter(must=[
                *qdrant_conditions(path),  # path, and a table's record's id
                models.FieldCondition(key="chunk", range=models.Range(gte=counts[path])),
            ]))
            self.conn.call("deleting stale chunks",
                           lambda s=selector: self.conn.client.delete(name, points_selector=s, wait=True))

    # --- incremental runs (state.py) ------------------------------------------------------------
    def reset(self) -> None:
        """Empty the collection, keeping its configuration (HNSW, quantization, indexes)."""
        from qdrant_client import models

        name, client = self.parsed.collection, self.conn.client
        everything = models.FilterSelector(filter=models.Filter())
        self.conn.call("emptying the collection", lambda: client.delete(name, points_selector=everything, wait=True))
        if self._without_sparse or self._other_type:
            self._recreate()
        if self._other_model:
            self.conn.call("updating the collection", lambda: client.update_collection(name, metadata=self.metadata))
            self._other_model = ""
        self._sync()

    def _recreate(self) -> None:
        """--full on a collection made without --sparse: Qdrant adds no sparse vector to an existing
        collection, so the (now empty) collection is made again, with it."""
        name = self.parsed.collection
        self._db = None
        self.conn.call("recreating the collection", lambda: self.conn.client.delete_collection(name))
        self._create()
        self._db = group_commits(self.conn.client, name) if self.parsed.local else None
        what = f"a sparse vector {SPARSE_VECTOR!r} (--sparse bm25)" if self._without_sparse else \
            f"--vector-type {self.vector_type}"
        self._without_sparse = False
        self._other_type = ""
        self.notices.append(f"made {self.display} again, with {what}: a Qdrant collection's vectors are fixed when "
                            "it is created")

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> None:
        """Delete every point of the given paths. A redone file is upserted in place under the
        same location and never listed here; a pruned one is. Idempotent."""
        from qdrant_client import models

        name, client = self.parsed.collection, self.conn.client
        paths = sorted(set().union(*stale.values())) if stale else []
        for selected in qdrant_filters(paths):  # files by path, a table's records by path and id
            selector = models.FilterSelector(filter=selected)
            self.conn.call("deleting points of removed files",
                           lambda s=selector: client.delete(name, points_selector=s, wait=True))
        self._sync()

    def close(self) -> None:
        if self.conn is not None:
            self._db = None
            self.conn.close()
            self.conn = None


def chunk_counts(table) -> dict[str, int]:
    """path (a table's record: path//id) -> number of chunks this write holds for it (max chunk + 1)."""
    counts: dict[str, int] = {}
    for path, chunk in zip(row_keys(table).to_pylist(), table.column("chunk").to_pylist()):
        counts[path] = max(counts.get(path, 0), int(chunk) + 1)
    return counts


def _sparse_vectors(table) -> list[Any]:
    """The `sparse` column as Qdrant's sparse vectors, one per row (an empty one where a chunk has no term)."""
    from qdrant_client import models

    return [models.SparseVector(indices=row["indices"] if row else [], values=row["values"] if row else [])
            for row in table.column("sparse").to_pylist()]


def vector_params(info: Any, display: str) -> tuple[int, str]:
    """(size, distance name) of a collection's single unnamed vector."""
    vectors = info.config.params.vectors
    if isinstance(vectors, dict) or vectors is None:
        names = ", ".join(vectors or {}) or "none"
        raise UsageError(f"{display} uses named vectors ({names}); gpucli writes one unnamed vector per point. "
                         "Write to another collection")
    distance = getattr(vectors.distance, "value", vectors.distance)
    return int(vectors.size), str(distance)


def _dims(schema, metadata: dict[str, str]) -> int:
    import pyarrow as pa

    index = schema.get_field_index("embedding")
    if index < 0 or not pa.types.is_fixed_size_list(schema.field(index).type) or schema.get_field_index("chunk") < 0:
        raise UsageError("a Qdrant output takes embeddings (rows with `chunk` and a fixed-size `embedding`); "
                         "use `gpucli embed`, or a Parquet/JSONL output for this task")
    size = schema.field(index).type.list_size
    declared = metadata.get("gpucli.dims")
    if declared and int(declared) != size:
        raise UsageError(f"the task declares {declared}-d vectors but its schema holds {size}-d ones. This is a bug.")
    return size
