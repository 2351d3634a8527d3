"""What an image-text model's items are, and how a batch of both kinds travels and comes back.

An image is one item whose payload is its pixels (uint8, H x W x 3); a text window is one item
whose payload is the ids its tower sees (int64, special tokens included). A batch may hold both:
on its way to a worker its images go into one shared-memory block and its windows are pickled,
each with its place in the batch (`MixedBatch`). The rows have embed's columns plus `modality`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucli.core.records import Items
from gpucli.tasks.images import ShmBatch, ShmPool, read_batch

IMAGE, TEXT = "image", "text"


@dataclass(frozen=True)
class MixedBatch:
    """A batch on its way to a worker: the images in one shared-memory block (or, in the process
    that made it, as arrays), the windows' ids, and where each goes back in the batch's order."""

    size: int
    images: ShmBatch | list[np.ndarray] | None
    image_at: tuple[int, ...]
    texts: tuple[Any, ...]
    text_at: tuple[int, ...]

    def __len__(self) -> int:
        return self.size

    @staticmethod
    def of(payloads: list[np.ndarray], shm: ShmPool | None = None) -> MixedBatch:
        """The payloads of a batch split by kind: the images packed into `shm`, or kept as they are."""
        image_at = tuple(i for i, p in enumerate(payloads) if p.dtype == np.uint8)
        text_at = tuple(i for i, p in enumerate(payloads) if p.dtype != np.uint8)
        images = [payloads[i] for i in image_at] if image_at else None
        if images is not None and shm is not None:
            images = shm.pack(images)
        return MixedBatch(len(payloads), images, image_at, tuple(payloads[i] for i in text_at), text_at)

    def image_arrays(self) -> list[np.ndarray]:
        return read_batch(self.images) if isinstance(self.images, ShmBatch) else list(self.images or [])


def image_items(source_ids: list[int], pixels: list[np.ndarray], cost: int) -> Items:
    """One item per image: chunk 0, no page, offsets or text."""
    n = len(source_ids)
    text = np.empty(n, dtype=object)
    text[:] = [None] * n
    return Items(np.asarray(source_ids, np.int64), np.zeros(n, np.int64), np.full(n, cost, np.int64), pixels,
                 {"page": np.zeros(n, np.int32), "char_start": np.zeros(n, np.int64),
                  "char_end": np.zeros(n, np.int64), "text": text, "modality": np.full(n, IMAGE, dtype=object)})


def text_items(block: Items, head: list[int], tail: list[int]) -> Items:
    """embed's block of windows with a payload per window: `head` + its ids + `tail`, the ids the
    tower sees."""
    head_ids, tail_ids = np.asarray(head, np.int64), np.asarray(tail, np.int64)
    rows = [np.concatenate([head_ids, block.payload.row(i).astype(np.int64), tail_ids]) for i in range(len(block))]
    payload = np.empty(len(rows), dtype=object)
    payload[:] = rows
    meta = dict(block.meta)
    meta["modality"] = np.full(len(block), TEXT, dtype=object)
    return Items(block.source_ids, block.index, block.cost, list(payload), meta)


def rows_table(items: Items, embedding: Any) -> Any:
    """The rows of a batch: an image's page, offsets and text null."""
    import pyarrow as pa

    image = items.meta["modality"] == IMAGE
    page = items.meta["page"].astype(np.int32)
    return pa.table({"chunk": pa.array(items.index, pa.int32()),
                     "page": pa.array(page, pa.int32(), mask=page == 0),
                     "char_start": pa.array(items.meta["char_start"].astype(np.int64), pa.int64(), mask=image),
                     "char_end": pa.array(items.meta["char_end"].astype(np.int64), pa.int64(), mask=image),
                     "text": pa.array(items.meta["text"], pa.string()),
                     "modality": pa.array(items.meta["modality"], pa.string()),
                     "embedding": embedding})


def rows_schema(embedding_type: Any) -> Any:
    import pyarrow as pa

    return pa.schema([("chunk", pa.int32()), ("page", pa.int32()), ("char_start", pa.int64()),
                      ("char_end", pa.int64()), ("text", pa.string()), ("modality", pa.string()),
                      ("embedding", embedding_type)])
