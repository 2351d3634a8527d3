"""File-system events under local roots, for `--watch`: watchfiles (Rust's notify: inotify,
FSEvents, ReadDirectoryChangesW) in a thread of its own.

The thread hands each group of changed paths, with each one's stat as it saw it then, to
`deliver` as a `Changed` message (called in the thread: the watch passes it to its event loop),
and says `EventsStopped` once no more events will come. What no walk reads is dropped here,
before it costs anything: paths under this run's own output and state (every part and ledger
write would be an event otherwise), and hidden names and what is under them (`.git` during a
checkout, an editor's swap file), which no walk reads. Everything else is kept, deletions
included: whether a path is an input is the walk's decision (gpucli/inputs/changed_walk.py),
made once the path is quiet. Events that the system dropped (an overflowed queue) and trees on
network file systems, where events may never come, are the periodic rescan's
(`--watch-rescan-s`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpucli.inputs.changes import Change, file_stat

GROUP_MS = 200  # watchfiles yields a group at most this long after its first change (memory under a storm)
STEP_MS = 50  # ... or once no change came for this long
STOP_CHECK_MS = 500  # how often the Rust side looks at the stop event while nothing happens
JOIN_S = 5.0


@dataclass(frozen=True)
class Changed:
    """A group of changed paths, each with its stat as the watcher's thread saw it."""

    changes: tuple[Change, ...]


@dataclass(frozen=True)
class EventsStopped:
    """The events stopped for good (the system's watch limit, a root gone): `reason` says why."""

    reason: str


WatchMessage = Changed | EventsStopped


class TreeWatcher:
    """One thread that watches `roots` (directories; a file root's directory) until `stop`,
    and hands what it sees to `deliver` (in its thread) as one message at a time."""

    def __init__(self, roots: list[str], ignore: list[str], deliver: Callable[[WatchMessage], None]) -> None:
        paths = [Path(os.path.abspath(r)) for r in roots]
        self.dirs = [str(p) for p in paths if p.is_dir()]
        self.files = {str(p) for p in paths if not p.is_dir()}
        self.watched = sorted({*self.dirs, *(os.path.dirname(f) for f in self.files)})
        self.ignore = tuple({os.path.abspath(p) for p in ignore} | {os.path.realpath(p) for p in ignore})
        self.deliver = deliver
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpucli-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, join: bool = True) -> None:
        """Ask the thread to end (it looks every STOP_CHECK_MS); `join`: wait for it, up to JOIN_S."""
        self._stop.set()
        if join and self._thread.is_alive():
            self._thread.join(JOIN_S)

    def wanted(self, path: str) -> bool:
        """Whether an event at `path` may concern an input (see the module docstring)."""
        if any(path == own or path.startswith(own + os.sep) for own in self.ignore):
            return False
        if path in self.files:
            return True
        for root in self.dirs:
            if path == root:
                return True
            if path.startswith(root.rstrip(os.sep) + os.sep):
                inner = path[len(root.rstrip(os.sep)) + 1:]
                return not any(name.startswith(".") for name in inner.split(os.sep))
        return False

    def _run(self) -> None:
        import watchfiles

        try:
            for group in watchfiles.watch(*self.watched, watch_filter=None, debounce=GROUP_MS, step=STEP_MS,
                                          stop_event=self._stop, rust_timeout=STOP_CHECK_MS, yield_on_timeout=False,
                                          raise_interrupt=False, recursive=True):
                paths = sorted({path for _, path in group if self.wanted(path)})
                if paths:
                    self.deliver(Changed(tuple(Change(path, file_stat(path)) for path in paths)))
        except BaseException as exc:  # noqa: BLE001 - the watch goes on by rescans, and says why
            if not self._stop.is_set():
                self.deliver(EventsStopped(f"{type(exc).__name__}: {exc}"))
            return
        if not self._stop.is_set():  # watchfiles ended by itself (its roots went)
            self.deliver(EventsStopped("the watched directories went"))
