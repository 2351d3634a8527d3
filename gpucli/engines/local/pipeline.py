"""run(config) -> RunSummary: the local engine's wiring and lifecycle over the core.

One input, from the walk to the ledger (one callback: the pool's events, `_on_pool_event`):

    walk.walk_blocks -> reader.read_chunk (reader thread or process: read, ledger's decision,
         hash, task.prepare_many) -> Accounts.read (ends failed and unchanged inputs; expects
         the block's items) -> BlockQueue -> Batcher.next (a sorted window cut into batches)
      -> WorkerPool.send -> worker: task.predict -> Result / Failed messages -> WorkerPool
         (recovery's decision) -> _on_pool_event(BatchesDone) -> Accounts.outputs_many (rows
         into the part buffer; an input is complete when all its items are back)
      -> Writer: Accounts.take_commit, then in the writer's thread Accounts.write (sink.write,
         then the ledger marks the part's inputs done) -> Accounts.durable (counted done)

The event loop only routes: file I/O and tokenizing run in reader threads or processes, models in the
workers, sink calls in the writer thread. Every input ends as rows or one failure record.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time
from collections.abc import Callable, Iterable

from gpucli.core.config import RunConfig
from gpucli.core.errors import EXIT_SIGINT, EXIT_SIGTERM, OutputError
from gpucli.core.progress import Progress, tick
from gpucli.core.records import Failure, Source
from gpucli.core.signals import LoopSignals
from gpucli.core.stages import Stage
from gpucli.core.summary import RunSummary
from gpucli.engines.batching import END, Batcher, BlockQueue
from gpucli.engines.job import Job
from gpucli.engines.local.dispatcher import errors_stop_the_pool, feed
from gpucli.engines.local.events import BatchesDone, BatchFailed, OutOfMemory, PoolEvent, PoolLog
from gpucli.engines.local.pool import WorkerPool
from gpucli.engines.passes import without_moved
from gpucli.engines.reader import ReaderProcesses, read_chunks
from gpucli.engines.recovery import OomHistory, after_oom
from gpucli.output.dedup import Copied
from gpucli.output.writer import Writer

STOP_DEADLINE_S = 10.0  # from a signal to the exit, whatever is running
WRITE_MARGIN_S = 2.0  # of it, kept for writing the complete inputs and closing the output


def run(config: RunConfig, progress: Progress | None = None) -> RunSummary:
    """Run one job to the end (or to an interrupt) and return its summary."""
    return asyncio.run(Pipeline(config, progress).run())


def build_stages(job: Job, devices: list[str], on_event: Callable[[PoolEvent], None],
                 ) -> tuple[BlockQueue, Batcher, WorkerPool, Writer]:
    """A run's stages, on the loop: the queue of read blocks, the batcher, the worker pool (its
    events to `on_event`) and the writer, started (the first read chunk's failures and unchanged
    inputs are recorded there)."""
    config = job.config
    queue = BlockQueue(config.queue_items or job.task_cls.queue_items)
    batcher = Batcher(queue, job.caps, job.window_items, parallel=len(devices))
    pool = WorkerPool(job.task, job.spec, devices, on_event, batch_timeout_s=config.batch_timeout_s,
                      max_restarts=config.max_restarts, setup_timeout_s=config.setup_timeout_s)
    writer = Writer(job.accounts, config.part_rows, config.flush_s)
    writer.start()
    return queue, batcher, pool, writer


class Pipeline:
    def __init__(self, config: RunConfig, progress: Progress | None = None) -> None:
        self.config = config
        self.job = Job(config, progress)
        self.progress = self.job.progress
        self.signal_received = 0  # the signal number that asked this run to stop; 0 = running
        self.deadline = float("inf")  # time.monotonic() by which the run has exited, after a signal
        self.stop_event = asyncio.Event()
        self.signals = LoopSignals()
        self.pool: WorkerPool | None = None
        self.writer: Writer | None = None
        self.queue: BlockQueue | None = None
        self.pruning: asyncio.Future | None = None  # --prune's thread, once the walk is complete

    @property
    def summary(self) -> RunSummary:
        """The counts so far (complete after `run`, also when it raised)."""
        return self.job.summary

    # --- the run ----------------------------------------------------------------------------
    async def run(self) -> RunSummary:
        self.signals.install(self._on_signal)
        gc.freeze()  # modules and models loaded so far never die: full collections skip them (halves the pauses)
        try:
            await asyncio.to_thread(self.job.open)
            if not self.signal_received:
                await self._run_opened()
            else:
                self.job.close(written=True)
        except OutputError as exc:  # the output side failed mid-run (or found no space): the summary goes with it
            if self.job.opened or exc.full:
                exc.summary = self._finish(exc)
            raise
        finally:
            self.signals.restore()
            gc.unfreeze()  # a process that runs again (tests, a library user) collects this run's objects
        return self._finish()

    def _finish(self, error: OutputError | None = None) -> RunSummary:
        return self.job.finish(self.signal_received, self.pool.infer_s if self.pool else 0.0,
                               self.batcher.waited_s if self.queue else 0.0,
                               self.writer.seconds if self.writer else 0.0, error)

    def _build_stages(self) -> tuple[list[str], BlockQueue, WorkerPool]:
        """The run's devices, and its queue, batcher, pool and writer on them (a watch's too)."""
        devices = self.job.devices()
        self.job.use_devices(devices)
        queue, self.batcher, pool, self.writer = build_stages(self.job, devices, self._on_pool_event)
        self.queue, self.pool = queue, pool
        self._oom = OomHistory(self.batcher.caps)  # out-of-memory errors lower the batcher's caps
        self.has_work = asyncio.Event()
        return devices, queue, pool

    async def _run_opened(self) -> None:
        job = self.job
        devices, queue, pool = self._build_stages()
        ticker = asyncio.ensure_future(tick(self.progress, lambda: job.counts_now(queue.items,
                                                                                  pool.in_flight_count())))
        self.reader = asyncio.ensure_future(self._read(devices))  # reads while the workers load their models
        pruning_error = None
        try:
            if job.output.all_new():  # a first run: the models load while the tree is walked and read
                pool.spawn()
            if await self._any_work():
                await self._load_and_run(devices)
            elif not self.signal_received:
                await self.reader
        finally:
            ticker.cancel()
            self.reader.cancel()
            await asyncio.gather(self.reader, return_exceptions=True)
            pruning_error = await self._shutdown()
        if pruning_error is not None:  # only when nothing else went up: the first error is the run's
            raise pruning_error

    def _built(self) -> tuple[WorkerPool, Writer, BlockQueue]:
        """The stages `_run_opened` built, for the steps that run after it."""
        assert self.pool is not None and self.writer is not None and self.queue is not None, "not built. A bug."
        return self.pool, self.writer, self.queue

    async def _any_work(self) -> bool:
        """Wait for the first block (or the end of input): a cron rerun over an unchanged
        tree then finishes in the time of a walk, without loading a model."""
        _, writer, _ = self._built()
        waiter = asyncio.ensure_future(self.has_work.wait())
        stop = asyncio.ensure_future(self.stop_event.wait())
        await asyncio.wait({waiter, stop, self.reader, writer.task}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        stop.cancel()
        for stage in (self.reader, writer.task):  # the writer: a failures file or ledger that failed
            if stage.done() and not stage.cancelled() and (error := stage.exception()) is not None:
                raise error
        return self.has_work.is_set() and not self.signal_received

    async def _load_and_run(self, devices: list[str], first_id: int = 1) -> int:
        """The models load while the dispatcher fills their Pipes; returns the next batch id."""
        where = ", ".join(sorted(set(devices)))
        self.job.counts.phase = f"loading the model in {len(devices)} worker(s) on {where}"
        pool, writer, _ = self._built()
        writer.warm()
        if not pool.spawned:
            pool.spawn()
        dispatcher = asyncio.ensure_future(feed(pool, self.batcher, writer, self.config.part_rows,
                                                lambda: bool(self.signal_received), first_id))
        loading = asyncio.ensure_future(pool.start())
        stop = asyncio.ensure_future(self.stop_event.wait())
        try:
            await asyncio.wait({loading, stop}, return_when=asyncio.FIRST_COMPLETED)
            if loading.done():
                loading.result()  # raises the worker's setup error
                self.job.counts.phase = ""
                return await self._run_stages(dispatcher)
        finally:
            stop.cancel()
            for task in (loading, dispatcher):
                task.cancel()
            await asyncio.gather(loading, dispatcher, return_exceptions=True)
        return first_id

    async def _run_stages(self, dispatcher: asyncio.Future) -> int:
        """Reader, dispatcher and writer run together; the first to fail stops the others
        (a sink that broke mid-run ends the run now, not after reading the whole tree)."""
        stages: set[asyncio.Future] = {self.reader, dispatcher, self._built()[1].task}
        while not dispatcher.done():
            done, _ = await asyncio.wait(stages, return_when=asyncio.FIRST_COMPLETED)
            for stage in done:
                if not stage.cancelled() and (error := stage.exception()) is not None:
                    raise error
            stages = {s for s in stages if not s.done()} or {dispatcher}
        return await dispatcher

    async def _shutdown(self) -> BaseException | None:
        """Stop the workers (by the deadline when a signal asked), write what is complete, close.
        Returns the prune's error when a stop cancelled the reader it would have gone up with
        (a refusal: exit 3 with its line, as on Ray, rather than an exit 130 that hides it)."""
        deadline = min(self.deadline - WRITE_MARGIN_S, time.monotonic() + STOP_DEADLINE_S)
        written, failed = False, False
        try:
            if self.pool is not None:
                await self.pool.stop(deadline)
            if self.writer is not None and self.writer.started:
                await self.writer.close()
            written = True
        except BaseException:
            failed = True
            raise
        finally:
            pruned = None  # None, or the prune thread's error
            if self.pruning is not None:
                pruned, = await asyncio.gather(self.pruning, return_exceptions=True)
            try:
                await asyncio.to_thread(self.job.close, written)
            except OutputError:
                if not failed:  # else the first error is the run's (a full disk fails the close too)
                    raise
        return pruned if isinstance(pruned, Exception) and self.signal_received else None

    # --- reader -----------------------------------------------------------------------------
    async def _read(self, devices: list[str]) -> None:
        job = self.job
        processes = job.reader_processes(devices)
        job.count_ahead()  # the total, for the progress, before this walk has been everywhere
        try:
            await read_blocks(job, self._built(), job.walk_blocks(), processes, job.seen(), self.has_work,
                              lambda: bool(self.signal_received))
        finally:
            if processes is not None:
                processes.close()
            job.task.close_reading()  # a stop does not wait for a document still being extracted
        if self.signal_received:  # a stop during the walk prunes nothing
            return
        await self._prune_then_end()

    async def _prune_then_end(self, refuse_all: bool = True) -> None:
        """--prune after a complete walk, then the end of input. A stop cancels the reader, never
        the prune's thread: _shutdown waits for it before the output closes (a close beside a
        running prune left the ledger and the rows apart)."""
        self.pruning = asyncio.ensure_future(asyncio.to_thread(self.job.prune, refuse_all))
        await asyncio.shield(self.pruning)
        await self._built()[2].put(END)

    # --- dispatcher -------------------------------------------------------------------------
    # --- what the pool tells the run (called on the loop by the pool) -----------------------
    def _on_pool_event(self, event: PoolEvent) -> None:
        pool, writer, _ = self._built()
        match event:
            case BatchesDone(batches=batches):
                with errors_stop_the_pool(pool):
                    self.job.accounts.outputs_many(batches)
                writer.added()
            case BatchFailed(batch=batch, reason=reason):
                with errors_stop_the_pool(pool):
                    self.job.accounts.fail_items(batch.items, Stage.INFER, reason)
                writer.added()
            case OutOfMemory(batch_size=batch_size):
                self._oom, said = after_oom(self._oom, batch_size)
                if said:
                    self.batcher.caps = self._oom.caps
                    self.progress.log(said + " for this run")
            case PoolLog(message=message):
                self.progress.log(message)

    # --- stop signals ---------------------------------------------------------------------------
    def _on_signal(self, sig: int) -> None:
        if self.signal_received:
            self.job.stop_at_once()
            if self.pool is not None:
                self.pool.kill_now()
            os._exit(EXIT_SIGINT if sig == signal.SIGINT else EXIT_SIGTERM)
        self.signal_received = sig
        self.deadline = time.monotonic() + STOP_DEADLINE_S
        self.stop_event.set()
        self.progress.log(f"{signal.Signals(sig).name}: finishing the batches running now (up to "
                          f"{STOP_DEADLINE_S:g}s), then writing what is done; press Ctrl-C again to stop at once")
        if hasattr(self, "reader"):
            self.reader.cancel()
        if self.pool is not None:
            self.pool.notify()


async def read_blocks(job: Job, built: tuple[WorkerPool, Writer, BlockQueue], blocks: Iterable[list[Source | Failure]],
                      processes: ReaderProcesses | None, seen: Callable[[list[str]], None] | None,
                      has_work: asyncio.Event, stopped: Callable[[], bool], watching: bool = False) -> None:
    """A walk's `blocks` read into the queue: the accounts end what needs no model (failures,
    unchanged inputs, copies whose rows the output holds) and the writer records it. `watching`:
    an input gone or replaced since the walk is a change the watch follows, not a failure."""
    _, writer, queue = built
    lookup = job.output.lookup()
    copies = job.copies_from_output()  # identical content embedded once: rows the output holds
    async for chunk in read_chunks(blocks, job.task, job.max_bytes, job.chunk_files,
                                   job.config.read_chunks_in_flight, lookup, seen,
                                   job.clocks["read"], processes, job.attempts()):
        copied: list[Copied] = []
        if watching:
            chunk = without_moved(chunk)
        if copies is not None and chunk.sources:
            chunk, copied = await asyncio.to_thread(copies.take, chunk)
        block = job.accounts.read(chunk, copied)
        writer.added()  # failures, unchanged inputs, copies' rows (they need no model)
        if block is not None:
            has_work.set()
            await queue.put(block)
        if stopped():
            return
