"""The writer (gpucli/output/writer.py) against a fake sink, on an event loop without processes: parts
of complete inputs are written in the writer's thread, in order, once a part's worth waits or
on close, and counted only when durable."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from gpucli.output.writer import Writer, part_due
from tests.helpers import block, make_accounts, outputs, sources


def test_a_part_is_due_at_part_rows_of_complete_inputs_or_after_flush_s():
    assert part_due(ready_rows=100, part_rows=100, waited_s=0.0, flush_s=30.0)
    assert not part_due(ready_rows=99, part_rows=100, waited_s=29.9, flush_s=30.0)
    assert part_due(ready_rows=1, part_rows=100, waited_s=30.0, flush_s=30.0)
    assert not part_due(ready_rows=0, part_rows=100, waited_s=60.0, flush_s=30.0), "no rows, no part"


def test_the_writer_writes_in_its_own_thread_when_a_part_is_due_and_the_rest_on_close():
    accounts, output = make_accounts()
    threads = []
    write = output.sink.write

    def recording(table):
        threads.append(threading.current_thread().name)
        return write(table)

    output.sink.write = recording
    found = sources(5)
    items = block([(i, 0) for i in range(5)])
    accounts.expect(found, items)

    async def scenario():
        writer = Writer(accounts, part_rows=3, flush_s=3600.0)
        writer.start()
        first = items.take(np.arange(3))
        accounts.outputs(first, outputs(first))
        writer.added()
        while accounts.summary.succeeded < 3:  # a part's worth waits: written without a close
            await asyncio.sleep(0.01)
        rest = items.take(np.arange(3, 5))
        accounts.outputs(rest, outputs(rest))
        writer.added()  # 2 < part_rows: not due
        await asyncio.sleep(0.05)
        assert accounts.summary.succeeded == 3
        await writer.close()
        return writer

    writer = asyncio.run(scenario())
    assert accounts.summary.succeeded == 5 and accounts.summary.rows == 5
    assert [t.num_rows for t in output.sink.tables] == [3, 2], "in order, one part at a time"
    assert [paths for paths, _, _ in output.committed] == [[f"f{i}.txt" for i in range(3)], ["f3.txt", "f4.txt"]]
    assert all(name.startswith("gpucli-writer") for name in threads)
    assert writer.seconds > 0 and not writer.busy


def test_a_sink_that_fails_ends_the_writer_with_its_error_and_nothing_counted():
    accounts, output = make_accounts()

    def broken(table):
        raise OSError(28, "No space left on device")

    output.sink.write = broken
    found = sources(1)
    items = block([(0, 0)])
    accounts.expect(found, items)

    async def scenario():
        writer = Writer(accounts, part_rows=1, flush_s=3600.0)
        writer.start()
        accounts.outputs(items, outputs(items))
        writer.added()
        try:
            await writer.close()
        except OSError as exc:
            return exc
        return None

    error = asyncio.run(scenario())
    assert isinstance(error, OSError) and error.errno == 28
    assert accounts.summary.succeeded == 0 and output.committed == [], "no ledger mark without a durable part"


async def settled(writer: Writer) -> None:
    """Yield to the loop until the writer has done what it was woken for (no clock asserted)."""
    await asyncio.sleep(0.005)
    while writer.busy:
        await asyncio.sleep(0.001)


def test_rows_of_an_input_still_open_make_no_part_due_however_many():
    """Issue 40: one input of 20,000 chunks comes back over 200 pool events, and one small input
    completes with each. Its held rows pass part_rows half way, yet no part can take them: the
    small inputs wait for part_rows of complete rows (or flush_s), and the run writes one part,
    not one tiny part (a Parquet file and a synced ledger transaction) per event."""
    accounts, output = make_accounts()
    big, small = 20_000, 200
    found = sources(1 + small)
    everything = block([(0, i) for i in range(big)] + [(1 + n, 0) for n in range(small)])
    accounts.expect(found, everything)

    async def scenario():
        writer = Writer(accounts, part_rows=10_000, flush_s=3600.0)
        writer.start()
        for n in range(small):
            event = everything.take(np.r_[np.arange(n * 100, (n + 1) * 100), big + n])
            accounts.outputs(event, outputs(event))
            writer.added()
            await settled(writer)
        await writer.close()

    asyncio.run(scenario())
    assert accounts.summary.succeeded == 1 + small and accounts.summary.rows == big + small
    assert len(output.sink.tables) == 1, f"{len(output.sink.tables)} parts for {small} events"
    assert accounts.ready_rows == 0 and accounts.backlog == 0


def test_complete_rows_are_counted_ready_as_inputs_complete_fail_and_leave_in_a_part():
    accounts, _ = make_accounts()
    found = sources(3)
    items = block([(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)])
    accounts.expect(found, items)
    first = items.take(np.array([0, 2, 3]))  # input 1 complete; 0 and 2 half back
    accounts.outputs(first, outputs(first))
    assert (accounts.ready_rows, accounts.backlog) == (1, 3)
    rest = items.take(np.array([1, 4]))
    accounts.outputs(rest, outputs(rest))
    assert accounts.ready_rows == 5
    accounts.fail_items(items.take(np.array([4])), "infer", "late failure")  # input 2, complete, fails
    assert accounts.ready_rows == 3
    commit = accounts.take_commit()
    assert commit.table.num_rows == 3 and accounts.ready_rows == 0 and accounts.backlog == 0


def test_a_flush_commits_what_is_complete_now_and_returns_once_it_is_durable():
    """A watch's pass ends so: its rows readable at once, not `flush_s` later."""
    accounts, output = make_accounts()
    found = sources(2)
    items = block([(0, 0), (1, 0)])
    accounts.expect(found, items)

    async def scenario():
        writer = Writer(accounts, part_rows=1000, flush_s=3600.0)
        writer.start()
        accounts.outputs(items, outputs(items))
        writer.added()  # 2 rows < part_rows, and the last part is young: not due
        await writer.flush()
        durable = accounts.summary.succeeded
        await writer.flush()  # nothing new: returns all the same
        await writer.close()
        return durable

    assert asyncio.run(scenario()) == 2
    assert [t.num_rows for t in output.sink.tables] == [2]
