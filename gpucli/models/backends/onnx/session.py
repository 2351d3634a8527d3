"""One ONNX Runtime InferenceSession for a worker, and its execution providers.

A leaf of the backends: the worker's models (runners.py) and the fusion check (fusion.py)
both load graphs through it. Why the intra-op threads sleep on CPU: see onnx.py's module doc.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError

EXTRA_INSTALL = "pip install onnx onnxruntime  (part of gpucli's install; onnxruntime-gpu instead on CUDA hosts)"


def load_session(model: bytes | str | Path, threads: int, device: str = "cpu") -> Any:
    """One InferenceSession for this worker: intra-op threads = its share of the cores, no
    inter-op parallelism (one graph, one batch at a time), all graph optimisations."""
    ort = _onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, int(threads))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: the worker's stderr is the user's terminal
    if not device.startswith("cuda"):
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # see the module doc
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(source, options, providers=providers(device, ort.get_available_providers()))


def providers(device: str, available: list[str]) -> list[Any]:
    """Execution providers for a gpucli device ("cpu", "cuda", "cuda:1")."""
    if not device.startswith("cuda"):
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in available:
        raise UsageError(f"--backend onnx on {device} needs onnxruntime-gpu (this onnxruntime offers "
                         f"{', '.join(available)}): pip uninstall onnxruntime && pip install onnxruntime-gpu; "
                         "or use --backend torch")
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]


def _onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise UsageError(f"--backend onnx needs ONNX Runtime: {EXTRA_INSTALL}") from None
    return onnxruntime

