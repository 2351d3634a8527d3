"""The Typer app: one command per task (built from the task registry), plus `models`,
`search` and `inspect`.

Commands only parse flags into a `RunConfig` and call the engine; typed errors, interrupts
and bugs become one line on stderr and an exit code here (`_exit_codes`). Nothing heavy is imported until a command runs: `gpucli --help` must
stay fast and must not import torch.

Help is Typer's rich help, in panels (input, model, the task's own options, output,
performance, incremental runs, engine, advanced) so that `embed --help` reads from what
a user needs first to what they rarely touch. Help texts hold literal brackets
(`pip install 'gpucli[ray]'`, `[env: GPUCLI_OUT]`) that rich markup would eat: every text
goes through `escape` (rich's own rule, without importing rich for a run).

Its size (over 400 lines): every command's options, panels, metavars and environment names are
declared here, as data beside the commands that use them; help layout is gpucli/app/help.py.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import click
import typer

from gpucli import __version__
from gpucli.app.help import PlainCommand, PlainGroup, escape, examples_text, short_usage
from gpucli.core.errors import EXIT_RUN_FAILED, EXIT_SIGINT, EXIT_SIGTERM, GpucliError, OutputError
from gpucli.core.terminal import columns, fit, width_of

app = typer.Typer(
    name="gpucli",
    help="Batch inference over file trees: embed text, classify images, transcribe audio.\n\n"
    "Reads a directory tree, batches inputs for one worker process per device, and writes Parquet, "
    "JSON lines or Qdrant. Bad files become failure records; the run goes on.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals can hold API keys
    rich_markup_mode="rich",  # panels; every help text is escaped (see the module docstring)
    cls=PlainGroup,
    add_completion=True,  # gpucli --install-completion; loads nothing until a shell asks
    context_settings={"help_option_names": ["-h", "--help"]},
)

ENV_HELP = ("Every option can be set as GPUCLI_<FLAG> in the environment (--batch-size: GPUCLI_BATCH_SIZE) or "
            "as a key of a --config TOML file (batch_size = 32). Flags win over the environment, which wins over "
            "the file.")
EXIT_CODES_HELP = ("Exit codes: 0 all done; 1 some inputs failed (see the failures file); 2 bad usage or config; "
                   "3 the run itself failed (sink unreachable, disk full, internal error); 75 another run holds "
                   "the lock on this output; 130 interrupted by Ctrl-C, 143 by SIGTERM (rerun to finish).")

EXIT_BROKEN_PIPE = 128 + 13  # what a C tool killed by SIGPIPE exits with (`set -o pipefail` sees it)

# Click's placeholders for option values, by Python type; flags take none.
METAVARS: dict[Any, str] = {str: "TEXT", int: "INTEGER", float: "FLOAT", Path: "PATH", list[str]: "TEXT"}
METAVAR_OVERRIDES = {"out": "PATH|URL", "state_dir": "PATH", "from_table": "PATH"}

# name -> (python type, flag declarations, help). Every default is None: "not given on the
# command line", so the environment and the config file can fill it (see config.py).
COMMON_OPTIONS: list[tuple[str, Any, tuple[str, ...], str]] = [
    ("out", str, ("--out", "-o"), "Output: DIR.parquet (dataset directory, default TASK.parquet), FILE.jsonl, "
                                  "or a sink URL (see README)."),
    ("model", str, ("--model", "-m"), "Model alias (see `gpucli models`), local directory, or Hugging Face id."),
    ("revision", str, ("--revision",), "Branch, tag or commit of a Hugging Face --model (default: its main branch)."),
    ("devices", str, ("--devices", "-d"), "auto (every visible GPU, else CPU) | cpu | cuda | cuda:0,1."),
    ("workers_per_device", int, ("--workers-per-device",), "Worker processes per device (default: 1 per GPU; on a CPU-only host the task's choice: embed, and classify on torch, run a worker per core, up to 4, that share the cores' threads)."),
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
               "extract_timeout": INPUT, "allow_unknown_tokens": INPUT, "dedup": INCREMENTAL}

# Only for tasks that read texts from a table (`reads_tables`: embed); see gpucli/inputs/tables.py.
TABLE_OPTIONS: list[tuple[str, Any, tuple[str, ...], str]] = [
    ("from_table", str, ("--from",), "Embed the rows of a table (.parquet, .csv or .jsonl) instead of files: one "
                                     "input per row, rows keyed by --id-column, no PATH arguments."),
    ("text_column", str, ("--text-column",), "With --from: the column holding each record's text (default: text)."),
    ("id_column", str, ("--id-column",), "With --from: the column holding each record's unique id (default: id)."),
]


def main() -> None:
    """The console script. A boxed (rich) traceback only on a terminal: logs get plain text."""
    app.pretty_exceptions_enable = sys.stderr.isatty()
    try:
        app()
    except KeyboardInterrupt:  # between Python's start and a command's own guard
        _error("interrupted (Ctrl-C)")
        sys.exit(EXIT_SIGINT)
    except SystemExit as exc:
        _exit_without_teardown(exc)


def _exit_without_teardown(exc: SystemExit) -> None:
    """Leave as `sys.exit` would, less the interpreter's teardown of every module (numpy, pyarrow,
    tokenizers...: ~0.3 s after the output was durable, a tenth of a short job's start-up; issue
    34). What an exit must still do is done first: other threads joined, the atexit handlers
    (logging, multiprocessing, executors), the standard streams flushed."""
    import atexit

    code = exc.code
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
    _join_threads(EXIT_JOIN_S)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`gpucli ... | head`): nothing more to say
            pass
    os._exit(status)


EXIT_JOIN_S = 10.0  # what the other threads get to finish once the run has ended and said so


def _join_threads(deadline_s: float) -> None:
    """Join the other non-daemon threads, as the interpreter would, but within a deadline: the
    run's outcome is durable and printed by now, and a thread left waiting (an executor's idle
    worker after a sink failed, a send to a dead pipe) must not keep a cron job alive forever
    (issue 41: a full disk printed its error, then never exited)."""
    import time

    end = time.monotonic() + deadline_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, end - time.monotonic()))


def _version(value: bool) -> None:
    if value:
        print(f"gpucli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                          help="Show the version and exit.")] = None) -> None:
    pass


def _option(name: str, kind: Any, flags: tuple[str, ...], help_text: str, panel: str = "") -> inspect.Parameter:
    """A keyword parameter whose default None means "not given" (config.py fills it from the
    environment, the config file or the default); its help names its GPUCLI_* variable."""
    metavar = "" if kind is bool else METAVAR_OVERRIDES.get(name, METAVARS.get(kind, "TEXT"))  # a flag: no `<bool>`
    option = typer.Option(*flags, help=escape(help_text + env_note(name, flags[0])), show_default=False,
                          metavar=metavar, rich_help_panel=TASK_PANELS.get(name) or panel or PANEL_OF.get(name, ADVANCED))
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[kind], option])


def env_note(name: str, flag: str) -> str:
    """` [env: GPUCLI_FROM_TABLE]` where the variable is not the flag's own name upper-cased
    (the epilog says that rule once: forty `[env: ...]` notes made the help twice as long)."""
    own = "GPUCLI_" + flag.split("/")[0].lstrip("-").replace("-", "_").upper()
    return "" if env_name(name) == own else f" [env: {env_name(name)}]"


def env_name(option: str) -> str:
    """The environment variable config.py reads for an option (`batch_size` -> GPUCLI_BATCH_SIZE)."""
    return f"GPUCLI_{option.upper()}"


def _task_parameters(task_cls: type) -> list[inspect.Parameter]:
    from gpucli.core.config import field_types

    params = []
    for f in dataclasses.fields(task_cls.Options):
        flag = f.metadata.get("flag", "--" + f.name.replace("_", "-"))
        default = f.default if f.default is not dataclasses.MISSING else None
        kind = field_types(task_cls.Options)[f.name]  # `bool | None` -> bool: None is "not given"
        help_text = f"{f.metadata.get('help', '')} (default: {f.metadata.get('default_help', default)})"
        params.append(_option(f.name, kind, (flag,), help_text, task_panel(task_cls)))
    return params


def task_panel(task_cls: type) -> str:
    """The panel of a task's own options: `Embed options`."""
    return f"{task_cls.name.capitalize()} options"


def _make_command(task_cls: type):
    task_fields = [f.name for f in dataclasses.fields(task_cls.Options)]

    def command(**kwargs: Any) -> None:
        config_file = kwargs.pop("config", None)
        incremental = kwargs.pop("incremental", None)
        paths = kwargs.pop("paths", None)
        cli = {k: v for k, v in kwargs.items() if k not in task_fields}
        cli.update({k: kwargs[k] for k in task_fields})
        cli["paths"] = tuple(paths) if paths else None
        cli["incremental"] = incremental
        for key in ("include", "exclude"):
            cli[key] = tuple(cli[key]) if cli[key] else None
        _run_task(task_cls, cli, config_file)

    params = _ordered([
        inspect.Parameter("paths", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[Optional[list[str]], typer.Argument(
                              help="Files and directories to read (directories are walked), or s3://, gs://, az:// prefixes." + (
                                  " None with --from." if getattr(task_cls, "reads_tables", False) else ""),
                              show_default=False, metavar="PATH...", hidden=True)]),  # described in the help
        *[_option(*spec) for spec in COMMON_OPTIONS],
        *[_option(*spec) for spec in (TABLE_OPTIONS if getattr(task_cls, "reads_tables", False) else [])],
        inspect.Parameter("incremental", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[Optional[bool], typer.Option(
                              "--incremental/--full", show_default=False, rich_help_panel=INCREMENTAL,
                              help=escape("Skip inputs already done in this output, or redo everything "
                                          "(default: incremental)."), metavar="")]),
        inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[Optional[Path], typer.Option(
                              "--config", "-c", help="TOML file of options (see configs/). Flags > GPUCLI_* "
                                                     "environment > this file > defaults.", show_default=False,
                              metavar="PATH", rich_help_panel=INPUT)]),
        *_task_parameters(task_cls),
    ], task_panel(task_cls))
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {}
    command.__name__ = task_cls.name
    command.gpucli_task = task_cls  # for TaskCommand's short usage
    paths = "PATH... are the files and directories to read (directories are walked)" + (
        "; none with --from." if getattr(task_cls, "reads_tables", False) else ".") + (
        f" A PATH may be a prefix in object storage (s3://, gs://, az://; pip install 'gpucli[cloud]'; "
        f"credentials from the store's own chain), e.g. gpucli {task_cls.name} s3://my-bucket/docs "
        f"--out {task_cls.name}.parquet (docs/buckets.md).")
    command.__doc__ = escape(f"{task_cls.help}\n\n\b\nExamples:\n{examples_text(task_cls.examples)}\n\n{paths}")
    return command


def _ordered(params: list[inspect.Parameter], own_panel: str) -> list[inspect.Parameter]:
    """Parameters in panel order (help shows panels in the order their first option comes):
    input, model, the task's own options, then the rest as PANELS lists them."""
    order = [INPUT, MODEL, own_panel, *[p for p in PANELS if p not in (INPUT, MODEL)]]

    def rank(param: inspect.Parameter) -> int:
        panel = next((getattr(m, "rich_help_panel", None) for m in getattr(param.annotation, "__metadata__", ())),
                     None)
        return order.index(panel) if panel in order else len(order)

    return sorted(params, key=rank)  # stable: within a panel, the order written above


def _run_task(task_cls: type, cli: dict[str, Any], config_file: Path | None) -> None:
    quiet = bool(cli.get("quiet"))
    with _sigterm_raises(), _exit_codes():
        from gpucli.core.config import build_config
        from gpucli.tasks import every_option_name

        config = build_config(task_cls.name, task_cls.Options, cli, config_file, every_option=every_option_name)
        check_model(task_cls, config.model)
        from gpucli.engines import run_engine

        try:
            summary = run_engine(config)  # the engine handles SIGINT / SIGTERM itself while it runs
        except OutputError as exc:
            if exc.summary is None:  # before any work: the output was refused
                raise
            _error(str(exc))  # mid-run: the line, then the summary as at any end (--json too)
            summary = exc.summary
        if not config.quiet and not quiet:
            _print_summary(summary)
        if config.json:
            print(json.dumps(summary.to_dict(), ensure_ascii=False), flush=True)
    _exit_now_after_a_cut_ray_start(summary.exit_code)
    raise typer.Exit(summary.exit_code)


def check_model(task_cls: type, model: str) -> None:
    """Before any work: an alias of another task, or a model directory of the wrong kind, is a
    usage error that names the task it belongs to (each task's own loader would fail in its
    own words: `hf download minilm`, "no tokenizer.json")."""
    if not model:
        return
    from gpucli.models.model_kind import require_kind, wrong_task_alias
    from gpucli.tasks import all_tasks

    aliases = [(entry.alias, entry.task) for cls in all_tasks().values() for entry in cls.models()]
    error = wrong_task_alias(task_cls.name, model, aliases)
    if error is not None:
        raise error
    if os.path.isdir(model):
        require_kind(task_cls.name, model, model)


def _exit_now_after_a_cut_ray_start(code: int) -> None:
    """A run whose private Ray was stopped while it started ends here, without the interpreter's
    finalization, in which Ray's half-started C++ side may crash (gpucli.engines.ray.connection.
    start_was_cut): the output and the ledger are closed and the summary is out by now."""
    connection = sys.modules.get("gpucli.engines.ray.connection")
    if connection is not None and connection.start_was_cut():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Terminated(BaseException):
    """SIGTERM outside the engine's own handling (imports, set-up). A BaseException, as
    KeyboardInterrupt is, so that no `except Exception` on the way swallows it."""


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Until the engine installs its handlers (and after it restores them), SIGTERM raises
    `Terminated`, which `_exit_codes` turns into exit 143 with one line, no traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def _exit_codes() -> Iterator[None]:
    """Whatever ends a command early becomes one line on stderr and its exit code: typed
    errors their own, Ctrl-C 130, SIGTERM 143, anything unexpected 3 (a bug: the traceback
    is shown with GPUCLI_DEBUG=1, never by default)."""
    debug = bool(os.environ.get("GPUCLI_DEBUG"))
    try:
        yield
    except (typer.Exit, typer.Abort, click.exceptions.Exit, click.exceptions.ClickException, click.exceptions.Abort):
        raise  # Typer's and Click's own ends (typer.Exit is a RuntimeError): not ours to translate
    except GpucliError as exc:
        if debug:
            raise
        _error(str(exc))
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt as exc:
        if getattr(exc, "signum", signal.SIGINT) == signal.SIGTERM:  # gpucli.core.signals.Interrupted
            _error("terminated (SIGTERM)")
            raise typer.Exit(EXIT_SIGTERM) from None
        _error("interrupted (Ctrl-C)")
        raise typer.Exit(EXIT_SIGINT) from None
    except Terminated:
        _error("terminated (SIGTERM)")
        raise typer.Exit(EXIT_SIGTERM) from None
    except BrokenPipeError:  # `gpucli search ... | head`: the reader left; not a bug
        _silence_stdout()
        raise typer.Exit(EXIT_BROKEN_PIPE) from None
    except Exception as exc:  # noqa: BLE001 - the boundary: a bug becomes exit 3, not a traceback in a log
        if debug:
            raise
        _error(f"internal error: {internal_message(exc)} (a bug in gpucli; rerun with GPUCLI_DEBUG=1 "
               "for the traceback)")
        raise typer.Exit(EXIT_RUN_FAILED) from None


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # no real file descriptor (a test runner's buffer)


def internal_message(exc: BaseException, limit: int = 300) -> str:
    """`Type: message` on one line, cut to `limit` characters (a log line, not a dump)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error(message: str) -> None:
    print(f"gpucli: error: {message}", file=sys.stderr, flush=True)


def _print_summary(s: Any) -> None:
    if getattr(s, "dry_run", False):
        print(f"gpucli {s.task}: dry run — {s.inputs} inputs: {s.succeeded} would run, {s.unchanged} unchanged, "
              f"{s.failed} would fail, {s.skipped} skipped" + (f", {s.pruned} would be pruned" if s.pruned else "")
              + f"; nothing written to {s.out}", file=sys.stderr, flush=True)  # one line: a log's, for grep
        return
    state = ("interrupted" if s.interrupted else "done" if s.exit_code == 0
             else "done with failures" if s.exit_code == 1 else "failed")
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in s.stage_seconds.items())
    rates = f"{getattr(s, 'inputs_per_s', 0.0):.1f} inputs/s, {getattr(s, 'rows_per_s', 0.0):.1f} rows/s"
    lines = [
        f"gpucli {s.task}: {state} in {s.elapsed_s:.1f}s — {s.inputs} inputs: {s.succeeded} succeeded"
        + (f" ({s.deduplicated} deduplicated)" if getattr(s, "deduplicated", 0) else "")
        + f", {s.failed} failed" + (f" ({s.unknown_tokens} in a language the model does not read)"
                                if getattr(s, "unknown_tokens", 0) else "")
        + f", {s.skipped} skipped" + (f" ({s.unchanged} unchanged since the last run)" if s.unchanged else "")
        + (f", {s.unfinished} unfinished" if s.unfinished else "") + (f", {s.pruned} pruned" if s.pruned else ""),
        f"  {s.rows} rows -> {s.out} ({rates}; {stages})",
    ]
    if has_records(s.failures_file):
        lines.append(f"  failures and skips: {s.failures_file}")
    if s.interrupted:
        lines.append("  rerun the same command to finish the rest")
    print(fit("\n".join(lines), width_of(sys.stderr)), file=sys.stderr, flush=True)  # words whole on a terminal


def has_records(path: str) -> bool:
    """Whether the failures file holds any record (unchanged inputs count as skipped, but are
    not listed in it: a clean incremental rerun must not point at an empty file)."""
    try:
        return bool(path) and os.path.getsize(path) > 0
    except OSError:
        return False


class TaskCommand(PlainCommand):
    """A task's command: bare (no argument at all), it prints a short usage with two examples
    and where to read on, not 150 lines of help (exit 2, as Click's no_args_is_help)."""

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return ["PATH...", "[OPTIONS]"]  # not Click's `[OPTIONS] [PATH...]...`

    def get_help_option(self, ctx: click.Context) -> Any:
        option = super().get_help_option(ctx)
        if option is not None:
            option.rich_help_panel = ADVANCED  # last, not a panel of its own between the arguments and Input
        return option

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing and not os.environ.get(env_name("paths")):
            click.echo(short_usage(self.callback.gpucli_task, ctx.command_path, columns()), err=True)
            ctx.exit(2)
        return super().parse_args(ctx, args)


def _register_tasks() -> None:
    """Every task's command; from the console script, only the one it runs when it runs a task
    (gpucli/app/entry.py: the other tasks' modules are not imported)."""
    from gpucli.app import entry
    from gpucli.tasks import all_tasks, task_of_module

    only = task_of_module(entry.invoked) if entry.invoked else None
    for task_cls in [only] if only is not None else all_tasks().values():
        app.command(name=task_cls.name, help=None, cls=TaskCommand,
                    epilog=escape(f"{ENV_HELP}\n\n{EXIT_CODES_HELP}"))(
            _make_command(task_cls))


@app.command(cls=PlainCommand)
def models(json_out: Annotated[bool, typer.Option("--json", help="One JSON object per model on stdout.")] = False,
           ) -> None:
    """List model aliases: task, backend, and whether each loads offline on this machine.

    Any local model directory or Hugging Face id in the local cache works with --model too.
    """
    with _exit_codes():
        from gpucli.tasks import all_tasks

        entries = [entry for task_cls in all_tasks().values() for entry in task_cls.models()]
        rows = [{"alias": e.alias, "task": e.task, "backend": e.backend, "available": bool(e.available()),
                 "description": e.description,
                 "default": e.alias == all_tasks()[e.task].default_model} for e in entries]
        if json_out:
            for row in rows:
                print(json.dumps(row))
            return
        models_table(rows)


def models_table(rows: list[dict[str, Any]], console: Any = None) -> None:
    """The models on stdout, two lines each (alias, task, offline, backend; then the description
    wrapped on words), so that an alias is never cut at 80 columns, whatever the descriptions
    hold. Text, never markup: a description such as "gpucli[funasr]" must print its brackets."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    width = console.width
    alias_w = max((len(r["alias"]) + 2 for r in rows), default=5)
    task_w = max((len(r["task"]) for r in rows), default=4)
    head = f"{'alias':<{alias_w}} {'task':<{task_w}} {'offline':<7} backend"
    console.print(Text(head, style="bold"), soft_wrap=True)
    for r in rows:
        alias = r["alias"] + (" *" if r["default"] else "")
        line = f"{alias:<{alias_w}} {r['task']:<{task_w}} {'yes' if r['available'] else 'no':<7} {r['backend']}"
        console.print(Text(fit(line, width, " " * (alias_w + task_w + 10))), soft_wrap=True)
        console.print(Text(fit("    " + r["description"], width, ""), style="dim"), soft_wrap=True)
    console.print(Text(fit("* the task's default model; any local model directory or Hugging Face id works with "
                           "--model too", width, "  ")), soft_wrap=True)


SEARCH_HELP = ("Show the chunks of an embed output nearest to QUERY: by cosine similarity (Hamming distance for "
               "binary vectors), BM25 with --mode sparse, or both fused by rank with --mode hybrid.\n\n"
               "\b\nExamples:\n"
               "  gpucli search \"how do bees make honey\" --in embed.parquet\n"
               "  gpucli search \"tidal forces\" --in qdrant:./qdrant_data/docs -k 3 --json\n"
               "  gpucli search \"a red car at night\" --in photos.parquet   # made with an image-text model\n"
               "  gpucli search --image query.jpg --in photos.parquet\n"
               "  gpucli search \"ZX-4471Q pump\" --in embed.parquet --mode hybrid   # made with --sparse bm25\n\n"
               "The query is embedded with the model the output was made with (named in its metadata). A Parquet "
               "dataset or a JSON lines file is scanned in batches with bounded memory; Qdrant searches itself.")
SEARCH_EXIT = ("Exit codes: 0 done; 1 the search failed (e.g. Qdrant unreachable); 2 bad usage or not an embed "
               "output; 3 internal error; 130 interrupted.")
INSPECT_HELP = ("Describe a gpucli output: task, model, rows, inputs done, failures, the last run, and the task's "
                "own settings.\n\n"
                "\b\nExamples:\n  gpucli inspect embed.parquet\n  gpucli inspect rows.jsonl --json\n"
                "  gpucli inspect qdrant:./qdrant_data/docs\n\n"
                "Reads only: the ledger is opened read-only and the run lock is not taken, so it works while a run "
                "writes the output.")
INSPECT_EXIT = "Exit codes: 0 done; 2 not a gpucli output (or unreadable); 3 internal error."


@app.command(cls=PlainCommand, help=escape(SEARCH_HELP), epilog=escape(SEARCH_EXIT))
def search(
    source: Annotated[str, typer.Option("--in", "-i", show_default=False, metavar="PATH|URL",
                                        help="An embed output: DIR.parquet, FILE.jsonl, "
                                             "qdrant://HOST:PORT/COLLECTION or qdrant:PATH/COLLECTION.")],
    query: Annotated[str, typer.Argument(help="What to look for, in words.", show_default=False, metavar="QUERY")] = "",
    k: Annotated[int, typer.Option("-k", "--top-k", help="How many chunks to show.", metavar="INTEGER")] = 10,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per hit on stdout (rank, score, path, "
                                                          "chunk, char_start, char_end, text).")] = False,
    image: Annotated[str, typer.Option("--image", metavar="FILE", show_default=False,
                                       help="Look for what is nearest to this image instead of words (an output "
                                            "made with an image-text model: CLIP, SigLIP).")] = "",
    mode: Annotated[str, typer.Option("--mode", metavar="dense|sparse|hybrid", help=(
        "dense: cosine of the vectors; sparse: BM25 over the sparse vectors of an output made with --sparse bm25 "
        "(IDF from the output itself, or Qdrant's); hybrid: both top lists fused by reciprocal rank, score = sum "
        "of 1/(60 + rank)."))] = "dense",
) -> None:
    """The nearest chunks (help: SEARCH_HELP)."""
    with _exit_codes():
        from gpucli.commands import search as searching

        result = searching.search(source, query, k, image, mode)
        searching.render(result, json_out)


@app.command(name="inspect", cls=PlainCommand, help=escape(INSPECT_HELP), epilog=escape(INSPECT_EXIT))
def inspect_command(
    out: Annotated[str, typer.Argument(help="A gpucli output: DIR.parquet, FILE.jsonl or qdrant:PATH/COLLECTION.", show_default=False,
                                       metavar="OUT")],
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")] = False,
) -> None:
    """What an output holds (help: INSPECT_HELP)."""
    with _exit_codes():
        from gpucli.commands import inspect as inspecting

        inspecting.render(inspecting.inspect_output(out), json_out)


_register_tasks()

if __name__ == "__main__":  # pragma: no cover
    main()
