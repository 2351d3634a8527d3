"""The loop inside each spawned worker process: load once, then predict batch after batch.
(Tests may run the same loop in a thread instead: processes.py's in-process mode.)

Messages (frozen dataclasses in gpucli.core.records), parent -> worker: `Work(batch_id, packed)`,
or `STOP` (None, the sentinel). Worker -> parent: `Ready(pid, device)` or
`SetupFailed(message)` once, then per batch `Started(batch_id)` and either
`Result(batch_id, outputs, seconds)` or `Failed(batch_id, kind, message)` (kind: a
`FailureKind`, ERROR or OOM; the worker goes on after either).
`Started` is written to the Pipe before `predict` begins, from the thread that runs it: when a
native crash takes the worker down, results still queued for the sender thread are lost with it,
and without this the parent would blame the oldest batch it had sent (one that had finished)
instead of the one that was running. A batch whose payload cannot be unpacked is `Failed`
without a `Started`.
`outputs` is whatever the task's `predict` returned for the batch: one float32 matrix for
embed (a row per item), or a list of one dict per item.
A receiver thread reads and unpacks the next batch while the model runs on this one; on
the stop sentinel it drops a batch it had prefetched (the parent counts it unfinished).
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from gpucli.core.records import Failed, FailureKind, Ready, Result, SetupFailed, Started, Work, WorkerMessage
from gpucli.core.signals import leave_to_parent
from gpucli.tasks import Task, TaskSpec, create_task

STOP = None


def worker_main(conn: Any, spec: TaskSpec, device: str, threads: int) -> None:
    """Entry point of a spawned worker. Never raises: every problem becomes a message."""
    leave_to_parent()  # a group's Ctrl-C or SIGTERM is the parent's to decide (gpucli.core.signals)
    if serve(conn, set_up(spec, device, threads), device):
        _exit_now(conn)


def worker_thread_main(conn: Any, spec: TaskSpec, device: str) -> None:
    """Entry point of a worker thread (processes.py's in-process mode, for tests): the same
    set-up, messages and loop, without what a process sets for itself alone (signals, thread
    counts, the allocator), which in a thread would change its parent's."""
    try:
        with _THREAD_SETUP_LOCK:
            task = load_task(spec, device)
        serve(conn, task, device)
    finally:
        conn.close()


# One worker thread loads its model at a time: two threads importing transformers' lazy modules at
# once failed ("cannot import name 'AutoModel' from 'transformers'"); processes import apart.
_THREAD_SETUP_LOCK = threading.Lock()


def serve(conn: Any, task: Task | SetupFailed, device: str) -> bool:
    """`Ready` and the loop, or `SetupFailed`; whether the model ran (then every result is sent)."""
    if isinstance(task, SetupFailed):
        _send(conn, task)
        return False
    _send(conn, Ready(os.getpid(), device))
    run_loop(conn, task)
    return True


def set_up(spec: TaskSpec, device: str, threads: int) -> Task | SetupFailed:
    """A model process's set-up, the same in a local worker and a Ray predictor actor: its share
    of the cores and the allocator's settings before the task imports its libraries, then the
    model. A failure is the task's own error, for the user to read."""
    limit_threads(threads)
    keep_freed_memory()
    return load_task(spec, device, threads)


def load_task(spec: TaskSpec, device: str, threads: int = 0) -> Task | SetupFailed:
    """The task and its model on `device`; with `threads`, torch's share of the cores too."""
    try:
        task = create_task(spec)
        task.setup(device)
        if threads:
            limit_torch_threads(threads)
    except BaseException as exc:  # noqa: BLE001 - the parent shows the worker's own error
        return SetupFailed(describe_error(exc))
    return task


def _exit_now(conn: Any) -> None:
    """Leave without interpreter teardown: every result is sent by now, and unloading torch
    and the model takes 1-3 s that the parent would spend waiting in `join`."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        conn.close()
    except OSError:
        pass
    os._exit(0)


def run_loop(conn: Any, task: Any) -> None:
    """Predict until the stop sentinel or until the parent goes away. Results leave through
    a sender thread, so pickling and the Pipe never keep the model from the next batch."""
    inbox: queue.Queue = queue.Queue(maxsize=1)
    outbox: queue.Queue = queue.Queue(maxsize=2)
    threading.Thread(target=_receive, args=(conn, task, inbox), daemon=True).start()
    sender = threading.Thread(target=_send_all, args=(conn, outbox), daemon=True)
    sender.start()
    try:
        while True:
            unpacked = inbox.get()
            if unpacked is STOP or not sender.is_alive():
                return
            if unpacked.error:
                outbox.put(Failed(unpacked.batch_id, FailureKind.ERROR, unpacked.error))
                continue
            if not _send(conn, Started(unpacked.batch_id)):
                return
            outbox.put(predict_one(task, unpacked.batch_id, unpacked.payloads))
    finally:
        outbox.put(STOP)
        sender.join(30)


def _send_all(conn: Any, outbox: queue.Queue) -> None:
    while (message := outbox.get()) is not STOP:
        if not _send(conn, message):
            return


def predict_one(task: Any, batch_id: int, payloads: list[Any]) -> Result | Failed:
    """Run one batch and check the task kept its promise of one output per input."""
    t0 = time.perf_counter()
    try:
        outputs = task.predict(payloads)
    except BaseException as exc:  # noqa: BLE001
        _free_memory()
        return Failed(batch_id, FailureKind.OOM if _is_oom(exc) else FailureKind.ERROR, describe_error(exc))
    if len(outputs) != len(payloads):
        message = (f"task {task.name!r} returned {len(outputs)} outputs for {len(payloads)} inputs; "
                   "predict must return one output per input. This is a bug in the task.")
        return Failed(batch_id, FailureKind.ERROR, message)
    return Result(batch_id, outputs, time.perf_counter() - t0)


@dataclass(frozen=True, slots=True)
class _Unpacked:
    """A batch the receiver thread unpacked for the model (or the reason it could not)."""

    batch_id: int
    payloads: Any = None
    error: str = ""


def _receive(conn: Any, task: Any, inbox: queue.Queue) -> None:
    while True:
        try:
            work: Work | None = conn.recv()
        except (EOFError, OSError):
            work = STOP  # the parent is gone: finish quietly
        if work is STOP:
            _drop_waiting(inbox)
            inbox.put(STOP)
            return
        try:
            inbox.put(_Unpacked(work.batch_id, task.unpack(work.packed)))
        except Exception as exc:  # noqa: BLE001
            inbox.put(_Unpacked(work.batch_id, error=describe_error(exc)))


def _drop_waiting(inbox: queue.Queue) -> None:
    """A prefetched batch is not started once the parent said stop."""
    try:
        inbox.get_nowait()
    except queue.Empty:
        pass


_SEND_LOCK = threading.Lock()  # the predicting thread and the sender thread write whole messages


def _send(conn: Any, message: WorkerMessage) -> bool:
    try:
        with _SEND_LOCK:
            conn.send(message)
        return True
    except (BrokenPipeError, EOFError, OSError):
        return False


def describe_error(exc: BaseException) -> str:
    last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    where = f" (at {os.path.basename(last[0].filename)}:{last[0].lineno})" if last else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _free_memory() -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def limit_threads(threads: int) -> None:
    """Each worker gets its share of the cores, so workers do not oversubscribe the CPU.
    Set before the task imports its libraries, which read these at import."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # OpenMP threads sleep as soon as a parallel region ends (unless the user says otherwise).
    # libgomp's default spins ~300k iterations first, which pays on an idle machine and costs
    # dearly on a shared one: a worker's cores are shared with the parent's reader processes
    # and writer (and, on cron boxes, with other jobs). Measured, 100k one-sentence files with a
    # 1-layer BERT on 2 busy cores: 110 s spinning, 23.6 s with PASSIVE (GOMP_SPINCOUNT=20000:
    # 67 s). ACTIVE (spin forever) was 2.8x slower still.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def keep_freed_memory() -> None:
    """Let glibc keep freed memory for the next batch instead of handing it back to the kernel.

    By default a fresh process returns the activations of each forward pass to the kernel and
    faults them in again, zeroed, on the next: ~24k page faults per batch of 8 x 232 tokens
    with the default model, and 5-15% of the batch's time on CPU. A worker runs batch after
    batch of similar size, so it keeps up to TRIM_KEEP_BYTES (as a CUDA caching allocator
    does on the GPU). Not glibc (musl, macOS): nothing to do."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
    mallopt(M_TRIM_THRESHOLD, TRIM_KEEP_BYTES)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling on 64-bit: blocks above it are mapped per call
TRIM_KEEP_BYTES = 512 << 20


def limit_torch_threads(threads: int) -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
