"""The Ray stages: reader actors (read + prepare a chunk of files into one block) and predictor
actors (a window of blocks, sorted and cut into batches, each predicted). Both run the same
core functions as the local engine (`reader.read_chunk`, `batching.Windows`, `worker.set_up`,
`worker.predict_one` and its `Result` / `Failed` messages, `recovery.after_error`,
`recovery.after_oom`); nothing here decides rows, failure records or the ledger.

Rows between the stages (`STAGE_SCHEMA`) carry blocks, not items:
  kind "chunk"  one per reader call: `data` the pickled ReadChunk (its sources, failures,
                unchanged inputs and block; the predictor passes it on with the block's payload
                dropped), `sids` every input of the call (so the driver knows which came back)
  kind "batch"  one per predicted batch: `data` the pickled Items without payload, and `output`
                the pickled outputs, or `error` the reason the batch failed alone
  kind "setup"  an actor could not load the task: `error` its message (the driver stops)
  kind "caps"   an actor lowered its batch caps after repeated out-of-memory errors: `error`
                says so (the driver logs it)
`seconds` is the read or model time of the row, `worker` the actor's host:pid (stage times
are per actor, like the local engine's busiest worker). A problem with one input travels as
data, never as an exception: Ray Data aborts the whole job on the first failed block.
Pickle protocol 5 keeps numpy columns (token ids, vectors) as flat buffers.
"""

from __future__ import annotations

import contextlib
import enum
import os
import pickle
import socket
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from gpucli.core.decision import Known, Status
from gpucli.core.records import Batch, Failed, FailureKind, Result, SetupFailed, Source
from gpucli.engines.batching import BatchCaps, Windows, cut_points
from gpucli.engines.local.worker import describe_error, predict_one, set_up
from gpucli.engines.reader import read_chunk
from gpucli.engines.recovery import Fail, OomHistory, after_error, after_oom
from gpucli.tasks import TaskSpec, create_task

from .connection import cores, retries
from .planning import READ_CPUS, READER_ACTOR_CPUS, Plan, chunks_per_call
from .readiness import mark_loaded


class RowKind(enum.Enum):
    """What a row of the stages' output carries to the driver (the Arrow column holds the value)."""

    CHUNK = "chunk"  # a reader's ReadChunk, and the source ids it came back for
    BATCH = "batch"  # a batch's items and outputs, or its failure
    SETUP = "setup"  # an actor that could not load the task
    CAPS = "caps"  # a predictor lowered its caps after out-of-memory: the line to show


def stage_schema():
    import pyarrow as pa

    return pa.schema([("kind", pa.string()), ("sids", pa.list_(pa.int64())), ("data", pa.binary()),
                      ("output", pa.binary()), ("error", pa.string()), ("seconds", pa.float64()),
                      ("worker", pa.string())])


def stage_row(kind: RowKind, data: Any = None, output: Any = None, error: str | None = None, seconds: float = 0.0,
              sids: list[int] | None = None) -> dict[str, Any]:
    return {"kind": kind.value, "sids": sids or [], "data": None if data is None else pickle.dumps(data, protocol=5),
            "output": None if output is None else pickle.dumps(output, protocol=5), "error": error,
            "seconds": seconds, "worker": f"{socket.gethostname()}:{os.getpid()}"}


def stage_table(rows: list[dict[str, Any]]):
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=stage_schema())


# --- what the driver sends: one row per input ----------------------------------------------

def source_row(source: Source) -> dict[str, Any]:
    """`known`: the ledger's digest of an input done earlier (the reader compares contents with it)."""
    return {"sid": source.id, "path": source.path, "abspath": os.fsencode(source.abspath),  # bytes: any name
            "size": source.size, "mtime_ns": source.mtime_ns, "dev": str(source.dev),  # may not fit an int64
            "ino": str(source.ino), "known": source.digest}


def from_source_rows(rows: list[dict[str, Any]]) -> tuple[list[Source], dict[str, Known]]:
    """Sources, and what the ledger knows of them. The driver already ended the inputs with the
    same size and mtime, so the known size is never equal: only the content hash decides."""
    sources = [Source(r["sid"], r["path"], os.fsdecode(r["abspath"]), r["size"], r["mtime_ns"],
                      dev=int(r["dev"]), ino=int(r["ino"])) for r in rows]
    known = {r["path"]: Known(-1, -1, r["known"], Status.DONE) for r in rows if r["known"]}
    return sources, known


def dataset(rows: list[dict[str, Any]], plan: Plan, spec: TaskSpec, max_bytes: int, caps: BatchCaps,
            chunk_files: int, window_items: int, alone: bool, batch_timeout_s: float = 0.0, run_id: str = ""):
    """Source rows -> readers (`chunk_files` a call) -> predictors (a window of chunks a call).
    `run_id`: the run whose readiness key predictors delete once loaded (readiness.py).
    `alone`: each input in Ray tasks of its own (the model loads per file: for the few files of
    dropped batches); tasks, not actors, so that a crash takes down that file's task only,
    whatever the Ray version does with the calls queued on a restarting actor."""
    import ray.data

    chunk = 1 if alone else chunk_files
    read_args, predict_args = (spec, max_bytes), (spec, plan.device, plan.actor_threads(), caps, batch_timeout_s, run_id)
    predict = dict(num_cpus=plan.num_cpus, num_gpus=plan.num_gpus)
    if alone:
        stages = [dict(fn=read_alone, fn_args=read_args, batch_size=None, num_cpus=READ_CPUS, **retries("max_retries")),
                  dict(fn=predict_alone, fn_args=predict_args, batch_size=None, **predict, **retries("max_retries"))]
    else:
        stages = [dict(fn=Reader, fn_constructor_args=read_args, batch_size=chunk, num_cpus=READER_ACTOR_CPUS,
                       compute=ray.data.ActorPoolStrategy(min_size=1, max_size=plan.readers),
                       **retries("max_task_retries")),
                  dict(fn=Predictor, fn_constructor_args=predict_args, batch_size=chunks_per_call(window_items, chunk),
                       compute=ray.data.ActorPoolStrategy(size=plan.actors), **predict, **retries("max_task_retries"))]
    ds: ray.data.Dataset = ray.data.from_items(rows, override_num_blocks=max(1, -(-len(rows) // chunk)))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        for stage in stages:
            ds = ds.map_batches(batch_format="pyarrow", **stage)
    return ds


# --- the stages ------------------------------------------------------------------------------

class Reader:
    """Reads a chunk of files and cuts them into one block (the parent side of a task)."""

    def __init__(self, spec: TaskSpec, max_bytes: int) -> None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"  # parallelism comes from several reader actors
        self.max_bytes = max_bytes
        self.setup_error = ""
        try:
            self.task = create_task(spec)
            self.task.open()
        except BaseException as exc:  # noqa: BLE001 - the driver reports it and stops
            self.setup_error = describe_error(exc)

    def __call__(self, table):
        if self.setup_error:
            return stage_table([stage_row(RowKind.SETUP, error=self.setup_error)])
        sources, known = from_source_rows(table.to_pylist())
        t0 = time.perf_counter()
        chunk = read_chunk(sources, self.task, self.max_bytes, known)
        chunk.found = 0  # the driver counted these inputs when it listed them
        return stage_table([stage_row(RowKind.CHUNK, chunk, seconds=time.perf_counter() - t0, sids=[s.id for s in sources])])


class Predictor:
    """Loads the model once per actor; runs a window of chunks as batches cut by count and cost,
    largest first. A batch that raises is halved (recovery.after_error) until the failing item
    stands alone, so one bad input costs one file. Repeated out-of-memory errors lower this
    actor's caps for the rest of the run (recovery.after_oom, as the local engine's batcher).
    The constructor tells the driver it is done (`readiness.mark_loaded`): --setup-timeout-s
    times the load, not the first window."""

    def __init__(self, spec: TaskSpec, device: str, threads: int | dict[str, int], caps: BatchCaps,
                 batch_timeout_s: float = 0.0, run_id: str = "") -> None:
        self.oom = OomHistory(caps)
        self.batch_timeout_s = batch_timeout_s
        task = set_up(spec, device, actor_threads(threads))
        self.setup_error = task.message if isinstance(task, SetupFailed) else ""
        self.task = None if isinstance(task, SetupFailed) else task
        mark_loaded(run_id)

    def __call__(self, table):
        if self.setup_error:
            return stage_table([stage_row(RowKind.SETUP, error=self.setup_error)])
        rows = table.to_pylist()
        out = [r for r in rows if r["kind"] != RowKind.CHUNK.value]  # a reader's setup error goes on to the driver
        windows = Windows(self.oom.caps, 0)
        for r in (r for r in rows if r["kind"] == RowKind.CHUNK.value):
            chunk = pickle.loads(r["data"])
            if chunk.block is not None and len(chunk.block):
                windows.add(chunk.block)
                chunk.block = chunk.block.without_payload()  # the driver expects its items, not their payload
            out.append({**r, "data": pickle.dumps(chunk, protocol=5)})  # before the chunk's batches
        windows.cut(final=True)
        while (items := windows.pop()) is not None:
            for piece in self._within_caps(items):
                self._predict(Batch(0, piece), out)
        return stage_table(out)

    def _predict(self, batch: Batch, out: list[dict[str, Any]]) -> None:
        with hang_guard(self.batch_timeout_s):
            message = predict_one(self.task, batch.id, batch.items.payload)
        match message:
            case Result(outputs=outputs, seconds=seconds):
                out.append(stage_row(RowKind.BATCH, batch.items.without_payload(), outputs, seconds=seconds))
            case Failed(kind=kind, message=text):
                if kind is FailureKind.OOM:
                    self._after_oom(len(batch), out)
                self._after_error(batch, kind, text, out)

    def _after_error(self, batch: Batch, kind: FailureKind, text: str, out: list[dict[str, Any]]) -> None:
        """Halves to run again (cut to the caps, which may have just been lowered), or the
        failure of the batch's only item."""
        for action in after_error(batch, kind, text, new_id=lambda: batch.id):
            if isinstance(action, Fail):
                out.append(stage_row(RowKind.BATCH, action.batch.items.without_payload(), error=action.reason))
            else:
                for piece in self._within_caps(action.batch.items):
                    self._predict(Batch(0, piece, action.batch.attempts), out)

    def _within_caps(self, items):
        """The window was cut before caps were lowered (after out-of-memory errors): cut again."""
        ends = cut_points(items.cost, self.oom.caps)
        if len(ends) == 1:
            return [items]
        return [items.take(np.arange(start, end)) for start, end in zip([0, *ends[:-1]], ends)]

    def _after_oom(self, batch_size: int, out: list[dict[str, Any]]) -> None:
        self.oom, said = after_oom(self.oom, batch_size)
        if said:
            out.append(stage_row(RowKind.CAPS, error=said + " for the rest of the run in this actor"))


def read_alone(table, spec: TaskSpec, max_bytes: int):
    return Reader(spec, max_bytes)(table)


def actor_threads(planned: int | dict[str, int]) -> int:
    """The threads of a predictor: the plan's count, or (the default CPU plan, an actor per node)
    its own node's CPUs from the plan's map; never more than the machine's cores. No call to
    Ray's control server: the node id is this worker's own."""
    if isinstance(planned, dict):
        try:
            import ray

            planned = planned.get(ray.get_runtime_context().get_node_id(), 0)
        except Exception:  # noqa: BLE001 - outside Ray (a test): the machine's cores
            planned = 0
    return max(1, min(planned or cores(), cores()))


def predict_alone(table, spec: TaskSpec, device: str, threads: int | dict[str, int], caps: BatchCaps,
                  batch_timeout_s: float = 0.0, run_id: str = ""):
    return Predictor(spec, device, threads, caps, batch_timeout_s, run_id)(table)


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    """--batch-timeout-s: a batch still running after `seconds` ends this worker process, like
    the local engine's watchdog kill: a hung model cannot be interrupted from inside. Ray then
    treats it as a death: the call is retried once, its files run again through a new pool,
    then one by one, so only the file that hangs becomes a failure record."""
    if not seconds:
        yield
        return
    timer = threading.Timer(seconds, _hung, (seconds,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _hung(seconds: float) -> None:
    print(f"gpucli: batch timed out after {seconds:g}s (--batch-timeout-s); ending this worker", file=sys.stderr,
          flush=True)
    os._exit(70)
