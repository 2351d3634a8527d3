"""A task command's options as data: flags, help texts, metavars, environment names and panels.

Every option's default is None, "not given on the command line", so that the environment and
the config file can fill it (gpucli/core/config.py). Help comes in panels, in the order a user
needs them: input, model, the task's own options, output, performance, incremental runs,
engine, advanced. Every help text goes through `escape` (gpucli/app/help.py): texts hold
literal brackets (`pip install 'gpucli[ray]'`, `[env: GPUCLI_OUT]`) that rich markup would eat.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Annotated, Any, Optional, get_origin

import typer

from gpucli.app.help import escape
from gpucli.core.config import field_types

ENV_HELP = ("Every option can be set as GPUCLI_<FLAG> in the environment (--batch-size: GPUCLI_BATCH_SIZE) or "
            "as a key of a --config TOML file (batch_size = 32). Flags win over the environment, which wins over "
            "the file.")
EXIT_CODES_HELP = ("Exit codes: 0 all done; 1 some inputs failed (see the failures file); 2 bad usage or config; "
                   "3 the run itself failed (sink unreachable, disk full, internal error); 75 another run holds "
                   "the lock on this output; 130 interrupted by Ctrl-C, 143 by SIGTERM (rerun to finish).")

# Click's placeholders for option values, by Python type; flags take none.
METAVARS: dict[Any, str] = {str: "TEXT", int: "INTEGER", float: "FLOAT", Path: "PATH", list[str]: "TEXT"}
METAVAR_OVERRIDES = {"out": "PATH|URL", "state_dir": "PATH", "from_table": "PATH"}

# name -> (python type, flag declarations, help).
COMMON_OPTIONS: list[tuple[str, Any, tuple[str, ...], str]] = [
    ("out", str, ("--out", "-o"), "Output: DIR.parquet (dataset directory, default TASK.parquet), FILE.jsonl, "
                                  "or a sink URL (see README)."),
    ("model", str, ("--model", "-m"), "Model alias (see `gpucli models`), local directory, or Hugging Face id."),
    ("revision", str, ("--revision",), "Branch, tag or commit of a Hugging Face --model (default: its main branch)."),
    ("devices", str, ("--devices", "-d"), "auto (every visible GPU, else CPU) | cpu | cuda | cuda:0,1."),
    ("workers_per_device", int, ("--workers-per-device",), "Worker processes per device (default: 1 per GPU; on a "
                                                           "CPU-only host the task's choice: embed, and classify on "
                                                           "torch, run a worker per core, up to 4, that share the "
                                                           "cores' threads)."),
    ("batch_size", int, ("--batch-size", "-b"), "Most items per batch (default: per task, smaller on CPU)."),
    ("max_batch_cost", int, ("--max-batch-cost",), "Most cost per batch: tokens, pixels or audio units "
                                                   "(default: per task, smaller on CPU; 0 = no cap)."),
    ("max_wait_ms", float, ("--max-wait-ms",), "Longest wait to fill a batch after its first item (default: 10)."),
    ("include", list[str], ("--include",), "Glob of files to read, instead of the task's suffixes (repeatable)."),
    ("exclude", list[str], ("--exclude",), "Glob of files to leave out (repeatable)."),
    ("max_file_mb", float, ("--max-file-mb",), "Larger files become failure records (default: 64 for text, "
                                               "whose tokenizing needs memory per MB; 512 for images and audio)."),
    ("limit", int, ("--limit",), "Take at most N inputs from the walk (a quick trial; a limited run prunes "
                                 "nothing)."),
    ("dry_run", bool, ("--dry-run",), "Walk and filter, then print one JSON line per input saying what a run "
                                      "would do (run, unchanged, prune, fail); loads no model, writes nothing."),
    ("fail_on", str, ("--fail-on",), "Which failed inputs make the exit code 1: new (default: inputs that had not "
                                     "already failed unchanged), any, or never. Known failures stay in the failures "
                                     "file either way."),
    ("allow_empty", bool, ("--allow-empty",), "A run that finds no input exits 0, not 3 (an empty or unmounted "
                                              "directory looks like that)."),
    ("setup_timeout_s", float, ("--setup-timeout-s",), "A worker still loading its model after this is restarted, "
                                                       "within the restart budget (default: 900)."),
    ("batch_timeout_s", float, ("--batch-timeout-s",), "A worker stuck longer on one batch is restarted and the "
                                                       "batch retried (default: 600)."),
    ("dtype", str, ("--dtype",), "auto | float32 | float16 | bfloat16 (auto: float16 on GPU, float32 on CPU)."),
    ("progress", str, ("--progress",), "auto | rich | plain | off (auto: bars on a terminal, lines in logs)."),
    ("quiet", bool, ("--quiet", "-q"), "No progress and no summary on stderr."),
    ("json", bool, ("--json",), "Print the run summary as one JSON object on stdout at the end."),
    ("prune", bool, ("--prune",), "Remove the rows of inputs that no longer exist (incremental runs)."),
    ("prune_all", bool, ("--prune-all",), "--prune, even when it would remove every row of the output or a root "
                                          "is empty (refused otherwise, exit 3)."),
    ("engine", str, ("--engine",), "local | ray (default: local). ray needs: pip install 'gpucli[ray]'."),
    ("ray_address", str, ("--ray-address",), "Ray cluster address for --engine ray (default: RAY_ADDRESS, else "
                                             "a private local Ray)."),
    ("state_dir", str, ("--state-dir",), "Where a Qdrant server output keeps its ledger, lock and failures "
                                         "file: DIR/qdrant/HOST_PORT/COLLECTION (default: $XDG_STATE_HOME/gpucli, "
                                         "else ~/.local/state/gpucli). Other outputs keep them beside themselves."),
]

# Only for tasks that read texts from a table (`reads_tables`: embed); see gpucli/inputs/tables.py.
TABLE_OPTIONS: list[tuple[str, Any, tuple[str, ...], str]] = [
    ("from_table", str, ("--from",), "Embed the rows of a table (.parquet, .csv or .jsonl) instead of files: one "
                                     "input per row, rows keyed by --id-column, no PATH arguments."),
    ("text_column", str, ("--text-column",), "With --from: the column holding each record's text (default: text)."),
    ("id_column", str, ("--id-column",), "With --from: the column holding each record's unique id (default: id)."),
]

# Help panels, in the order `--help` shows them; the task's own options come third, under its name.
INPUT, MODEL, OUTPUT, PERFORMANCE, INCREMENTAL, ENGINE, ADVANCED = (
    "Input", "Model", "Output", "Performance", "Incremental runs and cron", "Engine (Ray)", "Advanced")
PANELS = {
    INPUT: ("paths", "include", "exclude", "max_file_mb", "limit", "from_table", "text_column", "id_column", "config"),
    MODEL: ("model", "revision", "dtype"),
    OUTPUT: ("out", "json", "quiet", "progress", "dry_run"),
    PERFORMANCE: ("devices", "workers_per_device", "batch_size", "max_batch_cost", "max_wait_ms"),
    INCREMENTAL: ("incremental", "prune", "prune_all", "fail_on", "allow_empty", "state_dir"),
    ENGINE: ("engine", "ray_address"),
    ADVANCED: ("setup_timeout_s", "batch_timeout_s"),
}
PANEL_OF = {name: panel for panel, names in PANELS.items() for name in names}
# Task options that belong with common ones; the rest go under the task's own name.
TASK_PANELS = {"normalize": MODEL, "prompt": MODEL, "prefix": MODEL, "backend": PERFORMANCE, "quantize": PERFORMANCE,
               "extract_timeout": INPUT, "allow_unknown_tokens": INPUT,
               "encoding": INPUT, "allow_other_scripts": INPUT, "dedup": INCREMENTAL}


def task_parameters(task_cls: type) -> list[inspect.Parameter]:
    """Every parameter of a task's command, in panel order: its PATH arguments, the common
    options, --from and its columns where the task reads tables, --incremental/--full,
    --config, and the task's own options (its Options dataclass)."""
    reads_tables = getattr(task_cls, "reads_tables", False)
    return _ordered([
        _keyword("paths", Optional[list[str]], typer.Argument(
            help="Files and directories to read (directories are walked), or s3://, gs://, az:// prefixes."
                 + (" None with --from." if reads_tables else ""),
            show_default=False, metavar="PATH...", hidden=True)),  # described in the help
        *[option(*spec) for spec in COMMON_OPTIONS],
        *[option(*spec) for spec in (TABLE_OPTIONS if reads_tables else [])],
        _keyword("incremental", Optional[bool], typer.Option(
            "--incremental/--full", show_default=False, rich_help_panel=INCREMENTAL, metavar="",
            help=escape("Skip inputs already done in this output, or redo everything (default: incremental)."))),
        _keyword("config", Optional[Path], typer.Option(
            "--config", "-c", help="TOML file of options (see configs/). Flags > GPUCLI_* environment > this file > "
                                   "defaults.", show_default=False, metavar="PATH", rich_help_panel=INPUT)),
        *_own_options(task_cls),
    ], task_panel(task_cls))


def option(name: str, kind: Any, flags: tuple[str, ...], help_text: str, panel: str = "") -> inspect.Parameter:
    """A keyword parameter whose default None means "not given" (config.py fills it from the
    environment, the config file or the default); its help names its GPUCLI_* variable."""
    metavar = "" if kind is bool else METAVAR_OVERRIDES.get(name, METAVARS.get(kind, "TEXT"))  # a flag: no `<bool>`
    panel = TASK_PANELS.get(name) or panel or PANEL_OF.get(name, ADVANCED)
    return _keyword(name, Optional[kind], typer.Option(*flags, help=escape(help_text + env_note(name, flags[0])),
                                                       show_default=False, metavar=metavar, rich_help_panel=panel))


def _keyword(name: str, kind: Any, declared: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind, declared])


def env_note(name: str, flag: str) -> str:
    """` [env: GPUCLI_FROM_TABLE]` where the variable is not the flag's own name upper-cased
    (the epilog says that rule once: forty `[env: ...]` notes made the help twice as long)."""
    own = "GPUCLI_" + flag.split("/")[0].lstrip("-").replace("-", "_").upper()
    return "" if env_name(name) == own else f" [env: {env_name(name)}]"


def env_name(option: str) -> str:
    """The environment variable config.py reads for an option (`batch_size` -> GPUCLI_BATCH_SIZE)."""
    return f"GPUCLI_{option.upper()}"


def _own_options(task_cls: type) -> list[inspect.Parameter]:
    """The task's Options dataclass as options, each help ending with its default."""
    params = []
    for f in dataclasses.fields(task_cls.Options):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        default = f.default if f.default is not dataclasses.MISSING else None
        kind = field_types(task_cls.Options)[f.name]  # `bool | None` -> bool: None is "not given"
        kind = list[str] if get_origin(kind) is tuple else kind  # a repeatable option (Typer takes lists)
        help_text = f"{f.metadata.get('help', '')} (default: {f.metadata.get('default_help', default)})"
        params.append(option(f.name, kind, (flag,), help_text, task_panel(task_cls)))
    return params


def task_panel(task_cls: type) -> str:
    """The panel of a task's own options: `Embed options`."""
    return f"{task_cls.name.capitalize()} options"


def _ordered(params: list[inspect.Parameter], own_panel: str) -> list[inspect.Parameter]:
    """Parameters in panel order (help shows panels in the order their first option comes):
    input, model, the task's own options, then the rest as PANELS lists them."""
    order = [INPUT, MODEL, own_panel, *[p for p in PANELS if p not in (INPUT, MODEL)]]

    def rank(param: inspect.Parameter) -> int:
        panel = next((getattr(m, "rich_help_panel", None) for m in getattr(param.annotation, "__metadata__", ())),
                     None)
        return order.index(panel) if panel in order else len(order)

    return sorted(params, key=rank)  # stable: within a panel, the order written above
