"""The job both engines drive: built once from the config.

    Job   config -> task (parent side), spec, caps, output (sink, lock, ledger, failures),
          schema, metadata; devices and readers; the run's start, end and summary

Its inputs are gpucli/engines/run_inputs.py's (the walk or a table, --limit, the count ahead);
how the run ends, its summary's figures and exit code, gpucli/engines/outcome.py's. An engine
(`engines/local/pipeline.py` for local processes, `engines/ray/` for Ray) moves blocks of items
to models and hands every outcome to the job's `Accounts` (gpucli/output/accounts.py); it decides
nothing about rows, failures, the ledger or exit codes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator

import gpucli.engines.outcome as outcome
from gpucli import __version__
from gpucli.core.config import RunConfig
from gpucli.core.errors import GpucliError
from gpucli.core.progress import Counts, Progress, make_progress, start_line
from gpucli.core.records import Failure, Source
from gpucli.core.summary import BusyClock, RunSummary, now_text
from gpucli.engines.batching import WINDOW_BATCHES, BatchCaps
from gpucli.engines.reader import Attempts, ReaderProcesses
from gpucli.engines.run_inputs import RunInputs, check_roots, input_root
from gpucli.inputs import tables
from gpucli.inputs.scope import Found, WalkFilter
from gpucli.models.backends.choice import backend_default
from gpucli.models.devices import all_cpu, host_cores, resolve_devices
from gpucli.models.hub import download_progress_hidden
from gpucli.output import dedup
from gpucli.output.accounts import Accounts
from gpucli.output.output import Output
from gpucli.output.settings import output_metadata, output_schema, output_settings
from gpucli.tasks import Task, TaskSpec, get_task


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


class Job:
    """One run's set-up, shared by the engines: built once from the config."""

    def __init__(self, config: RunConfig, progress: Progress | None = None) -> None:
        self.readers: ReaderProcesses | None = None  # this run's, once the reader made them
        self.config = config
        self.task_cls, self.spec = task_and_spec(config)
        tables.check(config, self.task_cls)  # --from: task, table and columns, before anything is opened
        self.summary = RunSummary(task=self.task_cls.name, model=self.spec.model)
        self.progress = progress or make_progress(config.progress, config.quiet, self.task_cls.name,
                                                  self.task_cls.cost_name)
        self.counts = Counts()
        self.inputs = RunInputs(config, self.counts)
        self.caps = batch_caps(config, self.task_cls)
        self.clocks = {"read": BusyClock()}
        self.started = time.monotonic()
        self.summary.started_at = now_text()

    def open(self) -> None:
        """The task's parent side, then the output (sink, lock, ledger, failure log). Blocking."""
        check_roots(self.config.paths)
        out = self.config.out or default_out(self.task_cls.name)
        self.output = Output(out, self.config.incremental, state_dir=self.config.state_dir)
        self.spec = backend_default(self.spec, self.task_cls, self.config, self.output.made_with(), out)
        with download_progress_hidden(self.config.quiet or self.config.progress == "off"):
            self.task_cls = self.task_cls.variant(self.spec)  # embed with an image-text model reads images too
            self.task = self.task_cls(self.spec)
            self.task.beside_output(out)  # transcribe --subtitles: its files beside --out
            self.task.open()
        self.spec = self.task.spec  # the backend the task resolved: the workers run that, not auto
        quiet_parent_torch()
        if hasattr(self.task, "keep_vectors"):  # --vector-type: the sink and the ledger it stores for
            self.task.keep_vectors(self.output)
        self.schema, metadata = tables.output(self.config, output_schema(self.task), output_metadata(self.task))
        settings = output_settings(self.spec, self.task, metadata)
        roots = self.config.paths or ((self.config.from_table,) if self.config.from_table else ())
        metadata["gpucli.root"] = input_root(roots)  # descriptive: not part of the settings
        self.output.open(self.schema, metadata, settings)
        failures = self.output.failures
        assert failures is not None, "an output opened without its failures file. This is a bug."
        self.summary.out, self.summary.failures_file = self.output.display, failures.path
        for notice in [*getattr(self.task, "notices", []), *getattr(self.output.sink, "notices", []),
                       *self.output.notices]:
            self.progress.note(notice)
        self.accounts = Accounts(self.task, self.output, self.summary, self.counts, self.schema,
                                 dedup.InRun() if self.deduplicates else None)

    @property
    def deduplicates(self) -> bool:
        """Identical content embedded once (gpucli/output/dedup.py): the task's `dedup` option, locally."""
        return dedup.enabled(self.task.options, self.config.engine)

    def copies_from_output(self) -> dedup.FromOutput | None:
        """dedup.FromOutput for this run, or None (no dedup, or a sink that cannot read its rows back)."""
        if not self.deduplicates or not self.output.sink.reads_back:
            return None
        return dedup.FromOutput(self.output.ledger, self.output.sink, self.accounts.row_schema)

    def use_devices(self, devices: list[str]) -> None:
        """The caps for these devices, and the run's opening line (what, where, into what)."""
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
        devices = resolve_devices(self.config.devices)
        per_device = self.config.workers_per_device
        if not per_device:
            per_device = self.task.cpu_workers(host_cores()) if devices == ["cpu"] else 1
        return [device for device in devices for _ in range(per_device)]

    def reader_processes(self, devices: list[str]) -> ReaderProcesses | None:
        """Reader processes for this run, or None to read in threads (see reader.ReaderProcesses):
        `read_processes` when set (0 = threads), else the task's choice for the host's cores and
        the workers' `devices`."""
        count = self.config.read_processes
        if count < 0:
            count = self.task.reader_processes(host_cores(), devices)
        self.readers = ReaderProcesses(self.spec, count) if count > 0 else None
        return self.readers

    def join_readers(self, timeout: float = 10.0) -> None:
        """After the reader closed them: their pool's threads ended (ReaderProcesses.join), off the loop."""
        if self.readers is not None:
            self.readers.join(timeout)

    def stop_at_once(self) -> None:
        """A second stop's line, and the readers killed before its os._exit: left alive, they outlived
        the parent, blocked for good on a pipe nobody reads."""
        self.progress.log("second interrupt: stopping now; complete parts are kept")
        if self.readers is not None:
            self.readers.close()

    def attempts(self) -> Attempts:
        """Large inputs recorded in the ledger while they are prepared (reader.Attempts)."""
        return Attempts(self.output.begin_attempts, self.output.end_attempts)

    def walk_filter(self) -> WalkFilter:
        return self.inputs.walk_filter(self.task_cls.suffixes, getattr(self.task_cls, "reads_extensionless", False))

    def walk_blocks(self, exclude: list[str] | None = None) -> Iterator[list[Source | Failure]]:
        """The inputs in blocks (RunInputs.blocks), less the output's own paths unless `exclude` is given."""
        exclude = self.output.walk_exclusions() if exclude is None else exclude
        return self.inputs.blocks(self.walk_filter(), exclude, self.max_bytes)

    def walk(self, exclude: list[str] | None = None) -> Iterator[Found]:
        """The inputs one at a time (see `walk_blocks`)."""
        for block in self.walk_blocks(exclude):
            for entry in block:
                yield Found(source=entry) if isinstance(entry, Source) else Found(failure=entry)

    def count_ahead(self) -> None:
        """The walk counted ahead of the reader (RunInputs.count_ahead), only when the progress shows it."""
        if self.progress.shows:
            self.inputs.count_ahead(self.walk_filter(), self.output.walk_exclusions())

    def counts_now(self, queued: int = 0, in_flight: int = 0) -> Counts:
        """What the progress shows now: the accounts' counts, with the engine's queue and the
        batches (local) or inputs (Ray) in flight."""
        counts = self.accounts.counts_now()
        counts.queued, counts.in_flight = queued, in_flight
        counts.passed_over = self.inputs.report.passed_over  # the files the walk passed over, as it goes
        return counts

    def seen(self) -> Callable[[list[str]], None] | None:
        """For --prune: where the walk's paths go (the ledger, not memory)."""
        return self.output.mark_seen if self.config.prune else None

    def prune(self, refuse_all: bool = True) -> None:
        """After a complete walk (never after an interrupt); `refuse_all`: Output.prune's."""
        self.inputs.stop_counting()
        self.counts.walk_done = True
        if self.config.prune:
            self.summary.pruned += self.output.prune(self.inputs.report, self.config.prune_all, self.progress.log,
                                                     refuse_all)

    def close(self, written: bool) -> None:
        self.join_readers()  # closed by the reader's end by now
        self.inputs.stop_counting()
        try:
            self.output.close(written)
            for line in self.output.closing_notes:
                self.progress.note(line)
            if self.counts.walk_done and outcome.found_nothing(self.config, self.counts) and not self.summary.failed \
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
        unfinished = self.accounts.unfinished() if (stopping or error) and self.opened else 0
        outcome.count_passed_over(self.summary, self.inputs.report)
        for pattern in self.inputs.report.unmatched_excludes():
            self.progress.warn(f"--exclude {pattern!r} matched no file (gitignore patterns: 'name' or 'name/' "
                               "leaves out a directory at any depth, '/name' only at the root, '*.log' such files)")
        stages = {"read": self.clocks["read"].seconds, "write": write_s, "infer": infer_s, "queue": queue_s}
        s = outcome.summarize(self.summary, self.counts, time.monotonic() - self.started, stages, stopping, unfinished)
        s.exit_code = error.exit_code if error is not None else self._exit_code(stopping)
        if error is not None:
            s.error = str(error)  # the line the CLI prints; --json's summary carries it
        return s

    def _exit_code(self, stopping: int) -> int:
        """outcome.exit_code, saying first why a run that found no input failed."""
        empty = not stopping and outcome.found_nothing(self.config, self.counts)
        if empty:
            self.summary.error = outcome.nothing_found(self.config, self.inputs.report, self.task_cls, self.spec.model)
            self.progress.warn(self.summary.error)
        return outcome.exit_code(self.config, self.summary, stopping, empty)
