"""Every `gpucli ...` command the README and docs/ show in a fenced block is one the CLI takes
(tests/shown_commands.py finds them). Those that need no extra run for real on the README install
(tests/tour/); those marked `<!-- extra: NAME -->` run here, with --dry-run, in a sandbox holding
a copy of sample_data/ and configs/ and two small tables (posts.parquet, posts.csv), after the
README's quick-start command itself, with the real default model. The log lines, the summary's
keys, the metadata keys and the Python snippets the docs show are checked against that first run.

A block is illustrative (a Ray cluster, a Qdrant server, /data paths) when an HTML comment
`<!-- illustrative: why -->` comes right before it: its commands are only checked for options
the CLI does not have.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.shown_commands import FENCE, PAGES, QUICK_START, RUNNABLE, SHOWN, TASKS, Shown, commands_in


def _cli():
    import typer

    from gpucli.app.cli import app

    return typer.main.get_command(app)


def _flags(command) -> set[str]:
    flags = {"--help", "-h"}
    for param in command.params:
        flags.update(param.opts)
        flags.update(param.secondary_opts)
    return flags


def test_the_docs_show_commands_of_every_kind():
    shown = {s.argv[0] for s in RUNNABLE if s.argv and not s.extra}
    assert {"embed", "classify", "transcribe", "search", "inspect", "models", "snapshot", "compact"} <= shown, shown


def test_the_blocks_marked_for_an_extra_name_one_the_package_has():
    import tomllib

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    marked = {s.extra for s in SHOWN if s.extra}
    assert marked and marked <= extras, sorted(marked - extras)


@pytest.mark.parametrize("shown", SHOWN, ids=lambda s: s.id)
def test_every_command_shown_names_a_command_and_options_the_cli_has(shown: Shown):
    group = _cli()
    argv = [t.strip("[]") for t in shown.argv]
    command = group.commands.get(argv[0]) if argv and not argv[0].startswith("-") else group
    assert command is not None, f"{shown.id}: gpucli has no command {argv[0]!r}"
    flags = _flags(command)
    unknown = [t for t in argv if re.match(r"--?[A-Za-z]", t) and t.split("=")[0] not in flags]
    assert not unknown, f"{shown.id}: gpucli {' '.join(shown.argv)}: no such option {unknown}"


def test_every_option_named_in_the_text_is_one_gpucli_has():
    group = _cli()
    flags = _flags(group) | {f for command in group.commands.values() for f in _flags(command)}
    foreign = {"--runtime-env-json"}  # ray job submit's
    named = {f for text in PAGES.values() for f in re.findall(r"`(--[a-z][\w-]*)", text)}
    assert not named - flags - foreign, sorted(named - flags - foreign)


# --- runs, in a sandbox ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A user's directory after the quick start: sample_data/, configs/, two tables, and
    embed.parquet from the README's first command (with --json, to read its summary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    home = tmp_path_factory.mktemp("docs")
    shutil.copytree(ROOT / "sample_data", home / "sample_data")
    shutil.copytree(ROOT / "configs", home / "configs")
    posts = pa.table({"id": [1, 2], "body": ["Bees make honey from nectar.", "Rivers run to the sea."]})
    pq.write_table(posts, home / "posts.parquet")
    (home / "posts.csv").write_text("id,body\n1,Bees make honey from nectar.\n2,Rivers run to the sea.\n")
    assert QUICK_START in (ROOT / "README.md").read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLI_")}  # as a user runs it
    env["PYTHONPATH"] = str(ROOT)
    run = subprocess.run([sys.executable, "-m", "gpucli", *shlex.split(QUICK_START)[1:], "--json"], cwd=home,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    return home, run


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "gpucli", *argv], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=300)


def _in_process(argv: list[str], env: dict[str, str], cwd: Path, monkeypatch):
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    monkeypatch.chdir(cwd)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return CliRunner().invoke(app, argv)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("shown", [s for s in RUNNABLE if s.extra], ids=lambda s: s.id)
def test_every_command_shown_that_needs_an_extra_runs(shown: Shown, sandbox, monkeypatch):
    """Those that need none run for real on the README install (tests/tour/); these in this
    environment, which has every extra, as dry runs (the extra's own tests run them for real)."""
    home, _ = sandbox
    argv = list(shown.argv)
    if argv == shlex.split(QUICK_START)[1:]:
        return  # the sandbox ran it
    if argv[0] in TASKS and "--dry-run" not in argv:
        argv.append("--dry-run")
    result = _in_process(argv, dict(shown.env), home, monkeypatch)
    assert result.exit_code == 0, f"{shown.id}: gpucli {' '.join(argv)} -> {result.exit_code}\n{result.output}"


def _block_after(marker: str) -> tuple[str, str]:
    for text in PAGES.values():
        if marker in text:
            rest = text[text.index(marker):]
            fence = FENCE.search(rest)
            paragraph = rest[rest.index("-->") + 3:].strip().split("\n\n")[0]
            return (fence.group(2) if fence else ""), paragraph
    raise AssertionError(f"no page holds {marker!r}")


TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")


def _line_pattern(line: str) -> re.Pattern:
    escaped = re.escape(TIMESTAMP.sub("@TIME@", line))
    escaped = re.sub(r"\d+(?:\\\.\d+)*", r"[\\d.]+", escaped)
    escaped = escaped.replace(r"\(onnx\)", r"\((?:onnx|torch)\)").replace("@TIME@", TIMESTAMP.pattern)
    return re.compile(escaped)


@pytest.mark.model
@pytest.mark.slow
def test_the_log_lines_shown_are_those_a_run_prints(sandbox):
    _, run = sandbox
    shown = [line for line in _block_after("<!-- log-lines")[0].splitlines() if line.strip()]
    printed = [line for line in run.stderr.splitlines() if TIMESTAMP.match(line)]
    assert len(shown) == 2 and printed, (shown, run.stderr)
    assert _line_pattern(shown[0]).fullmatch(printed[0]), (shown[0], printed[0])
    assert _line_pattern(shown[-1]).fullmatch(printed[-1]), (shown[-1], printed[-1])


@pytest.mark.model
@pytest.mark.slow
def test_the_summary_keys_the_docs_list_are_the_summary_s(sandbox):
    _, run = sandbox
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    listed = set(re.findall(r"`(\w+)`", _block_after("<!-- summary-fields")[1]))
    known = set(summary) | set(summary["stage_seconds"])
    assert listed and listed <= known, f"not in a real summary: {sorted(listed - known)}"


@pytest.mark.model
@pytest.mark.slow
def test_the_metadata_keys_the_docs_name_are_in_a_real_output(sandbox):
    import pyarrow.parquet as pq

    home, _ = sandbox
    text = (ROOT / "docs" / "outputs-and-columns.md").read_text(encoding="utf-8")
    section = text[text.index("## Parquet"):text.index("## JSON lines")]
    named = set(re.findall(r"`(gpucli\.\w+)`", section))
    part = next((home / "embed.parquet").glob("part-*.parquet"))
    keys = {k.decode() for k in pq.read_schema(part).metadata}
    assert named and named <= keys, f"not in embed.parquet's metadata: {sorted(named - keys)}"


def _python_snippets() -> list[tuple[str, str]]:
    return [(f"{page.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 2}", m.group(2))
            for page, text in PAGES.items() for m in FENCE.finditer(text) if m.group(1) == "python"]


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("where,code", _python_snippets(), ids=[w for w, _ in _python_snippets()])
def test_every_python_snippet_runs_on_the_quick_start_output(where, code, sandbox, monkeypatch):
    """A snippet is cut at each import: a piece whose reader is not installed here (polars,
    duckdb) is left out, the others must run."""
    home, _ = sandbox
    monkeypatch.chdir(home)
    pieces = re.split(r"\n(?=import )", code.strip())
    ran = 0
    for piece in pieces:
        try:
            exec(compile(piece, where, "exec"), {})
            ran += 1
        except ModuleNotFoundError as exc:
            if exc.name not in ("polars", "duckdb", "pandas"):
                raise
    assert ran, f"{where}: no part of the snippet could run here"


# --- what the commands leave behind ------------------------------------------------------------

LEFT_IN_A_CHECKOUT = [  # one command per kind of output the README and docs/ show, run from the checkout's root
    [*shlex.split(QUICK_START)[1:]],  # embed.parquet/, embed.parquet.gpucli/, embed.failures.jsonl
    ["embed", "sample_data/docs", "--out", "docs.jsonl"],
    ["embed", "sample_data/docs", "--out", "qdrant:./qdrant_data/docs"],
    ["snapshot", "qdrant:./qdrant_data/docs", "docs.snapshot"],
    ["transcribe", "sample_data/wavs", "--out", "talks.parquet", "--subtitles", "srt"],
    ["transcribe", "sample_data/wavs", "--out", "timed.parquet", "--subtitles", "vtt", "--subtitles-dir", "captions"],
]


@pytest.mark.model
@pytest.mark.slow
def test_what_the_documented_commands_leave_in_a_checkout_git_ignores(tmp_path):
    """The quick start and its neighbours leave outputs and state folders in the checkout they
    run in (`embed.parquet.gpucli/`, `qdrant_data/` were untracked in `git status`): .gitignore
    names them all (a few inputs each: the names are what is checked)."""
    checkout = tmp_path / "checkout"
    shutil.copytree(ROOT / "sample_data", checkout / "sample_data")
    shutil.copy(ROOT / ".gitignore", checkout / ".gitignore")
    git = ["git", "-C", str(checkout)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    for argv in LEFT_IN_A_CHECKOUT:
        result = _run([*argv, "--limit", "2", "--quiet"] if argv[0] in TASKS else argv, {}, checkout)
        assert result.returncode in (0, 1), f"gpucli {' '.join(argv)}: {result.stderr[-2000:]}"
    status = subprocess.run([*git, "status", "--porcelain", "--untracked-files=all"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    left = sorted({line[3:].split("/")[0] for line in status if line.startswith("??")})
    assert left == [], f"not in .gitignore: {left}"
    assert {p.name for p in checkout.iterdir()} >= {"embed.parquet.gpucli", "docs.jsonl", "qdrant_data", "docs.snapshot",
                                                    "talks.subtitles", "captions"}, "the commands ran and wrote"


def test_a_cron_line_names_gpucli_by_its_absolute_path_and_the_docs_say_why():
    """cron's PATH is /usr/bin:/bin: a bare `gpucli` there is "not found" (exit 127, an empty log)."""
    lines = [line for text in PAGES.values() for fence in FENCE.finditer(text) if fence.group(1) == "cron"
             for line in fence.group(2).splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert lines, "the docs show a cron line"
    for line in lines:
        assert len(commands_in(line)) == 1, f"one gpucli command, its options checked above: {line}"
        assert re.search(r"\s/\S+/bin/gpucli\s", line) and not re.search(r"(^|[\s;&|])gpucli\s", line), line
        assert ">>" in line and "2>>" in line, f"both streams to a log: {line}"
    cron_page = PAGES[ROOT / "docs" / "incremental-and-cron.md"]
    assert "/usr/bin:/bin" in cron_page and "command -v gpucli" in cron_page
