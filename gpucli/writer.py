"""Drain finished rows into the sink without blocking the event loop.

Rows of finished batches are buffered (`PartBuffer`) and the rows of complete inputs are
written as one part (or upsert) when `part_rows` are waiting or `flush_s` passed, so a long
run keeps durable progress and memory stays bounded. The sink runs in a thread: its calls
may block (disk, network). Failures go to the failures JSONL at once, line by line.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucli.records import Failure
from gpucli.sinks import Sink


class FailureLog:
    """The failures JSONL beside the output; always written, empty when nothing failed."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")

    def add(self, failure: Failure) -> None:
        from gpucli.tables import shown  # a table's record: `path` and `id`

        self._file.write(json.dumps(shown(failure), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


# An input's status in the run's accounting (see core.Accounts): a numpy array indexed by
# source id holds one of these; the buffer reads it to choose the rows of a part.
OPEN, COMPLETE, FAILED, DONE = 0, 1, 2, 3


@dataclass
class Part:
    """Rows ready to be written as one part: `table` (path first) and, per row, its source id."""

    table: Any
    source_ids: Any  # numpy int64, one per row


class PartBuffer:
    """Rows of finished batches, held until their inputs are complete (every item back).

    Rows arrive per batch, as Arrow tables; a part takes the rows of every complete input
    at once (one vectorised selection), keeps the rows of inputs still open, and drops those
    of inputs that failed meanwhile. So a part never holds half an input: the ledger marks
    an input done only when the part holding all its rows is durable."""

    def __init__(self) -> None:
        self._tables: list[Any] = []
        self._ids: list[Any] = []
        self._index: list[Any] = []
        self.rows = 0

    def add(self, table: Any, source_ids: Any, index: Any) -> None:
        self._tables.append(table)
        self._ids.append(source_ids)
        self._index.append(index)
        self.rows += table.num_rows

    def take(self, status: Any) -> Part | None:
        """The rows of inputs whose `status[id]` is COMPLETE, ordered by input and item; rows
        of inputs still OPEN stay; the rest (FAILED) are dropped."""
        import numpy as np
        import pyarrow as pa

        if not self._tables:
            return None
        table = pa.concat_tables(self._tables) if len(self._tables) > 1 else self._tables[0]
        ids, index = np.concatenate(self._ids), np.concatenate(self._index)
        state = status[ids]
        ready, keep = state == COMPLETE, state == OPEN
        self._tables, self._ids, self._index = [], [], []
        self.rows = 0
        if keep.any():
            self.add(table.filter(pa.array(keep)), ids[keep], index[keep])
        if not ready.any():
            return None
        order = np.flatnonzero(ready)
        order = order[np.lexsort((index[order], ids[order]))]
        return Part(table.take(pa.array(order)), ids[order])


class Writer:
    """Writes parts in its own thread, one at a time, in order; the event loop only hands
    over the rows. `commit` runs in the writer thread right after the sink made a part
    durable (the ledger marks its inputs done); `on_durable` then runs on the loop. `backlog`
    says how many rows wait in the buffer (derived there, never counted twice)."""

    def __init__(self, sink: Sink, part_rows: int, flush_s: float, take: Callable[[], Part | None],
                 commit: Callable[[Part, str | None], Any], on_durable: Callable[[Any], None],
                 backlog: Callable[[], int]) -> None:
        self.sink = sink
        self.part_rows = part_rows
        self.flush_s = flush_s
        self.take = take
        self.commit = commit
        self.on_durable = on_durable
        self._backlog = backlog
        self.seconds = 0.0
        self.busy = False  # a part is being written now
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpucli-writer")  # its own: never
        # queued behind reader threads, and one at a time keeps parts in order

    def warm(self) -> None:
        """Import what the first write needs, in the writer's thread (call while models load)."""
        self._thread.submit(_warm_pyarrow)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    def added(self) -> None:
        """Rows were added to the buffer (on the loop): write a part once a part's worth waits."""
        if self.backlog >= self.part_rows:
            self._wake.set()

    @property
    def backlog(self) -> int:
        return self._backlog()

    async def drained(self, stopping: Callable[[], bool]) -> None:
        """Until the part being written is durable (backpressure: the sink is slower than the
        model). Rows of inputs still waiting for items stay in the backlog: waiting for them
        would wait for the batches the caller holds back."""
        while self.busy and not stopping() and not self.task.done():
            await asyncio.sleep(0.02)

    @property
    def task(self) -> asyncio.Task | None:
        """The writer's loop: done early only when the sink failed."""
        return self._task

    async def close(self) -> None:
        """Write what is complete and stop; raises what the sink raised."""
        self._closed = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _loop(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self.flush_s)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            await self._flush()
            if self._closed:
                await self._flush()
                self._thread.shutdown(wait=False)
                return

    async def _flush(self) -> None:
        part = self.take()
        if part is None:
            return
        t0 = time.perf_counter()
        self.busy = True
        try:
            result = await asyncio.get_running_loop().run_in_executor(self._thread, self.write, part)
        finally:
            self.busy = False
        self.seconds += time.perf_counter() - t0
        self.on_durable(result)

    def write(self, part: Part) -> Any:
        """Write one part durably and commit it (any thread; the local engine's writer thread)."""
        return self.commit(part, self.sink.write(part.table))


def rows_to_table(rows: list[dict[str, Any]], schema: Any) -> Any:
    """Column by column; fixed-size vectors are stacked into one numpy block (fast)."""
    import numpy as np
    import pyarrow as pa

    if not rows:
        return schema.empty_table()
    columns = []
    for field in schema:
        values = [row.get(field.name) for row in rows]
        if pa.types.is_fixed_size_list(field.type):
            flat = np.asarray(np.stack(values), dtype=field.type.value_type.to_pandas_dtype()).ravel()
            columns.append(pa.FixedSizeListArray.from_arrays(pa.array(flat), field.type.list_size))
        else:
            columns.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _warm_pyarrow() -> None:
    """pyarrow imports pandas on its first `pa.array` (0.5-5 s): pay that while the models
    load, not between the first batches, when the device would wait for the writer."""
    import pyarrow as pa

    pa.array([0])
