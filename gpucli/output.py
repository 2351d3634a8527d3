"""The output side of a run, opened and closed as one: sink, run lock, ledger, failures log.

Shared by every engine (local processes, Ray), so that the lock, the incremental rules and
the failure records are the same whatever runs the model.
"""

from __future__ import annotations

import os
from typing import Any

from gpucli.records import Failure, Source
from gpucli.sinks import Sink, open_sink
from gpucli.state import Ledger, RunLock, fingerprint
from gpucli.writer import FailureLog


class Output:
    def __init__(self, target: str, incremental: bool = True) -> None:
        self.sink: Sink = open_sink(target)
        self.incremental = incremental
        self.lock = RunLock(self.sink.state_dir)
        self.ledger: Ledger | None = None
        self.failures: FailureLog | None = None
        self.pruned: set[str] = set()

    @property
    def display(self) -> str:
        return self.sink.display

    def open(self, schema: Any, metadata: dict[str, str], settings: dict[str, Any]) -> None:
        """Take the lock (or raise LockedError), open the sink, check the settings against the
        ledger (`settings` is everything that changes the output), repair what a crashed run
        left behind. Blocking: call from a thread."""
        self.lock.acquire(self.sink.display)
        try:
            self.sink.open(schema, metadata)
        except BaseException:
            self.lock.release()
            raise
        try:
            self.ledger = self._open_ledger({**settings, "weights": _weights_signature(
                metadata.get("gpucli.model_path", ""))})
            self.failures = FailureLog(self.sink.failures_path)
        except BaseException:
            self.sink.close()  # frees what the sink holds (embedded Qdrant locks its directory)
            if self.ledger is not None:
                self.ledger.close()
            self.lock.release()
            raise

    def _open_ledger(self, settings: dict[str, Any]) -> Ledger:
        ledger = Ledger(self.sink.state_dir)
        value = fingerprint(settings)
        rebuild = ledger.check_fingerprint(value, full=not self.incremental, describe="model, options or dtype")
        if rebuild:
            if not ledger.is_new() or not self.incremental:
                # --full, or other settings with --full: empty the output. A missing ledger alone
                # empties nothing (a shared Qdrant collection, a state directory deleted by
                # hand): ids upsert in place, and Parquet parts it does not know are removed below.
                self.sink.reset()
            ledger.reset(value)
        for orphan in self.sink.locations() - ledger.locations():
            self.sink.remove_location(orphan)
        self._remove_stale(ledger)
        return ledger

    def close(self, clean: bool = True) -> None:
        """Remove superseded rows (when the run's writes all landed), then release everything."""
        try:
            if clean and self.ledger is not None:
                self._remove_stale(self.ledger)
        finally:
            self.sink.close()
            if self.failures is not None:
                self.failures.close()
            if self.ledger is not None:
                self.ledger.close()
            self.lock.release()

    def _remove_stale(self, ledger: Ledger) -> None:
        stale = ledger.stale()
        if stale:
            self.sink.supersede(stale, self.pruned)
            ledger.clear_stale(stale)

    # --- during the run ------------------------------------------------------------------
    def lookup(self):
        """For the reader: the ledger's entries, or None for `--full`."""
        return self.ledger.lookup if self.incremental else None

    def commit(self, sources: list[Source], rows: list[int], location: str | None) -> None:
        """After the sink made these rows durable (writer thread)."""
        self.ledger.mark_done(sources, rows, location)

    def failed(self, failure: Failure) -> None:
        self.failures.add(failure)
        if failure.stage != "skip":
            self.ledger.mark_failed(failure.path, failure.error)

    def unchanged(self, source: Source) -> None:
        self.ledger.mark_unchanged(source)

    def prune(self, seen: set[str]) -> int:
        """Forget inputs done earlier that this run's walk did not find; their rows go at close."""
        gone = [path for path in self.ledger.done_paths() if path not in seen]
        self.ledger.prune(gone)
        self.pruned.update(gone)
        return len(gone)


def _weights_signature(path: str) -> list:
    """Names and sizes of the weight files: a cheap identity of the weights in the fingerprint."""
    if not path or not os.path.isdir(path):
        return []
    suffixes = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".ckpt")
    return sorted((name, os.path.getsize(os.path.join(path, name))) for name in os.listdir(path)
                  if name.endswith(suffixes))
