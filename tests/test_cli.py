"""The command line as a user meets it: help, exit codes, stdout vs stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gpucli.cli import app

runner = CliRunner()


def test_help_lists_the_tasks_and_does_not_import_torch():
    code = ("import sys; from gpucli.cli import app; from typer.testing import CliRunner; "
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


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("gpucli ")


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
