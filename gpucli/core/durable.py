"""Files put in place durably, one way everywhere: a new file's content is written to a temporary
name beside it, flushed and fsynced, renamed over the target (`os.replace`: a reader sees the old
file or the new one, never half of one), and the directory fsynced, without which a power cut may
forget the rename that the ledger already counts. A sink's part, a subtitle file, an ONNX cache
entry and its sidecar, a digest memo and a snapshot all go through here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def fsync_dir(path: Path) -> None:
    """A rename or a new name in `path` made durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """`path`'s data on the disk (a file another library wrote by name)."""
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def replace_durably(temporary: Path, target: Path, synced: bool = False) -> None:
    """`temporary`, complete, renamed over `target` for good: its data fsynced first (unless
    `synced`: its writer did), the directory after."""
    if not synced:
        fsync_file(temporary)
    os.replace(temporary, target)
    fsync_dir(Path(target).parent)


@contextmanager
def replacing(target: Path, temporary: Path | None = None, mode: str = "wb", **open_args: Any) -> Iterator[IO]:
    """A file to write `target`'s new content into, at `temporary` (a hidden `.NAME.partial` beside
    it by default, which dataset readers skip); on a clean exit it replaces `target` durably, on an
    error it is removed and `target` stays as it was."""
    target = Path(target)
    temporary = Path(temporary) if temporary is not None else target.with_name(f".{target.name}.partial")
    try:
        with open(temporary, mode, **open_args) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        replace_durably(temporary, target, synced=True)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_durably(target: Path, data: bytes | str, temporary: Path | None = None) -> None:
    """`data` (text as UTF-8) in place of `target`, durably (`replacing`)."""
    with replacing(target, temporary) as file:
        file.write(data.encode("utf-8") if isinstance(data, str) else data)
