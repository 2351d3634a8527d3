"""A batch's model outputs -> rows, by the task's rules; and a part's rows -> rows with their inputs.

A task makes rows from a block of items and their outputs (`task.rows`); a task that merges an
input's rows (`merges_rows`, e.g. a recording's chunks) makes rows per item (`item_rows`), held
here until its input is complete, then `finish`es them into the input's final rows. An output
the task cannot make rows of fails the inputs of its batch only. What the rows mean for each
input's state is the accounts' business (gpucli/output/accounts.py); nothing here changes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucli.core.decision import Status
from gpucli.core.keys import with_path
from gpucli.core.records import Items, Source, concat_outputs, rows_to_table
from gpucli.output.settings import input_columns, input_fields
from gpucli.tasks import Task


@dataclass
class Made:
    """What the task made of one block's outputs: its rows (a table, or a merging task's
    (position, row) pairs) and the positions it could not use; or, for an output it could
    not use at all, `error` (the block's inputs fail)."""

    items: Items
    rows: Any = None
    bad: list[tuple[int, str]] = field(default_factory=list)
    error: str = ""


class RowMaker:
    def __init__(self, task: Task, schema: Any) -> None:
        self.task = task
        self.schema = schema  # the output's: path, the task's columns, the inputs' own
        self.row_schema = task.schema()  # a batch's rows: the task's columns only
        self._merging: dict[int, list[tuple[int, dict[str, Any]]]] = {}  # source id -> (index, row)

    @property
    def merges(self) -> bool:
        return bool(self.task.merges_rows)

    def made_many(self, finished: Sequence[tuple[Items, Any]]) -> list[Made]:
        """The outputs of several batches that came back together, as one block of rows (one
        Arrow table, not one per batch). Should the block's outputs not make rows together,
        each batch goes on its own, so that a bad output costs only its own batch's inputs."""
        if len(finished) > 1 and not self.merges:
            outputs = concat_outputs([out for _, out in finished])
            if outputs is not None:
                items = Items.concat([items.without_payload() for items, _ in finished])
                try:
                    return [Made(items, *self.task.rows(items, outputs))]
                except Exception:  # noqa: BLE001 - one by one below: the bad batch fails alone
                    pass
        return [self.made(items, out) for items, out in finished]

    def made(self, items: Items, outputs: Any) -> Made:
        """One batch's outputs."""
        try:
            rows, bad = (self.task.item_rows if self.merges else self.task.rows)(items, outputs)
        except Exception as exc:  # noqa: BLE001 - a bad output costs its inputs, not the run
            return Made(items, error=f"unusable model output: {type(exc).__name__}: {exc}")
        return Made(items, rows, bad)

    def hold(self, made: Made, status: np.ndarray) -> None:
        """A merging task's rows, held per input until it is complete; rows of an input no
        longer OPEN in `status` (failed meanwhile) are dropped."""
        for position, row in made.rows:
            sid = int(made.items.source_ids[position])
            if status[sid] == Status.OPEN:
                self._merging.setdefault(sid, []).append((int(made.items.index[position]), row))

    def merged(self, source: Source) -> Any:
        """A complete input's held rows, `finish`ed into its final rows (a table); raises what
        `finish` raises."""
        pairs = sorted(self._merging.pop(source.id, []), key=lambda pair: pair[0])
        return rows_to_table(self.task.finish(source, [row for _, row in pairs]), self.row_schema)

    def drop(self, sid: int) -> None:
        """A failed input's held rows."""
        self._merging.pop(sid, None)

    def with_inputs(self, table: Any, sources: list[Source], rows: np.ndarray) -> Any:
        """A part's rows with their inputs' columns: `path` first (and a record's `id`), then
        the task's, then size, mtime and digest; `sources` are the part's inputs, `rows` each
        row's position among them. Added once per part, not per batch: a few Arrow calls per
        batch were most of the parent's cost of a batch's rows."""
        table = with_path(table, [sources[i].path for i in rows.tolist()], self.schema)
        for name, column in zip(input_fields(), input_columns(sources, rows)):
            table = table.append_column(name, column)
        tag = getattr(self.task, "tag_part", None)  # embed --vector-type int8: its calibration in every part
        return tag(table) if tag is not None else table
