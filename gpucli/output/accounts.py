"""One accounting of results, for both engines: read chunks, batch outputs and failures in;
rows, failure records and complete inputs out; complete parts to the sink and the ledger.

Bookkeeping is per batch, not per item: an input's status (ledger.Status) and the items it
still waits for live in numpy arrays indexed by source id (a few bytes per input); its
`Source` is held only until its rows are durable or it failed. The commit step, `write` then
`durable`, is the same on both engines: the local Writer runs `write` in its thread and
`durable` on the loop, the Ray driver both in turn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucli.core.decision import Status
from gpucli.core.keys import with_path
from gpucli.core.progress import Counts
from gpucli.core.records import UNKNOWN_TOKENS, Failure, Items, ReadChunk, Source, concat_outputs, rows_to_table
from gpucli.core.stages import Stage
from gpucli.core.summary import RunSummary
from gpucli.output.dedup import Copied, InRun
from gpucli.output.output import Output
from gpucli.output.parts import Part, PartBuffer
from gpucli.output.settings import input_columns, input_fields
from gpucli.tasks import Task

OPEN, COMPLETE, FAILED, DONE = Status.OPEN, Status.COMPLETE, Status.FAILED, Status.DONE


@dataclass(frozen=True)
class Committed:
    """A part the sink made durable and the ledger recorded: its inputs and its row count."""

    source_ids: np.ndarray
    rows: int


class Accounts:
    """Every input ends as all of its rows or exactly one failure record.

    Items of one input may finish in any order and in different batches. The rows of each
    batch go into a `PartBuffer` at once; an input is COMPLETE when its last item is back,
    and a part takes the rows of complete inputs only. If any item of an input fails, the
    input fails once and its other rows are dropped. A task that merges an input's rows
    (`finish`, e.g. a recording's chunks) gets them all together when it is complete."""

    def __init__(self, task: Task, output: Output, summary: RunSummary, counts: Counts, schema: Any,
                 dedup: InRun | None = None) -> None:
        self.task = task
        self.output = output
        self.summary = summary
        self.counts = counts
        self.schema = schema
        # a batch's rows: the task's columns (a part gets its inputs' columns in `_with_inputs`)
        self.row_schema = task.schema()
        self.sources: dict[int, Source] = {}  # inputs in the model's hands or in the buffer
        self.status = np.zeros(1024, dtype=np.int8)
        self.waiting = np.zeros(1024, dtype=np.int32)  # items not yet back, per input
        self.buffer = PartBuffer()
        self.complete = 0  # inputs in status COMPLETE: results all back, rows not yet durable (progress)
        self._merging: dict[int, list[tuple[int, dict[str, Any]]]] = {}  # source id -> (index, row)
        self.dedup = dedup  # identical content embedded once (gpucli/output/dedup.py), or None
        self._copies: set[int] = set()  # copies not yet durable (the summary's `deduplicated`)

    # --- from the reader --------------------------------------------------------------------
    def read(self, chunk: ReadChunk, copied: list[Copied] = ()) -> Items | None:
        """A read chunk: failures and unchanged inputs end here; returns the block to run.
        `copied`: inputs whose rows were read back from the output (dedup.FromOutput)."""
        self.counts.found += chunk.found
        for copy in copied:
            self._copied(copy.source, copy.rows)
        for failure in chunk.failures:
            self.record_failure(failure)
        if chunk.unchanged:
            self.summary.unchanged += len(chunk.unchanged)
            self.summary.skipped += len(chunk.unchanged)
            self.output.unchanged(chunk.unchanged)
        if chunk.block is None or not len(chunk.block):
            return None
        block = chunk.block
        if self.dedup is not None:
            block, copies = self.dedup.split(chunk.sources, block)
            for copy in copies:  # no items: rows when their original's go into a part (take_part)
                self._copied(copy, None)
            if block is None:
                return None
        self.expect(chunk.sources, block)
        return block

    def _copied(self, source: Source, rows: Any) -> None:
        """A copy of content embedded once: OPEN until its original's rows are in a part, or
        COMPLETE now with `rows` read back from the output."""
        self._grow(source.id)
        self.sources[source.id] = source
        self._copies.add(source.id)
        self.waiting[source.id] = 0
        self.status[source.id] = OPEN if rows is None else COMPLETE
        if rows is not None:
            self.complete += 1
            self.buffer.add(rows, np.full(rows.num_rows, source.id, np.int64), np.arange(rows.num_rows))

    def expect(self, sources: list[Source], block: Items) -> None:
        self._grow(int(block.source_ids.max()))
        for source in sources:
            self.sources[source.id] = source
        ids, counts = np.unique(block.source_ids, return_counts=True)
        self.status[ids] = OPEN
        self.waiting[ids] = counts

    def _grow(self, largest: int) -> None:
        if largest < len(self.status):
            return
        size = max(largest + 1, 2 * len(self.status))
        self.status = np.concatenate([self.status, np.zeros(size - len(self.status), np.int8)])
        self.waiting = np.concatenate([self.waiting, np.zeros(size - len(self.waiting), np.int32)])

    # --- from the models --------------------------------------------------------------------
    def outputs_many(self, finished: list[tuple[Items, Any]]) -> None:
        """The outputs of several batches that came back together, as one block of rows (one
        Arrow table, not one per batch). Should the block's outputs not make rows together,
        each batch goes on its own, so that a bad output costs only its own batch's inputs."""
        if len(finished) > 1 and not self.task.merges_rows:
            outputs = concat_outputs([out for _, out in finished])
            if outputs is not None:
                items = Items.concat([items.without_payload() for items, _ in finished])
                try:
                    made = self.task.rows(items, outputs)
                except Exception:  # noqa: BLE001 - one by one below: the bad batch fails alone
                    made = None
                if made is not None:
                    self._place(items, *made)
                    return
        for items, out in finished:
            self.outputs(items, out)

    def outputs(self, items: Items, outputs: Any) -> None:
        """One batch's outputs: its rows into the buffer."""
        try:
            made = (self.task.item_rows if self.task.merges_rows else self.task.rows)(items, outputs)
        except Exception as exc:  # noqa: BLE001 - a bad output costs its inputs, not the run
            self._count(items)
            self.fail_items(items, Stage.INFER, f"unusable model output: {type(exc).__name__}: {exc}")
            return
        self._place(items, *made)

    def _place(self, items: Items, rows: Any, bad: list[tuple[int, str]]) -> None:
        """A block's rows (a table, or a merging task's (position, row) pairs) into the buffer;
        the inputs of `bad` positions fail."""
        self._count(items)
        for position, reason in bad:
            self.fail_source(int(items.source_ids[position]), Stage.INFER, reason)
        if self.task.merges_rows:
            for position, row in rows:
                sid = int(items.source_ids[position])
                if self.status[sid] == OPEN:  # a failed input's late rows are dropped
                    self._merging.setdefault(sid, []).append((int(items.index[position]), row))
        else:
            keep = np.ones(len(items), dtype=bool)
            keep[[position for position, _ in bad]] = False
            self._add_rows(rows, items.source_ids[keep], items.index[keep])
        self._arrived(items.source_ids)

    def _count(self, items: Items) -> None:
        self.counts.items += len(items)
        self.counts.cost += items.total_cost

    def _add_rows(self, table: Any, ids: np.ndarray, index: np.ndarray) -> None:
        """A batch's rows, without their inputs' columns (`_with_inputs` adds them to a whole part)."""
        self.buffer.add(table, ids, index)

    def _with_inputs(self, part: Part) -> Part:
        """The part's rows with their inputs' columns: `path` first (and a record's `id`), then
        the task's, then size, mtime and digest. Added once per part, not per batch: a few Arrow
        calls per batch were most of the parent's cost of a batch's rows."""
        inputs, rows = np.unique(part.source_ids, return_inverse=True)
        sources = [self.sources[sid] for sid in inputs.tolist()]
        table = with_path(part.table, [sources[i].path for i in rows.tolist()], self.schema)
        for name, column in zip(input_fields(), input_columns(sources, rows)):
            table = table.append_column(name, column)
        tag = getattr(self.task, "tag_part", None)  # embed --vector-type int8: its calibration in every part
        return dataclasses.replace(part, table=tag(table) if tag is not None else table)

    def _arrived(self, ids: np.ndarray) -> None:
        unique, counts = np.unique(ids, return_counts=True)
        self.waiting[unique] -= counts
        complete = unique[(self.waiting[unique] <= 0) & (self.status[unique] == OPEN)]
        self.status[complete] = COMPLETE
        self.complete += len(complete)
        if self.task.merges_rows:
            for sid in complete.tolist():
                self._merge(sid)

    def _merge(self, sid: int) -> None:
        """All rows of a merging task's input are back: `finish` them into its final rows."""
        source = self.sources[sid]
        rows = [row for _, row in sorted(self._merging.pop(sid, []), key=lambda pair: pair[0])]
        try:
            rows = self.task.finish(source, rows)
        except Exception as exc:  # noqa: BLE001
            self.fail_source(sid, Stage.INFER, f"{type(exc).__name__}: {exc}")
            return
        table = rows_to_table(rows, self.row_schema)
        self.buffer.add(table, np.full(len(rows), sid, np.int64), np.arange(len(rows), dtype=np.int64))

    def fail_items(self, items: Items, stage: str, reason: str) -> None:
        """Items that failed for good: each of their inputs fails once."""
        for sid in np.unique(items.source_ids).tolist():
            self.fail_source(sid, stage, reason)

    def fail_source(self, sid: int, stage: str, reason: str) -> None:
        if self.status[sid] not in (OPEN, COMPLETE):
            return
        self.complete -= int(self.status[sid] == COMPLETE)
        self.status[sid] = FAILED
        self._merging.pop(sid, None)
        self._copies.discard(sid)
        source = self.sources.pop(sid)
        self.record_failure(Failure(source.path, stage, reason, source.size, source.mtime_ns))
        for copy in self.dedup.ended(source) if self.dedup is not None else ():
            self.fail_source(copy.id, stage, reason)  # same content, same outcome

    def record_failure(self, failure: Failure) -> None:
        known = self.output.failed(failure)
        if failure.stage == Stage.SKIP:
            self.summary.skipped += 1
        else:
            self.summary.failed += 1
            self.summary.failed_known += known
            self.summary.unknown_tokens += failure.cause == UNKNOWN_TOKENS

    # --- from the writer --------------------------------------------------------------------
    def take_part(self) -> Part | None:
        """The rows of every complete input, as one part (on the loop or the driver)."""
        part = self.buffer.take(self.status)
        if part is None:
            return None
        if self.dedup is not None:  # the copies waiting for these inputs get their rows
            part, copies = self.dedup.with_copies(part, self.sources)
            self.status[copies] = COMPLETE
            self.complete += len(copies)
        return self._with_inputs(part)

    @property
    def backlog(self) -> int:
        """Rows waiting in the buffer, complete or not."""
        return self.buffer.rows

    def write(self, part: Part) -> Committed:
        """The commit step, both engines' (the local writer's thread, or the Ray driver): the sink
        makes `part` durable, then the ledger marks its inputs done, in that order (ledger.py)."""
        location = self.output.sink.write(part.table)
        ids, counts = np.unique(part.source_ids, return_counts=True)
        self.output.commit([self.sources[sid] for sid in ids.tolist()], counts.tolist(), location)
        return Committed(ids, part.table.num_rows)

    def durable(self, committed: Committed) -> None:
        """Back on the loop: count the inputs done and forget their sources."""
        self.complete -= int((self.status[committed.source_ids] == COMPLETE).sum())
        self.status[committed.source_ids] = DONE
        for sid in committed.source_ids.tolist():
            self.sources.pop(sid, None)
        self.summary.succeeded += len(committed.source_ids)
        self.summary.rows += committed.rows
        if self._copies:
            copies = self._copies.intersection(committed.source_ids.tolist())
            self._copies -= copies
            self.summary.deduplicated += len(copies)

    # --- at the end ---------------------------------------------------------------------------
    def unfinished(self) -> int:
        """Inputs handed to the models whose rows are not durable (after an interrupt)."""
        return len(self.sources)

    def lost(self, reason: str) -> None:
        """Inputs no result came back for (an engine that drops work): each a failure record."""
        for sid in [sid for sid in list(self.sources) if self.status[sid] in (OPEN, COMPLETE)]:
            self.fail_source(sid, Stage.INFER, reason)

    def open_inputs(self) -> int:
        """Inputs handed to the models that still wait for results (in flight)."""
        return len(self.sources) - self.complete

    def counts_now(self) -> Counts:
        """The progress's counts: an input counts when its results are back (`back`), and apart
        from it what is durable (`done`, `rows`: the summary's)."""
        c, s = self.counts, self.summary
        c.done, c.failed, c.skipped, c.rows = s.succeeded, s.failed, s.skipped, s.rows
        c.back, c.rows_back = self.complete, self.buffer.rows
        return c
