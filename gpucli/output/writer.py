"""Drain finished rows into the sink without blocking the event loop.

Rows of finished batches wait in the accounts' part buffer (gpucli/output/accounts.py), and the rows
of complete inputs are written as one part (or upsert) when `part_rows` are waiting or
`flush_s` passed (`part_due`, the Ray driver's rule too), so a long run keeps durable progress
and memory stays bounded. The sink runs in the writer's own thread: its calls may block (disk,
network).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpucli.output.accounts import Accounts, Committed
    from gpucli.output.parts import Part


def part_due(backlog: int, part_rows: int, waited_s: float, flush_s: float) -> bool:
    """Write a part now: a part's worth of rows waits, or the last part is `flush_s` old."""
    return backlog >= part_rows or waited_s >= flush_s


class Writer:
    """Writes parts in its own thread, one at a time, in order; the event loop only hands
    over the rows. The commit step is the accounts': `Accounts.write` runs in the writer's
    thread (the sink makes the part durable, the ledger marks its inputs done), then
    `Accounts.durable` on the loop counts them."""

    def __init__(self, accounts: Accounts, part_rows: int, flush_s: float) -> None:
        self.accounts = accounts
        self.part_rows = part_rows
        self.flush_s = flush_s
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
        if part_due(self.backlog, self.part_rows, 0.0, self.flush_s):
            self._wake.set()

    @property
    def backlog(self) -> int:
        """Rows waiting in the part buffer (derived there, never counted twice)."""
        return self.accounts.backlog

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
        try:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=self.flush_s)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                await self._flush()
                if self._closed:
                    await self._flush()
                    return
        finally:  # a sink that failed (a full disk) ends the loop too: the thread must not outlive it,
            self._thread.shutdown(wait=False)  # or the process waits for it at exit (issue 41)

    async def _flush(self) -> None:
        part = self.accounts.take_part()
        if part is None:
            return
        t0 = time.perf_counter()
        self.busy = True
        try:
            committed = await asyncio.get_running_loop().run_in_executor(self._thread, self.write, part)
        finally:
            self.busy = False
        self.seconds += time.perf_counter() - t0
        self.accounts.durable(committed)

    def write(self, part: Part) -> Committed:
        """Write one part durably and commit it (the writer's thread)."""
        return self.accounts.write(part)


def _warm_pyarrow() -> None:
    """pyarrow imports pandas on its first `pa.array` (0.5-5 s): pay that while the models
    load, not between the first batches, when the device would wait for the writer."""
    import pyarrow as pa

    pa.array([0])
