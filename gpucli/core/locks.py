"""The one lock of gpucli: an exclusive flock on a file, released by the kernel when its holder
dies, so a stale lock never blocks (it is simply taken over). A run's lock on its output, the
move of an earlier state directory, an ONNX cache entry's builder all take it here; a lock that
is held by another process is a LockedError (exit 75) that says whose, or a wait.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from gpucli.core.errors import LockedError


class FileLock:
    """An exclusive flock on `path` (created unless `create` is false), held from `take` or
    `wait` to `release` (or the end of a `with` block)."""

    def __init__(self, path: Path, create: bool = True) -> None:
        self.path = Path(path)
        self.create = create
        self._fd: int | None = None

    def take(self, refused: str | Callable[[str], str]) -> FileLock:
        """The lock now, or LockedError(refused) when another process holds it; `refused` may be
        a function of what the lock file says (a holder that wrote its name there: `note`)."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() if callable(refused) else ""
            os.close(fd)
            raise LockedError(refused(holder) if callable(refused) else refused) from None
        self._fd = fd
        return self

    def wait(self) -> FileLock:
        """The lock, once whoever holds it lets go."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def note(self, text: str) -> None:
        """What the lock file says while this process holds it (who holds it, for a refused one)."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text.encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _open(self) -> int:
        flags = os.O_RDWR | (os.O_CREAT if self.create else 0)
        return os.open(self.path, flags, 0o644)
