"""Cut blocks of items into batches by count, cost and time. No torch; no per-item loop.

A window of pending items (up to `window` items, or what arrived within `max_wait_s` of the
first) is sorted by cost, largest first, and cut into batches in that order: at most
`max_items` items and at most `max_cost` total cost (TEI's `max_batch_tokens`; an item over
the budget alone goes as a batch of one). Sorting whole windows pads like a global sort:
on one-sentence files a window of 16 batches pads ~2% over the tokens, where a sliding
window of 4 padded 27% (small items pile up in it). What is left of a window that cannot
fill a batch waits for the next window, unless the input has ended.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass

import numpy as np

from gpucli.core.records import Items

WINDOW_BATCHES = 16  # batches per sorted window


@dataclass(frozen=True)
class BatchCaps:
    max_items: int
    max_cost: int = 0  # 0 = no cost cap
    max_wait_s: float = 0.01

    def __post_init__(self) -> None:
        if self.max_items < 1:
            raise ValueError(f"batch size must be at least 1, got {self.max_items}")
        if self.max_cost < 0:
            raise ValueError(f"batch cost cap must be 0 (off) or positive, got {self.max_cost}")
        if self.max_wait_s < 0:
            raise ValueError(f"max wait must be 0 or positive, got {self.max_wait_s}")

    def full(self, count: int, cost: int) -> bool:
        """Whether a batch of `count` items costing `cost` can take nothing more."""
        return count >= self.max_items or (self.max_cost > 0 and cost >= self.max_cost)

    def halved(self) -> BatchCaps:
        return BatchCaps(max(1, self.max_items // 2), halved_cost(self.max_cost), self.max_wait_s)


def halved_cost(max_cost: int) -> int:
    """Half a cost cap, never below 1: 0 means no cap, so a cap of 1 halved to 0 would lift it."""
    return max(1, max_cost // 2) if max_cost else 0


def cut_points(costs: np.ndarray, caps: BatchCaps) -> list[int]:
    """End offsets of consecutive batches over `costs` (in the order given): each batch takes
    items while they fit, and the first item that would overflow the cost budget starts the
    next batch, unless the batch is empty. A loop per batch, not per item."""
    n = len(costs)
    totals = np.cumsum(costs, dtype=np.int64)
    ends, start = [], 0
    while start < n:
        end = min(start + caps.max_items, n)
        if caps.max_cost > 0:
            before = int(totals[start - 1]) if start else 0
            end = min(end, int(np.searchsorted(totals, before + caps.max_cost, side="right")))
        end = max(end, start + 1)
        ends.append(end)
        start = end
    return ends


def sort_by_cost(costs: np.ndarray) -> np.ndarray:
    """Indices ordering `costs` largest first (stable): similar lengths share a batch and big
    items go early, which keeps padding low and memory peaks at the start of a run."""
    return np.argsort(-costs, kind="stable")


def even_tail(costs: np.ndarray, caps: BatchCaps, ends: list[int], parallel: int) -> list[int]:
    """The last batches of a run re-cut into a multiple of `parallel` (the workers) of about
    equal size: 23 batches of 64 and one of 28 for two workers become 24 of 62-63, so that the
    workers finish together instead of one idling while the other runs its last full batch
    (1500 one-sentence files, 2 workers: the run ended ~0.1 s after one worker had finished).
    Where an even cut would break the cost cap, the batches are cut by it at the even size."""
    if parallel < 2 or len(ends) < 1:
        return ends
    n = len(costs)
    batches = min(n, -(-len(ends) // parallel) * parallel)
    even = [n * (k + 1) // batches for k in range(batches)]
    if caps.max_cost > 0:
        totals = np.concatenate(([0], np.cumsum(costs, dtype=np.int64)))
        starts = [0, *even[:-1]]
        if any(e - b > 1 and totals[e] - totals[b] > caps.max_cost for b, e in zip(starts, even)):
            return cut_points(costs, BatchCaps(max(1, -(-n // batches)), caps.max_cost, caps.max_wait_s))
    return even


class Windows:
    """Pending items -> batches, one sorted window at a time (pure: the caller feeds blocks).
    `parallel`: how many workers take the batches (the last window is cut for them: even_tail)."""

    def __init__(self, caps: BatchCaps, window_items: int, parallel: int = 1) -> None:
        self.caps = caps
        self.parallel = parallel
        self.window_items = max(window_items, caps.max_items)
        self._blocks: list[Items] = []
        self.count = 0
        self.cost = 0
        self._ready: collections.deque[Items] = collections.deque()

    def add(self, block: Items) -> None:
        self._blocks.append(block)
        self.count += len(block)
        self.cost += block.total_cost

    @property
    def window_full(self) -> bool:
        return self.count >= self.window_items

    @property
    def batch_full(self) -> bool:
        return self.caps.full(self.count, self.cost)

    def has_ready(self) -> bool:
        return bool(self._ready)

    def pop(self) -> Items | None:
        return self._ready.popleft() if self._ready else None

    def cut(self, final: bool) -> None:
        """Sort what is pending and cut it into ready batches; without `final`, a last batch
        that is not full stays pending for the next window. `final` (the input has ended) cuts
        the batches not taken yet again with what is pending, for the workers (even_tail)."""
        if final and self._ready:  # batches not sent yet join the last cut: the tail is cut as a whole
            self._blocks[:0] = list(self._ready)
            self.count += sum(len(b) for b in self._ready)
            self.cost += sum(b.total_cost for b in self._ready)
            self._ready.clear()
        if not self.count:
            return
        items = Items.concat(self._blocks)
        order = sort_by_cost(items.cost)
        costs = items.cost[order]
        ends = cut_points(costs, self.caps)
        if final:
            ends = even_tail(costs, self.caps, ends, self.parallel)
        start = 0
        for end in ends:
            part = order[start:end]
            full = self.caps.full(len(part), int(items.cost[part].sum()))
            if end == len(order) and not final and not full and len(ends) > 1:
                break
            self._ready.append(items.take(part))
            start = end
        rest = items.take(order[start:]) if start < len(order) else None
        self._blocks = [rest] if rest is not None else []
        self.count = len(rest) if rest is not None else 0
        self.cost = rest.total_cost if rest is not None else 0


END = None  # the end-of-input marker in a BlockQueue


class BlockQueue:
    """A bounded asyncio queue of blocks, bounded by the items they hold (not by blocks: a
    block may hold one huge image or a thousand sentences). A block always enters an empty
    queue, so an oversized block cannot deadlock it."""

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._blocks: collections.deque = collections.deque()
        self.items = 0
        self._changed = asyncio.Event()

    async def put(self, block: Items | None) -> None:
        while block is not END and self.items and self.items + len(block) > self.max_items:
            self._changed.clear()
            await self._changed.wait()
        self._blocks.append(block)
        self.items += len(block) if block is not END else 0
        self._changed.set()

    def get_nowait(self) -> Items | None:
        block = self._blocks.popleft()
        self.items -= len(block) if block is not END else 0
        self._changed.set()
        return block

    def empty(self) -> bool:
        return not self._blocks

    def holds_end(self) -> bool:
        """Whether the end of input is queued (the reader has put its last block)."""
        return bool(self._blocks) and self._blocks[-1] is END

    async def wait_nonempty(self) -> None:
        while not self._blocks:
            self._changed.clear()
            await self._changed.wait()


class Batcher:
    """The dispatcher's side of batching: blocks from a BlockQueue -> batches, waiting at most
    `max_wait_s` after a window's first item for more (seed 000's 5-10 ms window)."""

    def __init__(self, queue: BlockQueue, caps: BatchCaps, window_items: int, parallel: int = 1) -> None:
        self.queue = queue
        self.windows = Windows(caps, window_items, parallel)
        self.input_done = False
        self.waited_s = 0.0  # time the dispatcher had nothing to send (the device starved)

    @property
    def caps(self) -> BatchCaps:
        return self.windows.caps

    @caps.setter
    def caps(self, caps: BatchCaps) -> None:
        self.windows.caps = caps

    def idle(self) -> bool:
        return self.input_done and not self.windows.count and not self.windows.has_ready()

    def reopen(self) -> None:
        """A watch's next pass: more input comes after the end that was read (the batcher is idle)."""
        assert self.idle(), "a batcher reopened with items left. This is a bug."
        self.input_done = False

    async def next(self, interrupt: asyncio.Future | None = None) -> Items | None:
        """The next batch; None at the end of input, or when `interrupt` finished first (the
        pool changed: a batch to resend, a worker back) so the caller can look again. The
        interrupt is cancelled when the batch came first."""
        try:
            if self.windows.has_ready() and not self.input_done and self.queue.holds_end():
                self._drain()  # the input has ended behind batches cut before (no block comes after)
                if self.input_done:
                    self.windows.cut(final=True)  # the last batches, cut again for the workers
            while not self.windows.has_ready():
                if self.input_done:
                    self.windows.cut(final=True)
                    return self.windows.pop()
                if not self.windows.batch_full and not await self._collect(interrupt):
                    return None
                self.windows.cut(final=self.input_done)
            return self.windows.pop()
        finally:
            if interrupt is not None and not interrupt.done():
                interrupt.cancel()

    async def _collect(self, interrupt: asyncio.Future | None) -> bool:
        """Take what is queued into the window; wait for the first item (or the interrupt),
        then at most max_wait for a full window. False when interrupted with nothing new."""
        if not self.windows.count and self.queue.empty():
            t0 = time.monotonic()
            arrived = await _first(self.queue.wait_nonempty(), interrupt)
            self.waited_s += time.monotonic() - t0
            if not arrived:
                return False
        deadline = time.monotonic() + self.caps.max_wait_s
        while not self.input_done and not self.windows.window_full:
            self._drain()
            if self.input_done or self.windows.window_full:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not await _first(self.queue.wait_nonempty(), interrupt, remaining):
                break
        return True

    def _drain(self) -> None:
        while not self.queue.empty() and not self.windows.window_full:
            block = self.queue.get_nowait()
            if block is END:
                self.input_done = True
                return
            self.windows.add(block)


async def _first(waiting, interrupt: asyncio.Future | None, timeout: float | None = None) -> bool:
    """Await `waiting` until it finishes (True), or the interrupt or the timeout comes first (False)."""
    task = asyncio.ensure_future(waiting)
    pending = {task} | ({interrupt} if interrupt is not None else set())
    try:
        await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
    return task.done() and not task.cancelled()
