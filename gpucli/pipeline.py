"""run(config) -> RunSummary: the only module that knows every stage.

    reader (threads) --bounded queue--> dispatcher --Pipe per worker--> workers (spawned)
    writer (thread for the sink) <-- tracker <-- results (receiver threads -> event loop)

The event loop only routes: file I/O and decoding run in reader threads, models in the
workers, sink calls in a writer thread. Every input ends as rows or one failure record.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpucli import __version__
from gpucli.batching import BatchCaps, sort_window, take_batch
from gpucli.config import RunConfig
from gpucli.devices import resolve_devices
from gpucli.errors import EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, UsageError
from gpucli.output import Output
from gpucli.pool import PoolEvents, WorkerPool
from gpucli.progress import Counts, Progress, make_progress
from gpucli.reader import ReadResult, WalkFilter, WalkReport, read_all, walk
from gpucli.records import Batch, Failure, Item
from gpucli.tasks import Task, TaskSpec, get_task
from gpucli.tracker import Tracker
from gpucli.writer import Writer

END = object()
STOP_DEADLINE_S = 10.0
WINDOW_BATCHES = 16  # batches per sorted window (see _next_batch)


@dataclass
class RunSummary:
    task: str
    model: str
    inputs: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    rows: int = 0
    out: str = ""
    failures_file: str = ""
    elapsed_s: float = 0.0
    stage_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("read", "queue", "infer", "write"), 0.0))
    items_per_s: float = 0.0
    exit_code: int = 0
    unchanged: int = 0  # done by an earlier run, counted in skipped
    pruned: int = 0
    unfinished: int = 0
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stage_seconds"] = {k: round(v, 3) for k, v in self.stage_seconds.items()}
        data["elapsed_s"] = round(self.elapsed_s, 3)
        data["items_per_s"] = round(self.items_per_s, 2)
        return data


def default_out(task: str) -> str:
    return f"{task}.parquet"


def run(config: RunConfig, progress: Progress | None = None) -> RunSummary:
    """Run one job to the end (or to an interrupt) and return its summary."""
    return asyncio.run(Pipeline(config, progress).run())


def task_and_spec(config: RunConfig) -> tuple[type[Task], TaskSpec]:
    """The task class, and the plain data that rebuilds it in a worker (any engine)."""
    task_cls = get_task(config.task)
    return task_cls, TaskSpec(config.task, config.model or task_cls.default_model, dict(config.task_options),
                              config.dtype)


def batch_caps(config: RunConfig, task_cls: type[Task], devices: list[str] | None = None) -> BatchCaps:
    """The run's caps: flags where given, else the task's defaults (its CPU batch size when
    every worker is on the CPU)."""
    size, cost = task_cls.default_batch_size, task_cls.default_max_cost
    if devices and all(d == "cpu" for d in devices):
        size, cost = task_cls.cpu_batch_size or size, task_cls.cpu_max_cost or cost
    max_cost = cost if config.max_batch_cost < 0 else config.max_batch_cost
    return BatchCaps(config.batch_size or size, max_cost, config.max_wait_ms / 1000)


def quiet_parent_torch() -> None:
    """The parent only routes: torch threads there (imported by a task's `open`, e.g. for a
    Hugging Face image processor) would fight the workers for the cores."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


class Pipeline:
    def __init__(self, config: RunConfig, progress: Progress | None = None) -> None:
        self.config = config
        self.task_cls, self.spec = task_and_spec(config)
        self.summary = RunSummary(task=self.task_cls.name, model=self.spec.model)
        self.progress = progress or make_progress(config.progress, config.quiet, self.task_cls.name,
                                                  self.task_cls.cost_name)
        self.counts = Counts()
        self.tracker = Tracker()
        self.caps = batch_caps(config, self.task_cls)
        self.stopping: int = 0
        self.input_done = False
        self._work_event = asyncio.Event()
        self._batch_id = 0
        self._oom_events = 0

    # --- the run ----------------------------------------------------------------------------
    async def run(self) -> RunSummary:
        started = time.monotonic()
        check_roots(self.config.paths)
        self.task = self.task_cls(self.spec)
        await asyncio.to_thread(self.task.open)
        quiet_parent_torch()
        self.output = Output(self.config.out or default_out(self.task_cls.name), self.config.incremental)
        devices = resolve_devices(self.config.devices, self.config.workers_per_device)
        self.caps = batch_caps(self.config, self.task_cls, devices)
        schema, metadata = output_schema(self.task), output_metadata(self.task)
        await asyncio.to_thread(self.output.open, schema, metadata, output_settings(self.spec, metadata))
        self.summary.out, self.summary.failures_file = self.output.display, self.output.failures.path
        gc.freeze()  # modules and models loaded so far never die: full collections skip them (halves the pauses)
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=self.config.queue_items or self.task_cls.queue_items)
        self.pool = WorkerPool(self.task, self.spec, devices,
                               PoolEvents(self._on_outputs, self._on_item_failed, self.progress.log, self._on_oom),
                               batch_timeout_s=self.config.batch_timeout_s, max_restarts=self.config.max_restarts)
        self.writer = Writer(self.output.sink, schema, self.config.part_rows, self.config.flush_s,
                             self._on_durable, self.output.commit)
        self._install_signals()
        ticker = asyncio.ensure_future(self._tick())
        self.reader = asyncio.ensure_future(self._read())  # reads while the workers load their models
        try:
            if await self._any_work():
                where = ", ".join(sorted(set(devices)))
                self.counts.phase = f"loading the model in {len(devices)} worker(s) on {where}"
                self.writer.warm()
                self.pool.spawn()
                self.writer.start()
                dispatcher = asyncio.ensure_future(self._dispatch())  # fills the workers' Pipes while they load
                try:
                    await self.pool.start()
                except BaseException:
                    dispatcher.cancel()
                    await asyncio.gather(dispatcher, return_exceptions=True)
                    raise
                self.counts.phase = ""
                await self._run_stages(dispatcher)
            else:
                await self.reader
        finally:
            ticker.cancel()
            self.reader.cancel()
            await self._shutdown()
            self._remove_signals()
            gc.unfreeze()  # a process that runs again (tests, a library user) collects this run's objects
        return self._finish(started)

    async def _any_work(self) -> bool:
        """Wait for the first item (or the end of input): a cron rerun over an unchanged
        tree then finishes in the time of a walk, without loading a model."""
        waiter = asyncio.ensure_future(self._work_event.wait())
        await asyncio.wait({waiter, self.reader}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if self.reader.done() and self.reader.exception() is not None:
            raise self.reader.exception()
        return self._work_event.is_set()

    async def _run_stages(self, dispatcher: asyncio.Future) -> None:
        """Reader, dispatcher and writer run together; the first to fail stops the others
        (a sink that broke mid-run ends the run now, not after reading the whole tree)."""
        stages = (self.reader, dispatcher, self.writer.task)
        while not dispatcher.done():
            done, _ = await asyncio.wait(set(stages), return_when=asyncio.FIRST_COMPLETED)
            for stage in done:
                if not stage.cancelled() and stage.exception() is not None:
                    for other in stages:
                        if other is not self.writer.task:
                            other.cancel()
                    raise stage.exception()
            stages = tuple(s for s in stages if not s.done()) or (dispatcher,)
        await dispatcher
        if not self.reader.done():
            self.reader.cancel()

    async def _shutdown(self) -> None:
        await self.pool.stop(deadline_s=STOP_DEADLINE_S)
        written = False
        try:
            await self.writer.close()
            written = True
        finally:
            await asyncio.to_thread(self.output.close, written)
            self.progress.update(self._counts())
            self.progress.close()

    def _finish(self, started: float) -> RunSummary:
        s = self.summary
        s.unfinished = self.tracker.open_count if self.stopping else 0
        s.inputs = s.succeeded + s.failed + s.skipped + s.unfinished
        s.elapsed_s = time.monotonic() - started
        s.stage_seconds["write"] = self.writer.seconds
        s.items_per_s = self.counts.items / s.elapsed_s if s.elapsed_s else 0.0
        s.interrupted = bool(self.stopping)
        if self.stopping:
            s.exit_code = EXIT_SIGTERM if self.stopping == signal.SIGTERM else EXIT_SIGINT
        else:
            s.exit_code = EXIT_FAILED if s.failed else EXIT_OK
        return s

    # --- reader -----------------------------------------------------------------------------
    async def _read(self) -> None:
        flt = WalkFilter(self.task_cls.suffixes, self.config.include, self.config.exclude)
        max_bytes = int(self.config.max_file_mb * 2**20)
        report = WalkReport()
        found = walk(list(self.config.paths), flt, self.output.walk_exclusions(), report)
        chunk_files = self.config.read_chunk_files or self.task_cls.read_chunk_files
        async for result in read_all(found, self.task.prepare, max_bytes, chunk_files,
                                     self.config.read_chunks_in_flight, self.output.lookup(),
                                     self.output.mark_seen if self.config.prune else None):
            self.counts.found += 1
            if isinstance(result, Failure):
                self._record_failure(result)
            elif result.failure is not None:
                self._record_failure(result.failure)
            elif result.unchanged:
                self._unchanged(result.source)
            else:
                await self._enqueue(result)
            if self.stopping:
                return
        self.counts.walk_done = True
        if self.config.prune:
            self.summary.pruned = await asyncio.to_thread(self.output.prune, report, self.config.prune_all,
                                                          self.progress.log)
        await self.queue.put(END)

    def _unchanged(self, source) -> None:
        self.summary.unchanged += 1
        self.summary.skipped += 1
        self.output.unchanged(source)

    async def _enqueue(self, result: ReadResult) -> None:
        self.summary.stage_seconds["read"] += result.seconds
        self.tracker.expect(result.source, len(result.items))
        self._work_event.set()
        for item in result.items:
            item.enqueued_at = time.monotonic()
            await self.queue.put(item)

    # --- dispatcher -------------------------------------------------------------------------
    async def _dispatch(self) -> None:
        pending: list[Item] = []
        while not self.stopping:
            worker = self.pool.free_worker()
            if worker is None:
                await self.pool.wait_changed()
                continue
            if self.pool.retry:
                await self.pool.send(worker, self.pool.retry.popleft())
                continue
            if self.writer.backlog > 4 * self.config.part_rows:
                await self._wait_for_writer()
                continue
            batch = await self._next_batch(pending)
            if batch is not None:
                await self.pool.send(worker, batch)
            elif self.input_done and not pending and self.pool.idle():
                return
            elif self.input_done:
                await self.pool.wait_changed()
        await self._drain_in_flight()

    async def _wait_for_writer(self) -> None:
        """Backpressure: the sink is slower than the model; let it catch up."""
        while self.writer.backlog > self.config.part_rows and not self.stopping:
            if self.writer.task.done():
                return
            await asyncio.sleep(0.05)

    async def _next_batch(self, pending: list[Item]) -> Batch | None:
        """The next batch of a sorted window. A window is what is queued now (up to
        `_window_size` items; waiting at most max_wait for a full batch), sorted by cost and
        cut into batches in order; the next window is collected when what is left cannot
        fill a batch. Cutting whole windows pads like a global sort: on one-sentence files a
        window of 16 batches pads 2% over the tokens, where taking the biggest batch of a
        sliding window of 4 batches padded 27% (the small items pile up in the window)."""
        if not self.caps.full(len(pending), sum(i.cost for i in pending)):
            if not pending:
                item = await self._get(None)
                if item is None:
                    return None
                pending.append(item)
            await self._collect(pending, self._window_size())
            pending[:] = sort_window(pending)
        items, rest = take_batch(pending, self.caps)
        pending[:] = rest
        now = time.monotonic()
        self.summary.stage_seconds["queue"] += now - min(i.enqueued_at for i in items)
        self._batch_id += 1
        return Batch(self._batch_id, items)

    def _window_size(self) -> int:
        """WINDOW_BATCHES batches, within the queue's size (big items keep small queues,
        and the window holds items outside it)."""
        return max(self.caps.max_items, min(WINDOW_BATCHES * self.caps.max_items, self.queue.maxsize or 1 << 30))

    async def _collect(self, pending: list[Item], window: int) -> None:
        """Take what is queued, up to `window`; wait at most max_wait for a full batch."""
        deadline = time.monotonic() + self.caps.max_wait_s
        while len(pending) < window and not self.input_done:
            self._drain_now(pending, window)
            if self.caps.full(len(pending), sum(i.cost for i in pending)) or self.input_done:
                return
            remaining = deadline - time.monotonic()
            item = await self._get(remaining) if remaining > 0 else None
            if item is None:
                return
            pending.append(item)

    def _drain_now(self, pending: list[Item], window: int) -> None:
        while len(pending) < window and not self.queue.empty():
            item = self.queue.get_nowait()
            if item is END:
                self.input_done = True
                return
            pending.append(item)

    async def _get(self, timeout: float | None) -> Item | None:
        """The next item; None at the end of input, on timeout, or when the pool changed
        (a batch to resend, a worker back) so the dispatcher can look again."""
        if self.input_done:
            return None
        if not self.queue.empty():
            item = self.queue.get_nowait()
        else:
            getter = asyncio.ensure_future(self.queue.get())
            changed = asyncio.ensure_future(self.pool.wait_changed())
            try:
                await asyncio.wait({getter, changed}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                getter.cancel()
            if changed.done() and not changed.cancelled() and changed.exception() is not None:
                raise changed.exception()
            if not getter.done() or getter.cancelled():
                return None
            item = getter.result()
        if item is END:
            self.input_done = True
            return None
        return item

    async def _drain_in_flight(self) -> None:
        """After an interrupt: let running batches finish, up to the deadline."""
        deadline = time.monotonic() + STOP_DEADLINE_S
        while self.pool.in_flight_count() and time.monotonic() < deadline and self.stopping < 2:
            try:
                await asyncio.wait_for(self.pool.wait_changed(), deadline - time.monotonic())
            except asyncio.TimeoutError:
                break

    # --- results (called on the loop by the pool) -------------------------------------------
    def _on_outputs(self, batch: Batch, outputs: list[dict], seconds: float) -> None:
        self.summary.stage_seconds["infer"] += seconds
        self.counts.items += len(batch)
        self.counts.cost += batch.cost
        for item, output in zip(batch.items, outputs):
            try:
                row = self.task.row(item, output)
            except Exception as exc:  # noqa: BLE001 - a bad output costs one file
                self._on_item_failed(item, f"unusable model output: {type(exc).__name__}: {exc}")
                continue
            finished = self.tracker.add(item, row)
            if finished is not None:
                self._file_done(*finished)

    def _file_done(self, source, rows: list[dict]) -> None:
        try:
            rows = self.task.finish(source, rows)
        except Exception as exc:  # noqa: BLE001
            self._record_failure(Failure(source.path, "infer", f"{type(exc).__name__}: {exc}"))
            return
        self.writer.add(source, rows)

    def _on_item_failed(self, item: Item, reason: str) -> None:
        failure = self.tracker.fail(item, "infer", reason)
        if failure is not None:
            self._record_failure(failure)

    def _on_oom(self, batch_size: int) -> None:
        self._oom_events += 1
        if self._oom_events >= 2 and batch_size <= self.caps.max_items and batch_size > 1:
            self.caps = BatchCaps(max(1, batch_size // 2), self.caps.max_cost // 2 if self.caps.max_cost else 0,
                                  self.caps.max_wait_s)
            self.progress.log(f"out of memory {self._oom_events} times: batch size lowered to {self.caps.max_items}"
                              f"{f', cost cap to {self.caps.max_cost}' if self.caps.max_cost else ''} for this run")

    def _on_durable(self, sources: list, rows: int) -> None:
        self.summary.succeeded += len(sources)
        self.summary.rows += rows

    def _record_failure(self, failure: Failure) -> None:
        self.output.failed(failure)
        if failure.stage == "skip":
            self.summary.skipped += 1
        else:
            self.summary.failed += 1

    # --- progress and signals ---------------------------------------------------------------
    def _counts(self) -> Counts:
        c = self.counts
        c.done, c.failed, c.skipped, c.rows = (self.summary.succeeded, self.summary.failed, self.summary.skipped,
                                               self.summary.rows)
        c.queued = self.queue.qsize() if hasattr(self, "queue") else 0
        c.in_flight = self.pool.in_flight_count() if hasattr(self, "pool") else 0
        return c

    async def _tick(self) -> None:
        while True:
            self.progress.update(self._counts())
            await asyncio.sleep(0.25)

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests drive the pipeline from threads)

    def _remove_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.remove_signal_handler(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass

    def _on_signal(self, sig: int) -> None:
        if self.stopping:
            self.progress.log("second interrupt: stopping now; complete parts are kept")
            self.pool.kill_now()
            os._exit(EXIT_SIGINT if sig == signal.SIGINT else EXIT_SIGTERM)
        self.stopping = sig
        self.progress.log(f"{signal.Signals(sig).name}: finishing batches in flight (up to {STOP_DEADLINE_S:g}s), "
                          "then writing what is done; press Ctrl-C again to stop at once")
        if hasattr(self, "reader"):
            self.reader.cancel()
        self.pool.notify()


def output_schema(task: Task):
    """`path` first, then the task's columns."""
    import pyarrow as pa

    return pa.schema([pa.field("path", pa.string())] + list(task.schema()))


def output_metadata(task: Task) -> dict[str, str]:
    return {**task.info(), "gpucli.version": __version__, "gpucli.task": task.name}


def output_settings(spec: TaskSpec, metadata: dict[str, str]) -> dict[str, Any]:
    """Everything that changes the rows: an output's ledger refuses a run with others."""
    return {"task": spec.name, "model": spec.model, "options": dict(spec.options), "dtype": spec.dtype,
            "info": {k: v for k, v in metadata.items() if k != "gpucli.version"}}


def check_roots(paths: tuple[str, ...]) -> None:
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    for p in paths:
        if Path(p).is_dir() and not os.access(p, os.R_OK | os.X_OK):
            raise UsageError(f"{p}: directory is not readable")
