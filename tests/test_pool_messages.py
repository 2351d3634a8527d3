"""The pool's message paths without model processes: what a worker sent before it went is
kept, and a batch that cannot be sent fails its inputs at once (no timeout, no hang)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import types

import numpy as np

from gpucli.config import RunConfig
from gpucli.core import task_and_spec
from gpucli.pool import PoolEvents, Worker, WorkerPool
from gpucli.records import Batch, Items
from gpucli.tasks import create_task
from tests.fake_task import FAKE


class _Loop:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def call_soon_threadsafe(self, fn, *args) -> None:
        self.calls.append((fn.__name__, args))


def test_results_sent_just_before_the_worker_exits_are_all_handed_to_the_loop():
    parent, child = mp.Pipe()
    for n in range(3):
        child.send(("result", n, None, 0.0))
    child.close()  # the worker exits right after its last results
    loop = _Loop()
    pool = types.SimpleNamespace(_loop=loop, _on_messages=WorkerPool._on_messages, _on_exit=WorkerPool._on_exit)
    process = types.SimpleNamespace(join=lambda timeout: None)
    WorkerPool._receive(pool, Worker(0, "cpu"), parent, process)
    handed = [m for name, args in loop.calls if name == "_on_messages" for m in args[2]]
    assert [m[1] for m in handed] == [0, 1, 2]
    assert loop.calls[-1][0] == "_on_exit"


def test_a_batch_that_cannot_be_sent_fails_its_inputs_at_once():
    failed: list[tuple[Batch, str]] = []

    spec = task_and_spec(RunConfig(task=FAKE, paths=(".",)))[1]

    async def scenario() -> None:
        task = create_task(spec)
        pool = WorkerPool(task, spec, ["cpu"], PoolEvents(lambda *a: None, lambda b, r: failed.append((b, r))))
        pool._loop = asyncio.get_running_loop()
        worker = pool.workers[0]
        worker.conn, _ = mp.Pipe()
        task.pack = lambda payload: lambda: None  # a payload that does not pickle
        items = Items(np.array([0]), np.array([0]), np.array([1]), ["x"], {})
        await pool.send(worker, Batch(1, items))
        for _ in range(100):
            if failed:
                break
            await asyncio.sleep(0.02)
        assert not worker.in_flight

    asyncio.run(scenario())
    assert len(failed) == 1 and "could not send the batch" in failed[0][1]
