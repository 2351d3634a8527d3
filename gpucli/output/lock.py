"""The lock on an output: one run at a time writes it.

An exclusive flock, released by the kernel when the holder dies, so a stale lock never blocks
(it is simply taken over); the lock file names the holder for the message of a refused run.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from gpucli.core.errors import LockedError

HOLDER = re.compile(r"^pid (?P<pid>\d+) on (?P<host>\S+), started (?P<started>.+)$")


class LastRun(str, Enum):
    """What the lock file says of the last run, read without taking the lock (gpucli inspect)."""

    ENDED = "ended"  # released: the file is emptied by every run that ends, Ctrl-C included
    RUNNING = "running"  # its holder is alive on this host
    DIED = "did not finish"  # the file still names a holder that is gone: killed (-9), crashed, power cut
    ELSEWHERE = "held on another host"  # a holder on another machine (a shared file system): not checkable


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started: str
    state: LastRun


def last_holder(directory: Path) -> Holder | None:
    """The run the lock file names, if any, and whether it is alive, read without flock: trying
    the lock, even shared, could make a run that starts in that instant exit 75. A run empties the
    file when it ends, so a name left in it is a run running now or one that never ended."""
    try:
        text = (directory / "lock").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    found = HOLDER.match(text)
    if found is None:
        return None
    pid, host = int(found["pid"]), found["host"]
    if host != socket.gethostname():
        state = LastRun.ELSEWHERE
    else:
        state = LastRun.RUNNING if _alive(pid) else LastRun.DIED
    return Holder(pid, host, found["started"], state)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


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
