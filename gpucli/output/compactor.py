"""Compaction run on an output: at the end of a clean run past the threshold, and for `gpucli
compact` (which parts: gpucli/output/compaction.py; how a Parquet output stages and swaps them:
gpucli/output/sinks/parquet_compact.py). The ledger's order is a run's: the sink stages the new
parts invisibly, the ledger renames the locations with the swap pending in one transaction, then
the sink publishes; an open that finds the mark publishes again."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from gpucli.core.errors import OutputError, UsageError
from gpucli.output.compaction import ON_DEMAND_MIN
from gpucli.output.ledger import Ledger
from gpucli.output.state_dir import LEDGER, ledger_dir, open_ledger

Output = Any  # gpucli/output/output.py's Output, which calls `fold` from its close: not imported here


@dataclass(frozen=True)
class Compacted:
    """What a compaction did, for the run's log and `gpucli compact`."""

    parts_before: int
    parts_after: int
    seconds: float

    def line(self, display: str) -> str:
        return f"compacted {display}: {self.parts_before} parts into {self.parts_after} in {self.seconds:.1f}s"


def fold(output: Output, ledger: Ledger, min_small: int) -> Compacted | None:
    """Staged, recorded, published, and said in the run's log (`output.closing_notes`). Optional
    work: an OS error while staging (a full disk) leaves the output as it was, with a note; None
    when nothing was worth folding."""
    started = time.monotonic()
    before = len(ledger.locations())
    try:
        rewrite = output.sink.compact(min_small, ledger.locations())
    except OutputError as exc:  # the sink took back what it staged
        output.closing_notes.append(f"{output.display} was not compacted: {exc}")
        return None
    if rewrite is None:
        return None
    ledger.set_meta("last_location", max(name for name in rewrite.renamed.values() if name))  # names only grow
    ledger.rename_locations(rewrite.renamed, None, rewrite.pending)
    output._publish_pending(ledger)
    done = Compacted(before, len(ledger.locations()), time.monotonic() - started)
    output.closing_notes.append(done.line(output.display))
    return done


def compact_now(output: Output, min_small: int = ON_DEMAND_MIN) -> Compacted:
    """`gpucli compact OUT`: under the run lock (exit 75 while a run writes), what a killed run left
    is repaired as a run's open would (a pending swap published, orphaned parts removed), then the
    small parts are folded."""
    output._move_earlier_state()
    where = ledger_dir(output.sink) / LEDGER
    if not where.is_file():
        raise UsageError(f"{output.display}: not a gpucli output (no ledger at {where})")
    output.lock.acquire(output.sink.display)
    try:
        ledger = open_ledger(output.sink.state_dir, "", True, output.notices)
        try:
            output._publish_pending(ledger)
            renamed = output.sink.recover(ledger.locations(), ledger.meta("last_location"))
            if renamed:
                ledger.rename_locations(renamed)
            count = len(ledger.locations())
            return fold(output, ledger, min_small) or Compacted(count, count, 0.0)
        finally:
            ledger.close()
    finally:
        output.lock.release()
