"""Two directories exchanged at once: what a reader of either path sees is the old content or the
new, never a mix (a Parquet dataset compacted under a reader: gpucli/output/sinks/parquet.py).

Linux's `renameat2(..., RENAME_EXCHANGE)` swaps two names in one step (ext4, xfs, btrfs, tmpfs
and most local file systems; Linux 3.15, glibc 2.28). Where the file system or the C library
lacks it, two renames do it, with an instant between them where `target` does not exist: a
reader then gets FileNotFoundError (loud, never a wrong row), and a crash there leaves `target`
missing and `aside` holding the old content, which `exchange` called again completes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
from pathlib import Path

from gpucli.core.durable import fsync_dir

AT_FDCWD = -100
RENAME_EXCHANGE = 1 << 1
_UNSUPPORTED = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV)


def exchange(target: Path, staged: Path, aside: Path) -> None:
    """Put `staged` in place of `target` at once, the old content of `target` ending at `staged`
    (or, by the fallback, at `aside`); the parents are synced. `target` missing (a fallback cut
    short) is completed: `staged` takes its place."""
    if not target.exists():
        os.rename(staged, target)
    elif not _renameat2_exchange(target, staged):
        os.rename(target, aside)
        os.rename(staged, target)
    for parent in {target.parent, staged.parent, aside.parent}:
        fsync_dir(parent)


def _renameat2_exchange(a: Path, b: Path) -> bool:
    """True when the kernel swapped them; False where this system cannot (the caller falls back)."""
    libc = _libc()
    if libc is None or not hasattr(libc, "renameat2"):
        return False
    result = libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), str(a), None, str(b))


def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None
