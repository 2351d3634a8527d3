"""Changed paths of a watched tree, held until they are quiet: the coalescing, the bound and the
quiet rule of `--watch` (gpucli/engines/local/watch.py), on plain data (the clock and the stat
are given), so that they are tested without a file system or a thread.

A path is read once it is quiet: no event for `quiet_s` (`--watch-debounce-ms`), and its stat
(kind, size, mtime, inode) the same as when its last event was seen. A writer that goes on
without events (a network file system) changes the stat, and the path waits again; an editor's
save-by-rename (a temporary file written, renamed over the old one) is one entry per path, each
quiet once the save is over. Events coalesce per path: however many come, a path is held once,
with the time of its last one. Past `max_paths` the structure forgets them all and says so
(`overflowed`): the watch then walks the whole tree again, which finds every change by size and
mtime, so memory stays flat under an event storm (a `git checkout` of another branch).
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gpucli.core.records import Failure, Source


@dataclass(frozen=True, slots=True)
class FileStat:
    """What says a path has not changed: its kind, size, mtime and inode."""

    kind: int
    size: int
    mtime_ns: int
    ino: int


@dataclass(frozen=True, slots=True)
class Change:
    """A path that changed (absolute, as the watch saw it), with its stat when its event was
    seen: None when nothing was there (deleted, or moved away)."""

    path: str
    stat: FileStat | None


def file_stat(path: str) -> FileStat | None:
    """The path's stat without following a link, or None when nothing is there."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:  # cannot be looked at (a directory above it unreadable): the walk says why, as a failure
        return FileStat(-1, -1, -1, -1)
    return FileStat(stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino)


class PendingChanges:
    """Path -> (time of its last event, its stat then), oldest event first; on the event loop only."""

    def __init__(self, max_paths: int) -> None:
        self.max_paths = max_paths
        self._paths: OrderedDict[str, tuple[float, FileStat | None]] = OrderedDict()
        self.overflowed = False  # more paths changed than are held: the tree must be walked again

    def __len__(self) -> int:
        return len(self._paths)

    def add(self, changes: Iterable[Change], now: float) -> None:
        """Events for these paths at `now`, each with its stat when the event was seen."""
        paths = self._paths
        for change in changes:
            if change.path in paths:
                paths.move_to_end(change.path)
            paths[change.path] = (now, change.stat)
        if len(paths) > self.max_paths:
            paths.clear()
            self.overflowed = True

    def clear(self) -> None:
        """A walk of the whole tree is about to see every change: forget them (and the overflow)."""
        self._paths.clear()
        self.overflowed = False

    def next_quiet(self, quiet_s: float) -> float | None:
        """When the oldest path will have been quiet for `quiet_s` (None: nothing pending)."""
        if not self._paths:
            return None
        first = next(iter(self._paths.values()))
        return first[0] + quiet_s

    def ready(self, now: float, quiet_s: float, look: Callable[[str], FileStat | None] = file_stat) -> list[Change]:
        """The paths quiet for `quiet_s` whose stat (`look`) is still the one of their last event,
        taken out, with that stat (None: gone); a path whose stat changed without an event waits
        `quiet_s` again."""
        paths, ready = self._paths, []
        moved: list[Change] = []
        while paths:
            path, (when, seen) = next(iter(paths.items()))
            if now - when < quiet_s:
                break
            paths.popitem(last=False)
            current = look(path)
            (ready if current == seen else moved).append(Change(path, current))
        if moved:
            self.add(moved, now)
        return ready


def split_young(block: list[Source | Failure], now_ns: int, quiet_ns: int,
                exempt: frozenset[str] = frozenset()) -> tuple[list[Source | Failure], list[Source]]:
    """A walk's block without the files written within `quiet_ns` of `now_ns` (by their mtime):
    a walk of the whole tree (the watch's first pass, a rescan) never reads a file that may be
    being written; the watch holds those as changes instead. `exempt`: paths that are quiet
    already (a file whose mtime is in the future would otherwise wait forever)."""
    young = [entry for entry in block if isinstance(entry, Source) and entry.mtime_ns > now_ns - quiet_ns
             and entry.abspath not in exempt and "://" not in entry.abspath]  # an object in a bucket is whole
    if not young:
        return block, []
    held = {id(source) for source in young}
    return [entry for entry in block if id(entry) not in held], young
