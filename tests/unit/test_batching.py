"""Batches are cut from blocks of items (gpucli/engines/batching.py), and travel as columns
(gpucli/core/records.py): pure functions, no processes."""

from __future__ import annotations

import asyncio
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucli.core.config import RunConfig
from gpucli.core.records import Items, Ragged
from gpucli.engines.batching import END, BatchCaps, Batcher, BlockQueue, Windows, cut_points, even_tail, sort_by_cost


def block(costs, source=0, start=0) -> Items:
    n = len(costs)
    return Items(np.full(n, source, np.int64), np.arange(start, start + n, dtype=np.int64),
                 np.asarray(costs, dtype=np.int64), [f"p{start + i}" for i in range(n)],
                 {"n": np.arange(start, start + n)})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 100), max_size=60), st.integers(1, 16), st.integers(0, 300))
def test_cut_points_keep_order_lose_nothing_and_respect_caps(costs, max_items, max_cost):
    caps = BatchCaps(max_items, max_cost)
    ends = cut_points(np.asarray(costs, dtype=np.int64), caps)
    start = 0
    for end in ends:
        batch = costs[start:end]
        assert batch, "progress on every batch"
        assert len(batch) <= max_items
        assert len(batch) == 1 or max_cost == 0 or sum(batch) <= max_cost
        if end < len(costs) and max_cost and len(batch) < max_items:
            assert sum(batch) + costs[end] > max_cost, "the next item would have overflowed the budget"
        start = end
    assert start == len(costs)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 100), min_size=1, max_size=80), st.integers(1, 16), st.integers(0, 300),
       st.integers(1, 5))
def test_the_last_batches_are_cut_evenly_for_the_workers_within_the_caps(costs, max_items, max_cost, workers):
    caps = BatchCaps(max_items, max_cost)
    array = np.asarray(costs, dtype=np.int64)
    ends = even_tail(array, caps, cut_points(array, caps), workers)
    sizes = np.diff([0, *ends])
    assert ends[-1] == len(costs) and (sizes > 0).all() and (sizes <= max_items).all()
    for start, end in zip([0, *ends[:-1]], ends):
        assert end - start == 1 or max_cost == 0 or sum(costs[start:end]) <= max_cost
    if workers == 1:
        assert ends == cut_points(array, caps)
    elif max_cost == 0 or sum(costs) <= max_cost:  # only the count caps them
        before = len(cut_points(array, caps))
        assert len(ends) == min(len(costs), -(-before // workers) * workers)  # a multiple of the workers
        assert sizes.max() - sizes.min() <= 1


def test_two_workers_get_even_last_batches_instead_of_a_small_one_at_the_end():
    ends = even_tail(np.ones(1500, np.int64), BatchCaps(64), cut_points(np.ones(1500, np.int64), BatchCaps(64)), 2)
    assert len(ends) == 24 and set(np.diff([0, *ends]).tolist()) == {62, 63}
    assert even_tail(np.ones(3, np.int64), BatchCaps(64), [3], 4) == [1, 2, 3]  # fewer items than workers


def test_sort_by_cost_puts_similar_costs_together_largest_first():
    costs = np.array([3, 9, 1, 9, 3])
    assert costs[sort_by_cost(costs)].tolist() == [9, 9, 3, 3, 1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 30), max_size=40), min_size=1, max_size=8), st.data())
def test_ragged_round_trips_ids_lengths_and_empty_rows(rows, data):
    values = np.asarray([v for r in rows for v in r], dtype=np.int32)
    lengths = np.asarray([len(r) for r in rows], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    ragged = Ragged(values, starts, lengths)
    assert [ragged.row(i).tolist() for i in range(len(rows))] == rows
    idx = np.asarray(data.draw(st.lists(st.integers(0, len(rows) - 1), max_size=12)), dtype=np.int64)
    taken = ragged.take(idx)
    assert [taken.row(i).tolist() for i in range(len(idx))] == [rows[i] for i in idx]
    halves = Ragged.concat([ragged.take(np.arange(0, len(rows) // 2)), ragged.take(np.arange(len(rows) // 2, len(rows)))])
    assert [halves.row(i).tolist() for i in range(len(rows))] == rows


def test_ragged_padded_frames_every_row_without_a_loop_and_masks_the_padding():
    ragged = Ragged(np.array([5, 6, 7, 8, 9], np.int32), np.array([0, 2, 2, 2]), np.array([2, 3, 0, 1]))
    ids, mask = ragged.padded(pad=0, prefix=[101, 7], suffix=[102])
    assert ids.tolist() == [[101, 7, 5, 6, 102, 0], [101, 7, 7, 8, 9, 102], [101, 7, 102, 0, 0, 0],
                            [101, 7, 7, 102, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]]


def test_overlapping_windows_share_one_array_and_the_largest_item_survives_a_take():
    values = np.arange(1000, dtype=np.int32)
    ragged = Ragged(values, np.array([0, 224, 448, 900]), np.array([256, 256, 256, 100]))
    taken = ragged.take(np.array([3, 0]))
    assert taken.row(0).tolist() == list(range(900, 1000)) and taken.row(1).tolist() == list(range(256))


def test_items_take_and_concat_keep_every_column_aligned():
    a, b = block([1, 2, 3], source=1), block([4, 5], source=2, start=3)
    both = Items.concat([a, b])
    part = both.take(np.array([4, 0, 2]))
    assert part.source_ids.tolist() == [2, 1, 1] and part.index.tolist() == [4, 0, 2]
    assert part.payload == ["p4", "p0", "p2"] and part.meta["n"].tolist() == [4, 0, 2]
    assert part.cost.tolist() == [5, 1, 3] and part.without_payload().payload is None


def test_windows_cut_sorted_batches_and_keep_a_partial_batch_for_the_next_window():
    windows = Windows(BatchCaps(4), window_items=8)
    windows.add(block([1, 5, 2, 7, 3, 6, 4]))
    windows.cut(final=False)
    first = windows.pop()
    assert first.cost.tolist() == [7, 6, 5, 4] and windows.pop() is None
    assert windows.count == 3, "the last, partial batch waits for more items"
    windows.cut(final=True)
    assert windows.pop().cost.tolist() == [3, 2, 1]


def test_max_wait_flushes_a_partial_batch():
    async def scenario():
        queue = BlockQueue(100)
        batcher = Batcher(queue, BatchCaps(100, 0, 0.05), window_items=1600)
        await queue.put(block([1, 2, 3]))
        t0 = time.monotonic()
        batch = await batcher.next()
        waited = time.monotonic() - t0
        await queue.put(END)
        rest = await batcher.next()
        return batch, waited, rest, batcher

    batch, waited, rest, batcher = asyncio.run(scenario())
    assert len(batch) == 3 and waited >= 0.04, "a partial batch goes once max_wait passed, not before"
    assert rest is None and batcher.input_done and batcher.idle()


def test_the_end_of_input_behind_batches_already_cut_cuts_them_again_with_the_rest():
    """Batches cut before the end of input came are cut again with the last items once it has
    come (they were not sent yet): the workers get even last batches, none is lost or doubled."""
    windows = Windows(BatchCaps(4), window_items=8, parallel=2)
    windows.add(block([1, 5, 2, 7, 3, 6, 4, 8, 9]))
    windows.cut(final=False)
    assert windows.has_ready() and windows.count == 1
    windows.cut(final=True)
    batches = []
    while (batch := windows.pop()) is not None:
        batches.append(batch.cost.tolist())
    assert [len(b) for b in batches] == [2, 2, 2, 3]
    assert sorted(c for b in batches for c in b) == list(range(1, 10))

    async def scenario():
        queue = BlockQueue(100)
        batcher = Batcher(queue, BatchCaps(4, 0, 0.0), window_items=8, parallel=2)
        await queue.put(block([1, 5, 2, 7, 3, 6, 4, 8, 9]))
        first = await batcher.next()  # cut before the end of input was queued
        await queue.put(END)
        rest = []
        while (batch := await batcher.next()) is not None:
            rest.append(batch.cost.tolist())
        return first.cost.tolist(), rest

    first, rest = asyncio.run(scenario())
    assert len(first) == 4 and [len(b) for b in rest] == [2, 3]
    assert sorted(first + [c for b in rest for c in b]) == list(range(1, 10))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=20), min_size=1, max_size=12),
       st.integers(1, 8), st.integers(0, 120), st.integers(1, 4), st.integers(1, 40), st.integers(0, 12))
def test_the_batcher_gives_every_item_once_within_the_caps_wherever_the_end_of_input_comes(
        blocks, max_items, max_cost, workers, window, end_after):
    """Blocks arrive while batches are taken; the end of input is queued after `end_after`
    batches were taken (behind ready batches, behind a full window, or last)."""
    caps = BatchCaps(max_items, max_cost, 0.0)

    async def scenario():
        queue = BlockQueue(60)
        batcher = Batcher(queue, caps, window_items=window, parallel=workers)
        start, taken = 0, []

        async def feed():
            nonlocal start
            for costs in blocks:
                await queue.put(block(costs, start=start))
                start += len(costs)
                await asyncio.sleep(0)
            for _ in range(200):  # until `end_after` batches were taken, or they will not come without it
                if len(taken) >= end_after:
                    break
                await asyncio.sleep(0)
            await queue.put(END)

        feeder = asyncio.ensure_future(feed())
        while (batch := await batcher.next()) is not None:
            taken.append(batch)
            await asyncio.sleep(0)
        await feeder
        return taken

    taken = asyncio.run(asyncio.wait_for(scenario(), 20))
    seen = [int(i) for batch in taken for i in batch.index]
    assert sorted(seen) == list(range(sum(len(b) for b in blocks))), "every item exactly once"
    for batch in taken:
        assert 1 <= len(batch) <= max_items
        assert len(batch) == 1 or max_cost == 0 or batch.total_cost <= max_cost


def test_a_block_queue_is_bounded_by_items_but_always_takes_one_block():
    async def scenario():
        queue = BlockQueue(10)
        await queue.put(block([1] * 50))  # over the bound, but the queue was empty
        waiter = asyncio.ensure_future(queue.put(block([1] * 5)))
        await asyncio.sleep(0.05)
        blocked = not waiter.done()
        queue.get_nowait()
        await asyncio.wait_for(waiter, 2)
        return blocked, queue.items

    blocked, items = asyncio.run(scenario())
    assert blocked and items == 5


def test_cpu_runs_use_the_tasks_cpu_batch_size_and_flags_still_win():
    from gpucli.engines.job import batch_caps
    from gpucli.tasks.embed import EmbedTask

    config = RunConfig(task="embed", paths=("x",))
    assert batch_caps(config, EmbedTask, ["cpu"]).max_items == EmbedTask.cpu_batch_size == 64
    assert batch_caps(config, EmbedTask, ["cpu"]).max_cost == EmbedTask.cpu_max_cost == 2048
    assert batch_caps(config, EmbedTask, ["cuda:0"]).max_cost == EmbedTask.default_max_cost
    assert batch_caps(config, EmbedTask, ["cuda:0", "cuda:1"]).max_items == EmbedTask.default_batch_size == 64
    assert batch_caps(config, EmbedTask, ["cuda:0", "cpu"]).max_items == 64  # a GPU in the run: GPU sizes
    flagged = RunConfig(task="embed", paths=("x",), batch_size=48)
    assert batch_caps(flagged, EmbedTask, ["cpu"]).max_items == 48
    assert batch_caps(RunConfig(task="embed", paths=("x",), max_batch_cost=0), EmbedTask, ["cpu"]).max_cost == 0


def test_dispatcher_pads_about_as_little_as_a_global_sort():
    """Sentence-length items arriving in random order, in blocks of 64: the batches cut from
    sorted windows pad within a few percent of sorting everything (a sliding window padded
    ~27% more)."""
    import random

    rng = random.Random(7)
    costs = [rng.randint(12, 22) for _ in range(2000)]

    async def scenario():
        queue = BlockQueue(4096)
        batcher = Batcher(queue, BatchCaps(32), window_items=16 * 32)
        for start in range(0, len(costs), 64):
            await queue.put(block(costs[start:start + 64], start=start))
        await queue.put(END)
        batches = []
        while (batch := await batcher.next()) is not None:
            batches.append(batch.cost.tolist())
        return batches

    batches = asyncio.run(scenario())
    assert sorted(c for b in batches for c in b) == sorted(costs)  # every item once
    assert all(len(b) <= 32 for b in batches) and sum(len(b) < 32 for b in batches) <= 1
    ordered = sorted(costs, reverse=True)
    best = sum(max(ordered[i: i + 32]) * len(ordered[i: i + 32]) for i in range(0, len(ordered), 32))
    padded = sum(max(b) * len(b) for b in batches)
    assert padded <= 1.05 * best, (padded, best)
