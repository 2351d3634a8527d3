"""What the worker pool tells the run, as typed events through one callable (`OnEvent`).

The run handles them in one place (pipeline.py's `_on_pool_event`, a `match`), on the loop:
  BatchesDone   the batches one wake-up of the loop brought back, in the order they came
                (the run's bookkeeping is per wake-up, not per batch)
  BatchFailed   a batch whose only item failed for good: its input becomes a failure record
  OutOfMemory   a batch of `batch_size` items ran out of memory (recovery.after_oom decides
                whether the caps go down)
  PoolLog       a line for the user (a worker died and is restarted)
What waits on the pool (the run's dispatcher) is woken by `Changes` at every change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from gpucli.core.records import Batch, Items


class BatchDone(NamedTuple):
    """One batch's items (their payload is the worker's) and its outputs, one per item."""

    items: Items
    outputs: Any


@dataclass(frozen=True, slots=True)
class BatchesDone:
    batches: list[BatchDone]


@dataclass(frozen=True, slots=True)
class BatchFailed:
    batch: Batch
    reason: str


@dataclass(frozen=True, slots=True)
class OutOfMemory:
    batch_size: int


@dataclass(frozen=True, slots=True)
class PoolLog:
    message: str


PoolEvent = BatchesDone | BatchFailed | OutOfMemory | PoolLog
OnEvent = Callable[[PoolEvent], None]


class Changes:
    """Wake-ups for what waits on the pool: a batch finished, failed or was requeued, or a
    worker came or went (or the run, on a signal, wants its waiters to look again)."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future] = []

    def next(self) -> asyncio.Future:
        """A future done at the next change (for waiting on it beside something else)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    async def wait(self) -> None:
        waiter = self.next()
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
