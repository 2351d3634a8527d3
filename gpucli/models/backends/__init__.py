"""Inference backends beside torch: ONNX Runtime (`gpucli.models.backends.onnx`).

A task runs its model through torch, or with `--backend onnx` (and with `auto`, a new output's
default, on a CPU host: which one is gpucli.models.backends.choice) the same weights are exported once to an
ONNX graph in a per-user cache and run by ONNX Runtime in the workers; tokenizing, batching, pooling
and output stay the task's own. Nothing here imports torch or onnxruntime at import time:
`gpucli --help` imports the tasks, and the parent never needs them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from functools import cache

BACKENDS = ("auto", "torch", "onnx")
QUANTIZATIONS = ("", "int8")
# onnx and onnxruntime are part of gpucli's own install (pyproject.toml): missing, the install is incomplete
INSTALL = "pip install onnx onnxruntime (part of gpucli's install; on CUDA hosts onnxruntime-gpu instead of onnxruntime)"


def onnx_available(cached: Callable[[], bool] | None = None) -> bool:
    """ONNX Runtime can run the model here: onnxruntime is installed, and so is onnx unless the
    model's graph is in the cache already (`cached()`: loading a graph needs the runtime alone).

    onnx is known usable by importing it (~0.6 s, and only when an export follows, which costs
    5-15 s): a package that is found but does not import (a damaged install, or one shadowed on
    PYTHONPATH) counted as installed, and every worker then failed its export on every batch
    instead of the run taking torch with one line saying why."""
    if importlib.util.find_spec("onnxruntime") is None:
        return False
    if cached is not None and cached():
        return True
    return _onnx_imports()


@cache
def _onnx_imports() -> bool:
    try:
        import onnx  # noqa: F401 - only whether it imports
    except Exception:  # noqa: BLE001 - any failure to import means it cannot export: torch, with a note
        return False
    return True


def host_devices() -> list[str]:
    """The device kind `auto` decides by: this host's, not this run's (a GPU host stays on torch
    even for a `--devices cpu` run), so that every run of one host makes the same choice and its
    outputs' fingerprints stay put. No CUDA context is created (gpucli.models.devices)."""
    from gpucli.models.devices import visible_gpu_count

    return ["cuda"] if visible_gpu_count() > 0 else ["cpu"]


def export_notices(runtime: str, cached: Callable[[], bool]) -> list[str]:
    """What the parent says before a run whose workers export the model first (`cached()` is
    false): the run looks stalled for those seconds otherwise."""
    if runtime != "onnx" or cached():
        return []
    from gpucli.models.backends.onnx.cache import default_cache_root

    return [f"first run of this model on ONNX Runtime: the workers export it once into {default_cache_root() / 'onnx'} "
            "(about 5-15 s); later runs load it in under a second (--backend torch runs without it)"]


def quantize_info(quantize: str) -> dict[str, str]:
    """Output metadata for --quantize. With int8 the recipe too: it enters the ledger's fingerprint,
    so rows of two recipes (their vectors differ) never mix in one output without --full."""
    if not quantize:
        return {"gpucli.quantize": ""}
    from gpucli.models.backends.onnx.quantize import quantize_recipe  # stdlib-only at import: the parent may import it

    return {"gpucli.quantize": quantize, "gpucli.quantize_recipe": quantize_recipe()}


def worker_threads(default: int = 1) -> int:
    """The intra-op threads a worker may use: the worker sets OMP_NUM_THREADS to its share of the
    cores before `setup` (gpucli.engines.local.worker.limit_threads), so the ONNX session sizes itself the same."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return default
