"""Turn `--devices` into a list of worker slots, without initialising CUDA in the parent.

`auto` means every visible GPU (CUDA_VISIBLE_DEVICES is honoured), else the CPU.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or taskset may
    narrow), else the machine's count."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def all_cpu(devices: list[str]) -> bool:
    """Whether a run's workers all run on the CPU (an empty list: not known yet, so no)."""
    return bool(devices) and all(d == "cpu" for d in devices)


def visible_gpu_count() -> int:
    """How many CUDA devices this process may use, without creating a CUDA context in the
    parent. On a machine without the NVIDIA driver this answers without importing torch
    (seconds saved on every CPU run); with the driver and no CUDA_VISIBLE_DEVICES, NVML's count
    (what torch's NVML-based check answers there), also without torch: the parent of a GPU run
    then starts its workers ~1-2 s sooner. A CUDA_VISIBLE_DEVICES list (indices, UUIDs, MIG
    instances), or an NVML that does not answer, goes to torch's own parsing and count."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    if not _driver_present():
        return 0
    cuda_build = _torch_cuda_build()
    if cuda_build is False:
        return 0
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")  # workers inherit it, as they did
    if visible is None and cuda_build and (count := _nvml_device_count()) >= 0:
        return count
    try:
        import torch
    except ImportError:
        return 0
    if not torch.backends.cuda.is_built():
        return 0
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    return torch.cuda.device_count()


def _nvml_device_count() -> int:
    """The GPUs NVML sees (as torch.cuda._raw_device_count_nvml asks it), or -1 when the
    library is missing or does not answer."""
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        # nvmlInit_v2 (what nvml.h's nvmlInit names): unlike the legacy nvmlInit that torch
        # calls, it does not fail when one GPU is in a bad state; that GPU's worker says so
        if nvml.nvmlInit_v2() != 0:
            return -1
        count = ctypes.c_uint(0)
        ok = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
        nvml.nvmlShutdown()
    except (OSError, AttributeError):
        return -1
    return int(count.value) if ok else -1


def _torch_cuda_build() -> bool | None:
    """Whether the installed torch is a CUDA build, from the `cuda = ...` line of its
    version.py (None in a CPU wheel), without importing torch; None when that cannot be read."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    return cuda_build_of(text)


def cuda_build_of(version_py: str) -> bool | None:
    """torch/version.py's text -> whether it is a CUDA build (`cuda: Optional[str] = '12.8'`
    against `= None`), or None when it cannot tell: no such line, or a ROCm build (`hip` set),
    whose torch.cuda counts AMD GPUs: torch's own count decides those."""
    import re

    def value(name: str) -> str | None:
        match = re.search(rf"^{name}\b[^=]*=\s*(.+?)\s*$", version_py, re.MULTILINE)
        return None if match is None else match.group(1)

    cuda, hip = value("cuda"), value("hip")
    if cuda is None or (hip is not None and hip != "None"):
        return None
    return cuda != "None"


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


def torch_dtype(name: str, device: Any) -> Any:
    """`--dtype` as torch's dtype on `device` (a torch.device or its name): auto is float16 on CUDA,
    float32 elsewhere."""
    import torch

    if name == "auto":
        return torch.float16 if str(device).startswith("cuda") else torch.float32
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if name not in dtypes:
        raise UsageError(f"unknown dtype {name!r}; choose one of: auto, {', '.join(dtypes)}")
    return dtypes[name]
