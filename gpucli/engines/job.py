"""The job both engines drive: built once from the config.

    Job   config -> task (parent side), spec, caps, output (sink, lock, ledger, failures),
          schema, metadata; the walk; the summary and its exit code

An engine (`pipeline.py` for local processes, `engines/ray/` for Ray) moves blocks of items
to models and hands every outcome to the job's `Accounts` (gpucli/output/accounts.py); it decides
nothing about rows, failures, the ledger or exit codes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gpucli import __version__
from gpucli.core.config import RunConfig
from gpucli.core.errors import EXIT_FAILED, EXIT_OK, EXIT_RUN_FAILED, EXIT_SIGINT, EXIT_SIGTERM, GpucliError, UsageError
from gpucli.core.progress import Counts, Progress, make_progress
from gpucli.core.records import Failure, Source
from gpucli.core.summary import BusyClock, RunSummary, now_text
from gpucli.engines.batching import WINDOW_BATCHES, BatchCaps
from gpucli.inputs import tables
from gpucli.inputs.scope import Found, WalkFilter, WalkReport
from gpucli.inputs.walk import count_inputs, walk_blocks
from gpucli.models.backends.choice import backend_default
from gpucli.models.devices import all_cpu, host_cores
from gpucli.output import dedup
from gpucli.output.accounts import Accounts
from gpucli.output.output import Output
from gpucli.output.settings import output_metadata, output_schema, output_settings
from gpucli.tasks import Task, TaskSpec, get_task
from gpucli.tasks._images import IMAGE_SUFFIXES


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


def input_root(paths: tuple[str, ...]) -> str:
    """The absolute directory the rows' `path` is relative to (see walk.common_base), or the
    root URL of object-store roots (gpucli/inputs/stores/roots.py)."""
    from pathlib import Path

    from gpucli.inputs.stores.url import is_url
    from gpucli.inputs.walk import common_base

    if paths and all(is_url(p) for p in paths):
        from gpucli.inputs.stores.roots import url_input_root

        return url_input_root(paths)

    return str(common_base([Path(os.path.abspath(p)) for p in paths])) if paths else ""


def check_roots(paths: tuple[str, ...]) -> None:
    from gpucli.inputs.stores.url import is_url

    if any(is_url(p) for p in paths):  # s3://... roots: parsed and checked there, listed by the walk
        from gpucli.inputs.stores.roots import check_url_roots

        return check_url_roots(paths)
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    for p in paths:
        if Path(p).is_dir() and not os.access(p, os.R_OK | os.X_OK):
            raise UsageError(f"{p}: directory is not readable")


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
        self.summary.started_at = now_text()
        self.report = WalkReport()
        self._stop_count = threading.Event()  # the counting walk's (count_ahead): its number is no longer needed

    def open(self) -> None:
        """The task's parent side, then the output (sink, lock, ledger, failure log). Blocking."""
        from gpucli.models.hub import download_progress_hidden

        check_roots(self.config.paths)
        out = self.config.out or default_out(self.task_cls.name)
        self.output = Output(out, self.config.incremental, state_dir=getattr(self.config, "state_dir", ""))
        self.spec = backend_default(self.spec, self.task_cls, self.config, self.output.made_with(), out)
        with download_progress_hidden(self.config.quiet or self.config.progress == "off"):
            self.task_cls = self.task_cls.variant(self.spec)  # embed with an image-text model reads images too
            self.task = self.task_cls(self.spec)
            self.task.open()
        self.spec = self.task.spec  # the backend the task resolved (issue 16): the workers run that, not auto
        quiet_parent_torch()
        if hasattr(self.task, "keep_vectors"):  # --vector-type (issue 30): the sink and the ledger it stores for
            self.task.keep_vectors(self.output)
        self.schema, metadata = tables.output(self.config, output_schema(self.task), output_metadata(self.task))
        settings = output_settings(self.spec, self.task, metadata)
        roots = self.config.paths or ((self.config.from_table,) if self.config.from_table else ())
        metadata["gpucli.root"] = input_root(roots)  # descriptive: not part of the settings
        self.output.open(self.schema, metadata, settings)
        self.summary.out, self.summary.failures_file = self.output.display, self.output.failures.path
        for notice in [*getattr(self.task, "notices", []), *getattr(self.output.sink, "notices", []),
                       *self.output.notices]:
            self.progress.log(f"note: {notice}")
        self.accounts = Accounts(self.task, self.output, self.summary, self.counts, self.schema,
                                 dedup.InRun() if self.dedup else None)

    @property
    def dedup(self) -> bool:
        """Identical content embedded once (gpucli/output/dedup.py): the task's `dedup` option, locally."""
        return dedup.enabled(self.task.options, self.config.engine)

    def copies_from_output(self):
        """dedup.FromOutput for this run, or None (no dedup, or a sink that cannot read its rows back)."""
        if not self.dedup or not self.output.sink.reads_back:
            return None
        return dedup.FromOutput(self.output.ledger, self.output.sink, self.accounts.row_schema)

    def use_devices(self, devices: list[str]) -> None:
        """The caps for these devices, and the run's opening line (what, where, into what)."""
        from gpucli.core.progress import start_line

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
        from gpucli.models.devices import resolve_devices

        devices = resolve_devices(self.config.devices)
        per_device = self.config.workers_per_device
        if not per_device:
            per_device = self.task.cpu_workers(host_cores()) if devices == ["cpu"] else 1
        return [device for device in devices for _ in range(per_device)]

    def reader_processes(self, devices: list[str]):
        """Reader processes for this run, or None to read in threads (see reader.ReaderProcesses):
        `read_processes` when set (0 = threads), else the task's choice for the host's cores and
        the workers' `devices`."""
        from gpucli.engines.reader import ReaderProcesses

        count = self.config.read_processes
        if count < 0:
            count = self.task.reader_processes(host_cores(), devices)
        return ReaderProcesses(self.spec, count) if count > 0 else None

    def attempts(self):
        """Large inputs recorded in the ledger while they are prepared (reader.Attempts)."""
        from gpucli.engines.reader import Attempts

        return Attempts(self.output.begin_attempts, self.output.end_attempts)

    def walk_blocks(self, exclude: list[str] | None = None) -> Iterator[list[Source | Failure]]:
        """The inputs in blocks (walk.walk_blocks), at most `--limit` of them (a limited walk is
        incomplete: it prunes nothing)."""
        if self.config.from_table:  # texts from a table's rows, one record per row (gpucli/inputs/tables.py)
            blocks = _in_blocks(tables.records(self.config, self.report, self.max_bytes))
        else:
            blocks = walk_blocks(list(self.config.paths), self.walk_filter(),
                                 self.output.walk_exclusions() if exclude is None else exclude, self.report)
        return _limited(blocks, self.config.limit) if self.config.limit else blocks

    def walk_filter(self) -> WalkFilter:
        return WalkFilter(self.task_cls.suffixes, self.config.include, self.config.exclude)

    def count_ahead(self) -> None:
        """Count the walk in a thread of its own (walk.count_inputs: a number, never a list),
        ahead of the reader, whose walk waits for the queue: the progress then knows the total,
        and an ETA, long before the reader has found every input. A hint only: once the real
        walk ends its `found` is the total. Only when the progress shows it, and not for --from."""
        if self.config.from_table or not self.progress.shows:
            return
        roots, flt, exclude = list(self.config.paths), self.walk_filter(), self.output.walk_exclusions()
        limit = self.config.limit

        def count() -> None:
            try:
                total = count_inputs(roots, flt, exclude, self._stop_count)
            except Exception:  # noqa: BLE001 - a hint: the real walk reports what went wrong
                return
            if total is not None and not self._stop_count.is_set():
                self.counts.expected = min(total, limit) if limit else total

        threading.Thread(target=count, name="gpucli-count-ahead", daemon=True).start()

    def counts_now(self, queued: int = 0, in_flight: int = 0) -> Counts:
        """What the progress shows now: the accounts' counts, with the engine's queue and the
        batches (local) or inputs (Ray) in flight."""
        counts = self.accounts.counts_now()
        counts.queued, counts.in_flight = queued, in_flight
        return counts

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
        self._stop_count.set()
        self.counts.walk_done = True
        if self.config.prune:
            self.summary.pruned = self.output.prune(self.report, getattr(self.config, "prune_all", False),
                                                    self.progress.log)

    def close(self, written: bool) -> None:
        self._stop_count.set()
        try:
            self.output.close(written)
            if self.counts.walk_done and self._found_nothing() and not self.summary.failed \
                    and not self.summary.skipped:
                self.output.discard()  # a mistaken path leaves no empty output behind (a run that ended,
                # not one stopped or failed: its ledger may hold what the next run needs, e.g. attempts)
        finally:
            counts = self.counts_now()
            counts.ended = True  # the last line: what was written, nothing queued or in flight
            self.progress.update(counts)
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
        per_s = 1 / s.elapsed_s if s.elapsed_s else 0.0
        s.inputs_per_s, s.rows_per_s, s.items_per_s = s.inputs * per_s, s.rows * per_s, self.counts.items * per_s
        s.interrupted = bool(stopping)
        s.finished_at = now_text()
        s.exit_code = error.exit_code if error is not None else self._exit_code(stopping)
        return s

    def _found_nothing(self) -> bool:
        """No input under the roots given, and the user did not say that is expected."""
        return self.counts.found == 0 and not (self.config.allow_empty or self.config.prune_all)

    def _nothing_found(self) -> str:
        """Why nothing was found, and what to do: files were there but none the task reads (its
        suffixes, or --include), or the roots were empty (an unmounted share looks so)."""
        where = ", ".join(self.config.paths) or self.config.from_table
        seen = self.report.passed_over
        if seen and self.config.include:
            globs = " ".join(f"--include {g!r}" for g in self.config.include)
            return (f"found no input under {where}: the walk saw {seen} file(s), none matching {globs}; check the "
                    "glob (it matches the path under the root or the file name) (nothing was written)")
        images = sum(n for suffix, n in self.report.passed_over_suffixes.items() if suffix in IMAGE_SUFFIXES)
        if images and hasattr(self.task_cls, "variant") and self.task_cls.name == "embed":
            return (f"found no input under {where}: the walk saw {seen} file(s), {images} of them images, but "
                    f"{self.spec.model} is a text model with no image tower; to embed images give an image-text "
                    "model: a CLIP or SigLIP directory or Hugging Face id (`gpucli models` suggests some), e.g. "
                    "--model openai/clip-vit-base-patch32 (nothing was written)")
        if seen:
            return (f"found no input under {where}: the walk saw {seen} file(s), none of them files ending "
                    f"{', '.join(self.task_cls.suffixes)}, which {self.task_cls.name} reads; pass --include 'GLOB' "
                    "to read others (nothing was written)")
        return (f"found no input under {where}: nothing to do (an empty or unmounted directory?); pass "
                "--allow-empty when that is expected (nothing was written)")

    def _exit_code(self, stopping: int) -> int:
        """Interrupted: 130/143. A run that found no input under the roots given: 3 (an unmounted
        share looks like this) unless --allow-empty (or --prune-all, which says the root is empty on purpose). Failed inputs: 1 by --fail-on (new: only
        those that had not failed before unchanged; any; never)."""
        s = self.summary
        if stopping:
            return EXIT_SIGTERM if stopping == signal.SIGTERM else EXIT_SIGINT
        if self._found_nothing():
            self.progress.warn(self._nothing_found())
            return EXIT_RUN_FAILED
        failing = {"any": s.failed, "new": s.failed - s.failed_known, "never": 0}[self.config.fail_on]
        return EXIT_FAILED if failing else EXIT_OK
