"""The core that both engines drive: a job built once from the config, one accounting of
results, one writer of parts.

    Job       config -> task (parent side), spec, caps, output (sink, lock, ledger, failures),
              schema, metadata; the walk; the summary and its exit code
    Accounts  read chunks, batch outputs and failures -> rows, failure records, done inputs

An engine (`pipeline.py` for local processes, `engines/ray/` for Ray) moves blocks of items
to models and hands every outcome to the Accounts; it decides nothing about rows, failures,
the ledger or exit codes.

Bookkeeping is per batch, not per item: an input's status and the items it still waits for
live in numpy arrays indexed by source id (a few bytes per input); its `Source` is held only
until its rows are durable or it failed.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpucli import __version__, tables
from gpucli.backends.choice import backend_default
from gpucli.batching import WINDOW_BATCHES, BatchCaps
from gpucli.config import RunConfig
from gpucli.devices import all_cpu, host_cores
from gpucli.errors import EXIT_FAILED, EXIT_OK, EXIT_RUN_FAILED, EXIT_SIGINT, EXIT_SIGTERM, GpucliError, UsageError
from gpucli.output import Output
from gpucli.progress import Counts, Progress, make_progress
from gpucli.reader import ReadChunk
from gpucli.records import UNKNOWN_TOKENS, Failure, Items, Source, concat_outputs
from gpucli.tasks import Task, TaskSpec, get_task
from gpucli.walk import Found, WalkFilter, WalkReport, walk_blocks
from gpucli.writer import COMPLETE, DONE, FAILED, OPEN, Part, PartBuffer, rows_to_table

STAGES = ("read", "queue", "infer", "write")


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
    stage_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    items_per_s: float = 0.0
    exit_code: int = 0
    failed_known: int = 0  # of `failed`: inputs that had failed before and have not changed since
    unknown_tokens: int = 0  # of `failed`: texts in a language the model does not read (--allow-unknown-tokens)
    version: str = __version__
    started_at: str = ""
    finished_at: str = ""
    devices: list[str] = field(default_factory=list)
    unchanged: int = 0  # done by an earlier run, counted in skipped
    pruned: int = 0
    unfinished: int = 0
    interrupted: bool = False
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["stage_seconds"] = {k: round(v, 3) for k, v in self.stage_seconds.items()}
        data["elapsed_s"] = round(self.elapsed_s, 3)
        data["items_per_s"] = round(self.items_per_s, 2)
        return data


def _limited(blocks: Iterator[list[Source | Failure]], limit: int) -> Iterator[list[Source | Failure]]:
    """The walk's blocks up to `limit` inputs (failure records pass; the walk stops at the limit)."""
    sources = 0
    for block in blocks:
        for i, entry in enumerate(block):
            if isinstance(entry, Source):
                if sources == limit:
                    yield block[:i]
                    return
                sources += 1
        yield block


def _in_blocks(found: Iterator[Found], size: int = 256) -> Iterator[list[Source | Failure]]:
    block: list[Source | Failure] = []
    for item in found:
        block.append(item.source if item.source is not None else item.failure)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


class BusyClock:
    """Wall time during which at least one holder is inside (threads may overlap): a stage's
    busy time, which cannot exceed the run's wall time however many threads do the work."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._since = 0.0
        self.seconds = 0.0

    def __enter__(self) -> BusyClock:
        with self._lock:
            if not self._active:
                self._since = time.monotonic()
            self._active += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._active -= 1
            if not self._active:
                self.seconds += time.monotonic() - self._since


# --- the job ---------------------------------------------------------------------------------

def default_out(task: str) -> str:
    return f"{task}.parquet"


def task_and_spec(config: RunConfig) -> tuple[type[Task], TaskSpec]:
    """The task class, and the plain data that rebuilds it in a worker (any engine)."""
    task_cls = get_task(config.task)
    return task_cls, TaskSpec(config.task, config.model or task_cls.default_model, dict(config.task_options),
                              config.dtype, config.revision)


def batch_caps(config: RunConfig, task_cls: type[Task], devices: list[str] | None = None) -> BatchCaps:
    """The run's caps: flags where given, else the task's defaults (its CPU batch size when
    every worker is on the CPU)."""
    size, cost = task_cls.default_batch_size, task_cls.default_max_cost
    if all_cpu(devices or []):
        size, cost = task_cls.cpu_batch_size or size, task_cls.cpu_max_cost or cost
    max_cost = cost if config.max_batch_cost < 0 else config.max_batch_cost
    return BatchCaps(config.batch_size or size, max_cost, config.max_wait_ms / 1000)


def window_items(config: RunConfig, task_cls: type[Task], caps: BatchCaps) -> int:
    """WINDOW_BATCHES batches, within the queue's size (big items keep small queues)."""
    queue = config.queue_items or task_cls.queue_items
    return max(caps.max_items, min(WINDOW_BATCHES * caps.max_items, queue))


def quiet_parent_torch() -> None:
    """The parent only routes: torch threads there (imported by a task's `open`, e.g. for a
    Hugging Face image processor) would fight the workers for the cores."""
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


def output_schema(task: Task):
    """`path` first, then the task's columns, then the input's own (see `input_columns`)."""
    import pyarrow as pa

    return pa.schema([pa.field("path", pa.string())] + list(task.schema()) + list(input_fields()))


def input_fields():
    """Per-input columns, last so that outputs written before them keep their column order:
    the input's size in bytes, its modification time, and the content digest the ledger keeps
    (to join rows with the tree, or find the rows of one file's version)."""
    import pyarrow as pa

    return [pa.field("size", pa.int64()), pa.field("mtime", pa.timestamp("ns", tz="UTC")),
            pa.field("digest", pa.string())]


def input_columns(sources: list[Source], rows: np.ndarray) -> list[Any]:
    """The per-input columns of rows whose inputs are `sources`: `rows` holds each row's
    position in `sources`."""
    import pyarrow as pa

    size, mtime, digest = input_fields()
    positions = pa.array(rows)
    return [pa.array([s.size for s in sources], size.type).take(positions),
            pa.array([s.mtime_ns for s in sources], mtime.type).take(positions),
            pa.array([s.digest for s in sources], digest.type).take(positions)]


def output_metadata(task: Task) -> dict[str, str]:
    return {**task.info(), "gpucli.version": __version__, "gpucli.task": task.name}


DESCRIPTIVE_INFO = ("gpucli.extractors",)  # metadata that says how rows were made, not what they are


def output_settings(spec: TaskSpec, task: Task, metadata: dict[str, str]) -> dict[str, Any]:
    """Everything that changes the rows, with every option's effective value (a default
    given as a flag is the same run): an output's ledger refuses a run with others."""
    from gpucli.hub import DESCRIPTIVE_KEYS
    from gpucli.tasks._st_modules import fingerprint_info

    options = dataclasses.asdict(task.options) if dataclasses.is_dataclass(task.options) else dict(spec.options)
    if dataclasses.is_dataclass(task.options):  # options that change no row's content (--extract-timeout) are left out
        options = {f.name: options[f.name] for f in dataclasses.fields(task.options) if f.metadata.get("fingerprint", True)}
    info = {k: v for k, v in metadata.items()
            if k != "gpucli.version" and k not in DESCRIPTIVE_KEYS and k not in DESCRIPTIVE_INFO}
    return {"task": spec.name, "model": spec.model, "options": options, "dtype": spec.dtype,
            "info": fingerprint_info(info)}


def input_root(paths: tuple[str, ...]) -> str:
    """The absolute directory the rows' `path` is relative to (see walk.common_base)."""
    from pathlib import Path

    from gpucli.walk import common_base

    return str(common_base([Path(os.path.abspath(p)) for p in paths])) if paths else ""


def check_roots(paths: tuple[str, ...]) -> None:
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    for p in paths:
        if Path(p).is_dir() and not os.access(p, os.R_OK | os.X_OK):
            raise UsageError(f"{p}: directory is not readable")


class Job:
    """One run's set-up, shared by the engines: built once from the config."""

    def __init__(self, config: RunConfig, progress: Progress | None = None) -> None:
        self.config = config
        self.task_cls, self.spec = task_and_spec(config)
        tables.check(config, self.task_cls)  # --from: task, table and columns, before anything is opened
        self.summary = RunSummary(task=self.task_cls.name, model=self.spec.model)
        self.progress = progress or make_progress(config.progress, config.quiet, self.task_cls.name,
                                                  self.task_cls.cost_name)
        self.counts = Counts()
        self.caps = batch_caps(config, self.task_cls)
        self.clocks = {"read": BusyClock()}
        self.started = time.monotonic()
        self.summary.started_at = _now()
        self.report = WalkReport()

    def open(self) -> None:
        """The task's parent side, then the output (sink, lock, ledger, failure log). Blocking."""
        from gpucli.hub import download_progress_hidden

        check_roots(self.config.paths)
        out = self.config.out or default_out(self.task_cls.name)
        self.output = Output(out, self.config.incremental, state_dir=getattr(self.config, "state_dir", ""))
        self.spec = backend_default(self.spec, self.task_cls, self.config, self.output.made_with(), out)
        self.task = self.task_cls(self.spec)
        with download_progress_hidden(self.config.quiet or self.config.progress == "off"):
            self.task.open()
        self.spec = self.task.spec  # the backend the task resolved (issue 16): the workers run that, not auto
        quiet_parent_torch()
        self.schema, metadata = tables.output(self.config, output_schema(self.task), output_metadata(self.task))
        settings = output_settings(self.spec, self.task, metadata)
        roots = self.config.paths or ((self.config.from_table,) if self.config.from_table else ())
        metadata["gpucli.root"] = input_root(roots)  # descriptive: not part of the settings
        self.output.open(self.schema, metadata, settings)
        self.summary.out, self.summary.failures_file = self.output.display, self.output.failures.path
        for notice in [*getattr(self.task, "notices", []), *getattr(self.output.sink, "notices", []),
                       *self.output.notices]:
            self.progress.log(f"note: {notice}")
        self.accounts = Accounts(self.task, self.output, self.summary, self.counts, self.schema)

    def use_devices(self, devices: list[str]) -> None:
        """The caps for these devices, and the run's opening line (what, where, into what)."""
        from gpucli.progress import start_line

        self.caps = batch_caps(self.config, self.task_cls, devices)
        self.summary.devices = list(devices)
        self.progress.start(start_line(__version__, self.task_cls.name, self.spec.model, devices, self.output.display,
                                       getattr(self.task, "runtime", "")))

    @property
    def window_items(self) -> int:
        return window_items(self.config, self.task_cls, self.caps)

    @property
    def max_bytes(self) -> int:
        return int((self.config.max_file_mb or self.task_cls.max_file_mb) * 2**20)

    @property
    def chunk_files(self) -> int:
        return self.config.read_chunk_files or self.task_cls.read_chunk_files

    def devices(self) -> list[str]:
        """One entry per worker process: --workers-per-device per device when given, else one
        per device, or on a CPU-only host the task's choice for its cores (Task.cpu_workers)."""
        from gpucli.devices import resolve_devices

        devices = resolve_devices(self.config.devices)
        per_device = self.config.workers_per_device
        if not per_device:
            per_device = self.task.cpu_workers(host_cores()) if devices == ["cpu"] else 1
        return [device for device in devices for _ in range(per_device)]

    def reader_processes(self, devices: list[str]):
        """Reader processes for this run, or None to read in threads (see reader.ReaderProcesses):
        `read_processes` when set (0 = threads), else the task's choice for the host's cores and
        the workers' `devices`."""
        from gpucli.reader import ReaderProcesses

        count = self.config.read_processes
        if count < 0:
            count = self.task.reader_processes(host_cores(), devices)
        return ReaderProcesses(self.spec, count) if count > 0 else None

    def attempts(self):
        """Large inputs recorded in the ledger while they are prepared (reader.Attempts)."""
        from gpucli.reader import Attempts

        return Attempts(self.output.begin_attempts, self.output.end_attempts)

    def walk_blocks(self, exclude: list[str] | None = None) -> Iterator[list[Source | Failure]]:
        """The inputs in blocks (walk.walk_blocks), at most `--limit` of them (a limited walk is
        incomplete: it prunes nothing)."""
        if self.config.from_table:  # texts from a table's rows, one record per row (gpucli/tables.py)
            blocks = _in_blocks(tables.records(self.config, self.report, self.max_bytes))
        else:
            flt = WalkFilter(self.task_cls.suffixes, self.config.include, self.config.exclude)
            blocks = walk_blocks(list(self.config.paths), flt,
                                 self.output.walk_exclusions() if exclude is None else exclude, self.report)
        return _limited(blocks, self.config.limit) if self.config.limit else blocks

    def walk(self, exclude: list[str] | None = None) -> Iterator[Found]:
        """The inputs one at a time (see `walk_blocks`)."""
        for block in self.walk_blocks(exclude):
            for entry in block:
                yield Found(source=entry) if isinstance(entry, Source) else Found(failure=entry)

    def seen(self) -> Callable[[list[str]], None] | None:
        """For --prune: where the walk's paths go (the ledger, not memory)."""
        return self.output.mark_seen if self.config.prune else None

    def prune(self) -> None:
        """After a complete walk (never after an interrupt)."""
        self.counts.walk_done = True
        if self.config.prune:
            self.summary.pruned = self.output.prune(self.report, getattr(self.config, "prune_all", False),
                                                    self.progress.log)

    def close(self, written: bool) -> None:
        try:
            self.output.close(written)
        finally:
            self.progress.update(self.accounts.counts_now())
            self.progress.close()

    @property
    def opened(self) -> bool:
        """The output is open and the run's accounting exists: an error from now on is mid-run."""
        return hasattr(self, "accounts")

    def finish(self, stopping: int, infer_s: float, queue_s: float, write_s: float,
               error: GpucliError | None = None) -> RunSummary:
        """The summary: counts, stage times (each a busy time within the wall time: `read` while
        any reader thread worked, `queue` while the dispatcher had nothing to send, `infer` the
        busiest worker's model time, `write` the writer thread's time) and the exit code (the
        error's, when one stopped the run)."""
        s = self.summary
        s.unfinished = self.accounts.unfinished() if (stopping or error) and self.opened else 0
        s.inputs = s.succeeded + s.failed + s.skipped + s.unfinished
        s.elapsed_s = time.monotonic() - self.started
        s.stage_seconds.update(read=self.clocks["read"].seconds, write=write_s, infer=infer_s, queue=queue_s)
        s.items_per_s = self.counts.items / s.elapsed_s if s.elapsed_s else 0.0
        s.interrupted = bool(stopping)
        s.finished_at = _now()
        s.exit_code = error.exit_code if error is not None else self._exit_code(stopping)
        return s

    def _exit_code(self, stopping: int) -> int:
        """Interrupted: 130/143. A run that found no input under the roots given: 3 (an unmounted
        share looks like this) unless --allow-empty (or --prune-all, which says the root is empty on purpose). Failed inputs: 1 by --fail-on (new: only
        those that had not failed before unchanged; any; never)."""
        s = self.summary
        if stopping:
            return EXIT_SIGTERM if stopping == signal.SIGTERM else EXIT_SIGINT
        if self.counts.found == 0 and not (self.config.allow_empty or self.config.prune_all):
            self.progress.log(f"found no input under {', '.join(self.config.paths)}: nothing to do (an empty or "
                              "unmounted directory?); pass --allow-empty when that is expected")
            return EXIT_RUN_FAILED
        failing = {"any": s.failed, "new": s.failed - s.failed_known, "never": 0}[self.config.fail_on]
        return EXIT_FAILED if failing else EXIT_OK


# --- the accounting ---------------------------------------------------------------------------

class Accounts:
    """Every input ends as all of its rows or exactly one failure record.

    Items of one input may finish in any order and in different batches. The rows of each
    batch go into a `PartBuffer` at once; an input is COMPLETE when its last item is back,
    and a part takes the rows of complete inputs only. If any item of an input fails, the
    input fails once and its other rows are dropped. A task that merges an input's rows
    (`finish`, e.g. a recording's chunks) gets them all together when it is complete."""

    def __init__(self, task: Task, output: Output, summary: RunSummary, counts: Counts, schema: Any) -> None:
        self.task = task
        self.output = output
        self.summary = summary
        self.counts = counts
        self.schema = schema
        # a batch's rows: the task's columns (a part gets its inputs' columns in `_with_inputs`)
        self.row_schema = task.schema()
        self.sources: dict[int, Source] = {}  # inputs in the model's hands or in the buffer
        self.status = np.zeros(1024, dtype=np.int8)
        self.waiting = np.zeros(1024, dtype=np.int32)  # items not yet back, per input
        self.buffer = PartBuffer()
        self._merging: dict[int, list[tuple[int, dict[str, Any]]]] = {}  # source id -> (index, row)

    # --- from the reader --------------------------------------------------------------------
    def read(self, chunk: ReadChunk) -> Items | None:
        """A read chunk: failures and unchanged inputs end here; returns the block to run."""
        self.counts.found += chunk.found
        for failure in chunk.failures:
            self.record_failure(failure)
        if chunk.unchanged:
            self.summary.unchanged += len(chunk.unchanged)
            self.summary.skipped += len(chunk.unchanged)
            self.output.unchanged(chunk.unchanged)
        if chunk.block is None or not len(chunk.block):
            return None
        self.expect(chunk.sources, chunk.block)
        return chunk.block

    def expect(self, sources: list[Source], block: Items) -> None:
        self._grow(int(block.source_ids.max()))
        for source in sources:
            self.sources[source.id] = source
        ids, counts = np.unique(block.source_ids, return_counts=True)
        self.status[ids] = OPEN
        self.waiting[ids] = counts

    def _grow(self, largest: int) -> None:
        if largest < len(self.status):
            return
        size = max(largest + 1, 2 * len(self.status))
        self.status = np.concatenate([self.status, np.zeros(size - len(self.status), np.int8)])
        self.waiting = np.concatenate([self.waiting, np.zeros(size - len(self.waiting), np.int32)])

    # --- from the models --------------------------------------------------------------------
    def outputs_many(self, finished: list[tuple[Items, Any]]) -> None:
        """The outputs of several batches that came back together, as one block of rows (one
        Arrow table, not one per batch). Should the block's outputs not make rows together,
        each batch goes on its own, so that a bad output costs only its own batch's inputs."""
        if len(finished) > 1 and not self.task.merges_rows:
            outputs = concat_outputs([out for _, out in finished])
            if outputs is not None:
                items = Items.concat([items.without_payload() for items, _ in finished])
                try:
                    made = self.task.rows(items, outputs)
                except Exception:  # noqa: BLE001 - one by one below: the bad batch fails alone
                    made = None
                if made is not None:
                    self._place(items, *made)
                    return
        for items, out in finished:
            self.outputs(items, out)

    def outputs(self, items: Items, outputs: Any) -> None:
        """One batch's outputs: its rows into the buffer."""
        try:
            made = (self.task.item_rows if self.task.merges_rows else self.task.rows)(items, outputs)
        except Exception as exc:  # noqa: BLE001 - a bad output costs its inputs, not the run
            self._count(items)
            self.fail_items(items, "infer", f"unusable model output: {type(exc).__name__}: {exc}")
            return
        self._place(items, *made)

    def _place(self, items: Items, rows: Any, bad: list[tuple[int, str]]) -> None:
        """A block's rows (a table, or a merging task's (position, row) pairs) into the buffer;
        the inputs of `bad` positions fail."""
        self._count(items)
        for position, reason in bad:
            self.fail_source(int(items.source_ids[position]), "infer", reason)
        if self.task.merges_rows:
            for position, row in rows:
                sid = int(items.source_ids[position])
                if self.status[sid] == OPEN:  # a failed input's late rows are dropped
                    self._merging.setdefault(sid, []).append((int(items.index[position]), row))
        else:
            keep = np.ones(len(items), dtype=bool)
            keep[[position for position, _ in bad]] = False
            self._add_rows(rows, items.source_ids[keep], items.index[keep])
        self._arrived(items.source_ids)

    def _count(self, items: Items) -> None:
        self.counts.items += len(items)
        self.counts.cost += items.total_cost

    def _add_rows(self, table: Any, ids: np.ndarray, index: np.ndarray) -> None:
        """A batch's rows, without their inputs' columns (`_with_inputs` adds them to a whole part)."""
        self.buffer.add(table, ids, index)

    def _with_inputs(self, part: Part) -> Part:
        """The part's rows with their inputs' columns: `path` first (and a record's `id`), then
        the task's, then size, mtime and digest. Added once per part, not per batch: a few Arrow
        calls per batch were most of the parent's cost of a batch's rows."""
        inputs, rows = np.unique(part.source_ids, return_inverse=True)
        sources = [self.sources[sid] for sid in inputs.tolist()]
        table = tables.with_path(part.table, [sources[i].path for i in rows.tolist()], self.schema)
        for name, column in zip(input_fields(), input_columns(sources, rows)):
            table = table.append_column(name, column)
        return dataclasses.replace(part, table=table)

    def _arrived(self, ids: np.ndarray) -> None:
        unique, counts = np.unique(ids, return_counts=True)
        self.waiting[unique] -= counts
        complete = unique[(self.waiting[unique] <= 0) & (self.status[unique] == OPEN)]
        self.status[complete] = COMPLETE
        if self.task.merges_rows:
            for sid in complete.tolist():
                self._merge(sid)

    def _merge(self, sid: int) -> None:
        """All rows of a merging task's input are back: `finish` them into its final rows."""
        source = self.sources[sid]
        rows = [row for _, row in sorted(self._merging.pop(sid, []), key=lambda pair: pair[0])]
        try:
            rows = self.task.finish(source, rows)
        except Exception as exc:  # noqa: BLE001
            self.fail_source(sid, "infer", f"{type(exc).__name__}: {exc}")
            return
        table = rows_to_table(rows, self.row_schema)
        self.buffer.add(table, np.full(len(rows), sid, np.int64), np.arange(len(rows), dtype=np.int64))

    def fail_items(self, items: Items, stage: str, reason: str) -> None:
        """Items that failed for good: each of their inputs fails once."""
        for sid in np.unique(items.source_ids).tolist():
            self.fail_source(sid, stage, reason)

    def fail_source(self, sid: int, stage: str, reason: str) -> None:
        if self.status[sid] not in (OPEN, COMPLETE):
            return
        self.status[sid] = FAILED
        self._merging.pop(sid, None)
        source = self.sources.pop(sid)
        self.record_failure(Failure(source.path, stage, reason, source.size, source.mtime_ns))

    def record_failure(self, failure: Failure) -> None:
        known = self.output.failed(failure)
        if failure.stage == "skip":
            self.summary.skipped += 1
        else:
            self.summary.failed += 1
            self.summary.failed_known += known
            self.summary.unknown_tokens += failure.cause == UNKNOWN_TOKENS

    # --- from the writer --------------------------------------------------------------------
    def take_part(self) -> Part | None:
        """The rows of every complete input, as one part (on the loop or the driver)."""
        part = self.buffer.take(self.status)
        return None if part is None else self._with_inputs(part)

    def commit(self, part: Part, location: str | None) -> tuple[np.ndarray, int]:
        """After the sink made `part` durable (writer thread): the ledger marks its inputs done."""
        ids, counts = np.unique(part.source_ids, return_counts=True)
        self.output.commit([self.sources[sid] for sid in ids.tolist()], counts.tolist(), location)
        return ids, part.table.num_rows

    def durable(self, committed: tuple[np.ndarray, int]) -> None:
        """Back on the loop: count the inputs done and forget their sources."""
        ids, rows = committed
        self.status[ids] = DONE
        for sid in ids.tolist():
            self.sources.pop(sid, None)
        self.summary.succeeded += len(ids)
        self.summary.rows += rows

    # --- at the end ---------------------------------------------------------------------------
    def unfinished(self) -> int:
        """Inputs handed to the models whose rows are not durable (after an interrupt)."""
        return len(self.sources)

    def lost(self, reason: str) -> None:
        """Inputs no result came back for (an engine that drops work): each a failure record."""
        for sid in [sid for sid in list(self.sources) if self.status[sid] in (OPEN, COMPLETE)]:
            self.fail_source(sid, "infer", reason)

    def counts_now(self) -> Counts:
        c, s = self.counts, self.summary
        c.done, c.failed, c.skipped, c.rows = s.succeeded, s.failed, s.skipped, s.rows
        return c
