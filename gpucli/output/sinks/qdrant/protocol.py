"""What gpucli asks of one Qdrant collection, in gpucli's own types: the calls a server
(server.py, through qdrant-client) and Qdrant Edge in this process (edge/, Edge's own types)
both answer.

Why gpucli's own types: embedded mode used to take qdrant-client's pydantic models and translate
them into Edge's, so every embedded search imported qdrant-client (~0.7 s of a 1 s search) and
every point was built twice. Now each client builds its own library's types from these plain
messages, and the embedded paths never import qdrant-client.

A client is bound to one collection (`target.collection`); each call waits for Qdrant's
acknowledgement and raises GpucliError (exit 1), OutputError (the disk, exit 3) or
RunFailedError (a server's retries spent, exit 3) with the output named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gpucli.core.errors import UsageError

if TYPE_CHECKING:
    from gpucli.output.sinks.qdrant.target import Target

SPARSE_VECTOR = "bm25"  # the named sparse vector of --sparse bm25, beside the unnamed dense one


@dataclass(frozen=True)
class NewCollection:
    """What a collection is made with: one unnamed cosine vector of `dims`, stored the way
    `vector_type` asks (vector_types.py), Qdrant's IDF sparse vector when `sparse`, and gpucli's
    metadata (the model, its prompts: `gpucli search` reads them)."""

    dims: int
    sparse: bool = False
    vector_type: str = "float32"
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Described:
    """What gpucli reads of an existing collection."""

    dims: int  # the unnamed dense vector's size; 0 when the collection has named dense vectors
    distance: str  # "Cosine", "Dot", ...
    named: tuple[str, ...] = ()  # named dense vectors: a collection gpucli did not make
    sparse: tuple[str, ...] = ()  # names of its sparse vectors
    vector_type: str = "float32"  # what its datatype or quantization stands for (vector_types.py)
    metadata: dict[str, str] = field(default_factory=dict)
    points: int = 0

    def size(self, display: str) -> int:
        """The size of the collection's single unnamed vector (UsageError for named vectors)."""
        if self.named or not self.dims:
            raise UsageError(f"{display} uses named vectors ({', '.join(self.named) or 'none'}); gpucli writes one "
                             "unnamed vector per point. Write to another collection")
        return self.dims


@dataclass(frozen=True)
class SparseVector:
    """Term ids and their weights (--sparse bm25); Qdrant applies the IDF."""

    indices: list[int]
    values: list[float]


@dataclass(frozen=True)
class Rows:
    """One write's rows as the sink got them (an Arrow table: `path`, `chunk`, `embedding`, the
    task's columns, `sparse` with --sparse bm25), to be upserted as points (points.py): each
    client builds its own library's points from them, and they cross a process boundary as
    Arrow buffers, not as a million Python objects."""

    table: Any  # pyarrow.Table
    dims: int
    model: str  # the payload's `model`
    sparse: bool = False
    with_text: bool = True  # `?text=false` leaves `text` out of the payload

    def __len__(self) -> int:
        return int(self.table.num_rows)


@dataclass(frozen=True)
class Selection:
    """Points selected by their payload: `path` among `paths`, `id` among `ids` (a table's
    records), `chunk` from `from_chunk` on; each empty part selects everything, so
    `Selection()` is every point."""

    paths: tuple[str, ...] = ()
    ids: tuple[str, ...] = ()
    from_chunk: int | None = None

    @property
    def what(self) -> str:
        """The delete, as an error message names it."""
        if self.from_chunk is not None:
            return "deleting stale chunks"
        return "deleting points of removed files" if self.paths else "emptying the collection"


@dataclass(frozen=True)
class Nearest:
    """The dense vectors nearest `vector`; `oversampling` asks a quantized collection for that many
    candidates per hit, rescored with the original vectors (vector_types.OVERSAMPLING)."""

    vector: list[float]
    limit: int
    oversampling: float | None = None


@dataclass(frozen=True)
class Lexical:
    """BM25: the sparse vectors against the query's terms, with Qdrant's IDF."""

    terms: SparseVector
    limit: int


@dataclass(frozen=True)
class Hybrid:
    """Both lists, `depth` candidates each, fused by Qdrant's RRF with its `rrf_k`."""

    vector: list[float]
    terms: SparseVector
    limit: int
    depth: int
    rrf_k: int


Search = Nearest | Lexical | Hybrid


@dataclass(frozen=True)
class Found:
    """One hit: its score and payload."""

    score: float
    payload: dict[str, Any]


class Client(Protocol):
    """One collection's calls (see the module's docstring)."""

    target: Target
    notices: list[str]  # for the user: a collection moved from qdrant-client's local mode (embedded)

    def exists(self) -> bool: ...

    def describe(self) -> Described: ...

    def create(self, new: NewCollection) -> None:
        """Make the collection, with a keyword index on `path` (the deletes use it)."""

    def set_metadata(self, metadata: dict[str, str]) -> None: ...

    def drop(self) -> None:
        """Delete the collection (gone: `exists` is False)."""

    def upsert(self, rows: Rows) -> None:
        """The rows as points (ids: uuid5 of key and chunk), in batches of `?batch=N`."""

    def present(self, ids: list[str]) -> set[str]:
        """Which of these point ids exist."""

    def delete(self, selection: Selection) -> None: ...

    def search(self, search: Search) -> list[Found]: ...

    def sample_payload(self, keys: list[str]) -> dict[str, Any] | None:
        """These payload keys of one point, or None for an empty collection."""

    def flush(self) -> None:
        """Everything written so far is durable once this returns."""

    def index(self) -> bool:
        """Build the indexes of what was written since the last time (embedded; a server
        indexes by itself); True when anything was built."""

    def close(self) -> None: ...
