"""`--engine ray`: the same tasks and sinks on Ray Data, on a private local Ray or a cluster.

    driver: walk (gpucli.reader) -> from_items(sources)
      -> map_batches(_Reader)     actors: task.open once; read_source + task.prepare per file
      -> map_batches(_Predictor)  ActorPoolStrategy, num_gpus per actor: task.setup once; predict
      -> iter_batches (driver):   task.row + task.finish per file -> the sink; failures -> the JSONL

What the local engine's parent does (task.open, row, finish; the Output with its sink, lock,
ledger and failure log; the summary) stays in the driver, so outputs are the same. A problem with one input travels as a row with
`stage` and `error` set, never as an exception: Ray Data aborts the whole job on the first
failed block. A batch whose actor died twice is dropped (`max_errored_blocks = -1`); its
files run again after the stream ends, each in Ray tasks of its own, so a file that kills its
worker costs itself only (as with the local pool's split batches) and becomes a failure
record: inputs = results + failures holds here too. Results stream to the sink in parts of
`part_rows`; nothing is collected whole in the driver.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import signal
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpucli.batching import BatchCaps, sort_window, take_batch
from gpucli.config import RunConfig
from gpucli.errors import EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_SIGTERM, GpucliError, UsageError, WorkerSetupError
from gpucli.output import Output
from gpucli.pipeline import (
    WINDOW_BATCHES,
    RunSummary,
    batch_caps,
    check_roots,
    default_out,
    output_metadata,
    output_schema,
    output_settings,
    task_and_spec,
)
from gpucli.progress import Counts, Progress, make_progress
from gpucli.reader import WalkFilter, WalkReport, read_source, walk
from gpucli.records import Failure, Item, Source
from gpucli.state import Known
from gpucli.tasks import TaskSpec, create_task
from gpucli.tracker import Tracker
from gpucli.worker import describe_error, keep_freed_memory, limit_threads, limit_torch_threads, predict_one
from gpucli.writer import rows_to_table

LOCAL_OBJECT_STORE_BYTES = 512 * 2**20  # a private local Ray; batches of files are small
READ_CPUS = 0.5  # per reader actor: reading and tokenising leave room for the predictors
RETRIES = 1  # a batch whose actor died is retried once (on a new actor) before it is dropped
SETUP = "setup"  # the stage of a row that says an actor could not load the task
UNCHANGED = "unchanged"  # the stage of a row for a file whose content the ledger already has


@dataclass(frozen=True)
class Plan:
    """How many predictor actors, with what resources (from the cluster, not this machine)."""

    actors: int
    num_cpus: float
    num_gpus: float
    device: str  # "cuda:0" (Ray sets CUDA_VISIBLE_DEVICES to the actor's GPU) or "cpu"
    threads: int  # torch threads per actor
    readers: int  # most reader actors


def run(config: RunConfig, progress: Progress | None = None) -> RunSummary:
    """Run one job on Ray (the cluster at --ray-address / RAY_ADDRESS, else a private local Ray)."""
    check_roots(config.paths)
    job = RayJob(config, progress)
    job.open()  # the model and the output are checked before Ray starts: usage errors come fast
    return job.run(lambda: connect(config.ray_address))


def connect(address: str = "") -> Callable[[], None]:
    """Join the Ray at `address` (or RAY_ADDRESS), or start a private local one; returns how to
    leave it. A Ray this process already joined (a test's session, a notebook) is used as is."""
    import ray

    if ray.is_initialized():
        return _nothing
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address:
        ray.init(address=address, logging_level=logging.WARNING)
        return ray.shutdown  # disconnects this driver; the cluster stays
    temp_dir = tempfile.mkdtemp(prefix="gpucli-ray-")  # short: Ray's socket paths must fit 107 bytes
    start_local(temp_dir)

    def close() -> None:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)

    return close


def start_local(temp_dir: str, num_cpus: int | None = None,
                object_store_bytes: int = LOCAL_OBJECT_STORE_BYTES) -> None:
    """A single-node Ray for this process only: no dashboard, no usage stats, its own temp dir."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=num_cpus or _cores(), object_store_memory=object_store_bytes,
             include_dashboard=False, _temp_dir=temp_dir, logging_level=logging.ERROR)


class RayJob:
    """The driver's side of a run: what the local pipeline's parent does, fed by Ray Data."""

    def __init__(self, config: RunConfig, progress: Progress | None = None) -> None:
        self.config = config
        self.task_cls, self.spec = task_and_spec(config)
        self.summary = RunSummary(task=self.task_cls.name, model=self.spec.model)
        self.progress = progress or make_progress(config.progress, config.quiet, self.task_cls.name,
                                                  self.task_cls.cost_name)
        self.counts = Counts()
        self.tracker = Tracker()
        self.caps = batch_caps(config, self.task_cls)
        self.sources: dict[int, Source] = {}
        self.unseen: set[int] = set()  # sources no row came back for yet
        self.open_ids: set[int] = set()  # sources with some rows back, not all
        self._rows: list[dict[str, Any]] = []
        self._done: list[Source] = []
        self._done_rows: list[int] = []
        self._last_flush = time.monotonic()
        self.stopping = 0

    # --- the run ----------------------------------------------------------------------------
    def open(self) -> None:
        """The task's parent side, then the output (sink, lock, ledger, failure log) as locally."""
        self.started = time.monotonic()
        self.task = self.task_cls(self.spec)
        self.task.open()
        self.output = Output(self.config.out or default_out(self.task_cls.name), self.config.incremental)
        self.schema, metadata = output_schema(self.task), output_metadata(self.task)
        self.output.open(self.schema, metadata, output_settings(self.spec, metadata))
        self.summary.out, self.summary.failures_file = self.output.display, self.output.failures.path

    def run(self, connector: Callable[[], Callable[[], None]]) -> RunSummary:
        import ray.exceptions

        leave: Callable[[], None] = _nothing
        try:
            self._list()
            if self.sources:  # else nothing is new: no need to start or join Ray
                self._phase("starting Ray" if not (self.config.ray_address or os.environ.get("RAY_ADDRESS"))
                            else "joining the Ray cluster")
                leave = _joined(connector, self.config.ray_address)
                with self._signals(), _data_context():  # after ray.init, which installs its own SIGTERM handler
                    plan = make_plan(self.config)
                    self.caps = batch_caps(self.config, self.task_cls, [plan.device])  # CPU caps on CPU actors
                    self._phase(f"loading the model in {plan.actors} Ray actor(s) "
                                f"({plan.num_gpus:g} GPU, {plan.num_cpus:g} CPU each)")
                    self._consume(self._dataset(plan, self.config.read_chunk_files or self.task_cls.read_chunk_files))
                    self._retry_lost(plan)
        except KeyboardInterrupt:
            self.stopping = self.stopping or signal.SIGINT
        except ray.exceptions.RayError as exc:
            raise GpucliError(f"Ray stopped the run: {_first_line(exc)}. Results written so far are kept.") from None
        finally:
            try:
                self._close()
            finally:
                leave()
        return self._finish()

    def _list(self) -> None:
        """Walk like the local engine (same filters, relative paths, skip/failure records); files
        the ledger has as done with the same size and mtime are not even sent to Ray."""
        flt = WalkFilter(self.task_cls.suffixes, self.config.include, self.config.exclude)
        sources, report, seen = [], WalkReport(), []
        for found in walk(list(self.config.paths), flt, self.output.walk_exclusions(), report):
            self.counts.found += 1
            if self.config.prune:
                seen.append(found.failure.path if found.failure is not None else found.source.path)
                if len(seen) >= 1000:
                    self.output.mark_seen(seen)
                    seen = []
            if found.failure is not None:
                self._record_failure(found.failure)
            elif found.source is not None:
                sources.append(found.source)
        lookup = self.output.lookup()
        known = lookup([s.path for s in sources]) if lookup else {}
        for source in sources:
            k = known.get(source.path)
            k = k if k is not None and k.status == "done" else None
            if k is not None and (k.size, k.mtime_ns) == (source.size, source.mtime_ns):
                source.digest = k.digest
                self._unchanged(source)
            else:
                source.digest = k.digest if k is not None else ""  # the reader compares contents with it
                self.sources[source.id] = source
        self.unseen = set(self.sources)
        self.counts.walk_done = True
        if self.config.prune:
            self.output.mark_seen(seen)
            self.summary.pruned = self.output.prune(report, self.config.prune_all, self.progress.log)

    def _dataset(self, plan: Plan, chunk: int):
        """Sources not yet seen -> reader actors (`chunk` files a call) -> predictor actors (4
        batches' worth of items a call, cut into batches by the caps, largest first)."""
        import ray.data

        ds = ray.data.from_items(self._unseen_rows(), override_num_blocks=max(1, -(-len(self.unseen) // chunk)))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            ds = ds.map_batches(_Reader, batch_size=chunk, batch_format="pyarrow",
                                fn_constructor_args=(self.spec, self._max_bytes()),
                                compute=ray.data.ActorPoolStrategy(min_size=1, max_size=plan.readers),
                                num_cpus=READ_CPUS, **_retries("max_task_retries"))
            return ds.map_batches(_Predictor, batch_size=self._window(), batch_format="pyarrow",
                                  fn_constructor_args=(self.spec, plan.device, plan.threads, self.caps),
                                  compute=ray.data.ActorPoolStrategy(size=plan.actors),
                                  num_cpus=plan.num_cpus, num_gpus=plan.num_gpus, **_retries("max_task_retries"))

    def _window(self) -> int:
        """Items per predictor call: sorted and cut into batches in order, as the local
        dispatcher's windows (16 batches, within the queue size)."""
        caps, queue = self.caps, self.config.queue_items or self.task_cls.queue_items
        return max(caps.max_items, min(WINDOW_BATCHES * caps.max_items, queue))

    def _dataset_alone(self, plan: Plan):
        """Sources not yet seen, each read and predicted in Ray tasks of its own (the model is
        loaded per file: this is for the few files of dropped batches). Tasks, not actors: a
        crash then takes down that file's task only, whatever the Ray version does with the
        calls queued on a restarting actor."""
        import ray.data

        ds = ray.data.from_items(self._unseen_rows(), override_num_blocks=max(1, len(self.unseen)))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
            ds = ds.map_batches(_read_alone, batch_size=None, batch_format="pyarrow",
                                fn_args=(self.spec, self._max_bytes()), num_cpus=READ_CPUS,
                                **_retries("max_retries"))
            return ds.map_batches(_predict_alone, batch_size=None, batch_format="pyarrow",
                                  fn_args=(self.spec, plan.device, plan.threads, self.caps), num_cpus=plan.num_cpus,
                                  num_gpus=plan.num_gpus, **_retries("max_retries"))

    def _unseen_rows(self) -> list[dict[str, Any]]:
        return [{"sid": s.id, "path": s.path, "abspath": os.fsencode(s.abspath), "size": s.size,  # bytes: any name
                 "mtime_ns": s.mtime_ns, "dev": str(s.dev), "ino": str(s.ino),  # may not fit an int64
                 "known": s.digest} for sid, s in self.sources.items() if sid in self.unseen]

    def _max_bytes(self) -> int:
        return int(self.config.max_file_mb * 2**20)

    def _consume(self, ds) -> None:
        batches = iter(ds.iter_batches(batch_format="pyarrow", batch_size=None))
        try:
            for table in batches:
                self.counts.phase = ""
                for row in table.to_pylist():
                    self._take(row)
                if time.monotonic() - self._last_flush >= self.config.flush_s:
                    self._flush()
                self.progress.update(self._counts())
        finally:
            getattr(batches, "close", lambda: None)()  # stops the streaming executor and its actors now

    def _retry_lost(self, plan: Plan) -> None:
        """Files of dropped batches, again, one file per task, so that a file that kills its
        worker takes no other file down; then what is still missing becomes failure records."""
        lost = len(self.unseen) + len(self.open_ids)
        if lost:
            self.progress.log(f"ray: {lost} file(s) lost with a dead actor; running them again one by one")
            self.unseen |= self.open_ids  # their rows so far are dropped: tracker.expect starts them over
            self.open_ids.clear()
            self._consume(self._dataset_alone(plan))
        self._fail_lost("no result came back from Ray: the worker running this file died, also with the file "
                        "alone (a crash or out of memory; see the Ray logs)")

    def _close(self) -> None:
        written = False
        try:
            self._flush()
            written = True
        finally:
            self.output.close(written)
            self.progress.update(self._counts())
            self.progress.close()

    def _unchanged(self, source: Source) -> None:
        self.summary.unchanged += 1
        self.summary.skipped += 1
        self.output.unchanged(source)

    def _finish(self) -> RunSummary:
        s = self.summary
        s.unfinished = len(self.unseen) + len(self.open_ids)
        s.inputs = s.succeeded + s.failed + s.skipped + s.unfinished
        s.elapsed_s = time.monotonic() - self.started
        s.items_per_s = self.counts.items / s.elapsed_s if s.elapsed_s else 0.0
        s.interrupted = bool(self.stopping)
        if self.stopping:
            s.exit_code = EXIT_SIGTERM if self.stopping == signal.SIGTERM else EXIT_SIGINT
        else:
            s.exit_code = EXIT_FAILED if s.failed else EXIT_OK
        return s

    # --- results ------------------------------------------------------------------------------
    def _take(self, row: dict[str, Any]) -> None:
        """One row from the predictors: a file's failure, an item's failure, or an item's output."""
        if row["stage"] == SETUP:
            raise WorkerSetupError(f"a Ray actor could not load the task: {row['error']}")
        sid = row["sid"]
        source = self.sources[sid]
        self.summary.stage_seconds["read"] += row["read_s"]
        if sid in self.unseen:
            self.unseen.discard(sid)
            source.digest = row["digest"] or source.digest
            if row["stage"] == UNCHANGED:
                self._unchanged(source)
                return
            if row["idx"] < 0:
                self._record_failure(Failure(source.path, row["stage"], row["error"]))
                return
            self.tracker.expect(source, row["n"])
            self.open_ids.add(sid)
        item = pickle.loads(row["item"])
        if row["error"] is not None:
            self._fail_item(item, row["stage"], row["error"])
            return
        self.summary.stage_seconds["infer"] += row["infer_s"]
        self.counts.items += 1
        self.counts.cost += row["cost"]
        try:
            result = self.task.row(item, pickle.loads(row["output"]))
        except Exception as exc:  # noqa: BLE001 - a bad output costs one file
            self._fail_item(item, "infer", f"unusable model output: {type(exc).__name__}: {exc}")
            return
        finished = self.tracker.add(item, result)
        if finished is not None:
            self.open_ids.discard(sid)
            self._file_done(*finished)

    def _file_done(self, source: Source, rows: list[dict[str, Any]]) -> None:
        try:
            rows = self.task.finish(source, rows)
        except Exception as exc:  # noqa: BLE001
            self._record_failure(Failure(source.path, "infer", f"{type(exc).__name__}: {exc}"))
            return
        for row in rows:
            row["path"] = source.path
        self._rows.extend(rows)
        self._done.append(source)
        self._done_rows.append(len(rows))
        if len(self._rows) >= self.config.part_rows:
            self._flush()

    def _flush(self) -> None:
        """Write the finished files as one part; they count as done once it is durable."""
        self._last_flush = time.monotonic()
        if not self._done:
            return
        rows, done, counts = self._rows, self._done, self._done_rows
        self._rows, self._done, self._done_rows = [], [], []
        t0 = time.perf_counter()
        location = self.output.sink.write(rows_to_table(rows, self.schema))
        self.output.commit(done, counts, location)
        self.summary.stage_seconds["write"] += time.perf_counter() - t0
        self.summary.succeeded += len(done)
        self.summary.rows += len(rows)

    def _fail_item(self, item: Item, stage: str, error: str) -> None:
        failure = self.tracker.fail(item, stage, error)
        self.open_ids.discard(item.source_id)
        if failure is not None:
            self._record_failure(failure)

    def _fail_lost(self, reason: str) -> None:
        for sid in sorted(self.unseen):
            self._record_failure(Failure(self.sources[sid].path, "infer", reason))
        for sid in sorted(self.open_ids):
            self._fail_item(Item(sid, 0, None), "infer", reason)
        self.unseen.clear()

    def _record_failure(self, failure: Failure) -> None:
        self.output.failed(failure)
        if failure.stage == "skip":
            self.summary.skipped += 1
        else:
            self.summary.failed += 1

    def _phase(self, text: str) -> None:
        self.counts.phase = text
        self.progress.update(self._counts())

    def _counts(self) -> Counts:
        c = self.counts
        c.done, c.failed, c.skipped, c.rows = (self.summary.succeeded, self.summary.failed, self.summary.skipped,
                                               self.summary.rows)
        c.in_flight = len(self.unseen) + len(self.open_ids)
        return c

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGTERM stops the run like Ctrl-C: finished files are written, the rest is unfinished."""

        def on_term(sig: int, frame: Any) -> None:
            self.stopping = signal.SIGTERM
            raise KeyboardInterrupt

        try:
            previous = signal.signal(signal.SIGTERM, on_term)
        except ValueError:  # not the main thread
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)


# --- planning -----------------------------------------------------------------------------------

def make_plan(config: RunConfig) -> Plan:
    """The plan for the Ray this process joined (its resources, not this machine's)."""
    import ray

    resources = ray.cluster_resources()
    return plan_for(config.devices, config.workers_per_device, float(resources.get("CPU", 1)),
                    int(resources.get("GPU", 0)))


def plan_for(devices: str, per: int, cpus: float, gpus: int) -> Plan:
    """Predictor actors from --devices and --workers-per-device, and the cluster's CPUs and GPUs.

    GPUs: one actor per GPU times --workers-per-device (each takes 1/that of a GPU).
    CPU: --workers-per-device actors with fractional CPUs, so that the readers and the driver's
    output never starve (two actors x 1 CPU on a 2-CPU node deadlock reads and writes).
    """
    readers = max(1, min(8, int(cpus // 4)))
    if _wants_gpu(devices, gpus):
        actors = gpus * per
        num_cpus = min(1.0, max(0.25, (cpus - READ_CPUS) / actors))
        return Plan(actors, round(num_cpus, 2), 1.0 / per, "cuda:0", max(1, min(4, int(cpus // actors))), readers)
    num_cpus = min(1.0, max(0.1, (cpus - READ_CPUS) / per))
    return Plan(per, round(num_cpus, 2), 0.0, "cpu", max(1, int(cpus // per)), readers)


def _wants_gpu(devices: str, gpus: int) -> bool:
    spec = devices.strip().lower()
    if spec == "cpu":
        return False
    if spec in ("", "auto"):
        return gpus > 0
    if spec in ("cuda", "gpu"):
        if not gpus:
            raise UsageError("--devices cuda: the Ray cluster has no GPUs; use --devices cpu or auto")
        return True
    raise UsageError(f"--devices {devices!r}: with --engine ray use auto, cpu or cuda (every GPU of the cluster); "
                     "pick GPUs with CUDA_VISIBLE_DEVICES where Ray starts, and GPUs per actor with "
                     "--workers-per-device")


def _joined(connector: Callable[[], Callable[[], None]], address: str) -> Callable[[], None]:
    try:
        return connector()
    except ConnectionError as exc:
        where = address or os.environ.get("RAY_ADDRESS", "") or "a local Ray"
        raise GpucliError(f"cannot reach Ray at {where}: {_first_line(exc)}") from None


def _nothing() -> None:
    pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def _data_context() -> Iterator[None]:
    """Our progress instead of Ray's bars; dropped blocks instead of an aborted job; Ray Data's
    INFO lines kept out of the terminal (they still go to its log file in the session dir)."""
    import ray.data
    from ray.util.debug import log_once

    ctx = ray.data.DataContext.get_current()
    saved = ctx.enable_progress_bars, ctx.max_errored_blocks
    ctx.enable_progress_bars, ctx.max_errored_blocks = False, -1
    log_once("ray_data_progress_manager_disabled")  # we disabled them on purpose: no warning about it
    consoles = [h for h in logging.getLogger("ray.data").handlers if isinstance(h, logging.StreamHandler)]
    levels = [h.level for h in consoles]
    for handler in consoles:
        handler.setLevel(max(handler.level, logging.WARNING))
    try:
        yield
    finally:
        ctx.enable_progress_bars, ctx.max_errored_blocks = saved
        for handler, level in zip(consoles, levels, strict=True):
            handler.setLevel(level)


def _retries(option: str) -> dict[str, Any]:
    """Bounded retries (`max_task_retries` for actors, `max_retries` for tasks) for work whose
    worker died: Ray Data's default is to retry forever, so one input that crashes its worker
    would stall the job. Ray 2.60 deprecates passing these as keywords, with no named
    replacement yet; a version that no longer takes them gets Ray's default."""
    import inspect

    import ray.data

    params = inspect.signature(ray.data.Dataset.map_batches).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return {option: RETRIES}
    return {}


# --- actors -------------------------------------------------------------------------------------
# Rows between the stages: one per item, or one per file that failed before inference.
#   sid, n (items in the file), idx (-1: the file failed), cost, item (pickled Item; its payload
#   dropped after inference), output (pickled dict), stage + error (a failure; or stage "unchanged"),
#   digest (the file's content hash, for the ledger), read_s, infer_s.

def _stage_schema():
    import pyarrow as pa

    return pa.schema([("sid", pa.int64()), ("n", pa.int64()), ("idx", pa.int64()), ("cost", pa.int64()),
                      ("item", pa.binary()), ("output", pa.binary()), ("stage", pa.string()),
                      ("error", pa.string()), ("digest", pa.string()), ("read_s", pa.float64()),
                      ("infer_s", pa.float64())])


def _row(sid: int, n: int = 0, idx: int = -1, cost: int = 0, item: bytes | None = None, output: bytes | None = None,
         stage: str | None = None, error: str | None = None, digest: str = "", read_s: float = 0.0,
         infer_s: float = 0.0) -> dict:
    return {"sid": sid, "n": n, "idx": idx, "cost": cost, "item": item, "output": output, "stage": stage,
            "error": error, "digest": digest, "read_s": read_s, "infer_s": infer_s}


def _table(rows: list[dict]):
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=_stage_schema())


class _Reader:
    """Reads files and cuts them into items with the task's `prepare` (the parent side of a task)."""

    def __init__(self, spec: TaskSpec, max_bytes: int) -> None:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        self.max_bytes = max_bytes
        self.setup_error = ""
        try:
            self.task = create_task(spec)
            self.task.open()
        except BaseException as exc:  # noqa: BLE001 - the driver reports it and stops
            self.setup_error = describe_error(exc)

    def __call__(self, batch):
        out = []
        for rec in batch.to_pylist():
            if self.setup_error:
                out.append(_row(rec["sid"], stage=SETUP, error=self.setup_error))
                continue
            source = Source(rec["sid"], rec["path"], os.fsdecode(rec["abspath"]), rec["size"], rec["mtime_ns"],
                            dev=int(rec["dev"]), ino=int(rec["ino"]))
            known = Known(source.size, source.mtime_ns, rec["known"], "done") if rec["known"] else None
            result = read_source(source, self.task.prepare, self.max_bytes, known)
            if result.unchanged:
                out.append(_row(source.id, stage=UNCHANGED, digest=source.digest, read_s=result.seconds))
            elif result.failure is not None:
                out.append(_row(source.id, stage=result.failure.stage, error=result.failure.error,
                                digest=source.digest, read_s=result.seconds))
            else:
                out.extend(_row(source.id, len(result.items), item.index, item.cost, pickle.dumps(item, protocol=5),
                                digest=source.digest, read_s=result.seconds if position == 0 else 0.0)
                           for position, item in enumerate(result.items))
        return _table(out)


class _Predictor:
    """Loads the model once per actor and runs batches cut by count and cost, largest first.

    A batch that raises is halved until the failing item stands alone (as the local pool does),
    so one bad input costs one file; rows that already failed pass through."""

    def __init__(self, spec: TaskSpec, device: str, threads: int, caps: BatchCaps) -> None:
        limit_threads(min(threads, _cores()))
        keep_freed_memory()
        self.caps = caps
        self.setup_error = ""
        try:
            self.task = create_task(spec)
            self.task.setup(device)
            limit_torch_threads(min(threads, _cores()))
        except BaseException as exc:  # noqa: BLE001
            self.setup_error = describe_error(exc)

    def __call__(self, batch):
        rows = batch.to_pylist()
        if self.setup_error:
            return _table([_row(r["sid"], stage=SETUP, error=self.setup_error) for r in rows])
        done = [r["idx"] < 0 or r["error"] is not None for r in rows]  # failed or unchanged: passed on
        out = [_strip(r) for r, d in zip(rows, done, strict=True) if d]
        pending = sort_window([_Work(r, pickle.loads(r["item"])) for r, d in zip(rows, done, strict=True) if not d])
        while pending:
            work, pending = take_batch(pending, self.caps)
            self._predict(work, out)
        return _table(out)

    def _predict(self, work: list[_Work], out: list[dict]) -> None:
        kind, _, *rest = predict_one(self.task, 0, [w.item.payload for w in work])
        if kind == "result":
            outputs, seconds = rest
            for w, output in zip(work, outputs, strict=True):
                out.append(w.done(output=pickle.dumps(output, protocol=5), infer_s=seconds / len(work)))
            return
        error_kind, message = rest
        if len(work) > 1:
            mid = len(work) // 2
            self._predict(work[:mid], out)
            self._predict(work[mid:], out)
            return
        reason = f"out of memory even alone: {message}" if error_kind == "oom" else message
        out.append(work[0].done(stage="infer", error=reason))


def _read_alone(batch, spec: TaskSpec, max_bytes: int):
    return _Reader(spec, max_bytes)(batch)


def _predict_alone(batch, spec: TaskSpec, device: str, threads: int, caps: BatchCaps):
    return _Predictor(spec, device, threads, caps)(batch)


class _Work:
    """An item on its way through a predictor, with the stage row it came in."""

    __slots__ = ("row", "item", "cost")

    def __init__(self, row: dict, item: Item) -> None:
        self.row, self.item, self.cost = row, item, item.cost

    def done(self, **fields: Any) -> dict:
        self.item.payload = None  # the driver needs only the item's meta
        return {**self.row, "item": pickle.dumps(self.item, protocol=5), **fields}


def _strip(row: dict) -> dict:
    if row["item"] is None:
        return row
    item = pickle.loads(row["item"])
    item.payload = None
    return {**row, "item": pickle.dumps(item, protocol=5)}
