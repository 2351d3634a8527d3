"""`--dry-run`: the walk, the filters and the ledger's decision per input, without a model,
a lock or a write. One JSON line per input on stdout: {"path", "action", "reason"}, where
action is `run` (new, changed, or failed before), `unchanged` (done with the same size and
mtime: a run skips it without reading it), `fail` or `skip` (the walk's own records), or
`prune` (with --prune: done earlier, gone now, where the walk could see). A task that reads
several formats (embed) adds `format`: what the input would be read as ("pdf", "html", "text")."""

from __future__ import annotations

import json
import sys

from gpucli.core.config import RunConfig
from gpucli.core.decision import Action, decide
from gpucli.core.errors import OutputError, UsageError
from gpucli.core.keys import split_key
from gpucli.core.records import Source
from gpucli.core.stages import Stage
from gpucli.core.summary import RunSummary
from gpucli.engines.job import Job, default_out
from gpucli.engines.run_inputs import check_roots
from gpucli.output.ledger_view import ReadOnlyLedger
from gpucli.output.sinks import open_sink
from gpucli.output.state_dir import LEDGER, ledger_dir, own_paths


def dry_run(config: RunConfig) -> RunSummary:
    check_roots(config.paths)  # as a run does: a missing bucket is exit 2, not a "fail" line
    job = Job(config)
    job.task_cls = job.task_cls.variant(job.spec, download=False)  # image-text: images too; nothing fetched
    sink = open_sink(config.out or default_out(job.task_cls.name), state_dir=config.state_dir)
    try:  # where it is now, or where an earlier gpucli kept it; a PostgreSQL output's in its database
        known = sink.read_ledger() if sink.ledger_in_store else ReadOnlyLedger(ledger_dir(sink) / LEDGER)
    except OutputError as exc:  # damaged or unreadable: named, with what to do
        raise UsageError(f"its ledger {exc}") from None
    summary = job.summary
    summary.out, summary.dry_run = sink.display, True
    seen = set()
    own = own_paths(sink)
    job.inputs.report.list_skipped = True  # files passed over are listed too, each with its reason
    for found in job.walk(exclude=own):
        if found.failure is not None:
            _say(found.failure.path, "skip" if found.failure.stage == Stage.SKIP else "fail", found.failure.error)
            seen.add(found.failure.path)
            summary.skipped += found.failure.stage == Stage.SKIP
            summary.failed += found.failure.stage != Stage.SKIP
            if found.failure.stage == Stage.SKIP:
                reason = found.failure.cause or found.failure.error
                summary.skipped_by_reason[reason] = summary.skipped_by_reason.get(reason, 0) + 1
            continue
        source = found.source
        assert source is not None, "a walk entry with neither a source nor a failure. This is a bug."
        seen.add(source.path)
        action, reason = _decision(known, source) if config.incremental else (Action.RUN, "--full")
        summary.unchanged += action is Action.UNCHANGED
        summary.succeeded += action is Action.RUN  # what a run would process
        _say(source.path, action.value, reason, job.task_cls.read_as(source.path))
    if config.prune:
        for path in known.done_paths() - seen:
            if job.inputs.report.may_prune(path, config.prune_all):
                summary.pruned += 1
                _say(path, "prune", "done earlier, not found by this walk")
    summary.inputs = summary.succeeded + summary.unchanged + summary.failed + summary.skipped
    summary.exit_code = 0
    return summary


def _decision(known: ReadOnlyLedger, source: Source) -> tuple[Action, str]:
    """The run's own decision (ledger.decide), read from the ledger without the lock."""
    if not known.exists:
        return Action.RUN, "new output"
    decision = decide(known.lookup([source.path]).get(source.path), source)
    return decision.action, decision.reason


def _say(path: str, action: str, reason: str, read_as: str | None = None) -> None:
    path, record_id = split_key(path)  # a table's record (embed --from): `path` and `id`
    where = {"path": path} if record_id is None else {"path": path, "id": record_id}
    shown = {"format": read_as} if read_as and record_id is None else {}  # what the input would be read as
    print(json.dumps({**where, "action": action, "reason": reason, **shown}, ensure_ascii=False), flush=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use: gpucli TASK PATH --dry-run")
