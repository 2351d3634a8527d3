"""The collection a run writes to: what the run needs of it, checking an existing one before any
work, creating one, and what must be repaired (by `--full`) before the first write.

A collection's vector size, distance and vectors (dense, sparse, their type) are fixed when it
is made: a mismatch of size or distance is refused at once (exit 2); another model, a missing
sparse vector or another vector type is refused at the first write unless `reset` rebuilds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucli.core.errors import GpucliError, UsageError
from gpucli.output.sinks.qdrant.connection import Connection
from gpucli.output.sinks.qdrant.vector_types import params as vector_type_params
from gpucli.output.sinks.qdrant.vector_types import stored_type

SPARSE_VECTOR = "bm25"  # the named sparse vector of --sparse bm25, beside the unnamed dense one (issue 30)
# How the vectors were made (issue 14): `gpucli search` embeds queries with the recorded query prompt.
PROMPT_KEYS = ("gpucli.pooling", "gpucli.normalize", "gpucli.prompt", "gpucli.prompt_name", "gpucli.query_prompt",
               "gpucli.query_prompt_name")
KEPT_METADATA = ("gpucli.model", "gpucli.dims", "gpucli.version", "gpucli.task", "gpucli.vector_type",
                 "gpucli.truncate_dims", "gpucli.full_dims") + PROMPT_KEYS


@dataclass(frozen=True)
class Wanted:
    """What this run writes, from the task's schema and metadata: the collection must fit it."""

    dims: int
    model: str = ""
    sparse: bool = False  # --sparse bm25 (issue 30): a named sparse vector beside the dense one
    vector_type: str = "float32"  # --vector-type (issue 30): Qdrant's way for each (vector_types.py)
    metadata: dict[str, str] = field(default_factory=dict)  # kept on the collection, read by `gpucli search`

    @classmethod
    def of(cls, schema: Any, metadata: dict[str, str]) -> Wanted:
        return cls(dims=schema_dims(schema, metadata), model=metadata.get("gpucli.model", ""),
                   sparse=schema.get_field_index("sparse") >= 0,
                   vector_type=metadata.get("gpucli.vector_type", "float32"),
                   metadata={k: v for k, v in metadata.items() if k in KEPT_METADATA})


@dataclass(frozen=True)
class Mismatch:
    """How an existing collection differs from what the run writes, in ways `reset` repairs."""

    other_model: str = ""  # the model its vectors were made with, when another
    without_sparse: bool = False  # the run writes sparse vectors; the collection, made before, has none
    other_type: str = ""  # the vector type it was made for, when another

    @property
    def needs_new_collection(self) -> bool:
        """Qdrant fixes a collection's vectors when it is made: only a new collection repairs these."""
        return self.without_sparse or bool(self.other_type)

    def refusal(self, display: str, wanted: Wanted) -> UsageError | None:
        """The error the first write raises while the mismatch stands (vectors of two kinds never mix)."""
        if self.other_model:
            return UsageError(f"{display} holds vectors of model {self.other_model!r}, not {wanted.model!r}: "
                              f"mixing models makes search meaningless. Use --model {self.other_model}, another "
                              "collection, or --full to empty this one and rebuild it")
        if self.without_sparse:
            return UsageError(f"{display} was made without --sparse and has no sparse vector {SPARSE_VECTOR!r}; "
                              "use --full to make it again with one, or another collection")
        if self.other_type:
            return UsageError(f"{display} was made for --vector-type {self.other_type}, not {wanted.vector_type}; "
                              "use --full to make it again, or another collection")
        return None

    def rebuilt_with(self, wanted: Wanted) -> str:
        """What a new collection adds, for the run's notice."""
        if self.without_sparse:
            return f"a sparse vector {SPARSE_VECTOR!r} (--sparse bm25)"
        return f"--vector-type {wanted.vector_type}"


def check_existing(conn: Connection, wanted: Wanted) -> Mismatch:
    """Refuse a collection of other dims or distance (UsageError, before any work); report the rest."""
    name, display = conn.target.collection, conn.target.display
    info = conn.call("reading the collection", lambda: conn.client.get_collection(name))
    size, distance = vector_params(info, display)
    if size != wanted.dims:
        raise UsageError(f"{display} holds {size}-d vectors; model {wanted.model!r} makes {wanted.dims}-d ones. "
                         "Write to another collection, use the model the collection was made with, or delete "
                         "the collection")
    if distance != "Cosine":
        raise UsageError(f"{display} uses {distance} distance; gpucli writes to Cosine collections. "
                         "Write to another collection")
    stored = (getattr(info.config, "metadata", None) or {}).get("gpucli.model")
    kept_type = stored_type(info)
    return Mismatch(other_model=stored if stored and wanted.model and stored != wanted.model else "",
                    without_sparse=wanted.sparse and SPARSE_VECTOR not in (info.config.params.sparse_vectors or {}),
                    other_type="" if kept_type == wanted.vector_type else kept_type)


def create(conn: Connection, wanted: Wanted) -> None:
    """Make the collection: one unnamed cosine vector of the model's size (+ the sparse one)."""
    from qdrant_client import models

    name, client = conn.target.collection, conn.client
    vectors = models.VectorParams(size=wanted.dims, distance=models.Distance.COSINE,
                                  **vector_type_params(wanted.vector_type))  # --vector-type (issue 30)
    # --sparse bm25 (issue 30): BM25's IDF is Qdrant's, from the collection (tasks/_sparse.py)
    sparse = {SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)} if wanted.sparse else None
    try:
        conn.call("creating the collection", lambda: client.create_collection(
            name, vectors_config=vectors, sparse_vectors_config=sparse, metadata=wanted.metadata))
    except GpucliError as exc:
        if "metadata" not in str(exc) and "unknown field" not in str(exc):
            raise
        # a server older than collection metadata (1.16): the points' `model` payload suffices
        conn.call("creating the collection", lambda: client.create_collection(
            name, vectors_config=vectors, sparse_vectors_config=sparse))
    # a keyword index on path keeps the stale-chunk and prune deletes cheap (embedded mode too: Qdrant Edge)
    conn.call("indexing path", lambda: client.create_payload_index(
        name, "path", models.PayloadSchemaType.KEYWORD, wait=True))


def vector_params(info: Any, display: str) -> tuple[int, str]:
    """(size, distance name) of a collection's single unnamed vector."""
    vectors = info.config.params.vectors
    if isinstance(vectors, dict) or vectors is None:
        names = ", ".join(vectors or {}) or "none"
        raise UsageError(f"{display} uses named vectors ({names}); gpucli writes one unnamed vector per point. "
                         "Write to another collection")
    distance = getattr(vectors.distance, "value", vectors.distance)
    return int(vectors.size), str(distance)


def schema_dims(schema: Any, metadata: dict[str, str]) -> int:
    """The vector size the task's schema holds (UsageError for a task that makes no embeddings)."""
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
