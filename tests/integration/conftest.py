"""Fixtures of the integration tests: one local Ray session for the whole test session.

Starting Ray costs 3-20 s on a small box, and a module-scoped session started it once per module
that used it (test_buckets, test_odd_inputs, test_ray). The tests that use `ray_session` run last,
together (`pytest_collection_modifyitems`), so Ray starts once and no other test runs beside its
raylet and workers."""

from __future__ import annotations

import shutil
import tempfile

import pytest


@pytest.fixture(scope="session")
def ray_session():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from gpucli.engines.ray import start_local

    temp_dir = tempfile.mkdtemp(prefix="gpucli-ray-test-")  # short: Ray's socket paths must fit 107 bytes
    start_local(temp_dir, num_cpus=2, object_store_bytes=128 * 2**20)
    yield ray
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests on the shared Ray after all others, in their own order."""
    on_ray = [item for item in items if "ray_session" in getattr(item, "fixturenames", ())]
    if on_ray:
        moved = set(on_ray)
        items[:] = [item for item in items if item not in moved] + on_ray
