"""What travels between the stages: sources, blocks of items, batches, failures, and the
messages between a worker and its parent (`Work`, `Ready`, `SetupFailed`, `Started`, `Result`,
`Failed`; the protocol is described in worker.py).

Work is carried in blocks, not items: an `Items` block holds one column per field (the
source of each item, its number within that source, its cost, its payload and the row
columns known before inference). Token ids travel as one flat array with starts and
lengths (`Ragged`). Per-item Python objects exist only where a task cuts its inputs one
at a time (`Item`, turned into a block at once) or an item is genuinely alone (a failure).

Only plain data lives here: these objects are pickled across spawned processes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucli.core.stages import Stage


@dataclass(slots=True)
class Source:
    """One input file as the reader found it."""

    id: int
    path: str  # relative to the root it was found under, posix separators
    abspath: str
    size: int = 0
    mtime_ns: int = 0
    digest: str = ""  # content hash, set when the file is read (for the ledger)
    dev: int = 0  # st_dev and st_ino at walk time: the read opens this file and no other
    ino: int = 0
    version: str = ""  # an object's ETag (or generation) from the listing (gpucli/inputs/stores/); "" for a file


@dataclass(slots=True)
class Item:
    """One unit of model work cut from a source by a task's per-file `prepare`.

    `payload` goes to the worker's `predict`; `meta` holds the row columns known before
    inference (chunk number, offsets, text) and stays in the parent."""

    source_id: int
    index: int
    payload: Any
    cost: int = 1
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Ragged:
    """Rows of different lengths as one flat array: row i is values[starts[i]:starts[i]+lengths[i]].

    Rows may overlap (chunks that share tokens point into one document's ids); `take`
    returns a compact copy holding only the rows asked for, in that order."""

    values: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    def row(self, i: int) -> np.ndarray:
        return self.values[self.starts[i] : self.starts[i] + self.lengths[i]]

    def take(self, idx: np.ndarray) -> Ragged:
        lengths = self.lengths[idx]
        starts = _exclusive_cumsum(lengths)
        gather = np.repeat(self.starts[idx] - starts, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
        return Ragged(self.values[gather], starts, lengths)

    def compact(self) -> Ragged:
        """Rows back to back in order (what `padded` fills from)."""
        if len(self) == 0 or (self.starts[0] == 0 and np.array_equal(self.starts[1:], np.cumsum(self.lengths)[:-1])
                              and len(self.values) == int(self.lengths.sum())):
            return self
        return self.take(np.arange(len(self)))

    @staticmethod
    def concat(parts: list[Ragged]) -> Ragged:
        shifts = _exclusive_cumsum(np.array([len(p.values) for p in parts], dtype=np.int64))
        return Ragged(np.concatenate([p.values for p in parts]),
                      np.concatenate([p.starts + shift for p, shift in zip(parts, shifts)]),
                      np.concatenate([p.lengths for p in parts]))

    def padded(self, pad: int, prefix: Sequence[int] = (), suffix: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        """(ids, mask) as int64 matrices, each row prefix + its values + suffix, right-padded;
        built without a loop over rows."""
        rows = self.compact()
        n, head, tail = len(rows), len(prefix), len(suffix)
        width = head + (int(rows.lengths.max()) if n else 0) + tail
        ids = np.full((n, width), pad, dtype=np.int64)
        cols = np.arange(width)
        ends = head + rows.lengths[:, None]
        if head:
            ids[:, :head] = prefix
        ids[(cols >= head) & (cols < ends)] = rows.values
        for j, token in enumerate(suffix):
            ids[np.arange(n), head + rows.lengths + j] = token
        return ids, (cols < ends + tail).astype(np.int64)


def _exclusive_cumsum(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values), dtype=np.int64)
    if len(values) > 1:
        np.cumsum(values[:-1], out=out[1:])
    return out


@dataclass(slots=True)
class Items:
    """A block of items, one column per field (see the module docstring).

    `payload` is a `Ragged` (token ids) or a list with one object per item; `meta` maps a
    row column to one value per item (numpy arrays; object arrays for strings)."""

    source_ids: np.ndarray  # int64
    index: np.ndarray  # int64: the item's number within its source
    cost: np.ndarray  # int64
    payload: Any
    meta: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.source_ids)

    @property
    def total_cost(self) -> int:
        return int(self.cost.sum())

    def take(self, idx: np.ndarray) -> Items:
        idx = np.asarray(idx, dtype=np.int64)
        return Items(self.source_ids[idx], self.index[idx], self.cost[idx], take_payload(self.payload, idx),
                     {name: column[idx] for name, column in self.meta.items()})

    def without_payload(self) -> Items:
        """What the parent keeps of a batch while its payload is in a worker."""
        return Items(self.source_ids, self.index, self.cost, None, self.meta)

    @staticmethod
    def concat(blocks: list[Items]) -> Items:
        if len(blocks) == 1:
            return blocks[0]
        payloads = [b.payload for b in blocks]
        payload: Any
        if any(p is None for p in payloads):  # batches whose payloads are in a worker
            payload = None
        elif isinstance(payloads[0], Ragged):
            payload = Ragged.concat(payloads)
        else:
            payload = [p for ps in payloads for p in ps]
        return Items(np.concatenate([b.source_ids for b in blocks]), np.concatenate([b.index for b in blocks]),
                     np.concatenate([b.cost for b in blocks]), payload,
                     {name: np.concatenate([b.meta[name] for b in blocks]) for name in blocks[0].meta})

    @staticmethod
    def from_items(items: list[Item]) -> Items:
        """A block from a task's per-file items (the meta keys of the first item name the columns)."""
        names = list(items[0].meta) if items else []
        return Items(np.fromiter((i.source_id for i in items), np.int64, len(items)),
                     np.fromiter((i.index for i in items), np.int64, len(items)),
                     np.fromiter((i.cost for i in items), np.int64, len(items)),
                     [i.payload for i in items],
                     {name: object_column([i.meta.get(name) for i in items]) for name in names})


def concat_outputs(outputs: list[Any]) -> Any:
    """Several batches' outputs as one, in order: matrices stacked, lists joined; None when
    they are of different kinds (the caller then takes them one by one)."""
    if all(isinstance(o, np.ndarray) for o in outputs):
        shapes = {o.shape[1:] for o in outputs}
        return np.concatenate(outputs) if len(shapes) == 1 else None
    if all(isinstance(o, list) for o in outputs):
        return [value for o in outputs for value in o]
    return None


def take_payload(payload: Any, idx: np.ndarray) -> Any:
    if isinstance(payload, Ragged):
        return payload.take(idx)
    if payload is None:
        return None
    return [payload[i] for i in idx]


def object_column(values: list[Any]) -> np.ndarray:
    """A 1-d object array of any values (np.array would turn equal-length lists into 2-d)."""
    column = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        column[i] = value
    return column


@dataclass(slots=True)
class Batch:
    """Items cut for one forward pass; `attempts` counts the worker deaths it caused."""

    id: int
    items: Items
    attempts: int = 0

    @property
    def cost(self) -> int:
        return self.items.total_cost

    def __len__(self) -> int:
        return len(self.items)


@dataclass(slots=True, frozen=True)
class Failure:
    """Exactly one per failed or skipped input; written to the failures JSONL."""

    path: str
    stage: Stage  # a plain word is taken too (a failures file read back) and made a Stage
    error: str
    size: int = -1  # the input's stat when it failed (-1: not known), so that a rerun can tell
    mtime_ns: int = -1  # "failed again, unchanged" from "a new problem" (--fail-on new)
    cause: str = ""  # a kind the summary counts apart (UNKNOWN_TOKENS); not in the failures file

    def __post_init__(self) -> None:
        if not isinstance(self.stage, Stage):
            object.__setattr__(self, "stage", Stage(self.stage))  # an unknown word raises: a typo, a bug
        if " object at 0x" in self.error:
            object.__setattr__(self, "error", naming_the_input(self.error, self.path))

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "stage": self.stage.value, "error": self.error}


OBJECT_REPR = re.compile(r"<[\w.]+ object at 0x[0-9a-fA-F]+>")


def naming_the_input(error: str, path: str) -> str:
    """A library's error with the input named where it named our object: Pillow's "cannot identify
    image file <_io.BytesIO object at 0x7f...>" (the bytes gpucli handed it) says nothing to a
    reader of the failures file, and differs on every run. Every failure record goes through here,
    whichever decoder or library raised."""
    return OBJECT_REPR.sub(repr(path), error)


UNKNOWN_TOKENS = "unknown_tokens"  # a Failure's cause: the model cannot read the text's language
MOVED_IN_READ = "moved_in_read"  # a Failure's cause: gone or replaced between the walk and the read (a watch waits)


# --- the worker's messages (the protocol: worker.py) ------------------------------------------
# Frozen and slotted: one crosses a Pipe per batch, so they pickle as the class and its fields
# (a Result is its outputs' buffer plus ~20 bytes), and nothing changes them on the way.


@dataclass(frozen=True, slots=True)
class Work:
    """Parent -> worker: one batch to predict (`packed`: what the task's `pack` made of it)."""

    batch_id: int
    packed: Any


@dataclass(frozen=True, slots=True)
class Ready:
    """The worker loaded its model."""

    pid: int
    device: str


@dataclass(frozen=True, slots=True)
class SetupFailed:
    """The worker could not load its model; `message` is its own error, for the user."""

    message: str


@dataclass(frozen=True, slots=True)
class Started:
    """Sent just before `predict` runs on the batch (a crash then blames this batch)."""

    batch_id: int


@dataclass(frozen=True, slots=True)
class Result:
    """One output per item of the batch, and the seconds `predict` took."""

    batch_id: int
    outputs: Any
    seconds: float


class FailureKind(enum.Enum):
    """Why a batch failed while its worker stayed alive."""

    ERROR = "error"  # predict raised, the payload could not be unpacked, or the outputs do not fit
    OOM = "oom"  # out of memory: the run may lower its batch caps (recovery.after_oom)


@dataclass(frozen=True, slots=True)
class Failed:
    """The batch failed in a worker that goes on; `message` describes the error."""

    batch_id: int
    kind: FailureKind
    message: str


WorkerMessage = Ready | SetupFailed | Started | Result | Failed


@dataclass(slots=True)
class ReadChunk:
    """What one reader call gives the run: a block of items for the inputs that need the
    model, and the inputs that ended here (failed, skipped, unchanged)."""

    sources: list[Source] = field(default_factory=list)  # inputs whose items are in `block`
    block: Items | None = None
    failures: list[Failure] = field(default_factory=list)  # walk, read and prepare failures
    unchanged: list[Source] = field(default_factory=list)  # done in an earlier run, same content
    found: int = 0  # inputs the walk yielded for this chunk


def rows_to_table(rows: list[dict[str, Any]], schema: Any) -> Any:
    """Column by column; fixed-size vectors are stacked into one numpy block (fast)."""
    import numpy as np
    import pyarrow as pa

    if not rows:
        return schema.empty_table()
    columns = []
    for column_field in schema:
        values: list[Any] = [row.get(column_field.name) for row in rows]
        if pa.types.is_fixed_size_list(column_field.type):
            flat = np.asarray(np.stack(values), dtype=column_field.type.value_type.to_pandas_dtype()).ravel()
            columns.append(pa.FixedSizeListArray.from_arrays(pa.array(flat), column_field.type.list_size))
        else:
            columns.append(pa.array(values, type=column_field.type))
    return pa.Table.from_arrays(columns, schema=schema)
