"""`--dry-run`: the walk, the filters and the ledger's decision per input, without a model,
a lock or a write. One JSON line per input on stdout: {"path", "action", "reason"}, where
action is `run` (new, changed, or failed before), `unchanged` (done with the same size and
mtime: a run skips it without reading it), `fail` or `skip` (the walk's own records), or
`prune` (with --prune: done earlier, gone now, where the walk could see). A task that reads
several formats (embed) adds `format`: what the input would be read as ("pdf", "html", "text")."""

from __future__ import annotations

import json
import sqlite3
import sys
from typing import Any

from gpucli.config import RunConfig
from gpucli.core import Job, RunSummary
from gpucli.errors import DAMAGED_HINT, LedgerDamaged, UsageError, sqlite_error
from gpucli.sinks import open_sink
from gpucli.tables import split_key


def dry_run(config: RunConfig) -> RunSummary:
    job = Job(config)
    sink = open_sink(config.out or f"{job.task_cls.name}.parquet", state_dir=config.state_dir)
    known = _Ledger(sink.state_dir / "ledger.sqlite")
    summary = job.summary
    summary.out, summary.dry_run = sink.display, True
    seen = set()
    own = [str(p) for p in (sink.target, sink.failures_path, sink.state_dir)]
    for found in job.walk(exclude=own):
        if found.failure is not None:
            _say(found.failure.path, "skip" if found.failure.stage == "skip" else "fail", found.failure.error)
            seen.add(found.failure.path)
            summary.skipped += found.failure.stage == "skip"
            summary.failed += found.failure.stage != "skip"
            continue
        source = found.source
        seen.add(source.path)
        action, reason = known.decide(source) if config.incremental else ("run", "--full")
        summary.unchanged += action == "unchanged"
        summary.succeeded += action == "run"  # what a run would process
        _say(source.path, action, reason, job.task_cls.read_as(source.path))
    if config.prune:
        for path in known.done_paths() - seen:
            if job.report.may_prune(path, config.prune_all):
                summary.pruned += 1
                _say(path, "prune", "done earlier, not found by this walk")
    summary.inputs = summary.succeeded + summary.unchanged + summary.failed + summary.skipped
    job.counts.found = summary.inputs
    summary.exit_code = 0
    return summary


def _say(path: str, action: str, reason: str, read_as: str | None = None) -> None:
    path, record_id = split_key(path)  # a table's record (embed --from): `path` and `id`
    where = {"path": path} if record_id is None else {"path": path, "id": record_id}
    shown = {"format": read_as} if read_as and record_id is None else {}  # what the input would be read as
    print(json.dumps({**where, "action": action, "reason": reason, **shown}, ensure_ascii=False), flush=True)


class _Ledger:
    """The output's ledger, read-only (no lock taken: a run may be writing); empty when missing."""

    def __init__(self, path: Any) -> None:
        """A WAL ledger opened read-only still gets `-wal` and `-shm` files made beside it, so
        one without a `-wal` (closed cleanly: no run is writing it, its rows are all in the main
        file) is opened `immutable`, which makes and locks nothing: the output stays byte for
        byte as it was. With a `-wal` (a run is writing, or one died) both files are there
        already, and a plain read-only open sees what that run committed. A damaged file is
        read through at open (quick_check) and named, with what to do (errors.LedgerDamaged)."""
        self._db = None
        if path.is_file():
            wal = path.with_name(path.name + "-wal").exists()
            self._db = sqlite3.connect(f"{path.resolve().as_uri()}?{'mode=ro' if wal else 'immutable=1'}", uri=True)
            try:
                verdict = self._db.execute("pragma quick_check(1)").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                error = sqlite_error(exc, str(path))
                raise UsageError(f"its ledger {error}" if isinstance(error, LedgerDamaged)
                                 else f"cannot read its ledger {path}: {exc}") from None
            if verdict != "ok":
                raise UsageError(f"its ledger {LedgerDamaged(str(path), verdict, DAMAGED_HINT)}")

    def decide(self, source: Any) -> tuple[str, str]:
        if self._db is None:
            return "run", "new output"
        row = self._db.execute("select size, mtime_ns, status from files where path=?", (source.path,)).fetchone()
        if row is None:
            return "run", "new input"
        if row[2] == "done" and (row[0], row[1]) == (source.size, source.mtime_ns):
            return "unchanged", "done earlier, same size and mtime"
        if row[2] == "done":
            return "run", "changed since it was done (a run hashes it first: same content is skipped)"
        return "run", "failed before: a run tries it again"

    def done_paths(self) -> set[str]:
        if self._db is None:
            return set()
        return {row[0] for row in self._db.execute("select path from files where status='done'")}


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: gpucli TASK PATH --dry-run")
