"""The collection a run writes to: what the run needs of it, checking an existing one before any
work, creating one, and what must be repaired (by `--full`) before the first write.

A collection's vector size, distance and vectors (dense, sparse, their type) are fixed when it
is made: a mismatch of size or distance is refused at once (exit 2); another model, a missing
sparse vector or another vector type is refused at the first write unless `reset` rebuilds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucli.core.errors import UsageError
from gpucli.output.sinks.qdrant.protocol import SPARSE_VECTOR, Client, NewCollection

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


def check_existing(client: Client, wanted: Wanted) -> Mismatch:
    """Refuse a collection of other dims or distance (UsageError, before any work); report the rest."""
    display = client.target.display
    found = client.describe()
    size = found.size(display)
    if size != wanted.dims:
        raise UsageError(f"{display} holds {size}-d vectors; model {wanted.model!r} makes {wanted.dims}-d ones. "
                         "Write to another collection, use the model the collection was made with, or delete "
                         "the collection")
    if found.distance != "Cosine":
        raise UsageError(f"{display} uses {found.distance} distance; gpucli writes to Cosine collections. "
                         "Write to another collection")
    stored = found.metadata.get("gpucli.model")
    return Mismatch(other_model=stored if stored and wanted.model and stored != wanted.model else "",
                    without_sparse=wanted.sparse and SPARSE_VECTOR not in found.sparse,
                    other_type="" if found.vector_type == wanted.vector_type else found.vector_type)


def create(client: Client, wanted: Wanted) -> None:
    """Make the collection: one unnamed cosine vector of the model's size (+ the sparse one), and a
    keyword index on path."""
    client.create(NewCollection(dims=wanted.dims, sparse=wanted.sparse, vector_type=wanted.vector_type,
                                metadata=wanted.metadata))


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
