"""JSON lines: the same rows as the Parquet sink, one object per line (vectors as lists)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gpucli.sinks.base import Sink


class JsonlSink(Sink):
    name = "jsonl"
    help = "a file ending in .jsonl"

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.path = Path(target)
        self._file = None

    @classmethod
    def accepts(cls, target: str) -> bool:
        return target.lower().endswith(".jsonl") and not target.lower().endswith(".failures.jsonl")

    @property
    def failures_path(self) -> str:
        return str(self.path.with_suffix(".failures.jsonl"))

    def open(self, schema, metadata: dict[str, str]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, table) -> None:
        lines = [json.dumps(row, ensure_ascii=False, default=_plain) for row in table.to_pylist()]
        self._file.write("\n".join(lines) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _plain(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
