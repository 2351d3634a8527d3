"""Inference backends beside torch: ONNX Runtime (`gpucli.backends.onnx`).

A task runs its model through torch, or with `--backend onnx` (and with `auto`, a new output's
default, on a CPU host: gpucli.backends.choice) the same weights are exported once to an ONNX
graph in a per-user cache and run by ONNX Runtime in the workers; tokenizing, batching, pooling
and output stay the task's own. Nothing here imports torch or onnxruntime at import time:
`gpucli --help` imports the tasks, and the parent never needs them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

from gpucli.errors import UsageError

BACKENDS = ("auto", "torch", "onnx")
QUANTIZATIONS = ("", "int8")
INSTALL = "pip install 'gpucli[onnx]' (on CUDA hosts: pip install onnx onnxruntime-gpu)"


def onnx_available() -> bool:
    """Both halves of the `onnx` extra are importable (without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def host_devices() -> list[str]:
    """The device kind `auto` decides by: this host's, not this run's (a GPU host stays on torch
    even for a `--devices cpu` run), so that every run of one host makes the same choice and its
    outputs' fingerprints stay put. No CUDA context is created (gpucli.devices)."""
    from gpucli.devices import visible_gpu_count

    return ["cuda"] if visible_gpu_count() > 0 else ["cpu"]


def pin_choice(options: dict, runtime: str) -> None:
    """Write the parent's resolved backend into the TaskSpec's options that the workers are built
    from, so that no worker decides `auto` again on its own (a Ray CPU actor sees no GPU, and
    would pick otherwise). The task's own options, which the fingerprint holds, keep `auto`."""
    if options.get("backend") == "auto":
        options["backend"] = runtime


def export_notices(runtime: str, cached: Callable[[], bool]) -> list[str]:
    """What the parent says before a run whose workers export the model first (`cached()` is
    false): the run looks stalled for those seconds otherwise."""
    if runtime != "onnx" or cached():
        return []
    from gpucli.backends.onnx import default_cache_root

    return [f"first run of this model on ONNX Runtime: the workers export it once into {default_cache_root() / 'onnx'} "
            "(about 5-15 s); later runs load it in under a second (--backend torch runs without it)"]


def quantize_info(quantize: str) -> dict[str, str]:
    """Output metadata for --quantize. With int8 the recipe too: it enters the ledger's fingerprint,
    so rows of two recipes (their vectors differ) never mix in one output without --full."""
    if not quantize:
        return {"gpucli.quantize": ""}
    from gpucli.backends.onnx import quantize_recipe  # stdlib-only at import: the parent may import it

    return {"gpucli.quantize": quantize, "gpucli.quantize_recipe": quantize_recipe()}


def worker_threads(default: int = 1) -> int:
    """The intra-op threads a worker may use: the worker sets OMP_NUM_THREADS to its share of the
    cores before `setup` (gpucli.worker.limit_threads), so the ONNX session sizes itself the same."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return default


def resolve_backend(choice: str, devices: list[str], quantize: str = "", onnx_on_cpu: bool = False,
                    kept: str = "") -> str:
    """The backend a run uses, decided in the parent from plain data (nothing imported), the same
    on every run of one output: `torch` or `onnx`.

    `auto` decides once per output: `kept` is the runtime an existing output was made with
    (TaskSpec.runtime), and auto keeps it, so that a rerun never changes an output's runtime
    because the host changed (the onnx extra installed, a GPU added). For a new output auto picks
    onnx when int8 is asked for, or when every device is a CPU, the task says ONNX is faster
    there for this model (`onnx_on_cpu`, from benchmarks/onnx_e2e.py) and the onnx extra is
    installed; else torch (GPUs stay on torch: onnxruntime-gpu is not measured yet)."""
    if choice not in BACKENDS:
        raise UsageError(f"--backend {choice!r}: choose one of {', '.join(BACKENDS)}")
    if quantize not in QUANTIZATIONS:
        raise UsageError(f"--quantize {quantize!r}: gpucli knows int8 (or none)")
    if quantize and choice == "torch":
        raise UsageError("--quantize int8 runs on ONNX Runtime: use --backend onnx (or auto), or drop --quantize")
    if choice == "auto" and kept in ("torch", "onnx") and not quantize:
        if kept == "onnx" and not onnx_available():
            raise UsageError(f"this output was made with ONNX Runtime (--backend auto chose it) and it is not "
                             f"installed now: {INSTALL}; or pass --backend torch --full to rebuild the output")
        return kept
    if choice == "auto":
        from gpucli.devices import all_cpu

        choice = "onnx" if quantize or (all_cpu(devices) and onnx_on_cpu and onnx_available()) else "torch"
    if choice == "onnx" and not onnx_available():
        raise UsageError(f"--backend onnx needs ONNX Runtime: {INSTALL}")
    return choice
