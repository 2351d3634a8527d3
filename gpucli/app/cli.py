"""The Typer app: one command per task, built from the task registry, beside `models`, `search`
and `inspect` (gpucli/app/other_commands.py).

A task's command only parses its flags (declared as data in gpucli/app/options.py) into a
`RunConfig` and calls the engine; what ends it early becomes one line on stderr and an exit
code at the boundary (gpucli/app/boundary.py), and the summary is printed by
gpucli/app/summary_lines.py. Nothing heavy is imported until a command runs: `gpucli --help`
must stay fast and must not import torch, and `gpucli embed DIR` builds only embed's command
(gpucli/app/entry.py). Help is Typer's rich help, in panels; its layout is gpucli/app/help.py.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import click
import typer

from gpucli import __version__
from gpucli.app import entry, other_commands
from gpucli.app.boundary import (
    JsonEnding,
    error,
    exit_codes,
    exit_now_after_a_cut_ray_start,
    exit_without_teardown,
)
from gpucli.app.help import PlainCommand, PlainGroup, escape, examples_text, short_usage
from gpucli.app.options import ADVANCED, ENV_HELP, EXIT_CODES_HELP, env_name, task_parameters
from gpucli.app.summary_lines import print_summary
from gpucli.core.config import build_config
from gpucli.core.errors import EXIT_SIGINT, OutputError
from gpucli.core.notes import library_notes
from gpucli.core.terminal import columns
from gpucli.models.model_kind import alias_owner, looks_like_path, near_alias, require_kind, wrong_task_alias
from gpucli.tasks import all_tasks, every_option_name, task_of_module

app = typer.Typer(
    name="gpucli",
    help="Batch inference over file trees: embed text, classify images, transcribe audio.\n\n"
    "Reads a directory tree, batches inputs for one worker process per device, and writes Parquet, "
    "JSON lines or Qdrant. Bad files become failure records; the run goes on.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals can hold API keys
    rich_markup_mode="rich",  # panels; every help text is escaped (gpucli/app/options.py)
    cls=PlainGroup,
    add_completion=True,  # gpucli --install-completion; loads nothing until a shell asks
    context_settings={"help_option_names": ["-h", "--help"]},
)


def main() -> None:
    """The console script. A boxed (rich) traceback only on a terminal: logs get plain text."""
    app.pretty_exceptions_enable = sys.stderr.isatty()
    try:
        app()
    except KeyboardInterrupt:  # between Python's start and a command's own guard
        error("interrupted (Ctrl-C)")
        sys.exit(EXIT_SIGINT)
    except SystemExit as exc:
        exit_without_teardown(exc)


def _version(value: bool) -> None:
    if value:
        print(f"gpucli {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[Optional[bool], typer.Option("--version", "-V", callback=_version, is_eager=True,
                                                          help="Show the version and exit.")] = None) -> None:
    pass


def _make_command(task_cls: type):
    """A task's command: its parameters (gpucli/app/options.py), its help (the task's own words
    and examples), and a body that turns the flags into the config's CLI layer and runs it."""
    task_fields = [f.name for f in dataclasses.fields(task_cls.Options)]

    def command(**kwargs: Any) -> None:
        config_file = kwargs.pop("config", None)
        incremental = kwargs.pop("incremental", None)
        paths = kwargs.pop("paths", None)
        cli = {k: v for k, v in kwargs.items() if k not in task_fields}
        cli.update({k: tuple(kwargs[k]) if isinstance(kwargs[k], list) else kwargs[k] for k in task_fields})
        cli["paths"] = tuple(paths) if paths else None
        cli["incremental"] = incremental
        for key in ("include", "exclude"):
            cli[key] = tuple(cli[key]) if cli[key] else None
        _run_task(task_cls, cli, config_file)

    command.__signature__ = inspect.Signature(task_parameters(task_cls))
    command.__annotations__ = {}
    command.__name__ = task_cls.name
    command.gpucli_task = task_cls  # for TaskCommand's short usage
    command.__doc__ = _task_help(task_cls)
    return command


def _task_help(task_cls: type) -> str:
    """What the task does, its examples within 80 columns, and what PATH may be."""
    paths = "PATH... are the files and directories to read (directories are walked)" + (
        "; none with --from." if getattr(task_cls, "reads_tables", False) else ".") + (
        f" A PATH may be a prefix in object storage (s3://, gs://, az://; pip install 'gpucli[cloud]'; "
        f"credentials from the store's own chain), e.g. gpucli {task_cls.name} s3://my-bucket/docs "
        f"--out {task_cls.name}.parquet (docs/buckets.md).")
    return escape(f"{task_cls.help}\n\n\b\nExamples:\n{examples_text(task_cls.examples)}\n\n{paths}")


def _run_task(task_cls: type, cli: dict[str, Any], config_file: Path | None) -> None:
    """Config, model check, engine, summary; the exit code is the summary's."""
    quiet = bool(cli.get("quiet"))
    ending = JsonEnding(task_cls.name, str(cli.get("model") or ""), wanted=bool(cli.get("json")))
    with exit_codes(ending):
        config = build_config(task_cls.name, task_cls.Options, cli, config_file, every_option=every_option_name)
        ending.model, ending.wanted = config.model, config.json
        check_model(task_cls, config.model, config.task_options)
        from gpucli.engines import run_engine  # the engine's modules: only once a run is sure to start

        try:
            with library_notes():  # a library's warning is one gpucli line, not Python's report
                summary = run_engine(config)  # the engine handles SIGINT / SIGTERM itself while it runs
        except OutputError as exc:
            if exc.summary is None:  # before any work: the output was refused
                raise
            error(str(exc))  # mid-run: the line, then the summary as at any end (--json too)
            summary = exc.summary
        if not config.quiet and not quiet:
            print_summary(summary)
        if config.json:
            print(json.dumps(summary.to_dict(), ensure_ascii=False), flush=True)
    exit_now_after_a_cut_ray_start(summary.exit_code)
    raise typer.Exit(summary.exit_code)


def check_model(task_cls: type, model: str, options: dict[str, Any] | None = None) -> None:
    """Before any work: an alias of another task, or a model directory of the wrong kind, is a
    usage error that names the task it belongs to (each task's own loader would fail in its
    own words: `hf download minilm`, "no tokenizer.json"). Only a name that is neither a path
    nor one of this task's aliases can be another task's alias: only then are the other tasks'
    modules imported to ask (a run imports only its own task)."""
    if not model:
        return
    if not looks_like_path(model) and not alias_owner(model, _aliases([task_cls])):
        every = _aliases(list(all_tasks().values()))
        found = wrong_task_alias(task_cls.name, model, every)
        if found is None and not os.path.isdir(model):
            found = near_alias(model, every)  # minlm -> minilm
        if found is not None:
            raise found
    if os.path.isdir(model) and not task_cls.checks_its_model(options or {}):
        require_kind(task_cls.name, model, model)


def _aliases(tasks: list[type]) -> list[tuple[str, str]]:
    """(alias, task) of every model these tasks offer."""
    return [(entry.alias, entry.task) for cls in tasks for entry in cls.models()]


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
    only = task_of_module(entry.invoked) if entry.invoked else None
    for task_cls in [only] if only is not None else all_tasks().values():
        app.command(name=task_cls.name, help=None, cls=TaskCommand,
                    epilog=escape(f"{ENV_HELP}\n\n{EXIT_CODES_HELP}"))(
            _make_command(task_cls))


other_commands.register(app)
_register_tasks()

if __name__ == "__main__":  # pragma: no cover
    main()
