"""The lock on an output: one run at a time writes it.

gpucli's file lock (core/locks.py: an exclusive flock, released by the kernel when the holder
dies, so a stale lock never blocks); the lock file names the holder for the message of a refused
run.
"""

from __future__ import annotations

import os
import re
import socket
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from gpucli.core.locks import FileLock

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
    """The output's lock file in its state directory; it names the run that holds it."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "lock"
        self._lock: FileLock | None = None

    def acquire(self, output: str) -> None:
        """Creates the directory here, not before: an output that is refused creates nothing."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(self.path).take(
            lambda holder: f"another gpucli run holds the lock on {output} ({holder or 'another process'}); "
                           "wait for it to finish, or use another --out")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        self._lock.note(f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n")

    def release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            lock.note("")
            lock.release()
