"""JSON lines: the same rows as the Parquet sink, one object per line (vectors as lists)."""

from __future__ import annotations

import json
import os
import time
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
        self._run = f"{time.time_ns():x}"  # unique per run: a location names one write of one run
        self._writes = 0

    def write(self, table) -> str:
        lines = [json.dumps(row, ensure_ascii=False, default=_plain) for row in table.to_pylist()]
        self._file.write("\n".join(lines) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._writes += 1
        return f"{self._run}-{self._writes}"

    def reset(self) -> None:
        self._file.truncate(0)

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> None:
        """Rewrite the file: a pruned path loses every row; a redone path keeps only its
        last block of rows (a file's rows are always written together, newest last)."""
        redone = set().union(*stale.values()) - pruned if stale else set()
        if not redone and not pruned:
            return
        with open(self.path, encoding="utf-8") as f:
            lines = f.readlines()
        paths = [json.loads(line)["path"] for line in lines]
        last_block: dict[str, int] = {}
        for i, path in enumerate(paths):
            if path in redone and (i == 0 or paths[i - 1] != path):
                last_block[path] = i
        keep = []
        for i, (line, path) in enumerate(zip(lines, paths)):
            if path in pruned:
                continue
            if path in redone and i < last_block[path]:
                continue
            keep.append(line)
        tmp = self.path.with_name(f".{self.path.name}.inprogress")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(keep)
            f.flush()
            os.fsync(f.fileno())
        self._file.close()
        os.replace(tmp, self.path)
        self._file = open(self.path, "a", encoding="utf-8")

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
