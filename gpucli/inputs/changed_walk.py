"""The walk of what changed: for some paths under the roots, what the walk of the whole tree
(gpucli/inputs/walk.py) would yield for them, by the same rules, without walking the rest.

A watch (gpucli/engines/local/watch.py) learns from file-system events which paths changed. Each
path's directory is listed (the walk's rules need the listing: another gpucli output beside it,
this run's own files), and only the changed names in it go through the walk's own steps: the
task's suffixes, --include and --exclude, hidden names, links that leave the root, FIFOs and
devices, text sniffed from files without a suffix. A changed path that is a directory now is
walked whole (a directory moved into the tree comes as one event). A path the whole walk would
never reach (under a hidden directory, a link to a directory, another output, this run's own
state) yields nothing. Each file is yielded once, however many of its paths changed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from gpucli.core.records import Failure, Source
from gpucli.core.stages import Stage
from gpucli.inputs.own_outputs import is_output_dir, is_output_path
from gpucli.inputs.scope import WalkFilter, WalkReport
from gpucli.inputs.walk import _excluded, _rel, _unwrapped, _Walker, common_base


def walk_changed(roots: list[str], flt: WalkFilter, exclude: Iterable[str | os.PathLike], paths: Iterable[str],
                 report: WalkReport | None = None) -> Iterator[list[Source | Failure]]:
    """Blocks of `Source`s and failure records for the changed `paths` (absolute, as the watch
    saw them under the roots given), as `walk_blocks(roots, ...)` would yield them; rows' paths
    are relative to the same base."""
    walker = _ChangedWalker([Path(os.path.abspath(r)) for r in roots], flt,
                            frozenset(os.path.realpath(e) for e in exclude), report or WalkReport())
    walker.report_roots()
    next_id = 0
    for block in walker.changed(paths):
        for entry in block:
            if isinstance(entry, Source):
                entry.id = next_id
                next_id += 1
        if block:
            yield block
    walker.report.complete = True


def changed_keys(paths: list[str], roots: list[str]) -> list[str]:
    """The changed `paths` named as rows name inputs, for those under a root that is there: the
    inputs at them, or under them (a directory), that this pass's walk did not find are gone.
    Nothing under a root that is not there any more: an unmounted share's files are not gone."""
    absolute = [Path(os.path.abspath(r)) for r in roots]
    base = common_base(absolute)
    holders = [str(r) if r.is_dir() else str(r.parent) for r in absolute if r.exists()]
    return [_rel(path, base) for path in paths
            if any(path == h or path.startswith(h.rstrip(os.sep) + os.sep) for h in holders)]


class _ChangedWalker(_Walker):
    def report_roots(self) -> None:
        """The report's roots as the whole walk's: where a path not found may be gone (`may_prune`);
        a directory root with nothing in it now (an unmounted share) is an empty root."""
        for root in self.roots:
            rel = _rel(str(root), self.base)
            self.report.roots.append(rel)
            if root.is_dir() and not _has_entries(str(root)):
                self.report.empty_roots.append(rel)

    def changed(self, paths: Iterable[str]) -> Iterator[list[Source | Failure]]:
        by_dir: dict[str, set[str]] = {}
        file_roots = {str(r): r for r in self.roots if not r.is_dir()}
        for path in paths:
            if path in file_roots:  # a file given as a root: read as the run reads it (gone: nothing)
                root = file_roots[path]
                if not os.path.lexists(path):
                    continue
                yield _unwrapped(self._alias(path, _rel(path, self.base), os.path.realpath(root), explicit=True))
                continue
            by_dir.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
        for directory in sorted(by_dir):  # a directory before those under it: each file once
            yield from self._in_directory(directory, by_dir[directory])

    def _in_directory(self, directory: str, names: set[str]) -> Iterator[list[Source | Failure]]:
        root = self._root_of(directory)
        if root is None:
            return
        root_path, real_root = root
        real = os.path.realpath(directory)
        if real in self.seen_dirs or not self._reached(directory, root_path):
            return  # walked already (a directory above it came whole), or no walk goes there
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):  # gone since: what was under it is gone
            return
        except OSError as exc:  # there, and unreadable: nothing under it is known gone
            rel = _rel(directory, self.base)
            self.report.unlisted.append(rel)
            yield [Failure(rel, Stage.READ, f"cannot list directory: {exc.strerror}")]
            return
        if directory != root_path and is_output_dir(entries):
            return
        subdirs: list[tuple[str, str]] = []
        picked = [entry for entry in entries if entry.name in names]
        yield from self._entries(directory, real, picked, real_root, subdirs, self._excluded_names(real, entries))
        for start in subdirs:  # a directory that came (or changed) as a whole
            yield from self._tree(root_path, real_root, start)

    def _root_of(self, directory: str) -> tuple[str, str] | None:
        """The directory root holding `directory` (its path and real path), the deepest one."""
        holding = [(root, real) for root, real in self.dir_roots
                   if directory == root or directory.startswith(root.rstrip(os.sep) + os.sep)]
        return max(holding, key=lambda pair: len(pair[0]), default=None)

    def _reached(self, directory: str, root: str) -> bool:
        """Whether the whole walk lists `directory`: no directory from the root down to it is
        hidden, a link, another gpucli output, or this run's own output and state."""
        if _excluded(os.path.realpath(directory), self.exclude):
            return False
        inner = os.path.relpath(directory, root)
        if inner == ".":
            return True
        path = root
        for name in inner.split(os.sep):
            path = os.path.join(path, name)
            if name.startswith(".") or os.path.islink(path) or is_output_path(path):
                return False
        return True


def _has_entries(directory: str) -> bool:
    try:
        with os.scandir(directory) as it:
            return next(it, None) is not None
    except OSError:
        return True  # unlistable: the walk says so, and prunes nothing under it (report.unlisted)
