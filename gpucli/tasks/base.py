"""The contract every task implements; the pipeline knows tasks only through it.

A task lives in both processes. In the parent it cuts inputs into items (`open`, `prepare`)
and turns outputs into rows (`row`); in each spawned worker it loads the model once
(`setup`) and runs batches (`predict`). The object is built from plain data
(`TaskSpec`), so it can be rebuilt on the other side of `spawn`.

Module-level imports of task modules must stay light (no torch, transformers, PIL...):
`gpucli --help` imports every task module to build its commands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from gpucli.core.stages import Stage

if TYPE_CHECKING:
    import pyarrow as pa

    from gpucli.core.records import Failure, Item, Items, Source


@dataclass(frozen=True)
class ModelEntry:
    """A model alias a task offers by default (`gpucli models` lists them).

    `resolve()` returns the local path (or id) handed to the backend; `available()` says
    whether it loads offline on this machine, without loading it.
    """

    alias: str
    task: str
    backend: str
    description: str
    resolve: Callable[[], str]
    available: Callable[[], bool]


@dataclass(frozen=True)
class TaskSpec:
    """Plain data that rebuilds a task inside a spawned worker."""

    name: str
    model: str
    options: dict[str, Any] = field(default_factory=dict)
    dtype: str = "auto"
    revision: str = ""  # --revision: a Hugging Face branch, tag or commit
    runtime: str = ""  # an existing output's runtime (which --backend auto keeps) until the parent resolves it
    # (gpucli.models.backends.choice.choose_backend); "" = a new output


MAX_CPU_WORKERS = 4  # each a copy of the model; beyond 4 cores the workers share the cores' threads


def per_core(cores: int) -> int:
    """A single-threaded worker per core, up to MAX_CPU_WORKERS: several batches on one thread
    each beat one batch on all threads (no OpenMP barrier per operator, no sleeping threads to
    wake). Measured per task: EmbedTask.cpu_workers, ClassifyTask.cpu_workers."""
    return max(1, min(MAX_CPU_WORKERS, cores))


class Task:
    """Base class. Subclasses set the class attributes and override the methods marked so.

    Class attributes:
      name: the subcommand (`gpucli embed`).
      help: one paragraph for `--help`.
      suffixes: file suffixes read by default (lower case, with dot).
      Options: a frozen dataclass of task options; each field's metadata may hold
        `help` (str) and `flag` (str, e.g. "--top-k"); they become CLI flags and TOML keys.
      default_model: the alias used without `--model`.
      cost_name: what `cost` counts ("tokens", "pixels", "audio_s"), for progress and docs.
      default_max_cost: default per-batch cost budget.
      cpu_batch_size, cpu_max_cost: the defaults when every worker is on the CPU (0 = as on
        GPUs): a CPU gains little from big batches, and big activations fall out of its caches.
    """

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""
    examples: ClassVar[str] = ""
    suffixes: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type] = object
    default_model: ClassVar[str] = ""
    cost_name: ClassVar[str] = "items"
    default_batch_size: ClassVar[int] = 32
    default_max_cost: ClassVar[int] = 0  # 0 = no cost cap
    cpu_batch_size: ClassVar[int] = 0
    cpu_max_cost: ClassVar[int] = 0
    queue_items: ClassVar[int] = 2048  # items waiting for a batch; lower it for big items (audio, images)
    max_file_mb: ClassVar[float] = 512.0  # larger inputs are failure records unless --max-file-mb says more
    # path -> how many files it counts as in a read chunk, or None (every file counts one): a task
    # whose inputs differ a lot in work (embed: a PDF against a one-sentence text) spreads the heavy
    # ones over more chunks, and so over the reader threads or processes
    read_weight: ClassVar[Callable[..., int] | None] = None
    read_chunk_files: ClassVar[int] = 64  # files per reader thread call (8 calls in flight): decoded
    # inputs wait in memory, so tasks with big decoded inputs read fewer at a time
    # the output metadata keys (`gpucli.` dropped) that `gpucli inspect` shows for this task's outputs;
    # () = every key that is not common to all tasks
    shown_settings: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def read_as(cls, path: str) -> str | None:
        """The format an input at `path` is read as, for `--dry-run` (None: the task has one)."""
        return None

    @classmethod
    def checks_its_model(cls, options: Mapping[str, Any]) -> bool:
        """Whether the task, with these options, checks itself what kind of model a --model
        directory holds (classify --labels takes an image-text model); otherwise the command
        refuses a directory of another task's kind before any work (models/model_kind.py)."""
        return False

    @classmethod
    def hint_for_passed_over(cls, suffixes: Mapping[str, int], model: str) -> str:
        """What to say when a walk found no input of this task but files with these suffixes
        (counts by suffix), read by `model`; "" for the general advice (--include)."""
        return ""

    @classmethod
    def variant(cls, spec: TaskSpec, download: bool = True) -> type[Task]:
        """The class that runs `spec`: this one, or a variant for the model it names (embed with
        an image-text model reads images too). Called before the task is built, in every process
        that builds one (`create_task`); without `download`, only from what is on this machine
        (`--dry-run`, which fetches nothing)."""
        return cls

    def reader_processes(self, cores: int, devices: list[str]) -> int:
        """Reader processes by default on a host with `cores` whose workers run on `devices`
        (0 = read in threads). Called on the opened task. A task whose `prepare` is CPU work in
        Python (tokenizing, decoding) overrides this."""
        return 0

    def cpu_workers(self, cores: int) -> int:
        """Worker processes on a CPU-only host with `cores` (each gets cores // workers threads),
        when --workers-per-device is not given. Called on the opened task. A task whose model
        is of real size returns `per_core(cores)`."""
        return 1

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.options = self.Options(**spec.options)

    # --- model aliases ------------------------------------------------------------------
    @classmethod
    def models(cls) -> list[ModelEntry]:
        """The aliases this task offers (override)."""
        return []

    # --- parent side --------------------------------------------------------------------
    def beside_output(self, out: str) -> None:
        """Told the run's --out before `open`, in the parent: a task that writes files of its own
        beside the output (transcribe --subtitles) places them from it. Nothing by default."""

    def open(self) -> None:
        """Load what the parent needs to cut items (a tokenizer, class names). Raise
        `UsageError` with a fix when the model cannot be found."""

    def info(self) -> dict[str, str]:
        """Key/values stored in the output's metadata (`gpucli.model`, `gpucli.dims`, ...)."""
        return {"gpucli.model": self.spec.model}

    def schema(self) -> pa.Schema:
        """Columns of a result row besides `path` (override)."""
        raise NotImplementedError

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        """Decode one input into items. Runs in a reader thread, never on the event loop.
        Raise `InputError(stage, reason)` for bad input (override this, or `prepare_many`)."""
        raise NotImplementedError

    def close_reading(self) -> None:
        """The reader is done, or stopped: free what preparing holds (embed: its extraction
        children, killed if busy, so that a stop never waits for a slow document)."""

    def prepare_many(self, sources: list[Source], datas: list[bytes]) -> tuple[Items | None, list[Failure]]:
        """Decode a chunk of inputs into one block of items, and a failure record for each input
        that cannot be used. The default calls `prepare` per input; a task whose work batches
        well (tokenizing) overrides this and builds the block's columns at once."""
        from gpucli.core.errors import InputError
        from gpucli.core.records import Failure, Items

        items, failures = [], []
        for source, data in zip(sources, datas):
            try:
                got = self.prepare(source, data)
                if not got:
                    raise InputError(Stage.PREPROCESS, "nothing to process in this file")
                items.extend(got)
            except InputError as exc:
                failures.append(Failure(source.path, exc.stage, str(exc)))
            except Exception as exc:  # noqa: BLE001 - a decoder bug must cost one file, not the run
                failures.append(Failure(source.path, Stage.PREPROCESS, f"{type(exc).__name__}: {exc}"))
        return (Items.from_items(items) if items else None), failures

    def row(self, item: Item, output: dict[str, Any]) -> dict[str, Any]:
        """The result row (without `path`) for one item and its model output."""
        return {**item.meta, **output}

    def rows(self, items: Items, outputs: Any) -> tuple[pa.Table, list[tuple[int, str]]]:
        """The rows (without `path`) of one batch: a table with a row per usable item, in
        order, and (position, reason) for each item whose output could not be used. The
        default calls `row` per item; a task with columnar outputs overrides this."""
        from gpucli.core.records import rows_to_table

        good, bad = self.item_rows(items, outputs)
        return rows_to_table([row for _, row in good], self.schema()), bad

    def item_rows(self, items: Items, outputs: Any) -> tuple[list[tuple[int, dict[str, Any]]], list[tuple[int, str]]]:
        """`row` per item: (position, row) for each usable output, (position, reason) for the rest.
        A task that merges an input's rows in `finish` gets these dicts, all of their keys."""
        from gpucli.core.records import Item

        names = list(items.meta)
        good, bad = [], []
        for position, output in enumerate(outputs):
            item = Item(int(items.source_ids[position]), int(items.index[position]), None,
                        int(items.cost[position]), {n: items.meta[n][position] for n in names})
            try:
                good.append((position, self.row(item, output)))
            except Exception as exc:  # noqa: BLE001 - a bad output costs one file
                bad.append((position, f"unusable model output: {type(exc).__name__}: {exc}"))
        return good, bad

    def finish(self, source: Source, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """All rows of one source, in item order, once every item is done. A task whose items
        are pieces of one result (audio segments of one recording) merges them here."""
        return rows

    @property
    def merges_rows(self) -> bool:
        """Whether `finish` merges a source's rows (then the run holds them per source)."""
        return type(self).finish is not Task.finish

    # --- transport hooks (parent packs, worker unpacks; parent releases) -----------------
    def pack(self, payloads: list[Any]) -> Any:
        """Turn a batch's payloads into what crosses the Pipe (default: pickled as is).
        A task may put arrays into shared memory here and send only slot names."""
        return payloads

    def release(self, packed: Any) -> None:
        """Free what `pack` took (shared memory slots). Called once per packed batch in the
        parent, after its results arrived or its worker died."""

    # --- worker side --------------------------------------------------------------------
    def setup(self, device: str) -> None:
        """Load the model onto `device` ("cpu", "cuda:0"). Called once per worker (override)."""

    def unpack(self, packed: Any) -> list[Any]:
        return packed

    def predict(self, payloads: list[Any]) -> list[dict[str, Any]]:
        """Run the model on one batch: exactly one output dict per payload (override)."""
        raise NotImplementedError
