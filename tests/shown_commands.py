"""The `gpucli ...` commands the README and docs/ show in fenced blocks, as data: which page and
line, the arguments and environment, whether the block is illustrative (`<!-- illustrative: why -->`
right before it: a Ray cluster, a Qdrant server, /data paths), which extra it needs
(`<!-- extra: NAME ... -->`: run by the main suite, not by the README install's tour), and the exit
code the line says it ends with (a trailing `# exits N`; 0 otherwise). tests/integration/test_docs.py
checks them against the CLI in this environment; tests/tour/ runs them with the README install."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tests.helpers import ROOT

PAGES = {p: p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
REDIRECT = re.compile(r"^\d*>>?")
EXITS = re.compile(r"#.*\bexits (\d+)\b")
TASKS = ("embed", "classify", "transcribe")
QUICK_START = "gpucli embed sample_data/docs"


@dataclass(frozen=True)
class Shown:
    page: str
    line: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    illustrative: bool
    extra: str = ""  # the extra the block needs (`<!-- extra: ocr -->`), "" for the README install
    exits: int = 0  # the exit code the line promises (`# exits 1`)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def note_before(text: str, start: int) -> str:
    """The HTML comment right before a fence (blank lines between allowed), or ''."""
    before = text[:start].rstrip()
    if not before.endswith("-->"):
        return ""
    return before[before.rindex("<!--") + 4:-3].strip()


def commands_in(line: str) -> list[tuple[list[str], dict[str, str]]]:
    """The gpucli commands of one shell line (`gpucli` or a venv's `.../bin/gpucli`): after `&&`,
    `;`, `|`, `--` (ray job submit) or environment assignments; redirections dropped."""
    found = []
    for part in re.split(r"&&|;|\|", line):
        try:
            tokens = shlex.split(part, comments=True)
        except ValueError:
            continue
        env = {}
        while tokens and ENV.match(tokens[0]):
            key, _, value = tokens.pop(0).partition("=")
            env[key] = value
        at = next((i for i, token in enumerate(tokens) if token == "gpucli" or token.endswith("/bin/gpucli")), None)
        if at is None:  # a venv's script by its absolute path (cron) is gpucli too
            continue
        if at and tokens[at - 1] != "--":
            continue
        argv, skip = [], False
        for token in tokens[at + 1:]:
            if skip:
                skip = False
            elif REDIRECT.match(token):
                skip = token in (">", ">>", "2>", "2>>")
            else:
                argv.append(token)
        found.append((argv, env))
    return found


def shown_commands() -> list[Shown]:
    shown = []
    for page, text in PAGES.items():
        for fence in FENCE.finditer(text):
            note = note_before(text, fence.start())
            illustrative = note.startswith("illustrative")
            extra = note.removeprefix("extra:").split()[0] if note.startswith("extra:") else ""
            first_line = text[:fence.start()].count("\n") + 2
            for offset, line in enumerate(fence.group(2).replace("\\\n", " ").splitlines()):
                line = line.strip().removeprefix("$ ")
                exits = EXITS.search(line)
                for argv, env in commands_in(line):
                    shown.append(Shown(str(page.relative_to(ROOT)), first_line + offset, tuple(argv),
                                       tuple(env.items()), illustrative, extra, int(exits.group(1)) if exits else 0))
    return shown


SHOWN = shown_commands()
RUNNABLE = [s for s in SHOWN if not s.illustrative]
