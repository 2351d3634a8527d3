"""The output side of a run, opened and closed as one: sink, run lock, ledger, failures log.

Shared by every engine (local processes, Ray), so that the lock, the incremental rules and
the failure records are the same whatever runs the model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpucli.errors import RunFailedError
from gpucli.records import Failure, Source
from gpucli.sinks import Sink, open_sink
from gpucli.state import Ledger, RunLock, fingerprint
from gpucli.writer import FailureLog

if TYPE_CHECKING:
    from gpucli.reader import WalkReport


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

    # --- --prune: only what the walk could see is known to be gone -------------------------
    def mark_seen(self, paths: list[str]) -> None:
        """The paths this run's walk found (inputs and failure records), once per read chunk
        from a reader thread; kept in the ledger, not in memory (it grows with the tree)."""
        self.ledger.mark_seen(paths)

    def prune(self, report: WalkReport, prune_all: bool = False, log: Callable[[str], None] | None = None) -> int:
        """After a complete walk: forget inputs done earlier that it did not find, but only
        where it could see (a root it listed, not under a directory it could not list, not
        under an empty root unless `prune_all`); their rows go at close. Removing every row of
        a non-empty output is refused (RunFailedError, exit 3, nothing removed) unless
        `prune_all`: it is what a moved mount point or a changed root argument looks like."""
        log = log or (lambda message: None)
        if not report.complete:
            log("--prune: the walk did not finish; nothing pruned")
            return 0
        for note in report.notes(prune_all):
            log(f"--prune: {note}")
        gone = [path for path in self.ledger.unseen_done() if report.may_prune(path, prune_all)]
        if gone and not prune_all and len(gone) == self.ledger.done_count():
            raise RunFailedError(
                f"--prune would remove every row of {self.display} ({len(gone)} inputs): none of its inputs "
                "was found under the paths given (rows are named relative to the root argument). Nothing was "
                "removed. Check the paths, or pass --prune-all to remove them")
        self.ledger.prune(gone)
        self.pruned.update(gone)
        return len(gone)

    def walk_exclusions(self) -> list[str]:
        """What the walk must never read: the output itself (a Parquet directory, a JSONL file,
        an embedded Qdrant's storage directory), its failures file and its state directory.
        Inside the input tree they would be read as inputs (`.jsonl` and `.json` are embed
        suffixes, and the failures file exists before the walk)."""
        sink = self.sink
        parsed = getattr(sink, "parsed", None)  # a Qdrant target: only embedded mode is on disk
        own = (parsed.path if parsed.local else "") if parsed is not None else sink.target
        return [str(p) for p in (own, sink.failures_path, sink.state_dir) if str(p)]


def _weights_signature(path: str) -> list:
    """Names and sizes of the weight files: a cheap identity of the weights in the fingerprint."""
    if not path or not os.path.isdir(path):
        return []
    suffixes = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".ckpt")
    return sorted((name, os.path.getsize(os.path.join(path, name))) for name in os.listdir(path)
                  if name.endswith(suffixes))
