"""The local engine's dispatcher: batches from the batcher to free workers, resent batches
first, with the sink's backpressure; and the guard that turns an output error met while
handling a pool event into the pool's fatal error.

Both run on the event loop: the dispatcher is one of the run's stages (pipeline.py), the
guard wraps the accounting done inside the pool's callback, where an exception would only
be logged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from gpucli.core.errors import OutputError
from gpucli.core.records import Batch

if TYPE_CHECKING:
    from gpucli.engines.batching import Batcher
    from gpucli.engines.local.pool import WorkerPool
    from gpucli.output.writer import Writer

BACKPRESSURE_PARTS = 4  # parts' worth of rows waiting behind a busy sink before the dispatcher waits


async def feed(pool: WorkerPool, batcher: Batcher, writer: Writer, part_rows: int,
               stopping: Callable[[], bool], first_id: int = 1) -> int:
    """Until the batcher and the pool are both idle (every batch answered), or a stop. Returns
    the next batch id (`first_id`: where a watch's earlier passes left off)."""
    batch_id = first_id - 1
    while not stopping():
        pool.raise_fatal()
        worker = pool.free_worker()
        if worker is None:
            await pool.wait_changed()
        elif pool.retry:
            await pool.send(worker, pool.retry.popleft())
        elif writer.busy and writer.backlog > BACKPRESSURE_PARTS * part_rows:
            await writer.drained(stopping)  # backpressure: the sink is the slower
        elif (items := await batcher.next(interrupt=pool.changed())) is not None:
            batch_id += 1
            await pool.send(worker, Batch(batch_id, items))
        elif batcher.idle() and pool.idle():
            break
        elif batcher.idle():
            await pool.wait_changed()
    return batch_id + 1


@contextmanager
def errors_stop_the_pool(pool: WorkerPool) -> Iterator[None]:
    """An output error on the way (the failures file or the ledger could not be written) is the
    pool's fatal error, which the dispatcher raises: the run stops with it."""
    try:
        yield
    except OutputError as exc:
        pool.fatal = pool.fatal or exc
        pool.notify()
