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
from gpucli.core.config import Panel, RunConfig, field_types

ENV_HELP = ("Every option can be set as GPUCLI_<FLAG> in the environment (--batch-size: GPUCLI_BATCH_SIZE) or "
            "as a key of a --config TOML file (batch_size = 32). Flags win over the environment, which wins over "
            "the file.")
EXIT_CODES_HELP = ("Exit codes: 0 all done; 1 some inputs failed (see the failures file); 2 bad usage or config; "
                   "3 the run itself failed (sink unreachable, disk full, internal error); 75 another run holds "
                   "the lock on this output; 130 interrupted by Ctrl-C, 143 by SIGTERM (rerun to finish).")

# Click's placeholders for option values, by Python type; flags take none.
METAVARS: dict[Any, str] = {str: "TEXT", int: "INTEGER", float: "FLOAT", Path: "PATH", list[str]: "TEXT"}

INPUT, MODEL, OUTPUT, PERFORMANCE, INCREMENTAL, ENGINE, ADVANCED = (panel.value for panel in Panel)
# Task options that belong with common ones; the rest go under the task's own name.
TASK_PANELS = {"normalize": MODEL, "prompt": MODEL, "prefix": MODEL, "backend": PERFORMANCE, "quantize": PERFORMANCE,
               "extract_timeout": INPUT, "allow_unknown_tokens": INPUT,
               "encoding": INPUT, "allow_other_scripts": INPUT, "dedup": INCREMENTAL}


def common_options(tables: bool = False) -> list[inspect.Parameter]:
    """Every common option, as RunConfig declares it (gpucli/core/config.py `option`); the table
    options (--from and its columns) only for a task that reads tables."""
    kinds = field_types(RunConfig)
    return [option(f.name, _cli_kind(kinds[f.name]), f.metadata["flags"], f.metadata["help"], f.metadata["panel"].value,
                   f.metadata["metavar"])
            for f in dataclasses.fields(RunConfig) if f.metadata.get("flags") and f.metadata["tables"] == tables]


def _cli_kind(kind: Any) -> Any:
    """A tuple option is a repeatable flag: a list on the command line."""
    return list[str] if get_origin(kind) is tuple else kind


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
        *common_options(),
        *(common_options(tables=True) if reads_tables else []),
        _keyword("incremental", Optional[bool], typer.Option(
            "--incremental/--full", show_default=False, rich_help_panel=INCREMENTAL, metavar="",
            help=escape("Skip inputs already done in this output, or redo everything (default: incremental)."))),
        _keyword("config", Optional[Path], typer.Option(
            "--config", "-c", help="TOML file of options (see configs/). Flags > GPUCLI_* environment > this file > "
                                   "defaults.", show_default=False, metavar="PATH", rich_help_panel=INPUT)),
        *_own_options(task_cls),
    ], task_panel(task_cls))


def option(name: str, kind: Any, flags: tuple[str, ...], help_text: str, panel: str, metavar: str = "") -> inspect.Parameter:
    """A keyword parameter whose default None means "not given" (config.py fills it from the
    environment, the config file or the default); its help names its GPUCLI_* variable."""
    metavar = "" if kind is bool else metavar or METAVARS.get(kind, "TEXT")  # a flag: no `<bool>`
    panel = TASK_PANELS.get(name) or panel
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
    input, model, the task's own options, then the rest in the order of `Panel`."""
    order = [INPUT, MODEL, own_panel, *[p.value for p in Panel if p.value not in (INPUT, MODEL)]]

    def rank(param: inspect.Parameter) -> int:
        panel = next((getattr(m, "rich_help_panel", None) for m in getattr(param.annotation, "__metadata__", ())),
                     None)
        return order.index(panel) if panel in order else len(order)

    return sorted(params, key=rank)  # stable: within a panel, the order written above
