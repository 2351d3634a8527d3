"""Free space for a Qdrant Edge shard, checked before each write.

Qdrant Edge keeps its data in memory-mapped files, made sparse and filled as points arrive; a
page touched on a full file system kills the process with SIGBUS rather than raising. So every
write first makes sure the file system holds what the shard's files may still fill plus what
the write adds (`room`), and says ENOSPC (exit 3, a rerun resumes) when it does not.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

MARGIN_BYTES = 64 << 20  # kept free beyond what a write may fill: a new WAL file (32 MiB) and then some


def room(storage: Path, shard: Path, adding: int) -> None:
    """Raise ENOSPC unless the file system holds what the shard's sparse files may still fill,
    twice what this write adds (the WAL, then the segment) and a margin."""
    need = unbacked(shard) + 2 * adding + MARGIN_BYTES
    stats = os.statvfs(storage)
    free = stats.f_bavail * stats.f_frsize
    if free < need:
        raise OSError(errno.ENOSPC, f"No space left on device: Qdrant Edge needs {need / 2**20:.0f} MiB free for "
                      f"its memory-mapped files and this write, and {free / 2**20:.1f} MiB are", str(shard))


def unbacked(shard: Path) -> int:
    """Bytes the shard's files address but the file system has not allocated yet (sparse files)."""
    total = 0
    for root, _, files in os.walk(shard):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


def allocated(shard: Path) -> int:
    """Bytes the shard's files take on the file system."""
    total = 0
    for root, _, files in os.walk(shard):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:
                continue
    return total
