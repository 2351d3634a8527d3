"""Turn `--devices` into a list of worker slots, without initialising CUDA in the parent.

`auto` means every visible GPU (CUDA_VISIBLE_DEVICES is honoured), else the CPU.
"""

from __future__ import annotations

import os
import shutil

from gpucli.errors import UsageError


def visible_gpu_count() -> int:
    """How many CUDA devices this process may use. On a machine without the NVIDIA driver
    this answers without importing torch (seconds saved on every CPU run); with the driver,
    torch's NVML-based count, which creates no CUDA context in the parent."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    if not _driver_present():
        return 0
    try:
        import torch
    except ImportError:
        return 0
    if not torch.backends.cuda.is_built():
        return 0
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    return torch.cuda.device_count()


def _driver_present() -> bool:
    return os.path.isdir("/proc/driver/nvidia/gpus") or shutil.which("nvidia-smi") is not None


def resolve_devices(spec: str, workers_per_device: int = 1) -> list[str]:
    """'auto' | 'cpu' | 'cuda' | 'cuda:0,1' | '0,1' -> one entry per worker process."""
    if workers_per_device < 1:
        raise UsageError(f"--workers-per-device must be at least 1, got {workers_per_device}")
    devices = _parse(spec.strip().lower())
    return [device for device in devices for _ in range(workers_per_device)]


def _parse(spec: str) -> list[str]:
    if spec in ("", "auto"):
        count = visible_gpu_count()
        return [f"cuda:{i}" for i in range(count)] or ["cpu"]
    if spec == "cpu":
        return ["cpu"]
    if spec in ("cuda", "gpu"):
        count = visible_gpu_count()
        if count == 0:
            raise UsageError("--devices cuda: no CUDA device is visible here; use --devices cpu or auto")
        return [f"cuda:{i}" for i in range(count)]
    ids = spec.removeprefix("cuda:")
    try:
        indices = [int(part) for part in ids.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--devices {spec!r}: expected auto, cpu, cuda or cuda:0,1") from None
    count = visible_gpu_count()
    bad = [i for i in indices if i >= count or i < 0]
    if bad or not indices:
        raise UsageError(f"--devices {spec!r}: {count} CUDA device(s) visible here; use --devices auto or cpu")
    return [f"cuda:{i}" for i in indices]
