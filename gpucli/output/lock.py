"""The lock on an output: one run at a time writes it.

An exclusive flock, released by the kernel when the holder dies, so a stale lock never blocks
(it is simply taken over); the lock file names the holder for the message of a refused run.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from pathlib import Path

from gpucli.core.errors import LockedError


class RunLock:
    """An exclusive flock on the output: released by the kernel when the holder dies, so a
    stale lock never blocks (it is simply taken over); the file names the holder."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "lock"
        self._fd: int | None = None

    def acquire(self, output: str) -> None:
        """Creates the directory here, not before: an output that is refused creates nothing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockedError(f"another gpucli run holds the lock on {output} ({holder}); "
                              "wait for it to finish, or use another --out") from None
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
