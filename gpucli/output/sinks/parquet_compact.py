"""Compaction of a Parquet dataset directory: small parts folded into larger ones, exactly once
and never half-visible (which parts: gpucli/output/compaction.py).

A reader lists the directory, then opens the parts it listed; no order of renames inside one
directory can add a merged part and take its sources away at the same instant, so a reader
listing in between would count rows twice (or miss them). The whole directory is swapped instead:

1. stage  `OUT.parquet.gpucli/compacting/` is made beside the dataset: each merged part written
          there whole and fsynced, every other part hard-linked (no copy), the directory synced.
          A crash here leaves a staging directory no ledger names: the next open removes it.
2. ledger the sources' locations renamed to the merged parts and the swap marked pending, in one
          transaction (Ledger.rename_locations; the rules at the top of gpucli/output/ledger.py).
3. publish the staging directory and the dataset exchanged in one step (gpucli/core/swap.py), then
          the old content removed and the mark cleared. An open that finds the mark publishes
          again: done already when the dataset holds the merged parts.

A reader that listed the old directory and opens a part after the swap gets FileNotFoundError
(the old names are gone): a loud error to retry, never a row twice or missing. Where the dataset
directory is a mount point or on another file system than its state directory, nothing is
compacted (the swap needs one file system).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from gpucli.core.durable import fsync_dir
from gpucli.core.swap import exchange
from gpucli.output.compaction import ON_DEMAND_MIN, PartSize, Plan, plan
from gpucli.output.sinks.base import Rewrite

STAGED = "compacting"  # in the state directory: the new content, until the swap
ASIDE = "compacted-away"  # the old content, where the swap's two-rename fallback puts it
MARK = "compact:"


def part_sizes(directory: Path, names: list[str]) -> list[PartSize]:
    return [PartSize(name, (directory / name).stat().st_size) for name in names]


def with_columns(directory: Path, sizes: list[PartSize], wanted: Plan) -> list[PartSize]:
    """The parts a first plan would fold, with their column names (read from their footers only):
    parts whose columns differ go to separate bins."""
    import pyarrow.parquet as pq

    named = {name for group in wanted.bins for name in group}
    return [PartSize(p.name, p.bytes, tuple(pq.read_schema(directory / p.name).names)) for p in sizes
            if p.name in named]


def can_swap(directory: Path, state_dir: Path) -> bool:
    """The swap renames across the two: one file system, the dataset not a mount point of its own."""
    try:
        return not os.path.ismount(directory) and directory.stat().st_dev == state_dir.stat().st_dev
    except OSError:
        return False


def stage(directory: Path, state_dir: Path, folds: Plan, first_number: int, write) -> Rewrite:
    """Step 1 (module doc): the staging directory, complete and synced; the Rewrite that the
    ledger records (step 2). `write(tables, path)` writes one merged part as the sink writes parts."""
    import pyarrow.parquet as pq

    staged = state_dir / STAGED
    discard(state_dir)
    staged.mkdir()
    renamed: dict[str, str] = {}
    merged: list[str] = []
    for number, group in enumerate(folds.bins, first_number):
        name = f"part-{number:05d}.parquet"
        write([pq.read_table(directory / source) for source in group], staged / name)
        renamed.update(dict.fromkeys(group, name))
        merged.append(name)
    for entry in os.scandir(directory):
        if entry.name not in renamed and not entry.name.startswith(".") and entry.is_file(follow_symlinks=False):
            os.link(entry.path, staged / entry.name)
    fsync_dir(staged)
    pending = MARK + json.dumps({"merged": merged, "removed": sorted(renamed)})
    return Rewrite(renamed=dict(renamed), pending=pending)


def publish(directory: Path, state_dir: Path, pending: str) -> None:
    """Step 3 (module doc); idempotent."""
    merged = json.loads(pending.removeprefix(MARK))["merged"]
    staged = state_dir / STAGED
    in_place = directory.exists() and all((directory / name).exists() for name in merged)
    if not in_place and staged.exists():
        exchange(directory, staged, state_dir / ASIDE)
    discard(state_dir)


def discard(state_dir: Path) -> None:
    """What a compaction left in the state directory: a staging directory no ledger named (a
    crash in step 1), or the old content after a swap."""
    for name in (STAGED, ASIDE):
        shutil.rmtree(state_dir / name, ignore_errors=True)


def folds(directory: Path, state_dir: Path, names: list[str], min_small: int) -> Plan:
    """What to fold now, or an empty plan (nothing worth it, or no swap possible here)."""
    sizes = part_sizes(directory, names)
    first = plan(sizes, min_small)
    if not first or not can_swap(directory, state_dir):
        return Plan()
    return plan(with_columns(directory, sizes, first), ON_DEMAND_MIN)
