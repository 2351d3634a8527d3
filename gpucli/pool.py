"""Spawned worker processes, one or more per device, each with its own Pipe.

Why a Pipe each: when workers share one `mp.Queue`, SIGKILL of one wedged the others
(it died holding the queue's read lock). Why spawn: CUDA cannot survive fork.

The pool owns the batches in flight (at most `max_in_flight` per worker: one running, one
prefetched) and carries out the decisions of `recovery` when a batch fails or a worker
dies. A watchdog kills a worker stuck on one batch past the batch timeout, or still
loading its model past the setup timeout; both count as deaths against the restart budget.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpucli import recovery
from gpucli.errors import GpucliError, RunFailedError, WorkerSetupError
from gpucli.records import Batch, Items
from gpucli.signals import held_from_children
from gpucli.tasks import Task, TaskSpec
from gpucli.worker import STOP, worker_main


@dataclass
class InFlight:
    batch: Batch
    packed: Any
    sent_at: float


@dataclass
class Worker:
    index: int
    device: str
    process: Any = None
    conn: Any = None
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    ready: bool = False
    alive: bool = False
    pid: int = 0
    busy_since: float = 0.0
    spawned_at: float = 0.0
    kill_reason: str = ""
    infer_s: float = 0.0  # seconds its model spent in predict
    running: int | None = None  # the batch its model started last and has not answered (worker.py)


@dataclass
class PoolEvents:
    """What the pool tells the run: the outputs of batches that finished (items and outputs,
    in the order they came back: those one wake-up of the loop brought, at once), and a batch
    whose only item failed for good."""

    on_outputs: Callable[[list[tuple[Items, Any]]], None]
    on_batch_failed: Callable[[Batch, str], None]
    log: Callable[[str], None] = lambda message: None
    on_oom: Callable[[int], None] = lambda batch_size: None


class WorkerPool:
    def __init__(self, task: Task, spec: TaskSpec, devices: list[str], events: PoolEvents,
                 max_in_flight: int = 2, max_restarts: int = 16, batch_timeout_s: float = 600.0,
                 setup_timeout_s: float = 900.0) -> None:
        self.task = task
        self.spec = spec
        self.events = events
        self.max_in_flight = max_in_flight
        self.max_restarts = max_restarts
        self.batch_timeout_s = batch_timeout_s
        self.setup_timeout_s = setup_timeout_s
        self.workers = [Worker(i, d) for i, d in enumerate(devices)]
        self.retry: collections.deque[Batch] = collections.deque()
        self.restarts = 0
        self._consecutive_deaths = 0  # the restart backoff grows with these, and resets on success
        self.fatal: GpucliError | None = None
        self._waiters: list[asyncio.Future] = []
        self.threads = _threads_per_worker(devices)
        self._ctx = mp.get_context("spawn")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._setup_errors: dict[int, str] = {}
        self._closing = False
        self._started = False  # every worker loaded once; later setup failures are deaths
        self._watchdog: asyncio.Task | None = None
        self._next_id = 1_000_000_000  # ids of split batches, apart from the dispatcher's
        # Sends get a thread per worker: behind reader threads in the default pool the device
        # would wait for the disk, and one thread per Pipe keeps its messages in the order sent
        # (the pool blames the oldest batch for a crash, and STOP must follow the last batch)
        # and its writes whole.
        self._senders = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gpucli-send-{i}")
                         for i in range(len(devices))]

    # --- life cycle ---------------------------------------------------------------------
    @property
    def spawned(self) -> bool:
        return self._loop is not None

    def spawn(self) -> None:
        """Start every worker process; they load their models in the background."""
        self._loop = asyncio.get_running_loop()
        for worker in self.workers:
            self._spawn(worker)
        self._watchdog = asyncio.ensure_future(self._watch())

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
            await self._wait_changed()
        self._started = True

    async def stop(self, deadline: float) -> None:
        """The stop sentinel to each worker (through its sender thread, after what it is
        sending), join until `deadline` (time.monotonic), then kill. One deadline for all."""
        self._closing = True
        if self._watchdog:
            self._watchdog.cancel()
        for worker in self.workers:
            if worker.process is not None and worker.alive and not worker.ready:
                worker.process.kill()  # still loading: nothing of its work would be kept
            elif worker.conn is not None and worker.alive:
                self._senders[worker.index].submit(_send_quietly, worker.conn, STOP)
        await asyncio.to_thread(self._join_all, deadline)
        for sender in self._senders:
            sender.shutdown(wait=False, cancel_futures=True)
        for worker in self.workers:
            for record in worker.in_flight.values():
                self.task.release(record.packed)
            worker.in_flight.clear()

    def kill_now(self) -> None:
        """Second Ctrl-C: no grace."""
        self._closing = True
        for worker in self.workers:
            if worker.process is not None and worker.process.is_alive():
                worker.process.kill()

    def _join_all(self, deadline: float) -> None:
        for worker in self.workers:
            if worker.process is not None:
                worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            if worker.process is not None and worker.process.is_alive():
                worker.process.kill()  # workers ignore SIGTERM (the group's signal is the parent's)
                worker.process.join(1.0)

    def _spawn(self, worker: Worker) -> None:
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(target=worker_main, args=(child_conn, self.spec, worker.device, self.threads),
                                    name=f"gpucli-worker-{worker.index}", daemon=True)
        with held_from_children():
            process.start()
        child_conn.close()
        worker.process, worker.conn, worker.ready, worker.alive = process, parent_conn, False, True
        worker.pid, worker.spawned_at = process.pid, time.monotonic()
        threading.Thread(target=self._receive, args=(worker, parent_conn, process), daemon=True,
                         name=f"gpucli-recv-{worker.index}").start()

    # --- sending ------------------------------------------------------------------------
    def free_worker(self) -> Worker | None:
        """The live worker with the fewest batches in flight, if any has room (one still
        loading its model counts: its batches wait in its Pipe)."""
        room = [w for w in self.workers if w.alive and len(w.in_flight) < self.max_in_flight]
        return min(room, key=lambda w: len(w.in_flight)) if room else None

    async def send(self, worker: Worker, batch: Batch) -> None:
        packed = self.task.pack(batch.items.payload)
        if not worker.in_flight:
            worker.busy_since = time.monotonic()
        worker.in_flight[batch.id] = InFlight(batch, packed, time.monotonic())
        # Handed to the worker's sender thread without waiting for the write: the in-flight
        # limit already bounds what is queued, and a wake-up per batch cost the loop more than
        # the send itself. A failed write is the receiver thread's to see (it requeues the batch).
        sent = self._senders[worker.index].submit(_send_quietly, worker.conn, (batch.id, packed))
        sent.add_done_callback(lambda done: self._check_sent(worker, batch.id, done))

    def _check_sent(self, worker: Worker, batch_id: int, done: Any) -> None:
        """Sender thread: a batch that could not be sent for another reason than a dead worker
        (a payload that does not pickle) fails its inputs, instead of waiting for a timeout."""
        error = done.exception()
        if error is not None:
            self._loop.call_soon_threadsafe(self._send_failed, worker, batch_id, error)

    def _send_failed(self, worker: Worker, batch_id: int, error: BaseException) -> None:
        record = self._finish(worker, batch_id)
        if record is not None:
            self.events.on_batch_failed(record.batch, f"could not send the batch to its worker: "
                                                      f"{type(error).__name__}: {error}")
        self.notify()

    def in_flight_count(self) -> int:
        return sum(len(w.in_flight) for w in self.workers)

    def idle(self) -> bool:
        return not self.retry and self.in_flight_count() == 0

    @property
    def infer_s(self) -> float:
        """The busiest worker's predict time: a stage time that cannot exceed the wall time."""
        return max((w.infer_s for w in self.workers), default=0.0)

    async def wait_changed(self) -> None:
        """Until a batch finished, failed or was requeued, or a worker came or went."""
        self.raise_fatal()
        await self._wait_changed()

    def changed(self) -> asyncio.Future:
        """A future done at the next change (for waiting on it beside something else)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        return waiter

    async def _wait_changed(self) -> None:
        waiter = self.changed()
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def notify(self) -> None:
        """Wake everything waiting on a change (also used by the run on a signal)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def raise_fatal(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    # --- receiving (thread -> loop) -------------------------------------------------------
    def _receive(self, worker: Worker, conn: Any, process: Any) -> None:
        open_ = True
        while open_:
            messages: list[tuple] = []
            try:
                messages.append(conn.recv())
                while len(messages) < RECEIVE_DRAIN and conn.poll():  # what is waiting: one wake-up of the loop
                    messages.append(conn.recv())
            except (EOFError, OSError):
                open_ = False  # the worker is gone; what it sent before still counts
            if messages:
                self._loop.call_soon_threadsafe(self._on_messages, worker, process, messages)
        process.join(5.0)
        self._loop.call_soon_threadsafe(self._on_exit, worker, process)

    def _on_messages(self, worker: Worker, process: Any, messages: list[tuple]) -> None:
        """The results among these go to the run together: its bookkeeping is per wake-up,
        not per batch (on one-sentence files a batch's rows cost the loop more than its sending)."""
        finished: list[tuple[Items, Any]] = []
        try:
            for message in messages:
                self._handle(worker, process, message, finished)
            if finished:
                self.events.on_outputs(finished)
        except Exception as exc:  # noqa: BLE001 - a bug here must stop the run, not hang it
            import traceback

            self.fatal = RunFailedError(f"internal error while handling a worker's message: "
                                        f"{type(exc).__name__}: {exc}. This is a bug.\n{traceback.format_exc()}")
            self.notify()

    def _handle(self, worker: Worker, process: Any, message: tuple, finished: list[tuple[Items, Any]]) -> None:
        if worker.process is not process:
            return  # a message from a worker already replaced
        kind = message[0]
        if kind == "ready":
            worker.ready = True
            worker.busy_since = time.monotonic()  # batches sent while it loaded start now
        elif kind == "setup_error":
            self._setup_errors[worker.index] = message[1]
        elif kind == "started":
            worker.running = message[1]
            worker.busy_since = time.monotonic()  # the batch timeout counts from here
        elif kind == "result":
            self._consecutive_deaths = 0
            _, batch_id, outputs, seconds = message
            worker.infer_s += seconds
            record = self._finish(worker, batch_id)
            if record is not None:
                finished.append((record.batch.items, outputs))
        elif kind == "error":
            _, batch_id, error_kind, text = message
            record = self._finish(worker, batch_id)
            if record is not None:
                if error_kind == "oom":
                    self.events.on_oom(len(record.batch))
                self._apply(recovery.after_error(record.batch, error_kind, text, self._new_id))
        self.notify()

    def _finish(self, worker: Worker, batch_id: int) -> InFlight | None:
        if worker.running == batch_id:
            worker.running = None
        record = worker.in_flight.pop(batch_id, None)
        if record is not None:
            self.task.release(record.packed)
            worker.busy_since = time.monotonic()
        return record

    def _apply(self, actions: list[recovery.Action]) -> None:
        for action in actions:
            if isinstance(action, recovery.Resend):
                self.retry.append(action.batch)
            else:
                self.events.on_batch_failed(action.batch, action.reason)

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _take_in_flight(self, worker: Worker) -> list[Batch]:
        """Its batches, the one it was running first (recovery blames the first): the one it
        said it started, or else the oldest sent."""
        records = sorted(worker.in_flight.values(), key=lambda r: (r.batch.id != worker.running, r.sent_at))
        worker.in_flight.clear()
        worker.running = None
        for record in records:
            self.task.release(record.packed)
        return [record.batch for record in records]

    def _on_exit(self, worker: Worker, process: Any) -> None:
        if worker.process is not process:
            return
        worker.alive = False
        if self._closing:
            self.notify()
            return
        code = process.exitcode
        setup_error = self._setup_errors.pop(worker.index, None) if self._started else None
        if not worker.ready and not self._started:  # the first load: `start` reports it
            self._setup_errors.setdefault(worker.index, worker.kill_reason or
                                          f"worker exited during setup ({_exit_text(code)})")
            self._apply(recovery.after_unstarted(self._take_in_flight(worker)))
            self.notify()
            return
        if not worker.ready:  # a replacement that could not load the model: one more death
            worker.kill_reason = f"could not load the model again: {setup_error or worker.kill_reason or _exit_text(code)}"
            self._apply(recovery.after_unstarted(self._take_in_flight(worker)))
        reason = worker.kill_reason or _exit_text(code)
        worker.kill_reason = ""
        self._apply(recovery.after_death(self._take_in_flight(worker), reason, self._new_id))
        self._restart(worker, reason)
        self.notify()

    def _restart(self, worker: Worker, reason: str) -> None:
        if not recovery.may_restart(self.restarts, self.max_restarts):
            if not any(w.alive for w in self.workers):
                self.fatal = RunFailedError(f"workers died {self.restarts + 1} times (last: {reason}); "
                                            "restart budget spent, stopping. Results written so far are kept.")
            return
        self.restarts += 1
        self._consecutive_deaths += 1
        delay = recovery.restart_delay(self._consecutive_deaths)
        self.events.log(f"worker {worker.index} ({worker.device}) died ({reason}); restarting in {delay:.1f}s")
        self._loop.call_later(delay, self._respawn, worker)

    def _respawn(self, worker: Worker) -> None:
        if not self._closing:
            self._spawn(worker)

    async def _watch(self) -> None:
        """A worker stuck on one batch past the batch timeout, or loading its model past the
        setup timeout, is killed and handled as a death."""
        while True:
            await asyncio.sleep(min(1.0, self.batch_timeout_s / 4, self.setup_timeout_s / 4))
            now = time.monotonic()
            for worker in self.workers:
                if not worker.alive or worker.kill_reason:
                    continue
                if not worker.ready and now - worker.spawned_at > self.setup_timeout_s:
                    self._kill(worker, f"did not load the model within {self.setup_timeout_s:g}s "
                                       "(--setup-timeout-s)")
                elif worker.ready and worker.in_flight and now - worker.busy_since > self.batch_timeout_s:
                    self._kill(worker, f"batch timed out after {self.batch_timeout_s:g}s")

    def _kill(self, worker: Worker, reason: str) -> None:
        worker.kill_reason = reason
        try:
            os.kill(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


RECEIVE_DRAIN = 256  # messages a receiver thread hands the loop at once, at most


def _send_quietly(conn: Any, message: Any) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _threads_per_worker(devices: list[str]) -> int:
    cpu_workers = sum(1 for d in devices if d == "cpu")
    from gpucli.devices import host_cores

    cores = host_cores()
    if cpu_workers == 0:
        return 1 if len(devices) > cores else max(1, min(4, cores // len(devices)))
    return max(1, cores // cpu_workers)
