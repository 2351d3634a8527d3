"""One accounting of results, for both engines: read chunks, batch outputs and failures in; rows,
failure records and complete inputs out, as commits to the sink and the ledger.

`Accounts` is the one place both engines call (docs/architecture.md, "One input, from the walk to
the ledger"); it composes the parts that each do one job, all on the loop (or the Ray driver's
thread):

    states.InputStates   where each input stands, and the rows a part would take now
    rows.RowMaker        a batch's outputs -> rows; a part's rows -> rows with their inputs' columns
    parts.PartBuffer     rows held until their inputs are complete
    commit.Marks         failure records and unchanged inputs, until the next commit
    tally.Tally          the summary's and the progress's counters

The commit step is the same on both engines: `take_commit` on the loop (a frozen `Commit`),
`write` in the writer's thread (commit.write: nothing but the Commit crosses), then `durable`
back on the loop. The local Writer runs the three (gpucli/output/writer.py), the Ray driver
each in turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpucli.core.progress import Counts
from gpucli.core.records import Failure, Items, ReadChunk, Source
from gpucli.core.stages import Stage
from gpucli.core.summary import RunSummary
from gpucli.output import commit as commit_step
from gpucli.output.commit import Commit, Committed, Marks
from gpucli.output.dedup import Copied, InRun
from gpucli.output.output import Output
from gpucli.output.parts import Part, PartBuffer
from gpucli.output.rows import Made, RowMaker
from gpucli.output.states import InputStates
from gpucli.output.tally import Tally
from gpucli.tasks import Task


class Accounts:
    """Every input ends as all of its rows or exactly one failure record.

    Items of one input may finish in any order and in different batches. The rows of each
    batch go into a `PartBuffer` at once; an input is COMPLETE when its last item is back,
    and a part takes the rows of complete inputs only. If any item of an input fails, the
    input fails once and its other rows are dropped. A task that merges an input's rows
    (`finish`, e.g. a recording's chunks) gets them all together when it is complete."""

    def __init__(self, task: Task, output: Output, summary: RunSummary, counts: Counts, schema: Any,
                 dedup: InRun | None = None) -> None:
        self.output = output
        self.states = InputStates()
        self.rows = RowMaker(task, schema)
        self.buffer = PartBuffer()
        self.marks = Marks()
        self.tally = Tally(summary, counts)
        self.summary, self.counts = summary, counts  # the tally's, for whoever reads them
        self.dedup = dedup  # identical content embedded once (gpucli/output/dedup.py), or None

    @property
    def status(self) -> np.ndarray:
        """Each input's `Status`, by source id."""
        return self.states.status

    @property
    def complete(self) -> int:
        """Inputs whose results are all back and whose rows are not yet durable."""
        return self.states.complete

    @property
    def row_schema(self) -> Any:
        """A batch's rows: the task's columns."""
        return self.rows.row_schema

    # --- from the reader --------------------------------------------------------------------
    def read(self, chunk: ReadChunk, copied: list[Copied] = ()) -> Items | None:
        """A read chunk: failures and unchanged inputs end here; returns the block to run.
        `copied`: inputs whose rows were read back from the output (dedup.FromOutput)."""
        self.tally.found(chunk.found)
        for copy in copied:
            self._copied(copy.source, copy.rows)
        for failure in chunk.failures:
            self.record_failure(failure)
        if chunk.unchanged:
            self.tally.unchanged(len(chunk.unchanged))
            self.marks.unchanged.extend(chunk.unchanged)
        if chunk.block is None or not len(chunk.block):
            return None
        block = chunk.block
        if self.dedup is not None:
            block, copies = self.dedup.split(chunk.sources, block)
            for copy in copies:  # no items: rows when their original's go into a part (take_commit)
                self._copied(copy, None)
            if block is None:
                return None
        self.expect(chunk.sources, block)
        return block

    def _copied(self, source: Source, rows: Any) -> None:
        """A copy of content embedded once: OPEN until its original's rows are in a part, or
        COMPLETE now with `rows` read back from the output."""
        self.states.copy(source, complete=rows is not None)
        self.tally.copy(source.id)
        if rows is not None:
            self._add(rows, np.full(rows.num_rows, source.id, np.int64), np.arange(rows.num_rows))

    def expect(self, sources: list[Source], block: Items) -> None:
        self.states.expect(sources, block.source_ids)

    # --- from the models --------------------------------------------------------------------
    def outputs_many(self, finished: Sequence[tuple[Items, Any]]) -> None:
        """The outputs of several batches that came back together (RowMaker.made_many)."""
        for made in self.rows.made_many(finished):
            self._place(made)

    def outputs(self, items: Items, outputs: Any) -> None:
        """One batch's outputs: its rows into the buffer."""
        self._place(self.rows.made(items, outputs))

    def _place(self, made: Made) -> None:
        """A block's rows into the buffer; the inputs of its bad positions (or all of its
        inputs, for an output the task could not use) fail."""
        items = made.items
        self.tally.items(items)
        if made.error:
            self.fail_items(items, Stage.INFER, made.error)
            return
        for position, reason in made.bad:
            self.fail_source(int(items.source_ids[position]), Stage.INFER, reason)
        if self.rows.merges:
            self.rows.hold(made, self.states.status)
        else:
            keep = np.ones(len(items), dtype=bool)
            keep[[position for position, _ in made.bad]] = False
            self._add(made.rows, items.source_ids[keep], items.index[keep])
        complete = self.states.arrived(items.source_ids)
        for sid in complete.tolist() if self.rows.merges else ():
            self._merge(sid)

    def _add(self, table: Any, ids: np.ndarray, index: np.ndarray) -> None:
        """Rows without their inputs' columns (a whole part gets them: RowMaker.with_inputs)."""
        self.buffer.add(table, ids, index)
        self.states.rows_added(ids)

    def _merge(self, sid: int) -> None:
        """All rows of a merging task's input are back: `finish` them into its final rows."""
        try:
            table = self.rows.merged(self.states.sources[sid])
        except Exception as exc:  # noqa: BLE001
            self.fail_source(sid, Stage.INFER, f"{type(exc).__name__}: {exc}")
            return
        self._add(table, np.full(table.num_rows, sid, np.int64), np.arange(table.num_rows, dtype=np.int64))

    def fail_items(self, items: Items, stage: str, reason: str) -> None:
        """Items that failed for good: each of their inputs fails once."""
        for sid in np.unique(items.source_ids).tolist():
            self.fail_source(sid, stage, reason)

    def fail_source(self, sid: int, stage: str, reason: str) -> None:
        source = self.states.fail(sid)
        if source is None:
            return
        self.rows.drop(sid)
        self.tally.copy_ended(sid)
        self.record_failure(Failure(source.path, stage, reason, source.size, source.mtime_ns))
        for copy in self.dedup.ended(source) if self.dedup is not None else ():
            self.fail_source(copy.id, stage, reason)  # same content, same outcome

    def record_failure(self, failure: Failure) -> None:
        """Counted now; recorded (the failures file, the ledger) with the next commit."""
        self.tally.failure(failure)
        self.marks.failures.append(failure)

    # --- the commit step ----------------------------------------------------------------------
    @property
    def ready_rows(self) -> int:
        """Rows of complete inputs waiting: what a part would hold now (writer.part_due)."""
        return self.states.ready_rows

    @property
    def backlog(self) -> int:
        """Rows waiting in the buffer, complete or not (memory: the dispatcher's backpressure)."""
        return self.buffer.rows

    @property
    def marks_pending(self) -> bool:
        """Failure records or unchanged inputs wait for a commit."""
        return bool(self.marks)

    def take_commit(self, part: bool = True) -> Commit | None:
        """What the next commit records (on the loop or the driver): the rows of every complete
        input as one part when `part`, and the marks pending; None when there is nothing."""
        taken = self._take_part() if part else None
        failures, unchanged = self.marks.take()
        if taken is None:
            return Commit(failures=failures, unchanged=unchanged) if failures or unchanged else None
        inputs, at = np.unique(taken.source_ids, return_inverse=True)
        sources = [self.states.sources[sid] for sid in inputs.tolist()]
        table = self.rows.with_inputs(taken.table, sources, at)
        return Commit(table, inputs, tuple(sources), tuple(np.bincount(at).tolist()), failures, unchanged)

    def _take_part(self) -> Part | None:
        part = self.buffer.take(self.states.status)
        if part is None:
            return None
        self.states.taken(np.unique(part.source_ids))
        if self.dedup is not None:  # the copies waiting for these inputs get their rows
            part, copies = self.dedup.with_copies(part, self.states.sources)
            self.states.completed(copies)
        return part

    def write(self, commit: Commit) -> Committed:
        """The commit step's middle, in the writer's thread (or the Ray driver): commit.write."""
        return commit_step.write(self.output, commit)

    def durable(self, committed: Committed) -> None:
        """Back on the loop: count the inputs done and forget their sources."""
        self.states.durable(committed.source_ids)
        self.tally.durable(committed)

    # --- at the end ---------------------------------------------------------------------------
    def unfinished(self) -> int:
        """Inputs handed to the models whose rows are not durable (after an interrupt)."""
        return len(self.states.sources)

    def lost(self, reason: str) -> None:
        """Inputs no result came back for (an engine that drops work): each a failure record."""
        for sid in self.states.unended():
            self.fail_source(sid, Stage.INFER, reason)

    def open_inputs(self) -> int:
        """Inputs handed to the models that still wait for results (in flight)."""
        return len(self.states.sources) - self.states.complete

    def counts_now(self) -> Counts:
        return self.tally.counts_now(self.states.complete, self.buffer.rows)
