"""The batches in flight, per worker, and those waiting to be resent: which worker gets the next
batch, what a worker holds when it answers or dies, and in which order its batches are blamed.

At most `max_in_flight` batches per worker (one running, one prefetched in its Pipe): the
bound that keeps the parent's memory flat and the device fed. Decisions are on plain data
(`Worker` records); sending and the processes are pool_lifecycle.py's.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpucli.core.records import Batch
from gpucli.engines.local.processes import Worker
from gpucli.tasks import Task

SPLIT_IDS_FROM = 1_000_000_000  # ids of split batches, apart from the dispatcher's


@dataclass
class InFlight:
    batch: Batch
    packed: Any  # what the task's `pack` made of the payload; released when the batch leaves
    sent_at: float


def free_worker(workers: Sequence[Worker], max_in_flight: int) -> Worker | None:
    """The live worker with the fewest batches in flight, if any has room (one still loading
    its model counts: its batches wait in its Pipe)."""
    room = [w for w in workers if w.alive and len(w.in_flight) < max_in_flight]
    return min(room, key=lambda w: len(w.in_flight)) if room else None


def blame_order(worker: Worker) -> list[InFlight]:
    """A dead worker's batches, the one it was running first (recovery blames the first): the
    one it said it started, or else the oldest sent."""
    return sorted(worker.in_flight.values(), key=lambda r: (r.batch.id != worker.running, r.sent_at))


class Dispatch:
    """What each worker holds, and the batches to resend before any new one."""

    def __init__(self, task: Task, workers: Sequence[Worker], max_in_flight: int) -> None:
        self.task = task
        self.workers = workers
        self.max_in_flight = max_in_flight
        self.retry: collections.deque[Batch] = collections.deque()
        self._next_id = SPLIT_IDS_FROM

    def free_worker(self) -> Worker | None:
        return free_worker(self.workers, self.max_in_flight)

    def hand(self, worker: Worker, batch: Batch) -> Any:
        """The batch is the worker's from now on; returns its packed payload, to send."""
        packed = self.task.pack(batch.items.payload)
        now = time.monotonic()
        if not worker.in_flight:
            worker.busy_since = now
        worker.in_flight[batch.id] = InFlight(batch, packed, now)
        return packed

    def finish(self, worker: Worker, batch_id: int) -> InFlight | None:
        """The worker answered for this batch (None: it no longer holds it)."""
        if worker.running == batch_id:
            worker.running = None
        record = worker.in_flight.pop(batch_id, None)
        if record is not None:
            self.task.release(record.packed)
            worker.busy_since = time.monotonic()
        return record

    def take_all(self, worker: Worker) -> list[Batch]:
        """A dead worker's batches, in `blame_order`; it holds none after."""
        records = blame_order(worker)
        worker.in_flight.clear()
        worker.running = None
        for record in records:
            self.task.release(record.packed)
        return [record.batch for record in records]

    def release_all(self) -> None:
        """At the end: payloads of batches that never came back are freed (shared memory)."""
        for worker in self.workers:
            for record in worker.in_flight.values():
                self.task.release(record.packed)
            worker.in_flight.clear()

    def in_flight_count(self) -> int:
        return sum(len(w.in_flight) for w in self.workers)

    def idle(self) -> bool:
        return not self.retry and self.in_flight_count() == 0

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id
