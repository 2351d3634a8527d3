"""The pool's message paths without model processes: what a worker sent before it went is
kept, and a batch that cannot be sent fails its inputs at once (no timeout, no hang)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import types

import numpy as np

from gpucli.core.config import RunConfig
from gpucli.core.records import Batch, Items, Result, Started
from gpucli.engines.job import task_and_spec
from gpucli.engines.local.events import BatchFailed
from gpucli.engines.local.pool import WorkerPool
from gpucli.engines.local.processes import receive_until_closed
from gpucli.tasks import create_task
from tests.fake_task import FAKE


def test_results_sent_just_before_the_worker_exits_are_all_handed_to_the_loop():
    parent, child = mp.Pipe()
    for n in range(3):
        child.send(Result(n, None, 0.0))
    child.close()  # the worker exits right after its last results
    handed: list[list] = []
    receive_until_closed(parent, handed.append)
    assert [m.batch_id for messages in handed for m in messages] == [0, 1, 2]


def test_a_batch_that_cannot_be_sent_fails_its_inputs_at_once():
    events: list = []

    spec = task_and_spec(RunConfig(task=FAKE, paths=(".",)))[1]

    async def scenario() -> None:
        task = create_task(spec)
        pool = WorkerPool(task, spec, ["cpu"], events.append)
        pool._loop = asyncio.get_running_loop()
        worker = pool.workers[0]
        worker.conn, _ = mp.Pipe()
        task.pack = lambda payload: lambda: None  # a payload that does not pickle
        items = Items(np.array([0]), np.array([0]), np.array([1]), ["x"], {})
        await pool.send(worker, Batch(1, items))
        for _ in range(100):
            if events:
                break
            await asyncio.sleep(0.02)
        assert not worker.in_flight

    asyncio.run(scenario())
    [failed] = events
    assert isinstance(failed, BatchFailed) and "could not send the batch" in failed.reason


def _accounts_for(task):
    from gpucli.core.progress import Counts
    from gpucli.core.summary import RunSummary
    from gpucli.output.accounts import Accounts
    from gpucli.output.settings import output_schema

    output = types.SimpleNamespace(failed=lambda failure: False)
    return Accounts(task, output, RunSummary(task="t", model="m"), Counts(), output_schema(task))


def _embed_batches(task, counts: list[int]):
    """Blocks of one-window items (one input each), as the reader hands them, and their sources."""
    from gpucli.core.records import Source

    blocks, sources, next_id = [], [], 0
    for count in counts:
        ids = np.arange(next_id, next_id + count)
        sources += [Source(int(i), f"f{i}.txt", f"/x/f{i}.txt", size=10, mtime_ns=1, digest=f"d{i}") for i in ids]
        text = np.empty(count, dtype=object)
        text[:] = [f"text {i}" for i in ids]
        blocks.append(Items(ids, np.zeros(count, np.int64), np.full(count, 3), None,
                            {"page": np.zeros(count, np.int32), "char_start": np.zeros(count, np.int64),
                             "char_end": np.full(count, 6), "text": text}))  # page 0: a format without pages
        next_id += count
    return blocks, sources


def test_results_of_one_wake_up_become_rows_together_and_each_row_keeps_its_input():
    from gpucli.core.decision import Status
    from gpucli.tasks import TaskSpec
    from gpucli.tasks.embed import EmbedTask
    COMPLETE = Status.COMPLETE

    task = EmbedTask(TaskSpec("embed", "minilm"))
    task.dims = 4
    accounts = _accounts_for(task)
    blocks, sources = _embed_batches(task, [3, 2, 4])
    for block, start in zip(blocks, (0, 3, 5)):
        accounts.expect(sources[start:start + len(block)], block)
    outputs = [np.full((len(b), 4), float(n), np.float32) for n, b in enumerate(blocks)]
    accounts.outputs_many(list(zip(blocks, outputs)))
    assert len(accounts.buffer._fresh) == 1  # one table for the three batches
    part = accounts.take_commit()
    rows = part.table.to_pylist()
    assert [r["path"] for r in rows] == [f"f{i}.txt" for i in range(9)]
    assert [r["embedding"][0] for r in rows] == [0.0] * 3 + [1.0] * 2 + [2.0] * 4
    assert [r["digest"] for r in rows] == [f"d{i}" for i in range(9)]
    assert (accounts.status[:9] == COMPLETE).all() and accounts.counts.items == 9


def test_a_bad_output_among_batches_that_came_back_together_fails_only_its_own_inputs():
    from gpucli.tasks import TaskSpec
    from gpucli.tasks.embed import EmbedTask

    task = EmbedTask(TaskSpec("embed", "minilm"))
    task.dims = 4
    accounts = _accounts_for(task)
    blocks, sources = _embed_batches(task, [2, 2, 2])
    for block, start in zip(blocks, (0, 2, 4)):
        accounts.expect(sources[start:start + len(block)], block)
    good = np.zeros((2, 4), np.float32)
    accounts.outputs_many([(blocks[0], good), (blocks[1], np.zeros((2, 3), np.float32)), (blocks[2], good)])
    commit = accounts.take_commit()  # the failure records go with the next commit
    assert sorted(f.path for f in commit.failures) == ["f2.txt", "f3.txt"]
    assert sorted(commit.table.column("path").to_pylist()) == ["f0.txt", "f1.txt", "f4.txt", "f5.txt"]
    assert accounts.counts.items == 6


def test_a_crash_is_blamed_on_the_batch_the_worker_said_it_started_not_the_oldest():
    """A worker that finished batch 1 and died in batch 2 before its sender thread wrote batch 1's
    result: the parent holds both, and the batch it was running (2) is the one blamed."""
    from gpucli.engines import recovery
    from gpucli.engines.local.in_flight import InFlight

    spec = task_and_spec(RunConfig(task=FAKE, paths=(".",)))[1]
    task = create_task(spec)
    pool = WorkerPool(task, spec, ["cpu"], lambda event: None)
    worker = pool.workers[0]
    process = types.SimpleNamespace()
    worker.process = process
    items = Items(np.array([0]), np.array([0]), np.array([1]), ["x"], {})
    for batch_id, sent_at in ((1, 1.0), (2, 2.0)):
        worker.in_flight[batch_id] = InFlight(Batch(batch_id, items), None, sent_at)
    pool._on_messages(worker, process, [Started(1), Started(2)])
    actions = recovery.after_death(pool.dispatch.take_all(worker), "exit code 3", pool.dispatch.new_id)
    assert [(a.batch.id, a.batch.attempts) for a in actions] == [(2, 1), (1, 0)]


def test_a_killed_worker_thread_is_heard_as_a_sigkill_at_once_and_ends_by_itself(monkeypatch):
    """The tests' in-process mode (a worker is a thread) stands in for a kill: the thread's Pipe is
    shut down, the parent hears the exit as after SIGKILL, and the thread leaves its loop."""
    import signal
    import threading
    import time

    from gpucli.core.records import Ready
    from gpucli.engines.local.processes import IN_PROCESS_VARIABLE, Processes, exit_text

    monkeypatch.setenv(IN_PROCESS_VARIABLE, "1")
    spec = task_and_spec(RunConfig(task=FAKE, paths=(".",)))[1]
    heard: list = []

    async def scenario() -> None:
        ready, exited = asyncio.Event(), asyncio.Event()

        def on_messages(worker, process, messages) -> None:
            heard.extend(messages)
            if any(isinstance(m, Ready) for m in messages):
                ready.set()

        def on_exit(worker, process) -> None:
            heard.append(process.exitcode)
            exited.set()

        processes = Processes(spec, ["cpu"], 1, on_messages, on_exit)
        processes.spawn(processes.workers[0])
        await asyncio.wait_for(ready.wait(), 30)
        processes.kill(processes.workers[0], "stuck")
        await asyncio.wait_for(exited.wait(), 30)

    asyncio.run(scenario())
    assert isinstance(heard[0], Ready) and exit_text(heard[-1]) == "killed by SIGKILL" == \
        exit_text(-signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(t.name == "gpucli-worker-0" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(t.name == "gpucli-worker-0" for t in threading.enumerate()), "the worker thread went on"
