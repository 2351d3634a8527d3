"""Inference backends beside torch: ONNX Runtime (`gpucli.backends.onnx`).

A task runs its model through torch by default. With `--backend onnx` the same weights are
exported once to an ONNX graph in a per-user cache and run by ONNX Runtime in the workers;
tokenizing, batching, pooling and output stay the task's own. Nothing here imports torch or
onnxruntime at import time: `gpucli --help` imports the tasks, and the parent never needs them.
"""

from __future__ import annotations

import importlib.util
import os

BACKENDS = ("auto", "torch", "onnx")
QUANTIZATIONS = ("", "int8")


def onnx_available() -> bool:
    """Both halves of the `onnx` extra are importable (without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def worker_threads(default: int = 1) -> int:
    """The intra-op threads a worker may use: the worker sets OMP_NUM_THREADS to its share of the
    cores before `setup` (gpucli.worker.limit_threads), so the ONNX session sizes itself the same."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "")))
    except ValueError:
        return default
