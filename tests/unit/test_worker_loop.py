"""The worker's loop (gpucli/engines/local/worker.py) driven without a process: a Pipe made of two
`queue.Queue`s, a fake task, and the stop sentinel (LitServe's test_batched_loop)."""

from __future__ import annotations

import pickle
import queue
import threading
from typing import Any

import numpy as np
import pytest

from gpucli.core.records import Failed, FailureKind, Ready, Result, SetupFailed, Started, Work
from gpucli.engines.local.worker import STOP, run_loop, set_up

HANG_GUARD_S = 30.0  # a broken loop fails the test instead of hanging it; no timing is asserted


class QueueConn:
    """Both ends of a duplex Pipe as queues. Every message is pickled on the way, as a real
    Pipe would: what does not pickle fails here too."""

    def __init__(self) -> None:
        self.to_worker: queue.Queue = queue.Queue()
        self.to_parent: queue.Queue = queue.Queue()

    # the worker's end
    def recv(self) -> Any:
        try:
            return pickle.loads(self.to_worker.get(timeout=HANG_GUARD_S))
        except queue.Empty:
            raise EOFError("the test stopped feeding the worker") from None

    def send(self, message: Any) -> None:
        self.to_parent.put(pickle.loads(pickle.dumps(message, protocol=5)))

    # the parent's end
    def give(self, message: Any) -> None:
        self.to_worker.put(pickle.dumps(message, protocol=5))

    def answer(self) -> Any:
        return self.to_parent.get(timeout=HANG_GUARD_S)


class FakeTask:
    """Outputs one float32 row per payload (its length); markers in a payload misbehave."""

    name = "fake-loop"

    def unpack(self, packed: Any) -> list[str]:
        if "BADPACK" in packed:
            raise ValueError("cannot unpack")
        return list(packed)

    def predict(self, payloads: list[str]) -> np.ndarray:
        if "BOOM" in payloads:
            raise ValueError("BOOM in batch")
        if "OOM" in payloads:
            raise MemoryError("fake out of memory")
        if "SHORT" in payloads:
            return np.zeros((len(payloads) - 1, 1), np.float32)
        return np.array([[len(p)] for p in payloads], np.float32)


@pytest.fixture
def worker():
    """A running loop on a QueueConn; after the test the sentinel must end it."""
    conn = QueueConn()
    thread = threading.Thread(target=run_loop, args=(conn, FakeTask()), daemon=True)
    thread.start()
    yield conn
    conn.give(STOP)
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "the stop sentinel did not end the loop"


def outcome(conn: QueueConn, batch_id: int) -> Result | Failed:
    """The batch's Result or Failed; a Started before it must name the same batch."""
    while isinstance(message := conn.answer(), Started):
        assert message.batch_id == batch_id
    return message


def test_each_batch_is_started_then_answered_with_one_output_per_item(worker):
    worker.give(Work(1, ["a", "bcd"]))
    assert worker.answer() == Started(1)
    result = worker.answer()
    assert isinstance(result, Result) and result.batch_id == 1 and result.seconds >= 0
    assert result.outputs.tolist() == [[1.0], [3.0]]
    worker.give(Work(2, ["xy"]))
    assert outcome(worker, 2).outputs.tolist() == [[2.0]]


def test_an_exception_in_predict_is_a_failed_error_and_the_loop_goes_on(worker):
    worker.give(Work(7, ["ok", "BOOM"]))
    failed = outcome(worker, 7)
    assert failed == Failed(7, FailureKind.ERROR, failed.message)
    assert failed.message.startswith("ValueError: BOOM in batch")
    worker.give(Work(8, ["ok"]))
    assert isinstance(outcome(worker, 8), Result)


def test_out_of_memory_is_a_failed_of_kind_oom(worker):
    worker.give(Work(3, ["OOM", "b"]))
    failed = outcome(worker, 3)
    assert isinstance(failed, Failed) and failed.kind is FailureKind.OOM and "MemoryError" in failed.message


def test_a_task_that_returns_too_few_outputs_fails_the_batch_as_a_bug_in_the_task(worker):
    worker.give(Work(4, ["a", "SHORT"]))
    failed = outcome(worker, 4)
    assert failed.kind is FailureKind.ERROR and "one output per input. This is a bug in the task" in failed.message


def test_a_payload_that_cannot_be_unpacked_fails_without_being_started(worker):
    worker.give(Work(5, ["BADPACK"]))
    failed = worker.answer()
    assert isinstance(failed, Failed) and failed.batch_id == 5 and failed.kind is FailureKind.ERROR
    assert "cannot unpack" in failed.message


def test_the_loop_ends_quietly_when_the_parent_goes_away():
    class GoneConn(QueueConn):
        def recv(self) -> Any:
            raise EOFError

    conn = GoneConn()
    thread = threading.Thread(target=run_loop, args=(conn, FakeTask()), daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive() and conn.to_parent.empty()


def test_a_result_pickles_as_its_outputs_buffer_and_a_few_bytes():
    """One crosses a Pipe per batch: the message itself must not cost more than a tuple did."""
    outputs = np.zeros((64, 384), np.float32)
    assert len(pickle.dumps(Result(1, outputs, 0.5), protocol=5)) < outputs.nbytes + 200
    assert len(pickle.dumps(Failed(1, FailureKind.OOM, "x"), protocol=5)) < 120


def test_a_task_that_cannot_be_set_up_is_its_own_error_for_the_parent(monkeypatch):
    from gpucli.tasks import TaskSpec

    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
                "OMP_WAIT_POLICY"):
        monkeypatch.setenv(var, "")  # restored after the test: set_up writes the worker's settings
    failed = set_up(TaskSpec("tests.fake_task:FakeTask", "fake-model", {"fail_setup": "no device here"}), "cpu", 1)
    assert isinstance(failed, SetupFailed) and "RuntimeError: no device here" in failed.message
    assert pickle.loads(pickle.dumps(Ready(123, "cpu"))) == Ready(123, "cpu")
