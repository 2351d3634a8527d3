"""A run's inputs, for both engines: the walk of its roots, or the rows of its `--from` table.

    check_roots   the roots exist and can be read, before anything is opened (URL roots: stores/roots.py)
    input_root    the directory (or bucket URL) the rows' `path` is relative to
    RunInputs     the inputs in blocks, at most --limit of them, and their count ahead of the reader

The walk's report (what it saw, passed over, could not list) is kept here: pruning and the
"found no input" message read it once the walk is over.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

from gpucli.core.config import RunConfig
from gpucli.core.errors import UsageError
from gpucli.core.progress import Counts
from gpucli.core.records import Failure, Source
from gpucli.inputs import tables
from gpucli.inputs.scope import Found, WalkFilter, WalkReport
from gpucli.inputs.stores.url import is_url
from gpucli.inputs.walk import common_base, count_inputs, walk_blocks

BLOCK = 256  # a --from table's records per block, as the walk's blocks


def check_roots(paths: tuple[str, ...]) -> None:
    """Every root exists, and a directory can be listed: a usage error (exit 2) before any work."""
    if any(is_url(p) for p in paths):  # s3://... roots: parsed and checked there, listed by the walk
        from gpucli.inputs.stores.roots import check_url_roots  # the object stores' code: only for URL roots

        return check_url_roots(paths)
    missing = [p for p in paths if not os.path.lexists(p)]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    for p in paths:
        if Path(p).is_dir() and not os.access(p, os.R_OK | os.X_OK):
            raise UsageError(f"{p}: directory is not readable")


def input_root(paths: tuple[str, ...]) -> str:
    """The absolute directory the rows' `path` is relative to (see walk.common_base), or the
    root URL of object-store roots (gpucli/inputs/stores/roots.py)."""
    if paths and all(is_url(p) for p in paths):
        from gpucli.inputs.stores.roots import url_input_root  # the object stores' code: only for URL roots

        return url_input_root(paths)
    return str(common_base([Path(os.path.abspath(p)) for p in paths])) if paths else ""


class RunInputs:
    """The inputs of one run, in blocks of `Source`s and the walk's own failure records."""

    def __init__(self, config: RunConfig, counts: Counts) -> None:
        self.config, self.counts = config, counts
        self.report = WalkReport(exclude_patterns=tuple(p for p in config.exclude if not p.startswith("!")))
        self._stop_count = threading.Event()  # the counting walk's (count_ahead): its number is no longer needed

    def new_walk(self) -> None:
        """A watch walks the whole tree again: the report says what this walk sees (--prune)."""
        self.report = WalkReport(exclude_patterns=self.report.exclude_patterns)

    def walk_filter(self, suffixes: tuple[str, ...], extensionless: bool = False) -> WalkFilter:
        """The task's suffixes, or --include's globs, less --exclude's; extensionless text files too
        for a task that reads text (`extensionless`)."""
        return WalkFilter(suffixes, self.config.include, self.config.exclude, extensionless)

    def blocks(self, flt: WalkFilter, exclude: list[str], max_bytes: int) -> Iterator[list[Source | Failure]]:
        """The inputs in blocks (walk.walk_blocks), at most `--limit` of them (a limited walk is
        incomplete: it prunes nothing)."""
        if self.config.from_table:  # texts from a table's rows, one record per row (gpucli/inputs/tables.py)
            blocks = _in_blocks(tables.records(self.config, self.report, max_bytes))
        else:
            blocks = walk_blocks(list(self.config.paths), flt, exclude, self.report)
        return _limited(blocks, self.config.limit) if self.config.limit else blocks

    def count_ahead(self, flt: WalkFilter, exclude: list[str]) -> None:
        """Count the walk in a thread of its own (walk.count_inputs: a number, never a list),
        ahead of the reader, whose walk waits for the queue: the progress then knows the total,
        and an ETA, long before the reader has found every input. A hint only: once the real
        walk ends its `found` is the total. Not for --from: a table's rows are read once."""
        if self.config.from_table:
            return
        roots, limit = list(self.config.paths), self.config.limit

        def count() -> None:
            try:
                total = count_inputs(roots, flt, exclude, self._stop_count)
            except Exception:  # noqa: BLE001 - a hint: the real walk reports what went wrong
                return
            if total is not None and not self._stop_count.is_set():
                self.counts.expected = min(total, limit) if limit else total

        threading.Thread(target=count, name="gpucli-count-ahead", daemon=True).start()

    def stop_counting(self) -> None:
        """The walk is over, or the run is: the count ahead is no longer needed."""
        self._stop_count.set()


def _limited(blocks: Iterator[list[Source | Failure]], limit: int) -> Iterator[list[Source | Failure]]:
    """The walk's blocks up to `limit` inputs (failure records pass; the walk stops at the limit)."""
    sources = 0
    for block in blocks:
        for i, entry in enumerate(block):
            if isinstance(entry, Source):
                if sources == limit:
                    yield block[:i]
                    return
                sources += 1
        yield block


def _in_blocks(found: Iterator[Found], size: int = BLOCK) -> Iterator[list[Source | Failure]]:
    block: list[Source | Failure] = []
    for item in found:
        entry = item.source if item.source is not None else item.failure
        assert entry is not None, "a walk entry with neither a source nor a failure. This is a bug."
        block.append(entry)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block
