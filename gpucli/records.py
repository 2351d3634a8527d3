"""What travels between the stages: sources, items, batches, failures.

Only plain data lives here: these objects are pickled across spawned processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Source:
    """One input file as the reader found it."""

    id: int
    path: str  # relative to the root it was found under, posix separators
    abspath: str
    size: int = 0
    mtime_ns: int = 0
    digest: str = ""  # content hash, set when the file is read (for the ledger)
    dev: int = 0  # st_dev and st_ino of the file the walk stat'ed: the read opens that file or fails
    ino: int = 0  # (0: not checked)


@dataclass(slots=True)
class Item:
    """One unit of model work cut from a source (a text chunk, an image, an audio segment).

    `payload` goes to the worker's `predict`; `meta` holds the row columns known before
    inference (chunk number, offsets, text) and stays in the parent.
    """

    source_id: int
    index: int
    payload: Any
    cost: int = 1
    meta: dict[str, Any] = field(default_factory=dict)
    enqueued_at: float = 0.0


@dataclass(slots=True)
class Batch:
    id: int
    items: list[Item]
    attempts: int = 0

    @property
    def cost(self) -> int:
        return sum(item.cost for item in self.items)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(slots=True, frozen=True)
class Failure:
    """Exactly one per failed or skipped input; written to the failures JSONL."""

    path: str
    stage: str
    error: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "stage": self.stage, "error": self.error}


STAGES = ("read", "decode", "preprocess", "infer", "write", "skip")
