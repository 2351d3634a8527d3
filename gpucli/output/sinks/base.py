"""The contract every sink implements.

The writer calls every method from a worker thread (never on the event loop), so a sink
may block. `write` returns only once its rows are durable: the writer counts the inputs
behind them as done at that moment and not before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class Rewrite:
    """What `supersede` did when it moved rows that stay (a file rewritten in place): the new
    name of each moved location (None: no rows left), and what `publish` puts in place once
    the ledger holds the new names (see state.py: the ledger commits first, then the file)."""

    renamed: dict[str, str | None] = field(default_factory=dict)
    pending: str | None = None


class Sink:
    """Base class. Subclasses set `name`, implement `accepts` and the three methods."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    reads_back: ClassVar[bool] = False  # whether `rows_of` reads rows back (copies of content: gpucli/output/dedup.py)
    # whether the ledger lives in the store itself (PostgreSQL): a part's rows and its ledger entries
    # then commit in one transaction of the store (the ledger `open_ledger` gives: its `write_done`),
    # never `write` then `mark_done`; such a sink also has its own `run_lock` and `made_with`
    ledger_in_store: ClassVar[bool] = False

    def __init__(self, target: str) -> None:
        self.target = target

    @classmethod
    def accepts(cls, target: str) -> bool:
        """Whether `--out target` means this sink (a suffix, a URL scheme)."""
        raise NotImplementedError

    @property
    def failures_path(self) -> str:
        """Where the failures JSONL goes: beside the output."""
        return self.target.rstrip("/") + ".failures.jsonl"

    @property
    def display(self) -> str:
        """How the output is named in the summary (never with secrets)."""
        return self.target

    @property
    def state_dir(self) -> Path:
        """Where the ledger and the run lock live (see ledger.py): beside the output, `OUT.gpucli/`,
        never inside it (a dataset directory holds only what readers read: gpucli/output/state_dir.py)."""
        return Path(self.target.rstrip("/") + ".gpucli")

    def earlier_state_dirs(self) -> list[Path]:
        """Where an earlier gpucli kept this output's state: what only reads the ledger finds it
        there (state_dir.ledger_dir) until a run moves it to `state_dir`."""
        return []

    def move_earlier_state(self) -> str | None:
        """Called before the run lock is taken: move the state an earlier gpucli kept elsewhere to
        `state_dir`; a note for the run's log when it moved (once: the next run finds nothing to
        move). A sink whose move needs its lock makes it in `open` instead (Qdrant's)."""
        return None

    def read_ledger(self) -> Any:
        """The ledger, read only, of a sink that keeps it in its store (`ledger_in_store`); the others
        keep theirs in `state_dir`, where the caller reads it."""
        raise NotImplementedError(f"{self.name} keeps its ledger in {self.state_dir}, not in its store. This is a bug.")

    def run_lock(self) -> Any:
        """The lock that keeps a second run off this output: a flock in `state_dir` (lock.py)."""
        from gpucli.output.lock import RunLock

        return RunLock(self.state_dir)

    def open(self, schema: pa.Schema, metadata: dict[str, str]) -> None:
        """Prepare the output (create the directory or collection, check dims).
        Raise `UsageError` when the output cannot take this schema."""

    def widen(self) -> None:
        """After the ledger accepted this run's settings: bring what earlier runs wrote up to
        the schema `open` was given, where readers need it (see ParquetSink)."""

    def write(self, table: pa.Table) -> str | None:
        """Write rows durably (columns: `path` + the task's schema). Returns where they went
        (a part name) when the sink keeps rows in separate places, else None."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and release; the output must be readable afterwards."""

    def discard(self) -> None:
        """After `close`, for a run that found no input: take back what `open` made beyond the
        output's directories, lock and ledger (Output.discard removes those), e.g. an empty
        collection."""

    def rows_of(self, location: str, keys: set[str]) -> pa.Table | None:
        """The rows these inputs have at `location`, as written (every column, in any order), for
        copies of their content (gpucli/output/dedup.py); may hold other rows too. None when it cannot
        (`reads_back` False, or the place is gone): the copies are then embedded again. Called from a thread while
        the writer writes: it reads committed places only."""
        return None

    # --- incremental runs (see state.py) -------------------------------------------------
    def foreign(self) -> str | None:
        """Called before anything is created, when the output has no ledger: a description of
        what the target already holds (gpucli did not write it, so it must not delete it), or
        None when it is missing or empty. Raise `UsageError` when it cannot be an output at all."""
        return None

    def reset(self) -> None:
        """`--full`, or settings changed: remove every row this output holds."""

    def recover(self, known: set[str], last: str | None) -> dict[str, str | None]:
        """At open, with the locations the ledger holds and the last one it ever committed:
        remove what a crash left that the ledger does not know, and never name a new place
        after one the ledger listed. Returns locations renamed on the way (see `Rewrite`)."""
        for orphan in self.locations() - known:
            self.remove_location(orphan)
        return {}

    def locations(self) -> set[str]:
        """The places (parts) that exist now; those the ledger does not know were left by a
        crash before their inputs were marked done, and are removed."""
        return set()

    def remove_location(self, name: str) -> None:
        """Delete one orphaned place."""

    def next_pass(self) -> None:
        """A watch's later pass (gpucli/engines/local/watch.py): inputs written by an earlier pass
        of this process may be written again (a sink that added rows unkeyed, since each input came
        once, merges from now on)."""

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> Rewrite | None:
        """Remove rows no longer current: for each location, the rows of those paths (their
        input was redone elsewhere, or pruned). Must be idempotent: it may run twice.
        A sink that moves the rows that stay returns a `Rewrite`, and makes it visible only
        in `publish`."""
        return None

    def compact(self, min_small: int, known: set[str]) -> Rewrite | None:
        """Fold small places into larger ones (gpucli/output/compaction.py: which, and when):
        the new places are ready but invisible until `publish`, as for `supersede`. None: this
        sink has nothing to fold (one file, a database) or nothing is worth it."""
        return None

    def publish(self, pending: str) -> None:
        """Put a rewrite prepared by `supersede` in place. Idempotent: an open after a crash
        calls it again with the pending mark the ledger kept."""
