"""The run's summary as a person reads it on stderr, at the end of a run or a dry run.

A log's lines, for grep: the state and the counts first, then rows, rates and stage times,
then where the failures are and what to do after an interrupt; words kept whole on a
terminal. `--json` prints the summary itself on stdout (gpucli/core/summary.py).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gpucli.core.terminal import fit, width_of


def print_summary(s: Any) -> None:
    """The summary on stderr: one line for a dry run, a few for a run."""
    if getattr(s, "dry_run", False):
        print(_dry_run_line(s), file=sys.stderr, flush=True)  # one line: a log's, for grep
        return
    lines = [_counts_line(s), _rows_line(s)]
    if has_records(s.failures_file):
        lines.append(f"  failures and skips: {s.failures_file}")
    if s.interrupted:
        lines.append("  rerun the same command to finish the rest")
    print(fit("\n".join(lines), width_of(sys.stderr)), file=sys.stderr, flush=True)  # words whole on a terminal


def _dry_run_line(s: Any) -> str:
    return (f"gpucli {s.task}: dry run — {s.inputs} inputs: {s.succeeded} would run, {s.unchanged} unchanged, "
            f"{s.failed} would fail, {s.skipped} skipped" + _reasons(s) + (f", {s.pruned} would be pruned" if s.pruned else "")
            + f"; nothing written to {s.out}")


def _counts_line(s: Any) -> str:
    """`gpucli embed: done in 1.2s — 3 inputs: 2 succeeded, 1 failed, 0 skipped`, with what
    explains a count in brackets after it."""
    state = ("interrupted" if s.interrupted else "done" if s.exit_code == 0
             else "done with failures" if s.exit_code == 1 else "failed")
    return (f"gpucli {s.task}: {state} in {s.elapsed_s:.1f}s — {s.inputs} inputs: {s.succeeded} succeeded"
            + (f" ({s.deduplicated} deduplicated)" if getattr(s, "deduplicated", 0) else "")
            + f", {s.failed} failed" + (f" ({s.unknown_tokens} in a language the model does not read)"
                                        if getattr(s, "unknown_tokens", 0) else "")
            + f", {s.skipped} skipped" + _reasons(s)
            + (f", {s.unfinished} unfinished" if s.unfinished else "") + (f", {s.pruned} pruned" if s.pruned else ""))


def _reasons(s: Any) -> str:
    """` (73 no reader for this type, 3 excluded, 2 unchanged since the last run)`: why files were skipped."""
    by_reason = getattr(s, "skipped_by_reason", None) or ({"unchanged since the last run": s.unchanged}
                                                          if s.unchanged else {})
    shown = [f"{n} {reason}" for reason, n in sorted(by_reason.items(), key=lambda kv: -kv[1]) if n]
    return f" ({', '.join(shown)})" if shown else ""


def _rows_line(s: Any) -> str:
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in s.stage_seconds.items())
    rates = f"{getattr(s, 'inputs_per_s', 0.0):.1f} inputs/s, {getattr(s, 'rows_per_s', 0.0):.1f} rows/s"
    return f"  {s.rows} rows -> {s.out} ({rates}; {stages})"


def has_records(path: str) -> bool:
    """Whether the failures file holds any record (unchanged inputs count as skipped, but are
    not listed in it: a clean incremental rerun must not point at an empty file)."""
    try:
        return bool(path) and os.path.getsize(path) > 0
    except OSError:
        return False
