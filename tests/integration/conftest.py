"""Fixtures of the integration tests: one local Ray session shared by a module's Ray tests."""

from __future__ import annotations

import shutil
import tempfile

import pytest


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from gpucli.engines.ray import start_local

    temp_dir = tempfile.mkdtemp(prefix="gpucli-ray-test-")  # short: Ray's socket paths must fit 107 bytes
    start_local(temp_dir, num_cpus=2, object_store_bytes=128 * 2**20)
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)
