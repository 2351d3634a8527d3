"""Drain finished rows into the sink without blocking the event loop.

Rows of finished batches are buffered (`PartBuffer`) and the rows of complete inputs are
written as one part (or upsert) when `part_rows` are waiting or `flush_s` passed, so a long
run keeps durable progress and memory stays bounded. The sink runs in a thread: its calls
may block (disk, network). Failures go to the failures JSONL at once, line by line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpucli.sinks import Sink

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
    an input done only when the part holding all its rows is durable.

    Each row is looked at once on its way in (`_fresh`: the batches since the last take) and
    once on its way out. Rows of an input still open at a take are put aside per input
    (`_held`), and a later take asks only each held input's status, never their rows again:
    one huge input (a 100 MB text, ~50k chunks) left every take joining and filtering all of
    its rows so far, so that the writer's time grew with the square of the input (25 MB: 44 s,
    50 MB: ~200 s). A take costs the rows of the batches since the last one, plus one status
    lookup per held input, plus the rows it returns. `work` counts those rows and lookups."""

    def __init__(self) -> None:
        self._fresh: list[tuple[Any, Any, Any]] = []  # (table, source ids, item index) per batch
        self._held: dict[int, list[tuple[Any, Any]]] = {}  # source id -> (table, item index) pieces
        self.rows = 0
        self.work = 0  # rows and status lookups handled by `take`, all takes together

    def add(self, table: Any, source_ids: Any, index: Any) -> None:
        self._fresh.append((table, source_ids, index))
        self.rows += table.num_rows

    def take(self, status: Any) -> Part | None:
        """The rows of inputs whose `status[id]` is COMPLETE, ordered by input and item; rows
        of inputs still OPEN stay; the rest (FAILED) are dropped."""
        import numpy as np
        import pyarrow as pa

        pieces = self._take_held(status) + self._take_fresh(status)
        if not pieces:
            return None
        table = pa.concat_tables([t for t, _, _ in pieces]) if len(pieces) > 1 else pieces[0][0]
        ids, index = np.concatenate([i for _, i, _ in pieces]), np.concatenate([x for _, _, x in pieces])
        self.rows -= table.num_rows
        self.work += table.num_rows
        order = np.lexsort((index, ids))
        return Part(table.take(pa.array(order)), ids[order])

    def _take_fresh(self, status: Any) -> list[tuple[Any, Any, Any]]:
        """The new batches' rows: complete ones returned, open ones held, failed ones dropped."""
        import numpy as np
        import pyarrow as pa

        if not self._fresh:
            return []
        fresh, self._fresh = self._fresh, []
        table = pa.concat_tables([t for t, _, _ in fresh]) if len(fresh) > 1 else fresh[0][0]
        ids, index = np.concatenate([i for _, i, _ in fresh]), np.concatenate([x for _, _, x in fresh])
        self.work += len(ids)
        state = status[ids]
        ready, keep = state == COMPLETE, state == OPEN
        self.rows -= int(len(ids) - ready.sum() - keep.sum())  # rows of failed inputs
        if keep.any():
            self._hold(table.filter(pa.array(keep)), ids[keep], index[keep])
        if not ready.any():
            return []
        return [(table.filter(pa.array(ready)), ids[ready], index[ready])]

    def _hold(self, table: Any, ids: Any, index: Any) -> None:
        """Rows of inputs still open, put aside per input (one piece per input and take)."""
        import numpy as np
        import pyarrow as pa

        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        ends = np.r_[starts[1:], len(order)]
        for start, end in zip(starts.tolist(), ends.tolist()):
            rows = order[start:end]
            piece = table if end - start == table.num_rows else table.take(pa.array(rows))
            self._held.setdefault(int(sorted_ids[start]), []).append((piece, index[rows]))

    def _take_held(self, status: Any) -> list[tuple[Any, Any, Any]]:
        """Held inputs that completed (their rows returned) or failed (dropped): one status
        lookup per held input, none per row."""
        import numpy as np

        if not self._held:
            return []
        sids = np.fromiter(self._held, dtype=np.int64, count=len(self._held))
        state = status[sids]
        self.work += len(sids)
        out = []
        for sid, value in zip(sids[state != OPEN].tolist(), state[state != OPEN].tolist()):
            pieces = self._held.pop(sid)
            if value == COMPLETE:
                out.extend((table, np.full(table.num_rows, sid, dtype=np.int64), index) for table, index in pieces)
            else:
                self.rows -= sum(table.num_rows for table, _ in pieces)
        return out


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
