"""The bytes of many objects at once: one reader call's chunk, all its requests in flight.

A small object costs one round trip of latency and almost no transfer, so reading them one at
a time leaves the link idle (see benchmarks/RESULTS-buckets.md). Each reader call (a chunk of
the walk: reader.read_chunk) starts every read of its chunk on fsspec's I/O loop, at most
`IN_FLIGHT` at once, and several chunks are read at the same time (reader.read_chunks), up to
the filesystem's connection pool (filesystems.POOL_CONNECTIONS). Each read goes through the
retry policy (retry.py); what still fails is an `InputError` for that object alone, so the
reader writes its failure record and nothing is marked done that was not read."""

from __future__ import annotations

import asyncio
from typing import Any

from gpucli.core.errors import InputError
from gpucli.core.records import Source
from gpucli.core.stages import SkipReason, Stage
from gpucli.inputs.stores import filesystems
from gpucli.inputs.stores.retry import reason, retrying
from gpucli.inputs.stores.url import StoreUrl

IN_FLIGHT = 64  # reads at once per reader call


def fetch(sources: list[Source], max_bytes: int) -> list[bytes | InputError]:
    """Each source's bytes, or the InputError that is its failure record, in order."""
    if not sources:
        return []
    fs = filesystems.filesystem(StoreUrl.parse(sources[0].abspath).protocol)
    return filesystems.run(fs, _fetch_all, fs, sources, max_bytes)


async def _fetch_all(fs: Any, sources: list[Source], max_bytes: int) -> list[bytes | InputError]:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(source: Source) -> bytes | InputError:
        refused = _refused(source.size, max_bytes)
        if refused is not None:
            return refused  # no request for what would be refused after it
        async with gate:
            try:
                data = await retrying(lambda: fs._cat_file(source.abspath))
            except Exception as exc:  # noqa: BLE001 - every error of one object is its own failure record
                return InputError(Stage.READ, reason(exc))
        return _refused(len(data), max_bytes) or data

    return list(await asyncio.gather(*(one(s) for s in sources)))


def _refused(size: int, max_bytes: int) -> InputError | None:
    """The reader's rules for a local file (reader._read_bytes), in its words, for an object's size."""
    if size > max_bytes:
        return InputError(Stage.SKIP, f"file is {size / 2**20:.1f} MiB, over --max-file-mb {max_bytes / 2**20:g}; "
                                  "raise the limit to read it", cause=SkipReason.TOO_LARGE)
    if size == 0:
        return InputError(Stage.READ, "empty file (0 bytes)")
    return None
