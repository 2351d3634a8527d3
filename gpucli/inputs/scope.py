"""What a walk is asked for and what it saw: the filter of names (`WalkFilter`), a walk's
entries (`Found`), and what it could not list (`WalkReport`, for `--prune`).

A leaf both walks share: the walk of directories (walk.py) and the walk of URL roots
(stores/listing.py) fill the same report and take the same filter.
"""

from __future__ import annotations

import fnmatch
import os
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gpucli.core.records import Failure, Source
from gpucli.core.stages import SkipReason
from gpucli.inputs.compressed import inner_name


def _under(path: str, directory: str) -> bool:
    return directory == "." or path == directory or path.startswith(directory + "/")


def _shown(rel: str) -> str:
    return "the input root" if rel == "." else repr(rel)


@dataclass(frozen=True)
class WalkFilter:
    """Which files a walk reads. `--include` globs (matched against the path under the root or the file
    name) replace the task's suffixes; `--exclude` patterns always win and have gitignore's meaning
    (pathspec: `nodejs` and `nodejs/` leave out a directory of that name at any depth, `/build` only at
    the root, `*.log` any such file; before, `--exclude nodejs` left out nothing). A compressed
    file (`notes.txt.gz`, inputs/compressed.py) is read when its name without the suffix would be; with
    `extensionless`, a file without a suffix is read when its content is text (walk.py sniffs it)."""

    suffixes: tuple[str, ...]
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    extensionless: bool = False

    @cached_property
    def excluded(self) -> Any:
        """The --exclude patterns as one gitignore spec (None without any)."""
        if not self.exclude:
            return None
        import pathspec

        return pathspec.GitIgnoreSpec.from_lines(self.exclude)

    def wants(self, rel: str) -> bool:
        return self.why_not(rel) is None

    def why_not(self, rel: str) -> SkipReason | None:
        """None when the file at `rel` is read (or sniffed: `sniffs`), else why not."""
        if self.excluded is not None and self.excluded.match_file(rel):
            return SkipReason.EXCLUDED
        name = inner_name(rel.rsplit("/", 1)[-1])
        if self.include:
            inner = inner_name(rel)
            if any(fnmatch.fnmatch(p, g) for g in self.include for p in (rel, inner, name)):
                return None
            return SkipReason.NO_READER
        if not self.suffixes or name.lower().endswith(self.suffixes) or self.sniffs(name):
            return None
        return SkipReason.NO_READER

    def sniffs(self, name: str) -> bool:
        """Whether a file of this name is read only if its content is text: no suffix (README, AUTHORS)."""
        return self.extensionless and "." not in inner_name(name).lstrip(".")

    def exclude_hits(self, rel: str, unmatched: set[str]) -> set[str]:
        """The --exclude patterns among `unmatched` that match `rel` (for the warning on a pattern
        that matches nothing: only patterns not yet seen to match are tried)."""
        return {p for p in unmatched if self.each_exclude[p].match_file(rel)}

    @cached_property
    def each_exclude(self) -> dict[str, Any]:
        import pathspec

        return {p: pathspec.GitIgnoreSpec.from_lines([p]) for p in self.exclude}


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
    passed_over: int = 0  # files the walk saw and does not read (suffixes, --include, --exclude, not text)
    passed_over_suffixes: dict[str, int] = field(default_factory=dict)  # of those, by suffix (the first 64)
    skipped: Counter[str] = field(default_factory=Counter)  # of those, by SkipReason
    list_skipped: bool = False  # --dry-run: the walk yields each one as a skip record too
    exclude_patterns: tuple[str, ...] = ()  # --exclude, to say which matched nothing
    _unmatched: set[str] | None = None

    def pass_over(self, name: str, reason: SkipReason = SkipReason.NO_READER) -> None:
        """One file the task does not read: counted, by reason and by its suffix, so that the summary
        accounts for every file found and "no input" can say what the tree holds (images, for embed
        with a text model)."""
        self.passed_over += 1
        self.skipped[reason.value] += 1
        suffix = os.path.splitext(name)[1].lower()
        if suffix in self.passed_over_suffixes or len(self.passed_over_suffixes) < 64:
            self.passed_over_suffixes[suffix] = self.passed_over_suffixes.get(suffix, 0) + 1

    def saw_excluded(self, rel: str, flt: WalkFilter) -> None:
        """`rel` was left out by --exclude: the patterns that matched it are not "matching nothing"."""
        if self._unmatched is None:
            self._unmatched = set(self.exclude_patterns)
        if self._unmatched:
            self._unmatched -= flt.exclude_hits(rel, self._unmatched)

    def unmatched_excludes(self) -> list[str]:
        """The --exclude patterns that matched no file of a walk that ran to its end."""
        if not self.complete:
            return []
        left = set(self.exclude_patterns) if self._unmatched is None else self._unmatched
        return [p for p in self.exclude_patterns if p in left]

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
