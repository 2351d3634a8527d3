"""The pool's decisions on plain data (gpucli/engines/local/in_flight.py, gpucli/engines/local/watchdog.py), and how it turns
worker messages into the run's events (gpucli/engines/local/pool.py): no processes are spawned."""

from __future__ import annotations

import asyncio
import types

import numpy as np

from gpucli.core.records import Batch, Failed, FailureKind, Items, Ready, Result, SetupFailed, Started
from gpucli.engines.local.events import BatchDone, BatchesDone, BatchFailed, OutOfMemory, PoolLog
from gpucli.engines.local.in_flight import Dispatch, InFlight, blame_order, free_worker
from gpucli.engines.local.pool import WorkerPool
from gpucli.engines.local.processes import Worker
from gpucli.engines.local.watchdog import Timeouts, overdue
from gpucli.tasks import TaskSpec, create_task


def items(n: int = 1) -> Items:
    return Items(np.arange(n), np.zeros(n, np.int64), np.ones(n, np.int64), [f"p{i}" for i in range(n)], {})


def worker(index: int = 0, holding: int = 0, alive: bool = True, ready: bool = True) -> Worker:
    w = Worker(index, "cpu", alive=alive, ready=ready)
    for k in range(holding):
        w.in_flight[100 * index + k] = InFlight(Batch(100 * index + k, items()), None, float(k))
    return w


class CountingTask:
    def __init__(self) -> None:
        self.released: list = []

    def pack(self, payload):
        return ("packed", tuple(payload))

    def release(self, packed) -> None:
        self.released.append(packed)


# --- dispatch --------------------------------------------------------------------------------

def test_the_next_batch_goes_to_the_live_worker_with_the_fewest_in_flight():
    busy, light, dead = worker(0, holding=1), worker(1), worker(2, alive=False)
    assert free_worker([busy, light, dead], max_in_flight=2) is light
    assert free_worker([worker(0, holding=2), dead], max_in_flight=2) is None, "full or dead: nobody has room"
    loading = worker(3, ready=False)
    assert free_worker([loading], max_in_flight=2) is loading, "a loading worker's batches wait in its Pipe"


def test_a_dead_worker_blames_the_batch_it_said_it_started_then_the_oldest():
    w = worker(0, holding=3)
    w.running = 2
    assert [r.batch.id for r in blame_order(w)] == [2, 0, 1]
    w.running = None
    assert [r.batch.id for r in blame_order(w)] == [0, 1, 2]


def test_every_packed_payload_is_released_once_whether_answered_or_taken_back():
    task = CountingTask()
    w = worker(0)
    dispatch = Dispatch(task, [w], max_in_flight=2)
    dispatch.hand(w, Batch(1, items(2)))
    dispatch.hand(w, Batch(2, items(1)))
    assert dispatch.in_flight_count() == 2 and not dispatch.idle()
    assert dispatch.finish(w, 1).batch.id == 1
    assert dispatch.finish(w, 1) is None, "a batch answered twice is answered once"
    assert [b.id for b in dispatch.take_all(w)] == [2]
    assert len(task.released) == 2 and dispatch.idle()


def test_split_batches_get_ids_apart_from_the_dispatchers():
    dispatch = Dispatch(CountingTask(), [], max_in_flight=2)
    assert dispatch.new_id() != dispatch.new_id() and dispatch.new_id() > 10**9


# --- watchdog --------------------------------------------------------------------------------

TIMEOUTS = Timeouts(batch_s=60.0, setup_s=300.0)


def test_a_worker_still_loading_past_the_setup_timeout_is_overdue():
    w = worker(0, ready=False)
    w.spawned_at = 1000.0
    assert overdue(w, 1000.0 + 299, TIMEOUTS) == ""
    assert "did not load the model within 300s" in overdue(w, 1000.0 + 301, TIMEOUTS)


def test_a_worker_on_one_batch_past_the_batch_timeout_is_overdue_but_an_idle_one_is_not():
    w = worker(0, holding=1)
    w.busy_since = 50.0
    assert overdue(w, 50.0 + 61, TIMEOUTS) == "batch timed out after 60s"
    assert overdue(worker(0), 10**6, TIMEOUTS) == "", "nothing in flight: nothing can time out"


def test_a_worker_gone_or_already_being_killed_is_left_alone():
    dead, killed = worker(0, holding=1, alive=False), worker(1, holding=1)
    killed.kill_reason = "batch timed out after 60s"
    assert overdue(dead, 10**6, TIMEOUTS) == "" and overdue(killed, 10**6, TIMEOUTS) == ""


# --- messages into events --------------------------------------------------------------------

def pool_with_one_worker(events: list) -> tuple[WorkerPool, Worker, object]:
    spec = TaskSpec("tests.fake_task:FakeTask", "fake-model")
    pool = WorkerPool(create_task(spec), spec, ["cpu"], events.append)
    w = pool.workers[0]
    w.process, w.alive = types.SimpleNamespace(exitcode=None), True
    return pool, w, w.process


def test_results_of_one_wake_up_reach_the_run_as_one_event_in_order():
    events: list = []
    pool, w, process = pool_with_one_worker(events)
    for batch_id in (1, 2):
        pool.dispatch.hand(w, Batch(batch_id, items(batch_id)))
    pool._on_messages(w, process, [Ready(1, "cpu"), Started(1), Result(1, ["a"], 0.5), Started(2),
                                   Result(2, ["b", "c"], 0.25)])
    [done] = events
    assert isinstance(done, BatchesDone) and [len(d.items) for d in done.batches] == [1, 2]
    assert done.batches[1] == BatchDone(done.batches[1].items, ["b", "c"])
    assert w.ready and w.infer_s == 0.75 and pool.idle()


def test_an_out_of_memory_error_is_told_and_its_batch_halved_for_a_resend():
    events: list = []
    pool, w, process = pool_with_one_worker(events)
    pool.dispatch.hand(w, Batch(1, items(4)))
    pool._on_messages(w, process, [Failed(1, FailureKind.OOM, "MemoryError: x")])
    assert events == [OutOfMemory(4)]
    assert [len(b) for b in pool.retry] == [2, 2]


def test_a_batch_of_one_that_raised_fails_its_input():
    events: list = []
    pool, w, process = pool_with_one_worker(events)
    pool.dispatch.hand(w, Batch(1, items(1)))
    pool._on_messages(w, process, [Failed(1, FailureKind.ERROR, "ValueError: BOOM")])
    [failed] = events
    assert isinstance(failed, BatchFailed) and failed.reason == "ValueError: BOOM" and not pool.retry


def test_messages_from_a_replaced_worker_are_ignored():
    events: list = []
    pool, w, _ = pool_with_one_worker(events)
    pool.dispatch.hand(w, Batch(1, items(1)))
    pool._on_messages(w, types.SimpleNamespace(), [Result(1, ["a"], 0.1)])
    assert events == [] and pool.in_flight_count() == 1


def test_a_setup_failure_is_kept_for_start_to_report():
    pool, w, process = pool_with_one_worker([])
    pool._on_messages(w, process, [SetupFailed("RuntimeError: no GPU")])
    assert pool._setup_errors == {0: "RuntimeError: no GPU"}


def test_a_message_the_pool_does_not_know_stops_the_run_as_a_bug():
    pool, w, process = pool_with_one_worker([])
    pool._on_messages(w, process, [("result", 1, None, 0.0)])  # the old tuple protocol
    assert pool.fatal is not None and "This is a bug" in str(pool.fatal)


def test_a_death_mid_run_resends_its_batches_and_is_told_with_the_restart():
    events: list = []

    async def scenario() -> WorkerPool:
        pool, w, process = pool_with_one_worker(events)
        pool._loop, pool._started, w.ready = asyncio.get_running_loop(), True, True
        pool.dispatch.hand(w, Batch(1, items(2)))
        process.exitcode = -9
        pool._on_exit(w, process)
        pool._closing = True  # the restart itself (a spawn, after the backoff) is not under test
        return pool

    pool = asyncio.run(scenario())
    assert not pool.workers[0].alive and [(b.id, b.attempts) for b in pool.retry] == [(1, 1)]
    assert pool.restarts.used == 1
    [log] = events
    assert isinstance(log, PoolLog) and "worker 0 (cpu) died (killed by SIGKILL); restarting in" in log.message
