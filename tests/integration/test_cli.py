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
from gpucli.cli import _print_summary, app, models_table

runner = CliRunner()


def test_help_lists_the_tasks_and_does_not_import_torch():
    code = ("import sys; from gpucli.cli import app; from typer.testing import CliRunner; "
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


def flat_help(*args: str) -> str:
    result = runner.invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())  # however the terminal wraps it


def test_help_keeps_literal_brackets():
    assert "pip install 'gpucli[ray]'" in flat_help("embed")


def test_help_lists_every_exit_code():
    text = flat_help("embed")
    codes = text[text.index("Exit codes:"):]
    for code in ("0 all done", "1 some inputs failed", "2 bad usage", "3 the run itself failed", "75 another run",
                 "130 interrupted", "143 by SIGTERM"):
        assert code in codes, codes


def test_help_shows_click_placeholders_and_the_environment_variable_of_each_option():
    text = flat_help("embed")
    for needle in ("--batch-size INTEGER", "--max-wait-ms FLOAT", "--model TEXT", "--config PATH",
                   "--out PATH|URL", "--chunk-tokens INTEGER"):
        assert needle in text, needle
    for name in ("OUT", "MODEL", "DEVICES", "BATCH_SIZE", "MAX_WAIT_MS", "QUIET", "INCREMENTAL", "CHUNK_TOKENS"):
        assert f"[env: GPUCLI_{name}]" in text, name
    assert "<int>" not in text and "<str>" not in text


def test_shell_completion_is_offered():
    text = flat_help()
    assert "--install-completion" in text and "--show-completion" in text and "-V, --version" in text


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
        from gpucli.cli import main

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
        from gpucli.cli import main

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
    _print_summary(summary(str(failures)))  # an unchanged rerun: 5 skipped, nothing listed
    assert "failures and skips" not in capsys.readouterr().err
    failures.write_text('{"path": "a.txt", "stage": "decode", "error": "x"}\n')
    _print_summary(summary(str(failures), failed=1, exit_code=1))
    assert f"failures and skips: {failures}" in capsys.readouterr().err
    _print_summary(summary(str(tmp_path / "missing.jsonl"), failed=1))
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
