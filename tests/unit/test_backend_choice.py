"""The backend choice (gpucli.models.backends.choice), on plain data: which `--backend` an output runs
(`backend_default`: issue 15) and which runtime that means on this host for this model
(`choose_backend`: issue 16). Each rule of their docstrings is a test here; no process, no model,
and the host's facts are arguments, not patches."""

from __future__ import annotations

import pytest

from gpucli.core.config import RunConfig, build_config
from gpucli.core.errors import UsageError
from gpucli.models.backends.choice import Host, backend_default, choose_backend, fallback_notices
from gpucli.tasks import TaskSpec, get_task

EMBED = get_task("embed")
CPU = Host(("cpu",), onnx_installed=True)
GPU = Host(("cuda",), onnx_installed=True)
BARE_CPU = Host(("cpu",), onnx_installed=False)  # onnx or onnxruntime uninstalled (both are base dependencies)


def _spec(runtime: str = "", **options) -> TaskSpec:
    return TaskSpec("embed", "minilm", options, runtime=runtime)


def _runtime(choice: str, host: Host, quantize: str = "", onnx_on_cpu: bool = True, kept: str = "") -> str:
    return choose_backend(_spec(kept, backend=choice), choice, quantize, onnx_on_cpu, host).runtime


# --- choose_backend: a new spec, the workers' ---------------------------------------------------------
def test_the_choice_is_a_new_spec_naming_the_runtime_and_the_given_spec_is_not_written_to():
    given = _spec(backend="auto", pooling="mean")
    chosen = choose_backend(given, "auto", "", onnx_on_cpu=True, host=CPU)
    assert chosen is not given and given.options == {"backend": "auto", "pooling": "mean"} and given.runtime == ""
    assert chosen.options == {"backend": "onnx", "pooling": "mean"} and chosen.runtime == "onnx"
    assert (chosen.name, chosen.model, chosen.dtype, chosen.revision) == (given.name, given.model, given.dtype,
                                                                          given.revision)


def test_a_spec_chosen_once_chooses_the_same_again_on_any_host():
    """What a worker (or a Ray actor, or a second `open`) decides from the parent's spec."""
    chosen = choose_backend(_spec(backend="auto"), "auto", "", onnx_on_cpu=True, host=CPU)
    for host in (CPU, GPU):
        assert choose_backend(chosen, chosen.options["backend"], "", True, host).runtime == "onnx"
        assert choose_backend(chosen, "auto", "", True, host).runtime == "onnx"  # the task's own options say auto


@pytest.mark.parametrize(("choice", "host", "expected"), [("torch", CPU, "torch"), ("torch", BARE_CPU, "torch"),
                                                          ("onnx", CPU, "onnx"), ("onnx", GPU, "onnx")])
def test_a_given_backend_is_what_runs(choice, host, expected):
    assert _runtime(choice, host) == expected


@pytest.mark.parametrize(("host", "onnx_on_cpu", "expected"), [
    (CPU, True, "onnx"),  # a CPU host, a model ONNX is faster for, the extra installed
    (CPU, False, "torch"),  # a model whose graph gpucli does not check
    (GPU, True, "torch"),  # GPUs stay on torch (onnxruntime-gpu is not measured)
    (Host(("cuda:0", "cpu"), True), True, "torch"),
    (Host(("cpu", "cpu"), True), True, "onnx"),
    (BARE_CPU, True, "torch"),  # auto never asks for what is not installed
    (Host((), True), True, "torch"),  # no device known: not all CPUs
])
def test_auto_for_a_new_output_picks_onnx_only_on_an_all_cpu_host_for_a_model_it_suits(host, onnx_on_cpu, expected):
    assert _runtime("auto", host, onnx_on_cpu=onnx_on_cpu) == expected


@pytest.mark.parametrize("host", [CPU, GPU])
def test_auto_with_int8_is_onnx_on_any_host(host):
    assert _runtime("auto", host, "int8", onnx_on_cpu=False) == "onnx"


@pytest.mark.parametrize(("kept", "host", "expected"), [
    ("torch", CPU, "torch"),  # the onnx extra installed since
    ("onnx", GPU, "onnx"),  # a GPU added since
])
def test_auto_keeps_the_runtime_an_existing_output_was_made_with(kept, host, expected):
    assert _runtime("auto", host, kept=kept) == expected


def test_only_auto_keeps_and_int8_goes_to_onnx_whatever_was_kept():
    assert _runtime("torch", CPU, kept="onnx") == "torch"
    assert _runtime("auto", CPU, "int8", onnx_on_cpu=False, kept="torch") == "onnx"


def test_an_output_kept_on_onnx_where_the_extra_is_gone_is_refused_with_the_fix():
    with pytest.raises(UsageError, match=r"pip install onnx onnxruntime.*--backend torch --full"):
        _runtime("auto", BARE_CPU, kept="onnx")


@pytest.mark.parametrize(("choice", "quantize", "host", "message"), [
    ("tensorrt", "", CPU, "choose one of"),
    ("onnx", "fp8", CPU, "int8"),
    ("torch", "int8", CPU, "--backend onnx"),  # int8 is ONNX Runtime's
    ("onnx", "", BARE_CPU, r"pip install onnx onnxruntime"),
    ("auto", "int8", BARE_CPU, r"pip install onnx onnxruntime"),
])
def test_impossible_choices_are_usage_errors_that_name_the_fix(choice, quantize, host, message):
    with pytest.raises(UsageError, match=message):
        _runtime(choice, host, quantize)


def test_the_host_is_looked_up_only_as_far_as_the_choice_needs(monkeypatch):
    assert Host.looked_up("torch") == Host((), False)
    assert Host.looked_up("onnx").devices == ()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the public way to hide a host's GPUs
    assert Host.looked_up("auto").devices == ("cpu",)


def test_an_onnx_that_does_not_import_is_not_available_unless_the_graph_is_cached(monkeypatch):
    """Found is not enough: an onnx that fails to import cannot export, and `auto` must take torch
    (gpucli.models.backends.onnx_available). A cached graph needs onnxruntime alone."""
    import sys

    from gpucli.models import backends

    pytest.importorskip("onnxruntime")
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    backends._onnx_imports.cache_clear()
    try:
        assert not backends.onnx_available()
        assert not backends.onnx_available(lambda: False)
        assert backends.onnx_available(lambda: True)
    finally:
        backends._onnx_imports.cache_clear()


# --- backend_default: which --backend an output runs -----------------------------------------------
def _config(engine: str = "local", devices: str = "auto", **options) -> RunConfig:
    return RunConfig(task="embed", paths=("x",), engine=engine, devices=devices, task_options=options)


def _default(spec: TaskSpec, config: RunConfig, made_with: dict | None) -> TaskSpec:
    return backend_default(spec, EMBED, config, made_with, "out.parquet")


@pytest.mark.parametrize(("engine", "devices", "expected"), [
    ("local", "auto", "auto"), ("local", "cuda:0", "auto"), ("ray", "cpu", "auto"),
    ("ray", "auto", None), ("ray", "cuda:0,1", None),  # the Ray driver cannot see the cluster's GPUs
])
def test_a_new_output_gets_auto_and_on_ray_only_with_devices_cpu(engine, devices, expected):
    spec = _default(_spec(), _config(engine, devices), None)
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
    spec = _default(_spec(), _config(), stored)
    assert spec.options.get("backend") == backend and spec.runtime == runtime


def test_a_given_backend_is_never_replaced_but_auto_still_keeps_the_outputs_runtime():
    stored = {"options": {"backend": "auto"}, "info": {"gpucli.runtime": "onnx"}}
    for given in ("torch", "onnx", "auto"):
        spec = _default(_spec(backend=given), _config(backend=given), stored)
        assert spec.options["backend"] == given and spec.runtime == "onnx"
        assert _default(_spec(backend=given), _config(backend=given), None).options["backend"] == given


@pytest.mark.parametrize(("engine", "devices", "gpus", "refused"), [
    ("local", "auto", 1, True), ("local", "cuda:0", 1, True), ("local", "auto", 0, False), ("local", "cpu", 1, False),
    ("ray", "auto", 0, True), ("ray", "CPU", 0, False),  # the Ray driver cannot see the cluster's GPUs
])
def test_an_output_auto_made_on_onnx_is_not_continued_where_a_gpu_may_run_it(monkeypatch, engine, devices, gpus,
                                                                               refused):
    if gpus:  # this machine has none to show: the device count is the one thing faked
        monkeypatch.setattr("gpucli.models.devices.visible_gpu_count", lambda: gpus)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the public way to hide a host's GPUs
    stored = {"options": {"backend": "auto"}, "info": {"gpucli.runtime": "onnx"}}
    config = _config(engine, devices)
    if refused:
        with pytest.raises(UsageError, match=r"--out out.parquet .*--devices cpu.*--backend torch --full"):
            _default(_spec(), config, stored)
    else:
        assert _default(_spec(), config, stored).runtime == "onnx"
    torch_made = {"options": {"backend": "auto"}, "info": {}}
    assert _default(_spec(), config, torch_made).runtime == "torch"  # torch runs anywhere


def test_a_task_without_a_backend_option_is_untouched():
    spec = TaskSpec("transcribe", "whisper-tiny.en", {})
    config = RunConfig(task="transcribe", paths=("x",))
    assert backend_default(spec, get_task("transcribe"), config, None, "out.parquet") == spec


# --- the test suite's torch pin: GPUCLI_BACKEND, a public setting ------------------------------------
def test_gpucli_backend_torch_pins_every_output_to_torch_on_any_host():
    config = build_config("embed", EMBED.Options, {"paths": ("x",)}, environ={"GPUCLI_BACKEND": "torch"})
    for made_with in (None, {"options": {"backend": "auto"}, "info": {}}):
        spec = _default(_spec(**config.task_options), config, made_with)
        assert spec.options["backend"] == "torch"
        assert choose_backend(spec, "torch", "", True, CPU).runtime == "torch"


# --- fallback_notices: the slower path is never taken without a word -------------------------------------
def test_auto_on_a_cpu_host_without_onnx_runtime_says_once_that_it_runs_the_slower_torch_path():
    notes = fallback_notices(_spec(backend="auto"), "auto", "", onnx_on_cpu=True, host=BARE_CPU)
    assert len(notes) == 1 and "torch" in notes[0] and "pip install onnx onnxruntime" in notes[0]


@pytest.mark.parametrize(("choice", "host", "onnx_on_cpu", "kept"), [
    ("auto", CPU, True, ""),  # the fast path is taken
    ("auto", Host(("cuda",), onnx_installed=False), True, ""),  # a GPU host stays on torch by design
    ("auto", BARE_CPU, False, ""),  # a model ONNX Runtime does not run faster
    ("torch", BARE_CPU, True, ""),  # asked for
    ("auto", BARE_CPU, True, "torch"),  # an existing output keeps its own runtime
])
def test_no_fallback_note_where_the_run_takes_the_path_it_would_anyway(choice, host, onnx_on_cpu, kept):
    assert fallback_notices(_spec(kept, backend=choice), choice, "", onnx_on_cpu, host) == []
