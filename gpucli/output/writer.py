"""Commit parts and ledger marks without blocking the event loop.

Rows of finished batches wait in the accounts' part buffer (gpucli/output/accounts.py) until
their inputs are complete; the rows of complete inputs are written as one part (or upsert) when
a part is due (`part_due`, the Ray driver's rule too): `part_rows` of them wait, or `flush_s`
passed since the last part, so that a long run keeps durable progress. Rows of inputs still
open never make a part due: no part could take them (one input of 50k chunks made every pool
event write a part of a few rows). The memory they hold is bounded by what the dispatcher sends
(the batcher's window, and its backpressure on `backlog`), not by writing.

Failure records and unchanged inputs wake the writer at once: it records them (with a part,
when one is due) in its own thread, so the loop never waits on a disk sync; while it is busy
more gather, and go together in its next commit. The sink and the ledger run in the writer's
own thread: their calls may block (disk, network).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpucli.output.accounts import Accounts


def part_due(ready_rows: int, part_rows: int, waited_s: float, flush_s: float) -> bool:
    """Write a part now: `ready_rows` (rows of complete inputs) are a part's worth, or some are
    ready and the last part is `flush_s` old."""
    return ready_rows > 0 and (ready_rows >= part_rows or waited_s >= flush_s)


class Writer:
    """Commits in its own thread, one at a time, in order; the event loop only hands over. The
    commit step is the accounts': `Accounts.take_commit` on the loop (a frozen Commit),
    `Accounts.write` in the writer's thread, then `Accounts.durable` on the loop counts it."""

    def __init__(self, accounts: Accounts, part_rows: int, flush_s: float) -> None:
        self.accounts = accounts
        self.part_rows = part_rows
        self.flush_s = flush_s
        self.seconds = 0.0
        self.busy = False  # a commit is being written now
        self._last_part = time.monotonic()
        self._wake = asyncio.Event()
        self._closed = False
        self._asked = self._served = 0  # flushes asked for, and the last one whose commit is durable
        self._served_changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpucli-writer")  # its own: never
        # queued behind reader threads, and one at a time keeps commits in order

    def warm(self) -> None:
        """Import what the first write needs, in the writer's thread (call while models load)."""
        if self._task is None or not self._task.done():  # a writer that failed has no thread left
            self._thread.submit(_warm_pyarrow)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    def added(self) -> None:
        """Rows, failures or unchanged inputs were added (on the loop): wake the writer when a
        commit is due (a part, or marks to record)."""
        if self.accounts.marks_pending or self._part_due():
            self._wake.set()

    def _part_due(self) -> bool:
        return part_due(self.accounts.ready_rows, self.part_rows, time.monotonic() - self._last_part, self.flush_s)

    @property
    def backlog(self) -> int:
        """Rows waiting in the part buffer, of complete inputs or not (derived there, never counted twice)."""
        return self.accounts.backlog

    async def drained(self, stopping: Callable[[], bool]) -> None:
        """Until the commit being written is durable (backpressure: the sink is slower than the
        model). Rows of inputs still waiting for items stay in the backlog: waiting for them
        would wait for the batches the caller holds back."""
        while self.busy and not stopping() and not self.task.done():
            await asyncio.sleep(0.02)

    @property
    def task(self) -> asyncio.Task:
        """The writer's loop (once started): done early only when the sink or the ledger failed."""
        if self._task is None:
            raise RuntimeError("the writer's loop is asked for before it started. This is a bug.")
        return self._task

    @property
    def started(self) -> bool:
        return self._task is not None

    async def flush(self) -> None:
        """Commit what is complete now, and return once it is durable (a watch's pass ends so:
        its rows readable at once, not `flush_s` later); raises what the sink or ledger raised."""
        self._asked += 1
        ticket = self._asked
        self._wake.set()
        while self._served < ticket and not self.task.done():
            self._served_changed.clear()
            waiter = asyncio.ensure_future(self._served_changed.wait())
            await asyncio.wait({waiter, self.task}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
        if self._served < ticket:
            self.task.result()  # the writer's error; or, a writer that ended without it, a bug
            raise RuntimeError("the writer ended before a flush was served. This is a bug.")

    async def close(self) -> None:
        """Commit what is complete and pending, and stop; raises what the sink or ledger raised."""
        self._closed = True
        self._wake.set()
        if self._task is not None:
            await self._task

    async def _loop(self) -> None:
        try:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=self._until_due())
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                asked = self._asked
                await self._commit(self._closed or asked > self._served or self._part_due())
                if asked > self._served:
                    self._served = asked
                    self._served_changed.set()
                if self._closed:
                    await self._commit(part=True)  # what came while the last one was written
                    return
        finally:  # a sink that failed (a full disk) ends the loop too: the thread must not outlive it,
            self._thread.shutdown(wait=False)  # or the process waits for it at exit

    def _until_due(self) -> float:
        """Seconds until the last part is `flush_s` old; once it is, `added` wakes the writer
        as soon as rows are ready."""
        left = self.flush_s - (time.monotonic() - self._last_part)
        return left if left > 0 else self.flush_s

    async def _commit(self, part: bool) -> None:
        commit = self.accounts.take_commit(part)
        if part:
            self._last_part = time.monotonic()
        if commit is None:
            return
        t0 = time.perf_counter()
        self.busy = True
        try:
            committed = await asyncio.get_running_loop().run_in_executor(self._thread, self.accounts.write, commit)
        finally:
            self.busy = False
        self.seconds += time.perf_counter() - t0
        self.accounts.durable(committed)


def _warm_pyarrow() -> None:
    """pyarrow imports pandas on its first `pa.array` (0.5-5 s): pay that while the models
    load, not between the first batches, when the device would wait for the writer."""
    import pyarrow as pa

    pa.array([0])
