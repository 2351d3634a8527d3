"""The contract every sink implements.

The writer calls every method from a worker thread (never on the event loop), so a sink
may block. `write` returns only once its rows are durable: the writer counts the inputs
behind them as done at that moment and not before.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import pyarrow as pa


class Sink:
    """Base class. Subclasses set `name`, implement `accepts` and the three methods."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""

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
        """Where the ledger and the run lock live (see state.py): beside the output."""
        return Path(self.target.rstrip("/") + ".gpucli")

    def open(self, schema: pa.Schema, metadata: dict[str, str]) -> None:
        """Prepare the output (create the directory or collection, check dims).
        Raise `UsageError` when the output cannot take this schema."""

    def write(self, table: pa.Table) -> str | None:
        """Write rows durably (columns: `path` + the task's schema). Returns where they went
        (a part name) when the sink keeps rows in separate places, else None."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and release; the output must be readable afterwards."""

    # --- incremental runs (see state.py) -------------------------------------------------
    def reset(self) -> None:
        """`--full`, or settings changed: remove every row this output holds."""

    def locations(self) -> set[str]:
        """The places (parts) that exist now; those the ledger does not know were left by a
        crash before their inputs were marked done, and are removed."""
        return set()

    def remove_location(self, name: str) -> None:
        """Delete one orphaned place."""

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> None:
        """Remove rows no longer current: for each location, the rows of those paths (their
        input was redone elsewhere, or pruned). Must be idempotent: it may run twice."""
