"""The command line as a user meets it: help, exit codes, stdout vs stderr."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpucli import engines
from gpucli.app.cli import app
from gpucli.app.other_commands import models_table
from gpucli.app.summary_lines import print_summary

runner = CliRunner()


def test_help_lists_the_tasks_and_does_not_import_torch():
    code = ("import sys; from gpucli.app.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, ['--help']); print(r.output); "
            "r = CliRunner().invoke(app, ['embed', '--help']); print(r.output); "
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH'); "
            "print('TRANSFORMERS' if 'transformers' in sys.modules else 'NO-TRANSFORMERS')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "NO-TORCH" in out and "NO-TRANSFORMERS" in out
    assert "--batch-size" in out and "Examples" in out and "--chunk-tokens" in out
    top = runner.invoke(app, ["--help"])
    assert top.exit_code == 0
    for name in ("embed", "models"):
        assert name in top.output


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag):
    result = runner.invoke(app, [flag])
    assert result.exit_code == 0 and result.output.startswith("gpucli ")


BOX = str.maketrans("", "", "│╭╮╰╯─")


def flat_help(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.translate(BOX).split())  # however the terminal wraps it, panels and all


def help_at_80(*args: str) -> list[str]:
    result = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_help_keeps_literal_brackets():
    assert "pip install 'gpucli[ray]'" in flat_help("embed")


def test_help_lists_every_exit_code():
    text = flat_help("embed")
    codes = text[text.index("Exit codes:"):]
    for code in ("0 all done", "1 some inputs failed", "2 bad usage", "3 the run itself failed", "75 another run",
                 "130 interrupted", "143 by SIGTERM"):
        assert code in codes, codes


def test_help_shows_click_placeholders_and_says_how_options_map_to_the_environment():
    text = flat_help("embed")
    for needle in ("--batch-size -b INTEGER", "--max-wait-ms FLOAT", "--model -m TEXT", "--config -c PATH",
                   "--out -o PATH|URL", "--chunk-tokens INTEGER"):
        assert needle in text, needle
    assert "GPUCLI_<FLAG> in the environment (--batch-size: GPUCLI_BATCH_SIZE)" in text
    assert "[env: GPUCLI_FROM_TABLE]" in text  # the one whose variable is not its flag's name


@pytest.mark.parametrize("command", ["embed", "classify", "transcribe", "search", "inspect", "models", None])
def test_help_has_no_typer_artefacts_and_fits_80_columns(command):
    lines = help_at_80(*([command] if command else []))
    text = "\n".join(lines)
    for artefact in ("<list[str]>", "<bool>", "<str>", "<int>", "[PATH...]...", "PATH... <", "{QUERY}", "{OUT}"):
        assert artefact not in text, artefact
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert "…" not in text  # no help text cut by Typer's columns


def test_embed_help_is_in_panels_examples_first():
    lines = help_at_80("embed")
    titles = [line.strip("╭─╮ ").strip() for line in lines if line.startswith("╭─")]
    assert titles == ["Input", "Model", "Embed options", "Output", "Performance", "Incremental runs and cron",
                      "Engine (Ray)", "Advanced"], titles
    text = "\n".join(lines)
    assert text.index("Examples:") < text.index("╭─ Input")
    assert "gpucli embed ./docs" in text and "--help" in text


@pytest.mark.parametrize("task", ["embed", "classify", "transcribe"])
def test_a_bare_task_command_prints_a_short_usage_with_two_examples(task):
    result = runner.invoke(app, [task], env={"COLUMNS": "80"})
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0].endswith(f"{task} PATH... [OPTIONS]") and len(lines) < 20, result.stderr
    examples = [line for line in lines if line.strip().startswith(f"gpucli {task} ")]
    assert len(examples) == 2 and f"{task} --help` for every option" in result.stderr
    assert max(len(line) for line in lines) <= 80


@pytest.mark.parametrize("task,model,needles", [
    ("classify", "minilm", ["minilm is an embed model", "classify models: efficientnet-lite0"]),
    ("embed", "efficientnet-lite0", ["efficientnet-lite0 is a classify model", "embed models: minilm"]),
    ("transcribe", "minilm", ["minilm is an embed model", "transcribe models: whisper-tiny.en"]),
])
def test_an_alias_of_another_task_names_that_task(task, model, needles, tmp_path):
    result = runner.invoke(app, [task, str(tmp_path), "--model", model])
    assert result.exit_code == 2, result.output
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert "hf download" not in result.stderr


def test_no_alias_looks_like_a_path():
    """check_model asks the other tasks about a --model only when it is not a path: an alias
    that looked like one (`./x`, `/x`, `a/b/c`) would then go unrecognised by the wrong task."""
    from gpucli.models.model_kind import looks_like_path
    from gpucli.tasks import all_tasks

    aliases = [entry.alias for task_cls in all_tasks().values() for entry in task_cls.models()]
    assert aliases and not [alias for alias in aliases if looks_like_path(alias)]


def test_an_image_classifier_given_to_embed_names_its_architecture_and_classify(tmp_path):
    model = tmp_path / "vit"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["ViTForImageClassification"],
                                                   "model_type": "vit"}))
    result = runner.invoke(app, ["embed", str(tmp_path), "--model", str(model)])
    assert result.exit_code == 2, result.output
    assert "an image classifier (ViTForImageClassification)" in result.stderr
    assert f"gpucli classify ... --model {model}" in result.stderr and "tokenizer.json" not in result.stderr


def test_a_text_encoder_given_to_classify_names_embed(tmp_path):
    model = tmp_path / "bert"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    result = runner.invoke(app, ["classify", str(tmp_path), "--model", str(model)])
    assert result.exit_code == 2 and "a text encoder (BertModel)" in result.stderr and "gpucli embed" in result.stderr


def test_a_model_path_that_does_not_exist_is_not_sent_to_the_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["embed", ".", "--model", "./no/such/dir"])
    assert result.exit_code == 2 and "no such directory" in result.stderr
    assert "hf download" not in result.stderr


def test_shell_completion_is_offered():
    text = flat_help()
    assert "--install-completion" in text and "--show-completion" in text and "--version -V" in text


def test_shell_completion_completes_commands_and_options():
    def complete(words: str) -> list[str]:
        env = {"_GPUCLI_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        return runner.invoke(app, [], prog_name="gpucli", env=env).output.split()

    assert complete("gpucli em") == ["embed"]
    assert complete("gpucli embed --batch") == ["--batch-size", "--batch-timeout-s"]


def test_models_table_keeps_brackets_and_survives_markup_like_text():
    rows = [{"alias": "a[b]", "task": "transcribe", "backend": "funasr", "available": False, "default": False,
             "description": "Paraformer (gpucli[funasr]; [/usr/local])"}]
    screen = Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None, record=True)
    models_table(rows, screen)
    text = screen.export_text()
    assert "gpucli[funasr]; [/usr/local]" in text and "a[b]" in text


def engine_that(action):
    """A run_engine stand-in for failures that strike before or around the real run."""
    def run_engine(config):
        action()
    return run_engine


def test_an_internal_error_exits_3_with_one_line_and_no_traceback(tmp_path, monkeypatch):
    def boom():
        raise ValueError("boom\nsecond line")

    monkeypatch.setattr(engines, "run_engine", engine_that(boom))
    monkeypatch.delenv("GPUCLI_DEBUG", raising=False)
    result = runner.invoke(app, ["embed", str(tmp_path)])
    assert result.exit_code == 3
    assert result.stderr == ("gpucli: error: internal error: ValueError: boom second line (a bug in gpucli; "
                             "rerun with GPUCLI_DEBUG=1 for the traceback)\n")
    assert result.stdout == ""


def test_gpucli_debug_lets_an_internal_error_raise(tmp_path, monkeypatch):
    def boom():
        raise ValueError("boom")

    monkeypatch.setattr(engines, "run_engine", engine_that(boom))
    monkeypatch.setenv("GPUCLI_DEBUG", "1")
    result = runner.invoke(app, ["embed", str(tmp_path)])
    assert isinstance(result.exception, ValueError)


def test_a_debug_traceback_on_a_non_terminal_stderr_is_plain_not_boxed(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        from gpucli import engines
        from gpucli.app.cli import main

        def run_engine(config):
            raise ValueError("boom")

        engines.run_engine = run_engine
        sys.argv = ["gpucli", "embed", {str(tmp_path)!r}]
        main()
    """)
    env = {**os.environ, "GPUCLI_DEBUG": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr
    assert "ValueError: boom" in done.stderr and "╭" not in done.stderr and "│" not in done.stderr


def test_a_reader_that_leaves_early_is_a_broken_pipe_not_an_error():
    proc = subprocess.Popen([sys.executable, "-m", "gpucli", "models", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # as `| head -0` does
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and stderr == ""


def test_ctrl_c_before_the_engine_takes_over_exits_130_with_one_line(tmp_path, monkeypatch):
    def interrupt():
        raise KeyboardInterrupt

    monkeypatch.setattr(engines, "run_engine", engine_that(interrupt))
    result = runner.invoke(app, ["embed", str(tmp_path)])
    assert result.exit_code == 130
    assert result.stderr == "gpucli: error: interrupted (Ctrl-C)\n"


def test_sigterm_before_the_engine_takes_over_exits_143_with_one_line(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from gpucli import engines
        from gpucli.app.cli import main

        def run_engine(config):  # SIGTERM while the engine still imports and sets up
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)

        engines.run_engine = run_engine
        sys.argv = ["gpucli", "embed", {str(tmp_path)!r}]
        main()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 143, done.stderr
    assert done.stderr == "gpucli: error: terminated (SIGTERM)\n"


def test_sigterm_is_caught_while_a_command_sets_up_and_the_old_handler_restored_after(tmp_path, monkeypatch):
    before, during = signal.getsignal(signal.SIGTERM), []
    monkeypatch.setattr(engines, "run_engine", engine_that(lambda: during.append(signal.getsignal(signal.SIGTERM))))
    runner.invoke(app, ["embed", str(tmp_path)])
    assert during and during[0] is not before and callable(during[0])
    assert signal.getsignal(signal.SIGTERM) is before


def summary(failures_file: str, **counts) -> SimpleNamespace:
    base = dict(task="embed", interrupted=False, exit_code=0, stage_seconds={"read": 0.1}, elapsed_s=1.0, inputs=5,
                succeeded=0, failed=0, skipped=5, unchanged=5, unfinished=0, pruned=0, rows=0, out="o.parquet",
                items_per_s=0.0, failures_file=failures_file)
    return SimpleNamespace(**{**base, **counts})


def test_the_failures_file_is_named_only_when_it_holds_records(tmp_path, capsys):
    failures = tmp_path / "o.failures.jsonl"
    failures.write_text("")
    print_summary(summary(str(failures)))  # an unchanged rerun: 5 skipped, nothing listed
    assert "failures and skips" not in capsys.readouterr().err
    failures.write_text('{"path": "a.txt", "stage": "decode", "error": "x"}\n')
    print_summary(summary(str(failures), failed=1, exit_code=1))
    assert f"failures and skips: {failures}" in capsys.readouterr().err
    print_summary(summary(str(tmp_path / "missing.jsonl"), failed=1))
    assert "failures and skips" not in capsys.readouterr().err


@pytest.mark.parametrize("args,needle", [
    (["embed", "/no/such/dir"], "no such file"),
    (["embed", ".", "--progress", "sideways"], "--progress"),
    (["embed", ".", "--out", "x.unknownsink"], "no sink"),
    (["embed", ".", "--devices", "cuda:7"], "--devices"),
    (["embed", ".", "--batch-size", "-3"], "batch-size"),
    (["embed", ".", "--model", "/no/such/model"], "cannot find model"),
])
def test_bad_usage_exits_2_with_a_message_on_stderr(args, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert needle in result.stderr
    assert result.stdout == ""


def test_unknown_flag_is_usage_error():
    assert runner.invoke(app, ["embed", ".", "--no-such-flag"]).exit_code == 2


def test_bad_config_file_exits_2(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("batch_size = 8\nnot_an_option = 1\n")
    result = runner.invoke(app, ["embed", str(tmp_path), "--config", str(bad)])
    assert result.exit_code == 2 and "not_an_option" in result.stderr


def test_models_lists_the_default_as_available_offline():
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    minilm = next(r for r in rows if r["alias"] == "minilm")
    assert minilm["task"] == "embed" and minilm["available"] and minilm["default"]
    assert runner.invoke(app, ["models"]).exit_code == 0
