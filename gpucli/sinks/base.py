"""The contract every sink implements.

The writer calls every method from a worker thread (never on the event loop), so a sink
may block. `write` returns only once its rows are durable: the writer counts the inputs
behind them as done at that moment and not before.
"""

from __future__ import annotations

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

    def open(self, schema: "pa.Schema", metadata: dict[str, str]) -> None:
        """Prepare the output (create the directory or collection, check dims).
        Raise `UsageError` when the output cannot take this schema."""

    def write(self, table: "pa.Table") -> None:
        """Write rows durably (columns: `path` + the task's schema)."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and release; the output must be readable afterwards."""
