"""Rows on their way to the sink: a `Part` (rows of complete inputs, written as one) and the
`PartBuffer` that holds a batch's rows until their inputs are complete."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpucli.core.decision import Status

OPEN, COMPLETE = Status.OPEN, Status.COMPLETE


@dataclass
class Part:
    """Rows ready to be written as one part: `table` (path first) and, per row, its source id."""

    table: Any
    source_ids: Any  # numpy int64, one per row


class PartBuffer:
    """Rows of finished batches, held until their inputs are complete (every item back).

    Rows arrive per batch, as Arrow tables; a part takes the rows of every complete input
    at once (one vectorised selection), keeps the rows of inputs still open, and drops those
    of inputs that failed meanwhile. So a part never holds half an input: the ledger marks
    an input done only when the part holding all its rows is durable.

    Each row is looked at once on its way in (`_fresh`: the batches since the last take) and
    once on its way out. Rows of an input still open at a take are put aside per input
    (`_held`), and a later take asks only each held input's status, never their rows again:
    one huge input (a 100 MB text, ~50k chunks) left every take joining and filtering all of
    its rows so far, so that the writer's time grew with the square of the input (25 MB: 44 s,
    50 MB: ~200 s). A take costs the rows of the batches since the last one, plus one status
    lookup per held input, plus the rows it returns. `work` counts those rows and lookups."""

    def __init__(self) -> None:
        self._fresh: list[tuple[Any, Any, Any]] = []  # (table, source ids, item index) per batch
        self._held: dict[int, list[tuple[Any, Any]]] = {}  # source id -> (table, item index) pieces
        self.rows = 0
        self.work = 0  # rows and status lookups handled by `take`, all takes together

    def add(self, table: Any, source_ids: Any, index: Any) -> None:
        self._fresh.append((table, source_ids, index))
        self.rows += table.num_rows

    def take(self, status: Any) -> Part | None:
        """The rows of inputs whose `status[id]` is COMPLETE, ordered by input and item; rows
        of inputs still OPEN stay; the rest (FAILED) are dropped."""
        import numpy as np
        import pyarrow as pa

        pieces = self._take_held(status) + self._take_fresh(status)
        if not pieces:
            return None
        table = pa.concat_tables([t for t, _, _ in pieces]) if len(pieces) > 1 else pieces[0][0]
        ids, index = np.concatenate([i for _, i, _ in pieces]), np.concatenate([x for _, _, x in pieces])
        self.rows -= table.num_rows
        self.work += table.num_rows
        order = np.lexsort((index, ids))
        return Part(table.take(pa.array(order)), ids[order])

    def _take_fresh(self, status: Any) -> list[tuple[Any, Any, Any]]:
        """The new batches' rows: complete ones returned, open ones held, failed ones dropped."""
        import numpy as np
        import pyarrow as pa

        if not self._fresh:
            return []
        fresh, self._fresh = self._fresh, []
        table = pa.concat_tables([t for t, _, _ in fresh]) if len(fresh) > 1 else fresh[0][0]
        ids, index = np.concatenate([i for _, i, _ in fresh]), np.concatenate([x for _, _, x in fresh])
        self.work += len(ids)
        state = status[ids]
        ready, keep = state == COMPLETE, state == OPEN
        self.rows -= int(len(ids) - ready.sum() - keep.sum())  # rows of failed inputs
        if keep.any():
            self._hold(table.filter(pa.array(keep)), ids[keep], index[keep])
        if not ready.any():
            return []
        return [(table.filter(pa.array(ready)), ids[ready], index[ready])]

    def _hold(self, table: Any, ids: Any, index: Any) -> None:
        """Rows of inputs still open, put aside per input (one piece per input and take)."""
        import numpy as np
        import pyarrow as pa

        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        ends = np.r_[starts[1:], len(order)]
        for start, end in zip(starts.tolist(), ends.tolist()):
            rows = order[start:end]
            piece = table if end - start == table.num_rows else table.take(pa.array(rows))
            self._held.setdefault(int(sorted_ids[start]), []).append((piece, index[rows]))

    def _take_held(self, status: Any) -> list[tuple[Any, Any, Any]]:
        """Held inputs that completed (their rows returned) or failed (dropped): one status
        lookup per held input, none per row."""
        import numpy as np

        if not self._held:
            return []
        sids = np.fromiter(self._held, dtype=np.int64, count=len(self._held))
        state = status[sids]
        self.work += len(sids)
        out = []
        for sid, value in zip(sids[state != OPEN].tolist(), state[state != OPEN].tolist()):
            pieces = self._held.pop(sid)
            if value == COMPLETE:
                out.extend((table, np.full(table.num_rows, sid, dtype=np.int64), index) for table, index in pieces)
            else:
                self.rows -= sum(table.num_rows for table, _ in pieces)
        return out
