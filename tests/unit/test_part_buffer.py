"""The writer's part buffer: what a part holds, and what a take costs (counted, not timed)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpucli.core.decision import Status
from gpucli.output.parts import PartBuffer

OPEN, COMPLETE, FAILED = Status.OPEN, Status.COMPLETE, Status.FAILED


class CountingStatus(np.ndarray):
    """An input status array that counts the entries each lookup reads."""

    reads = 0

    def __getitem__(self, key):
        result = super().__getitem__(key)
        CountingStatus.reads += np.size(result)
        return result.view(np.ndarray) if isinstance(result, np.ndarray) else result


def batch(sid: int, start: int, count: int):
    table = pa.table({"text": [f"{sid}:{i}" for i in range(start, start + count)]})
    return table, np.full(count, sid, dtype=np.int64), np.arange(start, start + count, dtype=np.int64)


@pytest.fixture
def joined(monkeypatch):
    """Rows handed to pa.concat_tables, all calls together."""
    counter = {"rows": 0}
    real = pa.concat_tables

    def counting(tables, *args, **kwargs):
        counter["rows"] += sum(t.num_rows for t in tables)
        return real(tables, *args, **kwargs)

    monkeypatch.setattr(pa, "concat_tables", counting)
    return counter


def test_a_part_holds_complete_inputs_in_order_keeps_open_ones_and_drops_failed_ones():
    status = np.array([OPEN, OPEN, OPEN], dtype=np.int8)
    buffer = PartBuffer()
    buffer.add(*batch(0, 2, 2))
    buffer.add(*batch(1, 0, 3))
    buffer.add(*batch(0, 0, 2))
    assert buffer.take(status) is None and buffer.rows == 7
    buffer.add(*batch(2, 0, 1))
    status[0], status[2] = COMPLETE, FAILED
    part = buffer.take(status)
    assert part.table.column("text").to_pylist() == ["0:0", "0:1", "0:2", "0:3"]
    assert part.source_ids.tolist() == [0] * 4 and buffer.rows == 3
    buffer.add(*batch(1, 3, 1))
    status[1] = COMPLETE
    assert buffer.take(status).table.column("text").to_pylist() == [f"1:{i}" for i in range(4)]
    assert buffer.rows == 0 and buffer.take(status) is None


def test_a_take_costs_the_new_rows_not_the_rows_an_unfinished_input_holds(joined):
    """One huge input (50k chunks) comes back in 2,000 batches with a take after each: every
    take handles its own batch and one lookup per held input, however many rows are held."""
    per_batch, batches = 25, 2000
    status = np.array([OPEN, OPEN], dtype=np.int8).view(CountingStatus)
    CountingStatus.reads = 0
    buffer = PartBuffer()
    costs = []
    for n in range(batches):
        before = CountingStatus.reads + joined["rows"]
        buffer.add(*batch(0, n * per_batch, per_batch))
        assert buffer.take(status) is None
        costs.append(CountingStatus.reads + joined["rows"] - before)
    assert max(costs) <= 2 * per_batch + 2, "a take's cost grew with the rows held"
    assert buffer.rows == per_batch * batches
    status[0] = COMPLETE
    part = buffer.take(status)
    assert part.table.num_rows == per_batch * batches
    assert part.table.column("text").to_pylist() == [f"0:{i}" for i in range(per_batch * batches)]
    total = CountingStatus.reads + joined["rows"]
    assert total <= 4 * per_batch * batches, "all takes together are linear in the rows"
