"""Batches of images to the workers through one shared-memory block each: the parent packs a
batch's uint8 arrays into a block (`ShmPool.pack`) and sends its name and shapes down the worker's
Pipe (`ShmBatch`); the worker copies them out (`read_batch`) and the parent unlinks the block once
the batch is back (`ShmPool.release`).

numpy is imported inside the functions: `gpucli --help` imports every task module.
"""

from __future__ import annotations

import mmap
import os
import secrets
import sys
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import TYPE_CHECKING, Any

from gpucli.core import leftovers

if TYPE_CHECKING:
    import numpy as np

_swept = False  # leftover blocks of killed runs, swept at the first pack of this process


@dataclass(frozen=True)
class ShmBatch:
    """What crosses the Pipe for one batch: the block's name and how to cut it."""

    name: str
    shapes: tuple[tuple[int, ...], ...]

    @property
    def nbytes(self) -> int:
        return sum(_size(shape) for shape in self.shapes)


def _size(shape: tuple[int, ...]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


class ShmPool:
    """Parent-side owner of the shared-memory blocks of the batches in flight.

    `pack` creates one block per batch and keeps its handle; `release` unlinks it. The parent
    alone owns the blocks: workers attach without registering them with the resource tracker
    (see `read_batch`), so a block is unlinked exactly once, by `release`, or by the parent's
    resource tracker if the parent itself dies first. When the tracker dies too (the whole
    process group SIGKILLed), the first `pack` of the next run in any process sweeps them
    (leftovers.sweep_shm): only the parent packs, so workers never pay for the sweep.
    """

    def __init__(self) -> None:
        self._blocks: dict[str, shared_memory.SharedMemory] = {}

    def pack(self, arrays: list[np.ndarray]) -> ShmBatch:
        import numpy as np

        _sweep_once()
        shapes = tuple(tuple(int(d) for d in a.shape) for a in arrays)
        nbytes = sum(_size(shape) for shape in shapes)
        block = _create_block(max(nbytes, 1))
        try:
            flat = np.ndarray((nbytes,), dtype=np.uint8, buffer=block.buf)
            offset = 0
            for array, shape in zip(arrays, shapes):
                size = _size(shape)
                flat[offset : offset + size] = np.asarray(array, dtype=np.uint8).reshape(-1)
                offset += size
            del flat
            block.close()  # unmap here; the segment lives on until `release` unlinks it
        except BaseException:
            _unlink(block)
            raise
        self._blocks[_short_name(block)] = block
        return ShmBatch(_short_name(block), shapes)

    def release(self, batch: ShmBatch) -> None:
        """Unlink the batch's block. Safe to call twice and for a block packed elsewhere."""
        block = self._blocks.pop(batch.name, None)
        if block is None:
            try:
                block = shared_memory.SharedMemory(name=batch.name)
                block.close()
            except FileNotFoundError:
                return
        _unlink(block)

    def release_all(self) -> None:
        for name in list(self._blocks):
            self.release(ShmBatch(name, ()))

    def __len__(self) -> int:
        return len(self._blocks)


def _sweep_once() -> None:
    global _swept
    if not _swept:
        _swept = True
        leftovers.sweep_shm()


def _create_block(nbytes: int) -> shared_memory.SharedMemory:
    while True:
        try:
            return shared_memory.SharedMemory(name=f"gpucli_{os.getpid()}_{secrets.token_hex(6)}", create=True, size=nbytes)
        except FileExistsError:
            continue


def _short_name(block: shared_memory.SharedMemory) -> str:
    return block.name.lstrip("/")


def _unlink(block: shared_memory.SharedMemory) -> None:
    try:
        block.close()
        block.unlink()
    except FileNotFoundError:
        pass


def read_batch(batch: ShmBatch) -> list[np.ndarray]:
    """Worker side: copy the batch's arrays out of its block and let go of the block.

    The copy is one contiguous array; the returned items are views into it.
    """
    import numpy as np

    data = np.empty(batch.nbytes, dtype=np.uint8)
    if batch.nbytes:
        _copy_block(batch.name, data)
    arrays, offset = [], 0
    for shape in batch.shapes:
        size = _size(shape)
        arrays.append(data[offset : offset + size].reshape(shape))
        offset += size
    return arrays


def _copy_block(name: str, out: np.ndarray) -> None:
    """Copy a block without registering it with the resource tracker.

    `SharedMemory(name=...)` registers the block on attach. A spawned worker shares its
    parent's tracker, so that registration is harmless only until someone unregisters it:
    the usual advice, `resource_tracker.unregister` in the worker, removes the parent's
    entry too, and the parent's `unlink` then makes the tracker print a KeyError. Not
    registering at all is right whether or not the tracker is shared.
    """
    import numpy as np

    if sys.version_info >= (3, 13):
        block = shared_memory.SharedMemory(name=name, track=False)  # type: ignore[call-arg]
        view = np.ndarray(out.shape, dtype=np.uint8, buffer=block.buf)
        out[:] = view
        del view
        block.close()
        return
    if os.name == "nt":  # no resource tracker on Windows
        block = shared_memory.SharedMemory(name=name)
        view = np.ndarray(out.shape, dtype=np.uint8, buffer=block.buf)
        out[:] = view
        del view
        block.close()
        return
    _copy_posix(name, out)


def _copy_posix(name: str, out: np.ndarray) -> None:
    import _posixshmem  # CPython's own module behind SharedMemory on POSIX

    import numpy as np

    fd = _posixshmem.shm_open("/" + name, os.O_RDONLY, mode=0o600)
    try:
        mapped = mmap.mmap(fd, out.nbytes, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        view = np.frombuffer(mapped, dtype=np.uint8, count=out.nbytes)
        out[:] = view
        del view
    finally:
        mapped.close()


def stack(arrays: list[Any]) -> np.ndarray:
    """One (N, H, W, C) array; a no-copy view when the items are consecutive views of one
    buffer, as `read_batch` returns them."""
    import numpy as np

    first = arrays[0]
    base = first.base
    if (
        isinstance(base, np.ndarray)
        and all(a.base is base and a.shape == first.shape for a in arrays)
        and base.ndim == 1
        and first.__array_interface__["data"][0] == base.__array_interface__["data"][0]
    ):
        size = first.size
        starts = [a.__array_interface__["data"][0] for a in arrays]
        if all(s == starts[0] + i * size for i, s in enumerate(starts)):
            return base[: size * len(arrays)].reshape((len(arrays), *first.shape))
    return np.stack(arrays)
