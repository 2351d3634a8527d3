"""The commit step, both engines': one message from the loop to the writer's thread, and its answer.

On the loop (or the Ray driver's thread), `Accounts.take_commit` makes a `Commit`: the rows of
complete inputs as one part with the inputs they belong to, and the failure records and
unchanged inputs met since the last commit (`Marks`). A Commit is frozen and holds all it needs:
the writer's thread reads nothing the loop goes on changing (the accounts' live dict of sources;
a `Source` itself is never changed once the reader made it).

`write`, in the writer's thread (or the Ray driver, in turn), records it in this order:

1. the failure records: the failures file, then one ledger transaction (a many-failure tree
   costs one disk sync per commit, not one per failure, and never one on the loop);
2. the unchanged inputs' stat, one transaction;
3. the part: the sink makes it durable, then the ledger marks its inputs done (the rule at the
   top of gpucli/output/ledger.py: nothing is marked done that is not durable); where the ledger
   lives in the store (PostgreSQL), rows and entries in one transaction (Output.commit_part).

Failures go first so that a sink that fails (a full disk) still leaves them on record. Back on
the loop, `Accounts.durable(Committed)` counts what the commit made durable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gpucli.core.records import Failure, Source


def _frozen_ids(ids: Any = ()) -> np.ndarray:
    array = np.array(ids, dtype=np.int64)  # a copy of its own, read-only
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class Commit:
    """A part (None when there is none: marks only) and the marks that go with it."""

    table: Any = None  # the part's rows with their inputs' columns (pyarrow.Table), or None
    source_ids: np.ndarray = field(default_factory=_frozen_ids)  # the part's inputs, one each, ascending
    inputs: tuple[Source, ...] = ()  # their Sources, in the same order
    rows: tuple[int, ...] = ()  # their rows in the part, in the same order
    failures: tuple[Failure, ...] = ()
    unchanged: tuple[Source, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_ids", _frozen_ids(self.source_ids))


@dataclass(frozen=True)
class Committed:
    """What a commit made durable: the part's inputs and its row count, and how many of its
    failure records are known ones (failed before, unchanged: `--fail-on new`)."""

    source_ids: np.ndarray
    rows: int
    known_failures: int = 0


class Marks:
    """Failure records and unchanged inputs met on the loop since the last commit. Appending is
    all the loop does with them: the writer's thread records them with the next commit."""

    def __init__(self) -> None:
        self.failures: list[Failure] = []
        self.unchanged: list[Source] = []

    def __bool__(self) -> bool:
        return bool(self.failures or self.unchanged)

    def take(self) -> tuple[tuple[Failure, ...], tuple[Source, ...]]:
        failures, unchanged = tuple(self.failures), tuple(self.unchanged)
        self.failures, self.unchanged = [], []
        return failures, unchanged


class Recorder(Protocol):
    """What the commit step asks of the output side (gpucli/output/output.py: Output)."""

    sink: Any

    def failed(self, failures: list[Failure]) -> int: ...

    def unchanged(self, sources: list[Source]) -> None: ...

    def commit_part(self, table: Any, sources: list[Source], rows: list[int]) -> None: ...


def write(output: Recorder, commit: Commit) -> Committed:
    """Record `commit` (the writer's thread, or the Ray driver): in the module docstring's order."""
    known = output.failed(list(commit.failures)) if commit.failures else 0
    if commit.unchanged:
        output.unchanged(list(commit.unchanged))
    if commit.table is None:
        return Committed(commit.source_ids, 0, known)
    output.commit_part(commit.table, list(commit.inputs), list(commit.rows))
    return Committed(commit.source_ids, commit.table.num_rows, known)
