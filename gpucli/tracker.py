"""Per-input accounting: every input ends as all of its rows or exactly one failure.

Items of one file may finish in any order and in different batches; the tracker holds a
file's rows until the last item is back, then hands them on together. If any item of a
file fails, the file fails once and its other rows are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucli.records import Failure, Item, Source


@dataclass
class _Open:
    source: Source
    expected: int
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    failed: bool = False


class Tracker:
    def __init__(self) -> None:
        self._open: dict[int, _Open] = {}

    def expect(self, source: Source, count: int) -> None:
        self._open[source.id] = _Open(source, count)

    def add(self, item: Item, row: dict[str, Any]) -> tuple[Source, list[dict[str, Any]]] | None:
        """Record one item's row; returns (source, rows in item order) when the file is complete."""
        entry = self._open.get(item.source_id)
        if entry is None or entry.failed:
            return None
        entry.rows[item.index] = row
        if len(entry.rows) < entry.expected:
            return None
        del self._open[item.source_id]
        return entry.source, [entry.rows[i] for i in sorted(entry.rows)]

    def fail(self, item: Item, stage: str, error: str) -> Failure | None:
        """Fail the item's file; returns its failure record the first time only."""
        entry = self._open.pop(item.source_id, None)
        if entry is None:
            return None
        return Failure(entry.source.path, stage, error)

    def source_of(self, item: Item) -> Source | None:
        entry = self._open.get(item.source_id)
        return entry.source if entry else None

    @property
    def open_count(self) -> int:
        return len(self._open)
