"""Making a new name in a directory durable: every atomic replace (a sink's part, a subtitle
file, the state directory's files) ends with the directory's own fsync, without which a power
cut may forget the rename that the ledger already counts."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """A rename or a new name in `path` made durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
