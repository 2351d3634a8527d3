"""Help text as a user reads it: Typer's rich help without Typer's artefacts.

Typer shows each parameter's Python type beside it (`PATH <list[str]>`, `--json <bool>`) and
Click writes `[OPTIONS] [PATH...]...`; neither tells a user anything. Help texts are rich
markup under `rich_markup_mode="rich"` (the mode that has panels), so every text goes through
`escape` first: `pip install 'gpucli[ray]'` keeps its brackets. Nothing here imports rich:
`gpucli embed ...` builds its help texts at import, and only `--help` renders them.
"""

from __future__ import annotations

import re
from typing import Any

import click
import typer.core

from gpucli.core.terminal import fit

EXAMPLE_WIDTH = 76  # an example line within 80 columns after the help's indent
_MARKUP = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def escape(text: str) -> str:
    """`text` shown as it is under rich markup: rich.markup.escape's rule (a `[` that could open
    a tag gets a backslash), here so that a run does not import rich for its help texts."""
    text = _MARKUP.sub(lambda m: f"{m.group(1)}{m.group(1)}\\{m.group(2)}", text)
    return text + "\\" if text.endswith("\\") and not text.endswith("\\\\") else text


def examples_text(examples: str, width: int = EXAMPLE_WIDTH) -> str:
    """A task's examples within `width`: a line too long has the padding before its `# comment`
    narrowed, else the comment on a line of its own above the command."""
    lines = []
    for line in examples.splitlines():
        line = "  " + line.strip()  # one indent, whatever the task's string has
        command, sep, comment = line.partition("  # ")
        tight = f"{command.rstrip()}   # {comment.strip()}"
        if len(line) <= width or not sep:
            lines.append(line)
        elif len(tight) <= width:
            lines.append(tight)
        else:
            indent = command[: len(command) - len(command.lstrip())]
            lines += [f"{indent}# {comment.strip()}", command.rstrip()]
    return "\n".join(lines)


def short_usage(task_cls: type, command: str, width: int | None) -> str:
    """What a bare task command prints: usage, what the task does, two examples, `--help`."""
    examples = examples_text("\n".join(task_cls.examples.splitlines()[:2]))
    lines = [f"Usage: {command} PATH... [OPTIONS]", "", fit("  " + task_cls.help, width, ""), "", "Examples:",
             examples, "", f"See `{command} --help` for every option."]
    return "\n".join(lines)


class PlainArgument(typer.core.TyperArgument):
    """An argument without the Python type Typer shows beside it (`<list[str]>`, `<str>`), and
    in the usage line as Click's users know it (`QUERY`, `[OUT]`, `PATH...`; Typer writes `{QUERY}`)."""

    def display_type_rich(self, ctx: click.Context) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return name if self.nargs == 1 or name.endswith("...") else name + "..."


def _untyped(params: list[Any]) -> None:
    """Flags show no `<bool>`, arguments no `<str>` (Typer shows a type where no metavar is set)."""
    for param in params:
        if isinstance(param, typer.core.TyperArgument):
            param.__class__ = PlainArgument
        elif getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class PlainCommand(typer.core.TyperCommand):
    """A command whose help shows no Python types."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _untyped(self.params)  # now, not at --help: an error's usage line shows the arguments too

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _untyped(self.get_params(ctx))
        super().format_help(ctx, formatter)


class PlainGroup(typer.core.TyperGroup):
    """The root: its own flags (--version, completion) without `<bool>`, and usage errors as
    Click's plain lines (`Error: No such option: --frobnicate`), not a box: a log or a pipe gets
    one greppable line, and a long message is not cut across the box's lines."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        markup, self.rich_markup_mode = self.rich_markup_mode, None  # Typer boxes errors unless None
        try:
            return super().main(*args, **kwargs)
        finally:
            self.rich_markup_mode = markup

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from typer import rich_utils

        _untyped(self.get_params(ctx))
        rich_utils.rich_format_help(obj=self, ctx=ctx, markup_mode="rich")
