"""A near miss says what was meant (issue 52): `--model minlm` exited 2 with advice to `hf download minlm`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.config import RunConfig
from gpucli.core.errors import UsageError


@pytest.mark.parametrize("task,model,meant", [("embed", "minlm", "minilm (an embed model"),
                                              ("transcribe", "whisper-tiny", "whisper-tiny.en (a transcribe model"),
                                              ("classify", "efficientnet-lite", "efficientnet-lite0 (a classify model"),
                                              ("embed", "whisper-tiny", "whisper-tiny.en (a transcribe model")])
def test_a_model_name_near_an_alias_is_a_usage_error_naming_it(tmp_path, task, model, meant):
    (tmp_path / "a.txt").write_text("x")
    result = CliRunner().invoke(app, [task, str(tmp_path), "--model", model, "--out", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2
    assert f"did you mean {meant}" in result.stderr and "hf download" not in result.stderr


@pytest.mark.parametrize("field,value,meant", [("progress", "rihc", "rich"), ("dtype", "float61", "float16"),
                                               ("fail_on", "anny", "any"), ("engine", "locale", "local")])
def test_an_option_value_near_a_choice_says_which(field, value, meant):
    with pytest.raises(UsageError, match=f"did you mean {meant}\\?"):
        RunConfig(task="embed", paths=("x",), **{field: value})


def test_a_mistyped_option_name_is_suggested_by_click(tmp_path):
    result = CliRunner().invoke(app, ["embed", str(tmp_path), "--exlude", "x"])
    assert result.exit_code == 2 and "--exclude" in result.stderr
