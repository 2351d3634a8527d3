"""The worker process's own settings (gpucli/worker.py)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

FAULTS = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    if sys.argv[1] == "keep":
        from gpucli.worker import keep_freed_memory
        keep_freed_memory()
    faults = []
    for _ in range(6):  # like a forward pass: several ~11 MB activations alive at once, then freed
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        blocks = [np.ones((11 << 20) // 8) for _ in range(8)]
        del blocks
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(json.dumps(faults))
""")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_workers_keep_freed_memory_instead_of_faulting_it_in_every_batch():
    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True)
        return sum(json.loads(out.stdout)[2:])  # steady state: after the first passes

    default, kept = faults("default"), faults("keep")
    assert kept * 5 < default, (kept, default)


def test_worker_openmp_threads_sleep_after_a_region_unless_the_user_says_otherwise(monkeypatch):
    """Spinning OpenMP threads starved the parent's readers on shared cores (110 s against 23.6 s)."""
    from gpucli.worker import limit_threads

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
        monkeypatch.setenv(var, "")  # restored after the test: limit_threads writes them
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    limit_threads(2)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    limit_threads(2)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
