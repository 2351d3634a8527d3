"""Simulation hooks for the overlap benchmark; they live here, not in the CLI.

SimTask: a device that sleeps `device_ms` per batch (releasing the CPU, as a GPU kernel
would) and returns a tiny vector per item. Each non-empty line of a .txt file is one item.
SlowSink: a sink whose every write sleeps `sink_ms` (a remote vector database's upsert).
The sink registry only scans gpucli/output/sinks/, so drive.py installs SlowSink by replacing
`gpucli.engines.local.pipeline.open_sink` in its own process (the sink lives only in the parent).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpucli.core.records import Item, Source
from gpucli.output.sinks.base import Sink
from gpucli.tasks.base import Task


@dataclass(frozen=True)
class SimOptions:
    device_ms: float = 10.0
    load_s: float = 0.0  # a model load: the parent reads ahead and warms up meanwhile, as with a real model
    trace: str = ""  # a file to append "start end items" per batch (time.monotonic), for the timeline


class SimTask(Task):
    name = "sim"
    help = "simulated device: sleeps per batch"
    suffixes = (".txt",)
    Options = SimOptions
    default_model = "sim"
    cost_name = "items"
    default_batch_size = 16
    default_max_cost = 0

    def schema(self):
        import pyarrow as pa

        return pa.schema([("chunk", pa.int32()), ("embedding", pa.list_(pa.float32(), 4))])

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        lines = [line for line in data.decode("utf-8").splitlines() if line.strip()]
        return [Item(source.id, i, line, 1, {"chunk": i}) for i, line in enumerate(lines)]

    def setup(self, device: str) -> None:
        time.sleep(self.options.load_s)
        self.trace = open(self.options.trace, "a", buffering=1) if self.options.trace else None

    def predict(self, payloads: list[Any]) -> list[dict[str, Any]]:
        start = time.monotonic()
        time.sleep(self.options.device_ms / 1000)
        if self.trace is not None:
            self.trace.write(f"{start} {time.monotonic()} {len(payloads)}\n")
        return [{"embedding": [float(len(p)), 0.0, 0.0, 0.0]} for p in payloads]


class SlowSink(Sink):
    name = ""  # never registered: installed by drive.py for the overlap benchmark only
    sink_ms = 200.0

    @classmethod
    def accepts(cls, target: str) -> bool:
        return True

    @property
    def failures_path(self) -> str:
        return self.target.rstrip("/") + ".failures.jsonl"

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.writes = 0
        self.rows = 0
        self.spans: list[tuple[float, float, int]] = []  # (start, end, rows), time.monotonic

    def write(self, table) -> None:
        start = time.monotonic()
        time.sleep(self.sink_ms / 1000)
        self.writes += 1
        self.rows += table.num_rows
        self.spans.append((start, time.monotonic(), table.num_rows))
