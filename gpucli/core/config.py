"""One validated, frozen config per run.

Precedence: CLI flag > `GPUCLI_*` environment > `--config FILE.toml` > built-in default.
TOML keys and environment names are the option names (`batch_size`, `GPUCLI_BATCH_SIZE`);
a TOML file may also hold a table per task (`[embed]`) whose keys win over the top level.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

import tomllib

from gpucli.core.errors import UsageError


class EngineName(str, Enum):
    """The engines `--engine` takes; `gpucli.engines.ENGINES` maps each to the module that runs it
    (the config sits below the engines, so it holds their names, never their modules)."""

    LOCAL = "local"
    RAY = "ray"


ENGINE_NAMES = tuple(engine.value for engine in EngineName)

PROGRESS_MODES = ("auto", "rich", "plain", "off")
DTYPES = ("auto", "float32", "float16", "bfloat16")


class Panel(str, Enum):
    """The help panels a command's options are shown in, in the order `--help` shows them (a task's
    own options come third, under its name)."""

    INPUT = "Input"
    MODEL = "Model"
    OUTPUT = "Output"
    PERFORMANCE = "Performance"
    INCREMENTAL = "Incremental runs and cron"
    ENGINE = "Engine (Ray)"
    ADVANCED = "Advanced"


def option(default: Any, *flags: str, help: str, panel: Panel, check: Callable[[Any], bool] | None = None,
           must: str = "", choices: tuple[str, ...] = (), metavar: str = "", tables: bool = False) -> Any:
    """A common option, declared once: its field, its flags and help on the command line (every
    task's command has it; `tables`: only a task that reads tables), its panel, and the check its
    value must pass (`must` says how to fix it; `choices`: one of them, `one_of` names the one
    meant). Its TOML key is its name, its variable GPUCLI_NAME."""
    return field(default=default, metadata={"flags": flags, "help": help, "panel": panel, "check": check,
                                            "must": must, "choices": choices, "metavar": metavar, "tables": tables})


def setting(default: Any, check: Callable[[Any], bool] | None = None, must: str = "") -> Any:
    """A setting with no flag (a TOML key and a GPUCLI_* variable only), and its check."""
    return field(default=default, metadata={"check": check, "must": must})


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs; built once, validated on construction. A field declared with
    `option` is a flag of every task's command too (gpucli/app/options.py reads them from here)."""

    task: str
    paths: tuple[str, ...] = ()
    out: str = option("", "--out", "-o", panel=Panel.OUTPUT, metavar="PATH|URL", help=(
        "Output: DIR.parquet (dataset directory, default TASK.parquet), FILE.jsonl, or a sink URL (see README)."))
    model: str = option("", "--model", "-m", panel=Panel.MODEL, help=(
        "Model alias (see `gpucli models`), local directory, or Hugging Face id."))
    revision: str = option("", "--revision", panel=Panel.MODEL, help=(  # "" = the default branch
        "Branch, tag or commit of a Hugging Face --model (default: its main branch)."))
    devices: str = option("auto", "--devices", "-d", panel=Panel.PERFORMANCE, help=(
        "auto (every visible GPU, else CPU) | cpu | cuda | cuda:0,1."))
    # 0 = one per device; on a CPU-only host the task's choice (Task.cpu_workers)
    workers_per_device: int = option(0, "--workers-per-device", panel=Panel.PERFORMANCE, check=lambda v: v >= 0,
                                     must="--workers-per-device must be 1 or more (or 0: the default)", help=(
        "Worker processes per device (default: 1 per GPU; on a CPU-only host the task's choice: embed, and "
        "classify on torch, run a worker per core, up to 4, that share the cores' threads)."))
    batch_size: int = option(0, "--batch-size", "-b", panel=Panel.PERFORMANCE, check=lambda v: v >= 0,
                             must="--batch-size must be positive", help=(  # 0 = the task's default
        "Most items per batch (default: per task, smaller on CPU)."))
    max_batch_cost: int = option(-1, "--max-batch-cost", panel=Panel.PERFORMANCE, check=lambda v: v >= -1,
                                 must="--max-batch-cost must be 0 (no cap) or positive", help=(  # -1 = the task's
        "Most cost per batch: tokens, pixels or audio units (default: per task, smaller on CPU; 0 = no cap)."))
    max_wait_ms: float = option(10.0, "--max-wait-ms", panel=Panel.PERFORMANCE, check=lambda v: v >= 0,
                                must="--max-wait-ms must be 0 or positive", help=(
        "Longest wait to fill a batch after its first item (default: 10)."))
    include: tuple[str, ...] = option((), "--include", panel=Panel.INPUT, help=(
        "Glob of files to read, instead of the task's suffixes (repeatable)."))
    exclude: tuple[str, ...] = option((), "--exclude", panel=Panel.INPUT, help=(
        "Glob of files to leave out (repeatable)."))
    max_file_mb: float = option(0.0, "--max-file-mb", panel=Panel.INPUT, check=lambda v: v >= 0,
                                must="--max-file-mb must be positive", help=(  # 0 = the task's cap
        "Larger files become failure records (default: 64 for text, whose tokenizing needs memory per MB; 512 "
        "for images and audio)."))
    limit: int = option(0, "--limit", panel=Panel.INPUT, check=lambda v: v >= 0,
                        must="--limit must be 0 (no limit) or positive", help=(
        "Take at most N inputs from the walk (a quick trial; a limited run prunes nothing)."))
    dry_run: bool = option(False, "--dry-run", panel=Panel.OUTPUT, help=(
        "Walk and filter, then print one JSON line per input saying what a run would do (run, unchanged, prune, "
        "fail); loads no model, writes nothing."))
    fail_on: str = option("new", "--fail-on", panel=Panel.INCREMENTAL, choices=("new", "any", "never"), help=(
        "Which failed inputs make the exit code 1: new (default: inputs that had not already failed unchanged), "
        "any, or never. Known failures stay in the failures file either way."))
    allow_empty: bool = option(False, "--allow-empty", panel=Panel.INCREMENTAL, help=(  # no input: exit 0, not 3
        "A run that finds no input exits 0, not 3 (an empty or unmounted directory looks like that)."))
    setup_timeout_s: float = option(900.0, "--setup-timeout-s", panel=Panel.ADVANCED, check=lambda v: v > 0,
                                    must="--setup-timeout-s must be positive", help=(
        "A worker still loading its model after this is restarted, within the restart budget (default: 900)."))
    batch_timeout_s: float = option(600.0, "--batch-timeout-s", panel=Panel.ADVANCED, check=lambda v: v > 0,
                                    must="--batch-timeout-s must be positive", help=(
        "A worker stuck longer on one batch is restarted and the batch retried (default: 600)."))
    dtype: str = option("auto", "--dtype", panel=Panel.MODEL, choices=DTYPES, help=(
        "auto | float32 | float16 | bfloat16 (auto: float16 on GPU, float32 on CPU)."))
    progress: str = option("auto", "--progress", panel=Panel.OUTPUT, choices=PROGRESS_MODES, help=(
        "auto | rich | plain | off (auto: bars on a terminal, lines in logs)."))
    quiet: bool = option(False, "--quiet", "-q", panel=Panel.OUTPUT, help="No progress and no summary on stderr.")
    json: bool = option(False, "--json", panel=Panel.OUTPUT, help=(
        "Print the run summary as one JSON object on stdout at the end."))
    prune: bool = option(False, "--prune", panel=Panel.INCREMENTAL, help=(
        "Remove the rows of inputs that no longer exist (incremental runs)."))
    prune_all: bool = option(False, "--prune-all", panel=Panel.INCREMENTAL, help=(  # implies prune
        "--prune, even when it would remove every row of the output or a root is empty (refused otherwise, "
        "exit 3)."))
    # --watch (docs/watch.md): after the run, stay up and keep the output in step with the tree
    watch: bool = option(False, "--watch", panel=Panel.INCREMENTAL, help=(
        "After the run, stay up and keep the output in step with the tree: changed files are read once they "
        "are quiet, with the model loaded once; stop with Ctrl-C or SIGTERM (docs/watch.md)."))
    watch_debounce_ms: float = option(500.0, "--watch-debounce-ms", panel=Panel.INCREMENTAL, check=lambda v: v > 0,
                                      must="--watch-debounce-ms must be positive", help=(
        "With --watch: a changed file is read once no event came for this long and its size and mtime held "
        "still (default: 500)."))
    watch_rescan_s: float = option(600.0, "--watch-rescan-s", panel=Panel.INCREMENTAL, check=lambda v: v >= 0,
                                   must="--watch-rescan-s must be 0 (never) or positive", help=(
        "With --watch: a full incremental walk this often, for what events miss (network file systems, an "
        "overflowed event queue); 0 = never (default: 600)."))
    watch_poll_s: float = option(60.0, "--watch-poll-s", panel=Panel.INCREMENTAL, check=lambda v: v > 0,
                                 must="--watch-poll-s must be positive", help=(
        "With --watch on s3://, gs:// or az:// roots (no events there): list them again this often "
        "(default: 60)."))
    engine: str = option("local", "--engine", panel=Panel.ENGINE, choices=ENGINE_NAMES, help=(
        "local | ray (default: local). ray needs: pip install 'gpucli[ray]'."))
    ray_address: str = option("", "--ray-address", panel=Panel.ENGINE, help=(
        "Ray cluster address for --engine ray (default: RAY_ADDRESS, else a private local Ray)."))
    state_dir: str = option("", "--state-dir", panel=Panel.INCREMENTAL, metavar="PATH", help=(
        "Where a Qdrant server output keeps its ledger, lock and failures file: DIR/qdrant/HOST_PORT/COLLECTION "
        "(default: $XDG_STATE_HOME/gpucli, else ~/.local/state/gpucli). Other outputs keep them beside "
        "themselves."))
    # --from: texts from the rows of a table instead of files (gpucli/inputs/tables.py)
    from_table: str = option("", "--from", panel=Panel.INPUT, metavar="PATH", tables=True, help=(
        "Embed the rows of a table (.parquet, .csv or .jsonl) instead of files: one input per row, rows keyed by "
        "--id-column, no PATH arguments."))
    text_column: str = option("text", "--text-column", panel=Panel.INPUT, tables=True, help=(
        "With --from: the column holding each record's text (default: text)."))
    id_column: str = option("id", "--id-column", panel=Panel.INPUT, tables=True, help=(
        "With --from: the column holding each record's unique id (default: id)."))
    incremental: bool = True  # --incremental/--full (gpucli/app/options.py)
    queue_items: int = setting(0, lambda v: v >= 0, "queue and read sizes must be positive")  # 0 = the task's
    read_chunk_files: int = setting(0, lambda v: v >= 0, "queue and read sizes must be positive")  # 0 = the task's
    read_chunks_in_flight: int = setting(8, lambda v: v >= 1, "queue and read sizes must be positive")
    # reader processes; 0 = read in threads; -1 = the task's choice for the cores
    read_processes: int = -1
    # rows per part; also the writer's buffer, so it bounds memory
    part_rows: int = setting(10_000, lambda v: v >= 1, "part_rows must be positive")
    flush_s: float = 30.0
    max_restarts: int = setting(16, lambda v: v >= 0, "max_restarts must be 0 or positive")
    # --watch: changed paths held while they settle; past this many the watch walks the tree again instead
    watch_pending_max: int = setting(20_000, lambda v: v >= 1, "watch_pending_max must be positive")
    task_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.prune_all:
            object.__setattr__(self, "prune", True)
        if self.from_table:
            _check(not self.paths or tuple(self.paths) == (self.from_table,),
                   "--from reads its records from one table: give no PATH arguments with it (files and tables "
                   "go to separate outputs)")
            object.__setattr__(self, "paths", (self.from_table,))  # the walk's root: `path` is relative to it
            _check(bool(self.text_column) and bool(self.id_column) and self.text_column != self.id_column,
                   "--text-column and --id-column must name two different columns")
        if not self.paths:
            raise UsageError("give at least one file or directory to read (or --from TABLE)")
        if self.watch:
            _check_watch(self)
        for f in dataclasses.fields(self):
            value, declared = getattr(self, f.name), f.metadata
            if declared.get("choices"):
                one_of(declared["flags"][0], value, declared["choices"])
            elif declared.get("check") is not None:
                _check(declared["check"](value), declared["must"])


def _check_watch(config: RunConfig) -> None:
    """--watch keeps one output in step with a tree, on this machine's workers."""
    for refused, why in ((config.engine != EngineName.LOCAL.value, "--engine ray (it runs on the local engine)"),
                         (config.dry_run, "--dry-run (a dry run writes nothing to keep in step)"),
                         (bool(config.from_table), "--from (it watches files, not a table's rows)"),
                         (config.limit > 0, "--limit (a limited walk cannot keep an output in step)")):
        _check(not refused, f"--watch does not go with {why}")


def one_of(flag: str, value: str, choices: tuple[str, ...]) -> None:
    """A usage error unless `value` is one of `choices`, saying which was meant when one is close
    ("--progress rihc: must be one of auto, rich, plain, off; did you mean rich?")."""
    if value in choices:
        return
    import difflib

    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UsageError(f"{flag} must be one of {', '.join(choices)}{hint}")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise UsageError(message)


RUN_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig) if f.name not in ("task", "task_options")}


def load_toml(path: Path | None, task: str) -> dict[str, Any]:
    """Top-level keys, overridden by the `[task]` table; other tables are ignored."""
    if path is None:
        return {}
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--config {path}: not valid TOML: {exc}") from None
    flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
    flat.update(data.get(task, {}))
    return {k.replace("-", "_"): v for k, v in flat.items()}


def from_env(names: dict[str, type], environ: Mapping[str, str]) -> dict[str, Any]:
    """`GPUCLI_<NAME>` for each known option, converted to the option's type."""
    values = {}
    for name, kind in names.items():
        raw = environ.get(f"GPUCLI_{name.upper()}")
        if raw is not None:
            values[name] = convert(raw, kind, f"GPUCLI_{name.upper()}")
    return values


def convert(raw: Any, kind: type, where: str) -> Any:
    """Coerce a TOML or environment value to an option's type, with a clear error."""
    origin = get_origin(kind)
    try:
        if kind is bool:
            if isinstance(raw, bool):
                return raw
            if not isinstance(raw, str):  # a TOML number: `quiet = 1` is not a boolean in TOML
                raise UsageError(f"{where}: {raw!r} is not true or false")
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if origin in (tuple, list) or kind in (tuple, list):
            items = raw.split(",") if isinstance(raw, str) else list(raw)
            return tuple(str(x).strip() for x in items if str(x).strip())
        if kind in (int, float) and not isinstance(raw, str):
            return _typed_number(raw, kind, where)
        if kind is str and not isinstance(raw, str):  # `devices = 0`: TOML says it is a number
            shown = str(raw).lower() if isinstance(raw, bool) else repr(raw)
            raise UsageError(f'{where}: {shown} is not text; quote it ("...")')
        if kind in (int, float, str):
            return kind(raw)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {raw!r} is not a valid {getattr(kind, '__name__', kind)}") from None
    return raw


def _typed_number(raw: Any, kind: type, where: str) -> Any:
    """A TOML value for a number option: TOML says its type, so it must be that type (`int()` of
    `true` is 1 and of `2.5` is 2: `batch_size = true` ran with batches of one)."""
    shown = str(raw).lower() if isinstance(raw, bool) else repr(raw)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise UsageError(f"{where}: {shown} is not a number")
    if kind is int and not isinstance(raw, int):
        raise UsageError(f"{where}: {shown} is not a whole number")
    return kind(raw)


def did_you_mean(unknown: list[str], known: Mapping[str, Any], prefix: str = "") -> str:
    """"; did you mean batch_size?" for the unknown names that are close to a known one (difflib),
    else where the known ones are listed: forty-five names say less than the one meant."""
    import difflib

    guesses = [f"{prefix}{name} -> {prefix}{close[0]}" if len(unknown) > 1 else f"{prefix}{close[0]}"
               for name in unknown if (close := difflib.get_close_matches(name, list(known), n=1, cutoff=0.6))]
    if guesses:
        return f"; did you mean {', '.join(guesses)}?"
    return "; `gpucli TASK --help` lists the options (a config key is an option's name: batch_size)"


# GPUCLI_* variables that are not options: gpucli's own switches, its tests' and benchmarks'.
NOT_OPTIONS = ("GPUCLI_DEBUG", "GPUCLI_QDRANT_", "GPUCLI_TEST_", "GPUCLI_BENCH_")


def check_env_names(known: Mapping[str, Any], environ: Mapping[str, str],
                    every_option: Callable[[], set[str]] = set) -> None:
    """A GPUCLI_* variable that names no option but is close to one is a typo (GPUCLI_BATCHSIZE):
    an error, not silence, or a cron job runs with a default it meant to change. A variable far
    from every option is left alone: it may be another task's option or another tool's."""
    names = {f"GPUCLI_{name.upper()}": name for name in known}
    unknown = [key for key in environ if key.startswith("GPUCLI_") and key not in names
               and not key.startswith(NOT_OPTIONS) and key[7:].lower() not in every_option()]
    import difflib

    typos = [(key, close[0]) for key in sorted(unknown)
             if (close := difflib.get_close_matches(key, list(names), n=1, cutoff=0.85))]
    if typos:
        raise UsageError("environment: " + "; ".join(f"{key} is not an option; did you mean {right}?"
                                                     for key, right in typos))



def field_types(cls: type) -> dict[str, type]:
    """Each field's type as a flag, a TOML key or a variable takes it (`X | None` -> X), resolved
    from the dataclass's annotations (strings under `from __future__ import annotations`)."""
    hints = typing.get_type_hints(cls)
    kinds = {}
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        args = get_args(kind)
        if args and type(None) in args:  # X | None
            kind = next(a for a in args if a is not type(None))
        kinds[f.name] = kind
    return kinds


RUN_TYPES = {name: kind for name, kind in field_types(RunConfig).items() if name in RUN_FIELDS}


def build_config(
    task: str,
    options_cls: type,
    cli: Mapping[str, Any],
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    every_option: Callable[[], set[str]] = set,
) -> RunConfig:
    """Merge the four layers. `cli` holds only flags the user gave (others are None).
    `every_option` names every task's options (GPUCLI_CHUNK_TOKENS is embed's, not a typo under
    classify); it is asked only when a GPUCLI_* variable names no option of this task."""
    environ = os.environ if environ is None else environ
    task_types = field_types(options_cls)
    known = {**RUN_TYPES, **task_types}
    layered: dict[str, Any] = {}
    check_env_names(known, environ, every_option)
    for where, layer in (("config file", load_toml(config_file, task)), ("environment", from_env(known, environ))):
        unknown = sorted(set(layer) - set(known))
        if unknown:
            raise UsageError(f"{where}: unknown option(s) {', '.join(unknown)}{did_you_mean(unknown, known)}")
        layered.update({k: convert(v, known[k], f"{where} key {k}") for k, v in layer.items()})
    layered.update({k: v for k, v in cli.items() if v is not None})
    run_values = {k: v for k, v in layered.items() if k in RUN_FIELDS}
    task_values = {k: v for k, v in layered.items() if k in task_types}
    try:
        options_cls(**task_values)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{task} options: {exc}") from None
    return RunConfig(task=task, task_options=task_values, **run_values)
