"""The worker processes' life: spawn each with its own Pipe, send to it in order, hear from it
on a thread of its own, and stop it (the sentinel, a join until a deadline, then a kill).

Why a Pipe each: when workers share one `mp.Queue`, SIGKILL of one wedged the others (it
died holding the queue's read lock). Why spawn: CUDA cannot survive fork. What the messages
mean, and what to do when a worker dies, is not decided here (pool.py, recovery.py).

In-process mode, for tests only: with GPUCLI_TEST_INPROCESS_WORKERS=1 in the environment each
worker is a thread of this process (`WorkerThread`) that runs the same loop (worker.py) and
speaks the same messages over the same kind of Pipe; only the ~0.5-1 s spawn of an interpreter
per worker is gone. It cannot stand in where processes are the subject (a kill, a crash, a hang,
signals, memory): tests/conftest.py sets it for every test but those marked `processes`.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpucli.core.records import WorkerMessage
from gpucli.core.signals import held_from_children
from gpucli.engines.local.worker import STOP, worker_main, worker_thread_main
from gpucli.tasks import TaskSpec

RECEIVER_JOIN_S = 10.0  # a receiver ends once its process's Pipe closes: this only bounds a bug
RECEIVE_DRAIN = 256  # messages a receiver thread hands the loop at once, at most
IN_PROCESS_VARIABLE = "GPUCLI_TEST_INPROCESS_WORKERS"  # "1": worker threads instead of processes (tests)


def in_process_workers() -> bool:
    return os.environ.get(IN_PROCESS_VARIABLE) == "1"


@dataclass
class Worker:
    """One worker slot: the process now in it (replaced after a death) and what the parent knows."""

    index: int
    device: str
    process: Any = None
    conn: Any = None
    in_flight: dict[int, Any] = field(default_factory=dict)  # batch id -> dispatch.InFlight
    ready: bool = False
    alive: bool = False
    pid: int = 0
    busy_since: float = 0.0
    spawned_at: float = 0.0
    kill_reason: str = ""
    infer_s: float = 0.0  # seconds its model spent in predict
    running: int | None = None  # the batch its model started last and has not answered (worker.py)


OnMessages = Callable[[Worker, Any, list[WorkerMessage]], None]  # (worker, its process, messages), on the loop
OnExit = Callable[[Worker, Any], None]  # (worker, the process that exited), on the loop


class Processes:
    """The processes in the worker slots and their Pipes. Sends get a thread per worker: behind
    reader threads in the default pool the device would wait for the disk, and one thread per
    Pipe keeps its messages in the order sent (the pool blames the oldest batch for a crash,
    and STOP must follow the last batch) and its writes whole."""

    def __init__(self, spec: TaskSpec, devices: list[str], threads: int, on_messages: OnMessages,
                 on_exit: OnExit) -> None:
        self.spec = spec
        self.threads = threads
        self.workers = [Worker(i, d) for i, d in enumerate(devices)]
        self._on_messages = on_messages
        self._on_exit = on_exit
        self._ctx = mp.get_context("spawn")
        self.in_process = in_process_workers()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._senders = [ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gpucli-send-{i}")
                         for i in range(len(devices))]
        self._receivers: list[threading.Thread] = []  # one per process spawned; `stop` waits for them

    def spawn(self, worker: Worker) -> None:
        """A new process in this slot; it loads its model in the background. On the loop."""
        self._loop = asyncio.get_running_loop()
        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        name = f"gpucli-worker-{worker.index}"
        if self.in_process:
            process: Any = WorkerThread(child_conn, self.spec, worker.device, name)
            process.start()
        else:
            process = self._ctx.Process(target=worker_main, args=(child_conn, self.spec, worker.device, self.threads),
                                        name=name, daemon=True)
            with held_from_children():
                process.start()
            child_conn.close()
        worker.process, worker.conn, worker.ready, worker.alive = process, parent_conn, False, True
        worker.pid, worker.spawned_at = process.pid, time.monotonic()
        receiver = threading.Thread(target=self._receive, args=(worker, parent_conn, process), daemon=True,
                                    name=f"gpucli-recv-{worker.index}")
        self._receivers = [r for r in self._receivers if r.is_alive()] + [receiver]
        receiver.start()

    def send(self, worker: Worker, message: Any) -> Future:
        """Queued on the worker's sender thread, after what it is sending; the future fails when
        the message could not be pickled (a dead worker's Pipe is the receiver thread's to see)."""
        return self._senders[worker.index].submit(send_quietly, worker.conn, message)

    async def stop(self, deadline: float) -> None:
        """The stop sentinel to each worker, join until `deadline` (time.monotonic), then kill.
        One deadline for all. A worker still loading is killed at once: none of its work is kept.
        Returns once every receiver thread has handed its last message to the loop: one still on
        its way (a killed worker's exit) called the loop after `asyncio.run` had closed it, and
        printed "RuntimeError: Event loop is closed" under a stopped run's one line."""
        for worker in self.workers:
            if worker.process is not None and worker.alive and not worker.ready:
                worker.process.kill()
            elif worker.conn is not None and worker.alive:
                self.send(worker, STOP)
        await asyncio.to_thread(self._join_all, deadline)
        for sender in self._senders:
            sender.shutdown(wait=False, cancel_futures=True)

    def kill_now(self) -> None:
        """Second Ctrl-C: no grace."""
        for worker in self.workers:
            if worker.process is not None and worker.process.is_alive():
                worker.process.kill()

    def kill(self, worker: Worker, reason: str) -> None:
        """Ends a stuck worker; its exit then reads as a death for `reason`."""
        worker.kill_reason = reason
        if worker.process is not None:
            worker.process.kill()  # SIGKILL; nothing happens if it has exited already

    def _join_all(self, deadline: float) -> None:
        for worker in self.workers:
            if worker.process is not None:
                worker.process.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            if worker.process is not None and worker.process.is_alive():
                worker.process.kill()  # workers ignore SIGTERM (the group's signal is the parent's)
                worker.process.join(1.0)
        for receiver in self._receivers:  # each reads EOF now that its process is gone
            receiver.join(RECEIVER_JOIN_S)

    def _receive(self, worker: Worker, conn: Any, process: Any) -> None:
        """Receiver thread: each wake-up's messages to the loop together, then the exit."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("a receiver thread started before any worker was spawned. This is a bug.")

        def to_loop(messages: list[WorkerMessage]) -> None:
            call_on_loop(loop, self._on_messages, worker, process, messages)

        receive_until_closed(conn, to_loop)
        process.join(5.0)
        call_on_loop(loop, self._on_exit, worker, process)


class WorkerThread:
    """In-process mode's worker: a thread that runs worker.py's loop on its end of the Pipe,
    with the part of `multiprocessing.Process` that `Processes` uses. A thread cannot be killed:
    `kill` shuts its Pipe down, so the parent hears an exit at once (as after SIGKILL) and the
    thread ends by itself at its next receive or send."""

    def __init__(self, conn: Any, spec: TaskSpec, device: str, name: str) -> None:
        self.pid = os.getpid()
        self.exitcode: int | None = None
        self._conn = conn
        self._thread = threading.Thread(target=self._run, args=(spec, device), name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self, spec: TaskSpec, device: str) -> None:
        code = 1
        try:
            worker_thread_main(self._conn, spec, device)
            code = 0
        finally:
            if self.exitcode is None:
                self.exitcode = code

    def is_alive(self) -> bool:
        return self.exitcode is None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is None:
            self._thread.join(timeout)

    def kill(self) -> None:
        if self.exitcode is not None:
            return
        self.exitcode = -signal.SIGKILL
        try:  # shutdown, not close: it wakes a receive blocked on this socket in another thread
            with socket.socket(fileno=os.dup(self._conn.fileno())) as end:
                end.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def receive_until_closed(conn: Any, hand: Callable[[list[WorkerMessage]], None]) -> None:
    """Reads until the worker's end closes; what is waiting at each wake-up goes to `hand` at
    once (up to RECEIVE_DRAIN), and what the worker sent before it went still counts."""
    open_ = True
    while open_:
        messages: list[WorkerMessage] = []
        try:
            messages.append(conn.recv())
            while len(messages) < RECEIVE_DRAIN and conn.poll():
                messages.append(conn.recv())
        except (EOFError, OSError):
            open_ = False
        if messages:
            hand(messages)


def call_on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """`callback(*args)` on `loop`, from another thread; nothing once the loop is closed (the run
    is over, and a receiver that `stop` gave up on has nobody left to tell)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        if not loop.is_closed():
            raise


def send_quietly(conn: Any, message: Any) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass


def exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
