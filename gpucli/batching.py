"""Cut pending items into batches by count and cost. Pure: no torch, no asyncio.

The dispatcher keeps a window of pending items, sorts it by cost so a batch pads little
(sentence-transformers and Infinity sort by length), and takes one batch at a time: at
most `max_items` items and at most `max_cost` total cost (TEI's `max_batch_tokens`). An
item whose cost alone exceeds the budget goes as a batch of one.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucli.records import Item


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


def take_batch(pending: list[Item], caps: BatchCaps) -> tuple[list[Item], list[Item]]:
    """Split `pending` (already in the order wanted) into one batch and the rest.

    Items are taken in order while they fit; the first that would overflow the cost
    budget stops the batch (TEI pushes it back to the queue), unless the batch is empty.
    """
    batch: list[Item] = []
    cost = 0
    for i, item in enumerate(pending):
        if len(batch) >= caps.max_items:
            return batch, pending[i:]
        if batch and caps.max_cost > 0 and cost + item.cost > caps.max_cost:
            return batch, pending[i:]
        batch.append(item)
        cost += item.cost
    return batch, []


def sort_window(pending: list[Item]) -> list[Item]:
    """Order by cost, largest first: similar lengths share a batch and big items go early,
    which keeps padding low and memory peaks at the start of a run."""
    return sorted(pending, key=lambda item: item.cost, reverse=True)
