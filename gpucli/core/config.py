"""One validated, frozen config per run.

Precedence: CLI flag > `GPUCLI_*` environment > `--config FILE.toml` > built-in default.
TOML keys and environment names are the option names (`batch_size`, `GPUCLI_BATCH_SIZE`);
a TOML file may also hold a table per task (`[embed]`) whose keys win over the top level.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

import tomllib

from gpucli.core.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable


class EngineName(str, Enum):
    """The engines `--engine` takes; `gpucli.engines.ENGINES` maps each to the module that runs it
    (the config sits below the engines, so it holds their names, never their modules)."""

    LOCAL = "local"
    RAY = "ray"


ENGINE_NAMES = tuple(engine.value for engine in EngineName)

PROGRESS_MODES = ("auto", "rich", "plain", "off")
DTYPES = ("auto", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class RunConfig:
    """Everything a run needs; built once, validated on construction."""

    task: str
    paths: tuple[str, ...] = ()
    out: str = ""
    model: str = ""
    revision: str = ""  # a Hugging Face branch, tag or commit of --model ("" = the default branch)
    devices: str = "auto"
    workers_per_device: int = 0  # 0 = one per device; on a CPU-only host the task's choice (Task.cpu_workers)
    batch_size: int = 0  # 0 = the task's default
    max_batch_cost: int = -1  # -1 = the task's default, 0 = no cap
    max_wait_ms: float = 10.0
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_file_mb: float = 0.0  # 0 = the task's cap (text 64 MB: tokenizing needs memory per MB)
    incremental: bool = True
    prune: bool = False
    prune_all: bool = False  # --prune even when it would empty the output or a root is empty; implies prune
    json: bool = False
    quiet: bool = False
    progress: str = "auto"
    dtype: str = "auto"
    engine: str = "local"
    ray_address: str = ""
    state_dir: str = ""  # where a Qdrant server output keeps its ledger ("" = $XDG_STATE_HOME/gpucli)
    queue_items: int = 0  # 0 = the task's default (bounded by memory per item)
    read_chunk_files: int = 0  # 0 = the task's default
    read_chunks_in_flight: int = 8
    read_processes: int = -1  # reader processes; 0 = read in threads; -1 = the task's choice for the cores
    part_rows: int = 10_000  # rows per part; also the writer's buffer, so it bounds memory
    flush_s: float = 30.0
    batch_timeout_s: float = 600.0
    limit: int = 0  # at most this many inputs from the walk (0 = all); a limited run prunes nothing
    dry_run: bool = False  # walk, filter and say per input what a run would do; no model, no writes
    fail_on: str = "new"  # which failed inputs make the exit code 1: new | any | never
    allow_empty: bool = False  # a run that finds no input at all exits 0 instead of 3
    setup_timeout_s: float = 900.0  # a worker still loading its model after this is killed (a death)
    max_restarts: int = 16
    from_table: str = ""  # --from: texts from the rows of a table instead of files (gpucli/inputs/tables.py)
    text_column: str = "text"
    id_column: str = "id"
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
        one_of("--progress", self.progress, PROGRESS_MODES)
        one_of("--dtype", self.dtype, DTYPES)
        one_of("--engine", self.engine, ENGINE_NAMES)
        _check(self.workers_per_device >= 0, "--workers-per-device must be 1 or more (or 0: the default)")
        _check(self.batch_size >= 0, "--batch-size must be positive")
        _check(self.max_batch_cost >= -1, "--max-batch-cost must be 0 (no cap) or positive")
        _check(self.max_wait_ms >= 0, "--max-wait-ms must be 0 or positive")
        _check(self.max_file_mb >= 0, "--max-file-mb must be positive")
        _check(self.queue_items >= 0 and self.read_chunk_files >= 0 and self.read_chunks_in_flight >= 1,
               "queue and read sizes must be positive")
        _check(self.part_rows >= 1, "part_rows must be positive")
        _check(self.batch_timeout_s > 0, "--batch-timeout-s must be positive")
        _check(self.setup_timeout_s > 0, "--setup-timeout-s must be positive")
        one_of("--fail-on", self.fail_on, ("new", "any", "never"))
        _check(self.limit >= 0, "--limit must be 0 (no limit) or positive")
        _check(self.max_restarts >= 0, "max_restarts must be 0 or positive")


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
    hints = {}
    for f in dataclasses.fields(cls):
        kind = f.type if not isinstance(f.type, str) else eval(f.type, vars(__import__("typing")), {"tuple": tuple})
        args = get_args(kind)
        if args and type(None) in args:  # X | None
            kind = next(a for a in args if a is not type(None))
        hints[f.name] = kind
    return hints


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
