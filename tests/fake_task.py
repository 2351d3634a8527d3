"""A deterministic fake task that drives the whole pipeline in seconds (no model).

Each non-empty line of a .txt file is one item; its cost is its word count. The "model"
returns the line's word count and the lengths of its first four words (llm's EmbedDemo).
Markers in a line make the worker misbehave, for the failure-path tests:
  CRASH   the worker process dies (os._exit), like a native decoder crash
  BOOM    predict raises for the batch holding this line
  HANG    the worker hangs (for the batch timeout)
  DIE_IN_PREPARE (anywhere in a file) the process preparing it dies
Options make setup fail, raise out-of-memory above a batch size, log every batch (size
and cost) to a file the test reads, and leave a marker if the worker's teardown runs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from gpucli.core.errors import InputError
from gpucli.core.records import Item, Source
from gpucli.tasks.base import Task


@dataclass(frozen=True)
class FakeOptions:
    batch_log: str = ""
    fail_setup: str = ""
    fail_setup_again: str = ""  # a marker file: the first setup makes it, every later setup fails
    oom_above: int = 0
    sleep_ms: float = 0.0
    exit_marker: str = ""  # a file the worker's interpreter teardown (atexit) would write
    setup_sleep_s: float = 0.0  # a model that takes this long to load (a hang, when long)
    ready_marker: str = ""  # a file setup writes when it starts loading
    read_waits_for: str = ""  # prepare waits (up to 20 s) for this file, then fails the input
    predict_waits_for: str = ""  # predict waits (up to 120 s, a hang guard) for this file
    slow_node: str = ""  # on the Ray node started with GPUCLI_TEST_NODE=<this> (tests/ray_cluster.py) ...
    slow_node_ms: float = 0.0  # ... every batch sleeps this much longer
    dedup: bool = False  # identical content once (gpucli/output/dedup.py), as embed's --dedup


class FakeTask(Task):
    name = "fake"
    help = "test task"
    suffixes = (".txt",)
    Options = FakeOptions
    reads_tables = True  # --from TABLE (gpucli/inputs/tables.py)
    default_model = "fake-model"
    cost_name = "words"
    default_batch_size = 8
    default_max_cost = 0

    def info(self) -> dict[str, str]:
        return {"gpucli.model": self.spec.model, "gpucli.dims": "4"}

    def schema(self):
        import pyarrow as pa

        return pa.schema([("chunk", pa.int32()), ("text", pa.string()), ("words", pa.int64()),
                          ("embedding", pa.list_(pa.float32(), 4))])

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("decode", "not UTF-8") from None
        if self.options.read_waits_for:
            _wait_for(self.options.read_waits_for, 20.0)
        if "DIE_IN_PREPARE" in text:  # a decoder that takes its process down (out of memory)
            _in_a_process("DIE_IN_PREPARE")
            os._exit(9)
        lines = [line for line in text.splitlines() if line.strip()]
        return [Item(source.id, i, line, max(1, len(line.split())), {"chunk": i, "text": line})
                for i, line in enumerate(lines)]

    def setup(self, device: str) -> None:
        if self.options.ready_marker:
            from pathlib import Path

            Path(self.options.ready_marker).write_text("loading")
        if self.options.setup_sleep_s:
            time.sleep(self.options.setup_sleep_s)
        if self.options.fail_setup:
            raise RuntimeError(self.options.fail_setup)
        if self.options.fail_setup_again:
            from pathlib import Path

            marker = Path(self.options.fail_setup_again)
            if marker.exists():
                raise RuntimeError("the device is gone after the restart")
            marker.write_text("set up once")
        self.pid = os.getpid()
        if self.options.exit_marker:
            import atexit
            from pathlib import Path

            atexit.register(Path(self.options.exit_marker).write_text, "teardown ran")

    def predict(self, payloads: list[str]) -> list[dict[str, Any]]:
        cost = sum(max(1, len(p.split())) for p in payloads)
        if self.options.batch_log:
            with open(self.options.batch_log, "a") as f:
                f.write(json.dumps({"size": len(payloads), "cost": cost, "pid": self.pid, "texts": list(payloads),
                                    "worker": f"{self.pid}/{threading.current_thread().name}",  # a thread too
                                    "node": os.environ.get("GPUCLI_TEST_NODE", "")}) + "\n")
        if any("CRASH" in p for p in payloads):
            _in_a_process("CRASH")
            os._exit(3)
        if any("BOOM" in p for p in payloads):
            raise ValueError("BOOM in batch")
        if self.options.oom_above and len(payloads) > self.options.oom_above:
            raise MemoryError(f"fake out of memory for a batch of {len(payloads)}")
        if any("HANG" in p for p in payloads):
            _in_a_process("HANG")
            time.sleep(3600)
        if self.options.sleep_ms:
            time.sleep(self.options.sleep_ms / 1000)
        if self.options.predict_waits_for:
            _wait_for(self.options.predict_waits_for, 120.0)
        if self.options.slow_node and os.environ.get("GPUCLI_TEST_NODE") == self.options.slow_node:
            time.sleep(self.options.slow_node_ms / 1000)
        out = []
        for p in payloads:
            lengths = [float(len(w)) for w in p.split()[:4]]
            out.append({"words": len(p.split()), "embedding": lengths + [0.0] * (4 - len(lengths))})
        return out


FAKE = "tests.fake_task:FakeTask"
MISPLACED: list[str] = []  # markers met in a thread of the test process (tests/conftest.py fails the test)


def _in_a_process(marker: str) -> None:
    """CRASH, HANG and DIE_IN_PREPARE take down or stall the process they run in: in a worker
    thread of pytest's own process (processes.py's in-process mode) or a reader thread there, that
    would be pytest itself, so they raise instead, and the test fails for want of its marker.
    Elsewhere (spawned workers, readers, Ray's actors, a test's subprocess) they do what they say."""
    if os.environ.get(PYTEST_PID) == str(os.getpid()) and threading.current_thread() is not threading.main_thread():
        MISPLACED.append(marker)
        raise RuntimeError(f"{marker} in a thread of the test process")


PYTEST_PID = "GPUCLI_TEST_PYTEST_PID"  # set by tests/conftest.py: the pid of pytest's own process


def _wait_for(path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise InputError("read", f"{path} did not appear within {timeout_s:g}s")
        time.sleep(0.02)
