"""The worker process's own settings (gpucli/worker.py)."""

from __future__ import annotations

import json
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
