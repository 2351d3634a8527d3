"""What to do when a batch fails or a worker dies: decisions on plain data, no processes.

The pool carries these out. The rules:
* A batch that raised (out of memory or any other error) is split in halves and retried;
  a single item that still fails is a failure record for its input.
* A worker that died: the batch it was running counts one attempt; under
  DEATHS_BEFORE_SPLIT attempts it is resent whole, then split until the poison item stands
  alone and becomes a failure record. Batches that were only waiting in its Pipe are resent
  as they are (they never ran).
* Repeated out-of-memory errors lower the run's batch caps by half (`after_oom`, the one rule
  both engines follow: the local run's batcher and each Ray predictor actor).
* Restarts back off exponentially (reset by any success), within a budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpucli.core.records import Batch, FailureKind
from gpucli.engines.batching import BatchCaps, halved_cost

DEATHS_BEFORE_SPLIT = 2
OOMS_BEFORE_SHRINK = 2


@dataclass(frozen=True)
class Resend:
    batch: Batch


@dataclass(frozen=True)
class Fail:
    """The batch's only item failed for good: its input becomes a failure record."""

    batch: Batch
    reason: str


Action = Resend | Fail


def halves(batch: Batch, attempts: int, new_id: Callable[[], int]) -> list[Batch]:
    mid = len(batch) // 2
    return [Batch(new_id(), batch.items.take(part), attempts)
            for part in (np.arange(0, mid), np.arange(mid, len(batch)))]


def after_error(batch: Batch, kind: FailureKind, text: str, new_id: Callable[[], int]) -> list[Action]:
    """The worker stayed alive but `predict` raised for this batch."""
    if len(batch) == 1:
        return [Fail(batch, f"out of memory even alone: {text}" if kind is FailureKind.OOM else text)]
    return [Resend(half) for half in halves(batch, batch.attempts, new_id)]


def after_death(in_flight: list[Batch], reason: str, new_id: Callable[[], int]) -> list[Action]:
    """A worker died with these batches (oldest first: the first was running)."""
    actions: list[Action] = []
    for position, batch in enumerate(in_flight):
        attempts = batch.attempts + (position == 0)
        if attempts < DEATHS_BEFORE_SPLIT:
            actions.append(Resend(Batch(batch.id, batch.items, attempts)))
        elif len(batch) == 1:
            actions.append(Fail(batch, f"worker crashed on this input ({reason})"))
        else:
            actions.extend(Resend(half) for half in halves(batch, DEATHS_BEFORE_SPLIT - 1, new_id))
    return actions


def after_unstarted(in_flight: list[Batch]) -> list[Action]:
    """A worker died loading its model: its batches never ran; resend them as they are."""
    return [Resend(batch) for batch in in_flight]


@dataclass(frozen=True)
class OomHistory:
    """The caps batches are cut under, and the out-of-memory errors seen so far under them."""

    caps: BatchCaps
    events: int = 0


def after_oom(history: OomHistory, batch_size: int) -> tuple[OomHistory, str]:
    """One more out-of-memory error, on a batch of `batch_size`: the history after it, and the
    line to show when it lowered the caps ("" when they stay)."""
    events = history.events + 1
    caps = caps_after_oom(history.caps, batch_size, events)
    if caps is None:
        return OomHistory(history.caps, events), ""
    return OomHistory(caps, events), _lowered(caps, events)


def caps_after_oom(caps: BatchCaps, batch_size: int, oom_events: int) -> BatchCaps | None:
    """New (halved) caps once out-of-memory errors repeat on batches the caps allowed; else None."""
    if oom_events >= OOMS_BEFORE_SHRINK and 1 < batch_size <= caps.max_items:
        return BatchCaps(max(1, batch_size // 2), halved_cost(caps.max_cost), caps.max_wait_s)
    return None


def _lowered(caps: BatchCaps, oom_events: int) -> str:
    """What a run says when out-of-memory errors lowered its caps."""
    cost = f", cost cap to {caps.max_cost}" if caps.max_cost else ""
    return f"out of memory {oom_events} times: batch size lowered to {caps.max_items}{cost}"


@dataclass
class Restarts:
    """The restart budget of a run's workers, and the backoff that grows with deaths in a row."""

    budget: int
    used: int = 0
    deaths_in_a_row: int = 0  # reset by any result

    def after_death(self) -> float | None:
        """Seconds to wait before the restart, or None: the budget is spent."""
        if not may_restart(self.used, self.budget):
            return None
        self.used += 1
        self.deaths_in_a_row += 1
        return restart_delay(self.deaths_in_a_row)

    def after_success(self) -> None:
        self.deaths_in_a_row = 0


def restart_delay(consecutive_deaths: int) -> float:
    return min(5.0, 0.1 * 2 ** min(consecutive_deaths, 6))


def may_restart(restarts: int, max_restarts: int) -> bool:
    return restarts < max_restarts
