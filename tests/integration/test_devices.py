"""`--devices auto` counts GPUs without creating a CUDA context, and without importing torch
wherever it can (the parent of a GPU run starts its workers sooner)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import pytest

from gpucli.models import devices
from gpucli.models.devices import cuda_build_of, resolve_devices, visible_gpu_count


@pytest.fixture
def nvidia_host(monkeypatch):
    """A host with the NVIDIA driver and a CUDA build of torch; NVML answers 4 GPUs."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(devices, "_driver_present", lambda: True)
    monkeypatch.setattr(devices, "_torch_cuda_build", lambda: True)
    monkeypatch.setattr(devices, "_nvml_device_count", lambda: 4)


def _torch_counts(monkeypatch, count: int) -> list[int]:
    """torch's own count, recording each time it is asked."""
    import torch

    asked: list[int] = []
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: asked.append(count) or count)
    return asked


def test_with_the_driver_and_no_cuda_visible_devices_nvml_counts_and_torch_is_not_asked(nvidia_host, monkeypatch):
    asked = _torch_counts(monkeypatch, 2)
    assert visible_gpu_count() == 4
    assert resolve_devices("auto") == [f"cuda:{i}" for i in range(4)]
    assert resolve_devices("cuda:3") == ["cuda:3"]
    assert not asked


def test_a_cuda_visible_devices_list_or_a_silent_nvml_goes_to_torch(nvidia_host, monkeypatch):
    asked = _torch_counts(monkeypatch, 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5d3c1b2a,1")  # UUIDs, MIG: torch's parsing
    assert visible_gpu_count() == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(devices, "_nvml_device_count", lambda: -1)
    assert visible_gpu_count() == 2
    assert asked == [2, 2]
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert visible_gpu_count() == 0


def test_a_cpu_build_of_torch_sees_no_gpu_even_beside_the_driver(nvidia_host, monkeypatch):
    monkeypatch.setattr(devices, "_torch_cuda_build", lambda: False)
    monkeypatch.setattr(devices, "_nvml_device_count", lambda: pytest.fail("NVML asked for a CPU build"))
    assert visible_gpu_count() == 0
    assert resolve_devices("auto") == ["cpu"]


def test_the_build_is_read_from_torch_version_py():
    import torch.version

    with open(torch.version.__file__, encoding="utf-8") as f:
        installed = cuda_build_of(f.read())
    assert installed is (torch.version.cuda is not None)
    assert cuda_build_of("__version__ = '2.13.0+cu128'\ncuda: Optional[str] = '12.8'\n") is True
    assert cuda_build_of("cuda = '12.1'\n") is True
    assert cuda_build_of("cuda: Optional[str] = None\nhip: Optional[str] = None\n") is False
    assert cuda_build_of("__version__ = '3.0'\n") is None
    assert cuda_build_of("cuda: Optional[str] = None\nhip: Optional[str] = '6.2.41133'\n") is None  # ROCm: torch counts


def test_nvml_seeing_no_gpu_means_none_and_an_unknown_build_asks_torch(nvidia_host, monkeypatch):
    asked = _torch_counts(monkeypatch, 2)
    monkeypatch.setattr(devices, "_nvml_device_count", lambda: 0)
    assert visible_gpu_count() == 0 and not asked
    monkeypatch.setattr(devices, "_torch_cuda_build", lambda: None)  # version.py unreadable, or ROCm
    assert visible_gpu_count() == 2 and asked == [2]


class _FakeNvml:
    def __init__(self, count: int, init_rc: int = 0, count_rc: int = 0) -> None:
        self.count, self.init_rc, self.count_rc, self.shut = count, init_rc, count_rc, False

    def nvmlInit_v2(self) -> int:
        return self.init_rc

    def nvmlDeviceGetCount_v2(self, ref) -> int:
        ref._obj.value = self.count
        return self.count_rc

    def nvmlShutdown(self) -> int:
        self.shut = True
        return 0


def test_nvml_is_asked_through_its_c_library_and_a_missing_one_says_so(monkeypatch):
    fake = _FakeNvml(8)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake if name == "libnvidia-ml.so.1" else None)
    assert devices._nvml_device_count() == 8 and fake.shut
    monkeypatch.setattr(ctypes, "CDLL", lambda name: _FakeNvml(8, init_rc=9))  # NVML_ERROR_DRIVER_NOT_LOADED
    assert devices._nvml_device_count() == -1
    failing = _FakeNvml(8, count_rc=999)  # NVML_ERROR_UNKNOWN
    monkeypatch.setattr(ctypes, "CDLL", lambda name: failing)
    assert devices._nvml_device_count() == -1 and failing.shut

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert devices._nvml_device_count() == -1


def test_counting_gpus_does_not_import_torch():
    """In a fresh process (torch not yet imported), with the driver and NVML faked in."""
    code = textwrap.dedent("""
        import sys
        from gpucli.models import devices
        devices._driver_present = lambda: True
        devices._nvml_device_count = lambda: 2
        build = devices._torch_cuda_build()
        assert build is False, build  # this machine's CPU wheel, read without importing it
        devices._torch_cuda_build = lambda: True
        assert devices.resolve_devices("auto") == ["cuda:0", "cuda:1"]
        assert "torch" not in sys.modules, "torch was imported"
    """)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
