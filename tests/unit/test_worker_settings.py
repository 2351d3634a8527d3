"""The worker process's own settings (gpucli/engines/local/worker.py). How many page faults the allocator
setting saves is measured, not asserted: benchmarks/page_faults.py."""

from __future__ import annotations

import os


def test_worker_openmp_threads_sleep_after_a_region_unless_the_user_says_otherwise(monkeypatch):
    """Spinning OpenMP threads starved the parent's readers on shared cores (110 s against 23.6 s)."""
    from gpucli.engines.local.worker import limit_threads

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
        monkeypatch.setenv(var, "")  # restored after the test: limit_threads writes them
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    limit_threads(2)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    limit_threads(2)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
