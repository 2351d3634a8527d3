"""The watchdog: a worker stuck on one batch past --batch-timeout-s, or still loading its model
past --setup-timeout-s, is killed; its exit then counts as a death against the restart budget
(pool.py). A hung model cannot be interrupted from inside its process.

`overdue` decides on plain data; `watch` only looks at the clock and carries it out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpucli.engines.local.processes import Worker


@dataclass(frozen=True)
class Timeouts:
    batch_s: float
    setup_s: float

    @property
    def look_every_s(self) -> float:
        return min(1.0, self.batch_s / 4, self.setup_s / 4)


def overdue(worker: Worker, now: float, timeouts: Timeouts) -> str:
    """Why this worker must be killed now ("" when it need not). `busy_since` is when the
    batch it runs started (or, with nothing started, when its last answer came)."""
    if not worker.alive or worker.kill_reason:
        return ""  # gone, or already being killed
    if not worker.ready and now - worker.spawned_at > timeouts.setup_s:
        return f"did not load the model within {timeouts.setup_s:g}s (--setup-timeout-s)"
    if worker.ready and worker.in_flight and now - worker.busy_since > timeouts.batch_s:
        return f"batch timed out after {timeouts.batch_s:g}s"
    return ""


async def watch(workers: Sequence[Worker], timeouts: Timeouts, kill: Callable[[Worker, str], None]) -> None:
    """Until cancelled: every `look_every_s`, kill the workers that are overdue."""
    while True:
        await asyncio.sleep(timeouts.look_every_s)
        now = time.monotonic()
        for worker in workers:
            if reason := overdue(worker, now, timeouts):
                kill(worker, reason)
