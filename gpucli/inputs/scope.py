"""What a walk is asked for and what it saw: the filter of names (`WalkFilter`), a walk's
entries (`Found`), and what it could not list (`WalkReport`, for `--prune`).

A leaf both walks share: the walk of directories (walk.py) and the walk of URL roots
(stores/listing.py) fill the same report and take the same filter.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from gpucli.core.records import Failure, Source


def _under(path: str, directory: str) -> bool:
    return directory == "." or path == directory or path.startswith(directory + "/")


def _shown(rel: str) -> str:
    return "the input root" if rel == "." else repr(rel)


@dataclass(frozen=True)
class WalkFilter:
    suffixes: tuple[str, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def wants(self, rel: str) -> bool:
        """`--include` globs replace the task's suffixes; `--exclude` always wins.
        Globs match the relative path or the file name."""
        name = rel.rsplit("/", 1)[-1]
        if not self.exclude and not self.include:
            return name.lower().endswith(self.suffixes) if self.suffixes else True
        if any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in self.exclude):
            return False
        if self.include:
            return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in self.include)
        return name.lower().endswith(self.suffixes) if self.suffixes else True


@dataclass(slots=True)
class Found:
    """What the walk yields: a readable source, or a record for a skipped/broken entry."""

    source: Source | None = None
    failure: Failure | None = None


@dataclass
class WalkReport:
    """What one walk could not see, so that `--prune` never removes the rows of a file that
    still exists: it may prune a path only under a root this walk listed, never under a
    directory it could not list (`unlisted`), and not under a root that turned out empty
    (an unmounted share looks like an empty directory) unless the user said so.

    Paths are relative like the rows' `path` ("." for a lone directory root)."""

    roots: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)  # directories (a root included) that could not be listed
    empty_roots: list[str] = field(default_factory=list)  # root directories under which the walk found nothing
    complete: bool = False  # the walk ran to its end: an interrupted walk prunes nothing
    passed_over: int = 0  # files the walk saw that the task does not read (suffixes, --include, --exclude)
    passed_over_suffixes: dict[str, int] = field(default_factory=dict)  # of those, by suffix (the first 64)

    def pass_over(self, name: str) -> None:
        """One file the task does not read: counted, and by its suffix, so that "no input" can say
        what the tree holds (images, for embed with a text model)."""
        self.passed_over += 1
        suffix = os.path.splitext(name)[1].lower()
        if suffix in self.passed_over_suffixes or len(self.passed_over_suffixes) < 64:
            self.passed_over_suffixes[suffix] = self.passed_over_suffixes.get(suffix, 0) + 1

    def may_prune(self, path: str, allow_empty: bool = False) -> bool:
        """Whether a path this walk did not find is known to be gone."""
        if not self.complete or any(_under(path, d) for d in self.unlisted):
            return False
        listed = [r for r in self.roots if allow_empty or r not in self.empty_roots]
        return any(_under(path, r) for r in listed)

    def notes(self, allow_empty: bool = False) -> list[str]:
        """What a pruning run must say about what it kept."""
        notes = [f"{_shown(d)} could not be listed: nothing under it is pruned" for d in self.unlisted]
        if not allow_empty:
            notes += [f"{_shown(r)} is empty: nothing under it is pruned (pass --prune-all if it really is)"
                      for r in self.empty_roots]
        return notes
