"""The worker pool: spawned worker processes, one or more per device, fed batches by the run.

`WorkerPool` coordinates four parts, each in a module of its own:
  pool_lifecycle  the processes: spawn, a Pipe and a receiver thread each, the stop
  dispatch        the batches in flight per worker (at most `max_in_flight`: one running, one
                  prefetched) and those waiting to be resent
  recovery        what to do when a batch fails or a worker dies (decisions on plain data)
  watchdog        a worker stuck on one batch past the batch timeout, or still loading its
                  model past the setup timeout, is killed; both count as deaths against the
                  restart budget
It hears the worker's messages (gpucli.core.records, the protocol in worker.py) and tells the run
what happened in pool_events' events, through one callable, on the loop.
"""

from __future__ import annotations

import asyncio
import collections
import time
import traceback
from typing import Any

from gpucli.core.errors import GpucliError, RunFailedError, WorkerSetupError
from gpucli.core.records import Batch, Failed, FailureKind, Ready, Result, SetupFailed, Started, Work, WorkerMessage
from gpucli.engines import recovery
from gpucli.engines.local.events import BatchDone, BatchesDone, BatchFailed, Changes, OnEvent, OutOfMemory, PoolLog
from gpucli.engines.local.in_flight import Dispatch
from gpucli.engines.local.processes import Processes, Worker, call_on_loop, exit_text
from gpucli.engines.local.watchdog import Timeouts, watch
from gpucli.models.devices import host_cores
from gpucli.tasks import Task, TaskSpec


class WorkerPool:
    def __init__(self, task: Task, spec: TaskSpec, devices: list[str], on_event: OnEvent,
                 max_in_flight: int = 2, max_restarts: int = 16, batch_timeout_s: float = 600.0,
                 setup_timeout_s: float = 900.0) -> None:
        self.task = task
        self.on_event = on_event
        self.timeouts = Timeouts(batch_timeout_s, setup_timeout_s)
        self.threads = _threads_per_worker(devices)
        self.processes = Processes(spec, devices, self.threads, self._on_messages, self._on_exit)
        self.workers = self.processes.workers
        self.dispatch = Dispatch(task, self.workers, max_in_flight)
        self.restarts = recovery.Restarts(max_restarts)
        self.changes = Changes()
        self.fatal: GpucliError | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._setup_errors: dict[int, str] = {}
        self._closing = False
        self._started = False  # every worker loaded once; later setup failures are deaths
        self._watchdog: asyncio.Task | None = None

    # --- life cycle ---------------------------------------------------------------------
    @property
    def spawned(self) -> bool:
        return self._loop is not None

    def _spawned_on(self) -> asyncio.AbstractEventLoop:
        """The loop the workers were spawned from, where their messages and events go."""
        if self._loop is None:
            raise RuntimeError("the pool's loop is asked for before any worker was spawned. This is a bug.")
        return self._loop

    def spawn(self) -> None:
        """Start every worker process; they load their models in the background."""
        self._loop = asyncio.get_running_loop()
        for worker in self.workers:
            self.processes.spawn(worker)
        self._watchdog = asyncio.ensure_future(watch(self.workers, self.timeouts, self.processes.kill))

    async def start(self) -> None:
        """Wait until every worker has loaded its model (or one failed). Batches may be sent
        meanwhile: they wait in the worker's Pipe, so the model starts on the first one the
        moment it is loaded."""
        if self._loop is None:
            self.spawn()
        while not all(w.ready for w in self.workers):
            if self._setup_errors:
                index, message = next(iter(self._setup_errors.items()))
                raise WorkerSetupError(f"worker {index} ({self.workers[index].device}) could not load the model: "
                                       f"{message}")
            await self.changes.wait()
        self._started = True

    async def stop(self, deadline: float) -> None:
        """The stop sentinel to each worker (after what it is being sent), join until `deadline`
        (time.monotonic), then kill. One deadline for all."""
        self._closing = True
        if self._watchdog:
            self._watchdog.cancel()
        await self.processes.stop(deadline)
        self.dispatch.release_all()

    def kill_now(self) -> None:
        """Second Ctrl-C: no grace."""
        self._closing = True
        self.processes.kill_now()

    # --- sending ------------------------------------------------------------------------
    @property
    def retry(self) -> collections.deque[Batch]:
        """Batches to send before any new one (split or resent by recovery)."""
        return self.dispatch.retry

    def free_worker(self) -> Worker | None:
        return self.dispatch.free_worker()

    async def send(self, worker: Worker, batch: Batch) -> None:
        """Handed to the worker's sender thread without waiting for the write: the in-flight
        limit already bounds what is queued, and a wake-up per batch cost the loop more than
        the send itself. A failed write is the receiver thread's to see (it requeues the batch)."""
        packed = self.dispatch.hand(worker, batch)
        sent = self.processes.send(worker, Work(batch.id, packed))
        sent.add_done_callback(lambda done: self._check_sent(worker, batch.id, done))

    def _check_sent(self, worker: Worker, batch_id: int, done: Any) -> None:
        """Sender thread: a batch that could not be sent for another reason than a dead worker
        (a payload that does not pickle) fails its inputs, instead of waiting for a timeout."""
        error = done.exception()
        if error is not None:
            call_on_loop(self._spawned_on(), self._send_failed, worker, batch_id, error)

    def _send_failed(self, worker: Worker, batch_id: int, error: BaseException) -> None:
        record = self.dispatch.finish(worker, batch_id)
        if record is not None:
            self.on_event(BatchFailed(record.batch, f"could not send the batch to its worker: "
                                                    f"{type(error).__name__}: {error}"))
        self.notify()

    def in_flight_count(self) -> int:
        return self.dispatch.in_flight_count()

    def idle(self) -> bool:
        return self.dispatch.idle()

    @property
    def infer_s(self) -> float:
        """The busiest worker's predict time: a stage time that cannot exceed the wall time."""
        return max((w.infer_s for w in self.workers), default=0.0)

    # --- waiting for a change -----------------------------------------------------------
    async def wait_changed(self) -> None:
        """Until a batch finished, failed or was requeued, or a worker came or went."""
        self.raise_fatal()
        await self.changes.wait()

    def changed(self) -> asyncio.Future:
        return self.changes.next()

    def notify(self) -> None:
        """Wake everything waiting on a change (also used by the run on a signal)."""
        self.changes.notify()

    def raise_fatal(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    # --- hearing from the workers (on the loop) -------------------------------------------
    def _on_messages(self, worker: Worker, process: Any, messages: list[WorkerMessage]) -> None:
        """The results among these go to the run together: its bookkeeping is per wake-up,
        not per batch (on one-sentence files a batch's rows cost the loop more than its sending)."""
        if worker.process is not process:
            return  # messages from a worker already replaced
        done: list[BatchDone] = []
        try:
            for message in messages:
                self._handle(worker, message, done)
            if done:
                self.on_event(BatchesDone(done))
        except Exception as exc:  # noqa: BLE001 - a bug here must stop the run, not hang it
            self.fatal = RunFailedError(f"internal error while handling a worker's message: "
                                        f"{type(exc).__name__}: {exc}. This is a bug.\n{traceback.format_exc()}")
        self.notify()

    def _handle(self, worker: Worker, message: WorkerMessage, done: list[BatchDone]) -> None:
        match message:
            case Ready():
                worker.ready = True
                worker.busy_since = time.monotonic()  # batches sent while it loaded start now
            case SetupFailed(message=text):
                self._setup_errors[worker.index] = text
            case Started(batch_id=batch_id):
                worker.running = batch_id
                worker.busy_since = time.monotonic()  # the batch timeout counts from here
            case Result(batch_id=batch_id, outputs=outputs, seconds=seconds):
                self.restarts.after_success()
                worker.infer_s += seconds
                if (record := self.dispatch.finish(worker, batch_id)) is not None:
                    done.append(BatchDone(record.batch.items, outputs))
            case Failed(batch_id=batch_id, kind=kind, message=text):
                if (record := self.dispatch.finish(worker, batch_id)) is not None:
                    if kind is FailureKind.OOM:
                        self.on_event(OutOfMemory(len(record.batch)))
                    self._apply(recovery.after_error(record.batch, kind, text, self.dispatch.new_id))
            case _:
                raise TypeError(f"unknown message from a worker: {message!r}")

    def _apply(self, actions: list[recovery.Action]) -> None:
        for action in actions:
            match action:
                case recovery.Resend(batch=batch):
                    self.retry.append(batch)
                case recovery.Fail(batch=batch, reason=reason):
                    self.on_event(BatchFailed(batch, reason))

    def _on_exit(self, worker: Worker, process: Any) -> None:
        if worker.process is not process:
            return
        worker.alive = False
        if not self._closing:
            self._after_exit(worker, process.exitcode)
        self.notify()

    def _after_exit(self, worker: Worker, code: int | None) -> None:
        """A worker that exited mid-run: its batches go back (recovery decides how), and it is
        restarted within the budget. One that never loaded its model is `start`'s to report."""
        setup_error = self._setup_errors.pop(worker.index, None) if self._started else None
        if not worker.ready and not self._started:  # the first load: `start` reports it
            self._setup_errors.setdefault(worker.index, worker.kill_reason or
                                          f"worker exited during setup ({exit_text(code)})")
            self._apply(recovery.after_unstarted(self.dispatch.take_all(worker)))
            return
        if not worker.ready:  # a replacement that could not load the model: one more death
            worker.kill_reason = f"could not load the model again: {setup_error or worker.kill_reason or exit_text(code)}"
            self._apply(recovery.after_unstarted(self.dispatch.take_all(worker)))
        reason = worker.kill_reason or exit_text(code)
        worker.kill_reason = ""
        self._apply(recovery.after_death(self.dispatch.take_all(worker), reason, self.dispatch.new_id))
        self._restart(worker, reason)

    def _restart(self, worker: Worker, reason: str) -> None:
        if (delay := self.restarts.after_death()) is None:
            if not any(w.alive for w in self.workers):
                self.fatal = RunFailedError(f"workers died {self.restarts.used + 1} times (last: {reason}); "
                                            "restart budget spent, stopping. Results written so far are kept.")
            return
        self.on_event(PoolLog(f"worker {worker.index} ({worker.device}) died ({reason}); restarting in {delay:.1f}s"))
        self._spawned_on().call_later(delay, self._respawn, worker)

    def _respawn(self, worker: Worker) -> None:
        if not self._closing:
            self.processes.spawn(worker)


def _threads_per_worker(devices: list[str]) -> int:
    cpu_workers = sum(1 for d in devices if d == "cpu")
    cores = host_cores()
    if cpu_workers == 0:
        return 1 if len(devices) > cores else max(1, min(4, cores // len(devices)))
    return max(1, cores // cpu_workers)
