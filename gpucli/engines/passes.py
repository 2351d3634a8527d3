"""A watch's passes on plain data: which pass comes next, when the tree is walked whole again,
and what each pass did (its log line and its `--json` line). The watch itself is
gpucli/engines/local/watch.py; the changed paths it holds, gpucli/inputs/changes.py.

    START    the first pass: a full incremental run (what a stopped or killed watch left is done here)
    CHANGES  the paths that changed and are quiet, walked by the whole walk's rules
    RESCAN   the whole tree walked again: every --watch-rescan-s (the safety net for events the
             system dropped or never sent), every --watch-poll-s for bucket roots (no events
             there) or once file events failed, and at once after the held changes overflowed
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from enum import Enum

from gpucli.core.progress import Counts
from gpucli.core.records import MOVED_IN_READ, ReadChunk
from gpucli.core.summary import RunSummary
from gpucli.inputs.changes import Change


def without_moved(chunk: ReadChunk) -> ReadChunk:
    """A read chunk of a watch's pass without the inputs gone or replaced between the walk and the
    read: no failure record, but a change (their event came after the walk's stat: the watch holds
    it, and a later pass reads or removes them)."""
    moved = [f for f in chunk.failures if f.cause == MOVED_IN_READ]
    if not moved:
        return chunk
    return dataclasses.replace(chunk, failures=[f for f in chunk.failures if f.cause != MOVED_IN_READ],
                               found=chunk.found - len(moved))


class PassKind(str, Enum):
    START = "start"
    CHANGES = "changes"
    RESCAN = "rescan"


@dataclass(frozen=True)
class Pass:
    number: int
    kind: PassKind
    changes: tuple[Change, ...] = ()  # CHANGES: each quiet path with its stat (None: gone)

    @property
    def walks_all(self) -> bool:
        return self.kind is not PassKind.CHANGES


@dataclass
class Rescans:
    """When the whole tree is walked again: every `every_s` seconds (0: never) from the last walk."""

    every_s: float
    last: float = 0.0

    def due(self, now: float) -> bool:
        return self.every_s > 0 and now - self.last >= self.every_s

    def until(self, now: float) -> float:
        """Seconds until the next one is due (inf: never)."""
        return max(0.0, self.last + self.every_s - now) if self.every_s > 0 else math.inf

    def walked(self, now: float) -> None:
        self.last = now

    def at_least_every(self, every_s: float) -> None:
        """File events failed: walk at least this often from now on."""
        self.every_s = min(self.every_s, every_s) if self.every_s > 0 else every_s


def rescan_every(urls: bool, rescan_s: float, poll_s: float) -> float:
    """Bucket roots have no events: they are listed every `poll_s`; files every `rescan_s`."""
    return poll_s if urls else rescan_s


@dataclass(frozen=True)
class Totals:
    """The run's counters at one moment (a pass's figures are two of them apart)."""

    found: int = 0
    succeeded: int = 0
    failed: int = 0
    unchanged: int = 0
    skipped: int = 0
    rows: int = 0
    removed: int = 0

    @classmethod
    def of(cls, summary: RunSummary, counts: Counts) -> Totals:
        return cls(counts.found, summary.succeeded, summary.failed, summary.unchanged,
                   summary.skipped - summary.unchanged, summary.rows, summary.pruned)

    def minus(self, before: Totals) -> Totals:
        return Totals(*(a - b for a, b in zip(asdict(self).values(), asdict(before).values())))


@dataclass(frozen=True)
class PassReport:
    """What one pass did: its `--json` line and its log line."""

    number: int
    kind: PassKind
    changed: int  # paths whose changes the pass took (CHANGES)
    did: Totals
    pending: int  # changes held for the next passes
    seconds: float
    extra: dict = field(default_factory=dict)

    @property
    def worth_saying(self) -> bool:
        """A pass that read or removed nothing (an editor's probe file come and gone) says nothing."""
        return self.kind is PassKind.START or bool(self.did.found or self.did.removed)

    def line(self) -> dict:
        return {"event": "pass", "pass": self.number, "kind": self.kind.value, "changed": self.changed,
                "inputs": self.did.found, "succeeded": self.did.succeeded, "failed": self.did.failed,
                "unchanged": self.did.unchanged, "skipped": self.did.skipped, "removed": self.did.removed,
                "rows": self.did.rows, "pending": self.pending, "seconds": round(self.seconds, 3), **self.extra}

    def text(self) -> str:
        what = f"{self.changed} change(s)" if self.kind is PassKind.CHANGES else self.kind.value
        d = self.did
        return (f"pass {self.number} ({what}): {d.found} input(s), {d.succeeded} written, {d.failed} failed, "
                f"{d.unchanged} unchanged, {d.removed} removed, {d.rows} rows in {self.seconds:.2f}s; "
                f"{self.pending} pending")
