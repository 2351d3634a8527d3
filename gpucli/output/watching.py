"""The output between a watch's passes (gpucli/engines/local/watch.py): inputs that went are
forgotten, the rows a pass superseded go at once, small parts are folded from time to time.

A run does these at its close; a watch keeps its output open for days, so it does them after each
pass, once the pass's parts are durable, in the same order and under the same ledger rules
(gpucli/output/ledger.py): the ledger first (a gone input forgotten, its rows stale, in one
transaction), then the sink (the stale rows removed, idempotent), so a kill -9 at any step leaves
what the next start repairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpucli.output.compaction import AUTO_MIN_SMALL
from gpucli.output.compactor import fold
from gpucli.output.output import Output

if TYPE_CHECKING:
    from gpucli.inputs.scope import WalkReport


def forget_unseen(output: Output, keys: list[str], report: WalkReport) -> int:
    """After a pass over changed paths (named by `keys`, as rows name inputs), whose walk marked
    what it found seen: the inputs at them or under them (a directory) that it did not find are
    gone, where the walk could see (`report`: not under a directory it could not list, nor under
    a root now empty). Forgotten, their rows stale; returns how many."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    unseen = output.ledger.unseen_at(keys, [key for key in keys if key != "."])
    gone = sorted({path for path in unseen if report.may_prune(path)})
    if gone:
        output.ledger.prune(gone)
        output.pruned.update(gone)
    return len(gone)


def settle(output: Output) -> None:
    """The rows superseded so far (changed, failed and removed inputs) removed now, not at the
    close, so that a reader beside the watch sees each input once."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    output.remove_stale(output.ledger)
    output.pruned.clear()  # its one use (the removal above) is done: not held for days


def fold_small_parts(output: Output) -> list[str]:
    """Compaction as a run's close does it (past AUTO_MIN_SMALL small parts); returns its notes."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    fold(output, output.ledger, AUTO_MIN_SMALL)
    notes, output.closing_notes = output.closing_notes, []
    return notes


def next_pass(output: Output) -> None:
    """A pass after the first: inputs it redoes may have rows from an earlier pass; and it is
    incremental even when the first was --full (the output was made anew then, and a rescan
    must not embed the whole tree again)."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    output.ledger.next_pass()
    output.sink.next_pass()
    output.incremental = True


def forget_seen(output: Output) -> None:
    """Before a walk of the whole tree: --prune counts only what that walk sees."""
    assert output.ledger is not None, "a watch's pass on an output not open. This is a bug."
    output.ledger.clear_seen()
