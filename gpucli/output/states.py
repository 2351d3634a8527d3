"""Where each input of a run stands, on the loop (or the Ray driver's thread) only.

Per input, by source id, in numpy arrays (a few bytes per input): its `Status` (core/decision.py:
OPEN until every item is back, COMPLETE, DONE once its rows are durable, or FAILED), the items
it still waits for, and the rows it has in the part buffer. Its `Source` is held only until its
rows are durable or it failed.

`ready_rows` is the rows of COMPLETE inputs in the part buffer: what a part would take now. It is
kept here as inputs complete, fail, or leave in a part, so that the rule for when a part is due
(writer.part_due) counts the rows a part can hold, never the rows of an input still open (one
input of 50k chunks held 50k rows that no part could take).
"""

from __future__ import annotations

import numpy as np

from gpucli.core.decision import Status
from gpucli.core.records import Source

OPEN, COMPLETE, FAILED, DONE = Status.OPEN, Status.COMPLETE, Status.FAILED, Status.DONE


class InputStates:
    """Every transition of an input's state goes through here, and each keeps `complete` (inputs
    COMPLETE: results all back, rows not yet durable; the progress's `back`) and `ready_rows`
    true."""

    def __init__(self) -> None:
        self.status = np.zeros(1024, dtype=np.int8)
        self.waiting = np.zeros(1024, dtype=np.int32)  # items not yet back, per input
        self.buffered = np.zeros(1024, dtype=np.int64)  # rows in the part buffer, per input
        self.sources: dict[int, Source] = {}  # inputs with the models, in the buffer, or being written
        self.complete = 0
        self.ready_rows = 0

    def expect(self, sources: list[Source], ids: np.ndarray) -> None:
        """A block's inputs go to the models; `ids`: the block's source id per item."""
        self._grow(int(ids.max()))
        for source in sources:
            self.sources[source.id] = source
        unique, counts = np.unique(ids, return_counts=True)
        self.status[unique] = OPEN
        self.waiting[unique] = counts

    def copy(self, source: Source, complete: bool) -> None:
        """An input with no items (a copy of content embedded once, gpucli/output/dedup.py):
        COMPLETE when its rows are at hand, else OPEN until its original's rows are in a part."""
        self._grow(source.id)
        self.sources[source.id] = source
        self.waiting[source.id] = 0
        self.status[source.id] = COMPLETE if complete else OPEN
        self.complete += complete

    def rows_added(self, ids: np.ndarray) -> None:
        """Rows went into the part buffer; `ids`: their source ids, one per row."""
        unique, counts = np.unique(ids, return_counts=True)
        self.buffered[unique] += counts
        self.ready_rows += int(counts[self.status[unique] == COMPLETE].sum())

    def arrived(self, ids: np.ndarray) -> np.ndarray:
        """Results came back for these items (source id per item): returns the inputs that
        are complete now."""
        unique, counts = np.unique(ids, return_counts=True)
        self.waiting[unique] -= counts
        now = unique[(self.waiting[unique] <= 0) & (self.status[unique] == OPEN)]
        self.status[now] = COMPLETE
        self.complete += len(now)
        self.ready_rows += int(self.buffered[now].sum())
        return now

    def fail(self, sid: int) -> Source | None:
        """The input fails: its Source, or None when it ended already (an input fails once)."""
        state = self.status[sid]
        if state not in (OPEN, COMPLETE):
            return None
        if state == COMPLETE:
            self.complete -= 1
            self.ready_rows -= int(self.buffered[sid])
        self.buffered[sid] = 0  # the buffer drops its rows at the next take
        self.status[sid] = FAILED
        return self.sources.pop(sid)

    def taken(self, ids: np.ndarray) -> None:
        """The rows of these inputs (each once) left the buffer in a part."""
        self.ready_rows -= int(self.buffered[ids].sum())
        self.buffered[ids] = 0

    def completed(self, ids: list[int]) -> None:
        """Copies whose rows a part holds now (their original's)."""
        self.status[ids] = COMPLETE
        self.complete += len(ids)

    def durable(self, ids: np.ndarray) -> None:
        """The part holding these inputs' rows is durable and the ledger has them done."""
        self.complete -= int((self.status[ids] == COMPLETE).sum())
        self.status[ids] = DONE
        for sid in ids.tolist():
            self.sources.pop(sid, None)

    def unended(self) -> list[int]:
        """Inputs handed to the models that are neither failed nor durable."""
        return [sid for sid in self.sources if self.status[sid] in (OPEN, COMPLETE)]

    def _grow(self, largest: int) -> None:
        if largest < len(self.status):
            return
        size = max(largest + 1, 2 * len(self.status))
        self.status, self.waiting, self.buffered = (
            np.concatenate([array, np.zeros(size - len(array), array.dtype)])
            for array in (self.status, self.waiting, self.buffered))
