"""Drain finished files into the sink without blocking the event loop.

Rows of finished files are buffered and written as one part (or upsert) when the buffer
reaches `part_rows` or `flush_s` passed, so a long run keeps durable progress and memory
stays bounded. The sink runs in a thread: its calls may block (disk, network).
Failures go to the failures JSONL at once, line by line.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpucli.records import Failure, Source
from gpucli.sinks import Sink


class FailureLog:
    """The failures JSONL beside the output; always written, empty when nothing failed."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")

    def add(self, failure: Failure) -> None:
        self._file.write(json.dumps(failure.to_dict(), ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


class Writer:
    def __init__(self, sink: Sink, schema: Any, part_rows: int, flush_s: float,
                 on_durable: Callable[[list[Source], int], None],
                 commit: Callable[[list[Source], list[int], str | None], None] | None = None) -> None:
        """`commit` runs in the writer thread right after the sink made rows durable (the
        ledger marks their inputs done); `on_durable` then runs on the loop (counters)."""
        self.sink = sink
        self.schema = schema
        self.part_rows = part_rows
        self.flush_s = flush_s
        self.on_durable = on_durable
        self.commit = commit
        self.seconds = 0.0
        self._rows: list[dict[str, Any]] = []
        self._sources: list[Source] = []
        self._counts: list[int] = []
        self._last_flush = time.monotonic()
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

    def add(self, source: Source, rows: list[dict[str, Any]]) -> None:
        """Called on the loop when a file is complete."""
        for row in rows:
            row["path"] = source.path
        self._rows.extend(rows)
        self._sources.append(source)
        self._counts.append(len(rows))
        if len(self._rows) >= self.part_rows:
            self._wake.set()

    @property
    def backlog(self) -> int:
        return len(self._rows)

    @property
    def task(self) -> asyncio.Task | None:
        """The writer's loop: done early only when the sink failed."""
        return self._task

    async def close(self) -> None:
        """Write what is buffered and stop; raises what the sink raised."""
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
        if not self._sources:
            return
        rows, sources, counts = self._rows, self._sources, self._counts
        self._rows, self._sources, self._counts = [], [], []
        t0 = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(self._thread, self._write, rows, sources, counts)
        self.seconds += time.perf_counter() - t0
        self._last_flush = time.monotonic()
        self.on_durable(sources, len(rows))

    def _write(self, rows: list[dict[str, Any]], sources: list[Source], counts: list[int]) -> None:
        location = self.sink.write(rows_to_table(rows, self.schema))
        if self.commit is not None:
            self.commit(sources, counts, location)


def rows_to_table(rows: list[dict[str, Any]], schema: Any) -> Any:
    """Column by column; fixed-size vectors are stacked into one numpy block (fast)."""
    import numpy as np
    import pyarrow as pa

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
