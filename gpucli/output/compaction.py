"""Which parts of a Parquet output to fold together, from their names and sizes: the policy,
on plain data (no files), for the end of a run, `gpucli compact` and `gpucli inspect`.

Every run that writes adds at least one part; a cron job that adds one file an hour makes 8,760
parts a year, and every reader (pyarrow, pandas, polars, DuckDB, Spark) pays per file. The numbers
follow Delta Lake's auto compaction, the best known rule for this (its defaults: files up to
128 MB written, compaction once a table holds 50 small files):

    TARGET_BYTES  128 MiB  a merged part holds small parts up to this size (bin packing in part order)
    SMALL_BYTES    16 MiB  a part below it is small: a reader pays more to open it than to read it
                           (benchmarks/compaction.py measures the scan of many small parts against one)
    AUTO_MIN_SMALL     50  the end of a run compacts once the output holds this many small parts
    ON_DEMAND_MIN       2  `gpucli compact` folds any two small parts that fit one bin

Parts of the target size or over (a long run writes parts of `part_rows` rows) are never
rewritten, so compaction costs at most the small parts' bytes, however large the output. Parts
whose columns differ (an output that gained a column: ParquetSink.widen) never share a bin.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

TARGET_BYTES = 128 * 2**20
SMALL_BYTES = 16 * 2**20
AUTO_MIN_SMALL = 50
ON_DEMAND_MIN = 2


@dataclass(frozen=True)
class PartSize:
    name: str
    bytes: int
    columns: tuple[str, ...] = ()  # parts with other columns never share a bin


@dataclass(frozen=True)
class Plan:
    """Groups of parts, each to become one part; empty when nothing is worth rewriting."""

    bins: tuple[tuple[str, ...], ...] = ()
    rewrite_bytes: int = 0

    @property
    def removed(self) -> int:
        """How many parts fewer the output holds after it."""
        return sum(len(group) - 1 for group in self.bins)

    def __bool__(self) -> bool:
        return bool(self.bins)


def plan(parts: list[PartSize], min_small: int = AUTO_MIN_SMALL) -> Plan:
    """Small parts packed in part order into bins of at most TARGET_BYTES, when at least
    `min_small` parts are small; a bin of one part is left as it is."""
    small = [p for p in sorted(parts, key=lambda p: p.name) if p.bytes < SMALL_BYTES]
    if len(small) < max(min_small, ON_DEMAND_MIN):
        return Plan()
    bins: list[list[PartSize]] = []
    for part in small:
        current = bins[-1] if bins else None
        if (current is None or sum(p.bytes for p in current) + part.bytes > TARGET_BYTES
                or current[0].columns != part.columns):
            bins.append([part])
        else:
            current.append(part)
    kept = [group for group in bins if len(group) > 1]
    return Plan(tuple(tuple(p.name for p in group) for group in kept), sum(p.bytes for g in kept for p in g))


@dataclass(frozen=True)
class Layout:
    """What `gpucli inspect` says of an output's parts."""

    parts: int
    total_bytes: int
    smallest: int
    median: int
    largest: int
    small: int
    would_fold: Plan

    @classmethod
    def of(cls, parts: list[PartSize]) -> Layout:
        sizes = sorted(p.bytes for p in parts) or [0]
        return cls(len(parts), sum(sizes), sizes[0], int(statistics.median(sizes)), sizes[-1],
                   sum(1 for p in parts if p.bytes < SMALL_BYTES), plan(parts, ON_DEMAND_MIN))

    def advice(self, out: str) -> str:
        """A sentence when `gpucli compact` would help (half the parts or more are small and
        folding them removes at least a few), else ""."""
        fold = self.would_fold
        if not fold or fold.removed < 4 or self.small * 2 < self.parts:
            return ""
        return (f"{self.small} of the {self.parts} parts are small: `gpucli compact {out}` leaves "
                f"{self.parts - fold.removed} (a run does it itself past {AUTO_MIN_SMALL} small parts)")
