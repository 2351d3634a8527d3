"""The run's counters, on the loop (or the Ray driver's thread): the summary's and the progress's.

An input counts as failed, skipped or unchanged when the accounts end it, and as succeeded only
when the commit that holds its rows is durable (`durable`); whether a failure is a known one (it
failed before, unchanged) is the ledger's answer, counted when its commit comes back.
"""

from __future__ import annotations

from gpucli.core.progress import Counts
from gpucli.core.records import UNKNOWN_TOKENS, Failure, Items
from gpucli.core.stages import SkipReason, Stage
from gpucli.core.summary import RunSummary
from gpucli.output.commit import Committed


class Tally:
    def __init__(self, summary: RunSummary, counts: Counts) -> None:
        self.summary = summary
        self.counts = counts
        self._copies: set[int] = set()  # copies of content embedded once, not yet durable (`deduplicated`)

    def found(self, count: int) -> None:
        self.counts.found += count

    def items(self, items: Items) -> None:
        """Model items back (their rows or failures)."""
        self.counts.items += len(items)
        self.counts.cost += items.total_cost

    def unchanged(self, count: int) -> None:
        self.summary.unchanged += count
        self.summary.skipped += count
        self._skipped_for(SkipReason.UNCHANGED.value, count)

    def failure(self, failure: Failure) -> None:
        if failure.stage == Stage.SKIP:
            self.summary.skipped += 1
            self._skipped_for(failure.cause or failure.error, 1)
        else:
            self.summary.failed += 1
            self.summary.unknown_tokens += failure.cause == UNKNOWN_TOKENS

    def _skipped_for(self, reason: str, count: int) -> None:
        if count:
            by_reason = self.summary.skipped_by_reason
            by_reason[reason] = by_reason.get(reason, 0) + count

    def copy(self, sid: int) -> None:
        """A copy of content embedded once, to count as deduplicated once durable."""
        self._copies.add(sid)

    def copy_ended(self, sid: int) -> None:
        self._copies.discard(sid)

    def durable(self, committed: Committed) -> None:
        self.summary.succeeded += len(committed.source_ids)
        self.summary.rows += committed.rows
        self.summary.failed_known += committed.known_failures
        if self._copies:
            copies = self._copies.intersection(committed.source_ids.tolist())
            self._copies -= copies
            self.summary.deduplicated += len(copies)

    def counts_now(self, back: int, rows_back: int) -> Counts:
        """The progress's counts: an input counts when its results are back (`back`), and apart
        from it what is durable (`done`, `rows`: the summary's)."""
        c, s = self.counts, self.summary
        c.done, c.failed, c.skipped, c.rows = s.succeeded, s.failed, s.skipped, s.rows
        c.back, c.rows_back = back, rows_back
        return c

