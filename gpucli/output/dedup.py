"""Identical content embedded once (on by default for embed, `--no-dedup`).

An input whose content digest (`Source.digest`: the file's bytes, or a table record's text,
gpucli/output/fingerprint.py) is the digest of an input embedded in this run, or of one already done
in the output, gets a copy of that input's rows under its own key, without a forward pass.
A copy's rows equal the original's in every task column (`text`, `chunk`, `page`, offsets,
vectors); `path` (and a record's `id`), `size`, `mtime` and `digest` are its own (added by
RowMaker.with_inputs like any input's). A copy is committed like any input: its rows go into
a part, the part is made durable, then the ledger marks it done; so a kill -9 and a rerun give
every (path, chunk) once, `--prune` of the original removes only the original's rows, and a
changed copy is a changed input (new digest: embedded, its old rows superseded).

Which task: one whose options have `dedup` set (EmbedOptions.dedup; a task without that option
never deduplicates). Which engine: the local one. On Ray the readers and the predictors are one
Ray Data stream, so the driver sees an input's digest only after its forward pass: `--engine ray`
runs as `--no-dedup` (Job.dedup).

Two places an original's rows come from:

* `InRun`, on the event loop: the first input of a digest in flight (its items with the models
  or in the part buffer) is the original; a later input with that digest waits for it without
  items (its items are dropped from the block before the batcher). When the original's rows go
  into a part (`Accounts.take_commit`), each waiting copy gets them in the same part. When the
  original fails, each copy gets the same failure record under its own path (same content,
  same outcome: a copy prepared again would fail alike, or kill a worker again). Memory: one
  digest per input in flight and the waiting copies' `Source`s, at most MAX_WAITING of them;
  past that a copy goes to the model like any input (a flood of copies costs forward passes,
  never memory).
* `FromOutput`, in a thread between the reader and the accounts: a digest the ledger has as
  done (an earlier run with the same settings, as the ledger's fingerprint guarantees, or a
  part of this run already durable) has that input's rows read back from the sink
  (`Sink.rows_of`: Parquet reads the part's row groups holding the path, JSON lines the byte
  range); the copy's items are dropped and it is COMPLETE at once. A sink that cannot read its
  rows back (Qdrant) returns None: such copies are embedded again. So are copies whose rows do
  not come back as the ledger counted them (a part gone since): embedding is always correct.
  A rerun whose only new inputs are such copies loads no model: the writer runs from the
  start (pipeline.Pipeline._run_opened) and commits them, the workers start only for model work.

What is not saved: a copy is still read, hashed and prepared (tokenized) by the reader, since
its digest needs its bytes and reader processes do not share the run's state; and a copy read
while its original is being written (after its part was taken, before the ledger lists it) is
embedded again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from gpucli.core.records import Items, ReadChunk, Source
from gpucli.output.parts import Part

MAX_WAITING = 10_000  # copies waiting for their originals in flight, all originals together


class InRun:
    """Copies of content in flight in this run: digest -> original, original -> waiting copies."""

    def __init__(self, max_waiting: int = MAX_WAITING) -> None:
        self.originals: dict[str, int] = {}  # digest -> source id of the input in flight with it
        self.waiting: dict[int, list[Source]] = {}  # original's source id -> copies waiting for its rows
        self.max_waiting = max_waiting
        self.waiting_count = 0

    def split(self, sources: list[Source], block: Items) -> tuple[Items | None, list[Source]]:
        """A read chunk's inputs to run: (the block without the copies' items, the copies). The
        first input of a digest not in flight becomes its original, here or in a later chunk."""
        copies: list[Source] = []
        for source in sources:
            original = self.originals.get(source.digest) if source.digest else None
            if original is None:
                if source.digest:
                    self.originals[source.digest] = source.id
            elif self.waiting_count < self.max_waiting:
                self.waiting.setdefault(original, []).append(source)
                self.waiting_count += 1
                copies.append(source)
        if not copies:
            return block, []
        keep = np.flatnonzero(~np.isin(block.source_ids, np.array([c.id for c in copies], np.int64)))
        return (block.take(keep) if len(keep) else None), copies

    def ended(self, original: Source) -> list[Source]:
        """The original's rows are in a part, or it failed: its digest is no longer in flight;
        returns the copies that waited for it."""
        if self.originals.get(original.digest) == original.id:
            del self.originals[original.digest]
        copies = self.waiting.pop(original.id, [])
        self.waiting_count -= len(copies)
        return copies

    def with_copies(self, part: Part, sources: dict[int, Source]) -> tuple[Part, list[int]]:
        """A part taken from the buffer (rows sorted by input), with each waiting copy's rows: the
        rows of its original, under the copy's source id. Returns the part and the copies' ids."""
        inputs, starts = np.unique(part.source_ids, return_index=True)
        ends = np.r_[starts[1:], len(part.source_ids)]
        positions, ids = [], []
        for sid, start, end in zip(inputs.tolist(), starts.tolist(), ends.tolist()):
            for copy in self.ended(sources[sid]):
                positions.append(np.arange(start, end))
                ids.append(np.full(end - start, copy.id, np.int64))
        if not positions:
            return part, []
        import pyarrow as pa

        extra = part.table.take(pa.array(np.concatenate(positions)))
        copy_ids = np.concatenate(ids)
        return Part(pa.concat_tables([part.table, extra]), np.concatenate([part.source_ids, copy_ids])), \
            np.unique(copy_ids).tolist()


@dataclasses.dataclass
class Copied:
    """An input whose rows were read back from the output: the task's columns, one row per chunk."""

    source: Source
    rows: Any  # pyarrow.Table with the task's row schema


class FromOutput:
    """Copies of content the output already holds (the ledger's done inputs): called in a thread
    with each read chunk (blocking: a ledger query, and a sink read when a digest is found)."""

    def __init__(self, ledger: Any, sink: Any, row_schema: Any) -> None:
        self.ledger = ledger
        self.sink = sink
        self.row_schema = row_schema

    def take(self, chunk: ReadChunk) -> tuple[ReadChunk, list[Copied]]:
        """The chunk without the inputs whose rows were read back, and those inputs with their rows."""
        wanted = {s.digest for s in chunk.sources if s.digest}
        found = self.ledger.done_with_digests(sorted(wanted)) if wanted else {}
        if not found:
            return chunk, []
        rows = self._read_back(found)
        copied = [Copied(s, rows[s.digest]) for s in chunk.sources if s.digest in rows]
        if not copied:
            return chunk, []
        ids = np.array([c.source.id for c in copied], np.int64)
        keep = np.flatnonzero(~np.isin(chunk.block.source_ids, ids))
        block = chunk.block.take(keep) if len(keep) else None
        gone = set(ids.tolist())
        return dataclasses.replace(chunk, block=block, sources=[s for s in chunk.sources if s.id not in gone]), copied

    def _read_back(self, found: dict[str, tuple[str, str | None, int]]) -> dict[str, Any]:
        """digest -> the task's columns of the done input's rows, for the digests whose rows came
        back whole (as many as the ledger counted); by location, one sink read each."""
        from gpucli.core.keys import row_keys

        by_location: dict[str | None, dict[str, tuple[str, int]]] = {}
        for content, (key, location, count) in found.items():
            if location is None:  # rows kept nowhere the sink can name (none, or a sink without places)
                continue
            by_location.setdefault(location, {})[key] = (content, count)
        out: dict[str, Any] = {}
        for location, keys in by_location.items():
            table = self.sink.rows_of(location, set(keys))
            if table is None:
                continue
            positions: dict[str, list[int]] = {}
            for i, key in enumerate(row_keys(table).to_pylist()):
                positions.setdefault(key, []).append(i)
            for key, (content, count) in keys.items():
                rows = self._rows(table, positions.get(key, []))
                if rows is not None and rows.num_rows == count:
                    out[content] = rows
        return out

    def _rows(self, table: Any, positions: list[int]) -> Any:
        """One input's rows in the order of their chunks, as the task's columns (None when the
        output's columns do not make them)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = table.take(pa.array(positions, pa.int64()))
        if "chunk" in rows.column_names and rows.num_rows > 1:
            rows = rows.take(pc.sort_indices(rows.column("chunk")))
        try:
            rows = rows.select(self.row_schema.names)
        except KeyError:
            return None
        try:
            return rows.cast(self.row_schema)
        except (ValueError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            pass
        try:  # JSON lines: lists of numbers to fixed-size vectors, value by value
            return pa.Table.from_arrays([pa.array(rows.column(f.name).to_pylist(), f.type) for f in self.row_schema],
                                        schema=self.row_schema)
        except (ValueError, TypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None


def enabled(options: Any, engine: str) -> bool:
    """Whether a run deduplicates: its task has the `dedup` option set, on the local engine."""
    return bool(getattr(options, "dedup", False)) and engine == "local"
