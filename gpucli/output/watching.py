"""The output between a watch's passes (gpucli/engines/local/watch.py): inputs that went are
forgotten, the rows a pass superseded go at once, small parts are folded from time to time.

A run does these at its close; a watch keeps its output open for days, so it does them after each
pass, once the pass's parts are durable, in the same order and under the same ledger rules
(gpucli/output/ledger.py): the ledger first (a gone input forgotten, its rows stale, in one
transaction), then the sink (the stale rows removed, idempotent), so a kill -9 at any step leaves
what the next start repairs.
"""

from __future__ import annotations

from gpucli.output.compaction import AUTO_MIN_SMALL
from gpucli.output.compactor import fold
from gpucli.output.output import Output


def forget_gone(output: Output, paths: list[str], under: list[str]) -> int:
    """Inputs a watch saw go: at `paths` (gone, or a directory now) and under the directories
    `under` (gone, or a file now). Forgotten, their rows stale; returns how many."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    gone = sorted(set(output.ledger.known_at(paths, [d for d in under if d != "."])))
    if gone:
        output.ledger.prune(gone)
    return len(gone)


def settle(output: Output) -> None:
    """The rows superseded so far (changed, failed and removed inputs) removed now, not at the
    close, so that a reader beside the watch sees each input once."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    output._remove_stale(output.ledger)
    output.pruned.clear()  # its one use (the removal above) is done: a watch's memory stays flat


def fold_small_parts(output: Output) -> list[str]:
    """Compaction as a run's close does it (past AUTO_MIN_SMALL small parts); returns its notes."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    fold(output, output.ledger, AUTO_MIN_SMALL)
    notes, output.closing_notes = output.closing_notes, []
    return notes


def forget_seen(output: Output) -> None:
    """Before a walk of the whole tree: --prune counts only what that walk sees."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    output.ledger.clear_seen()
