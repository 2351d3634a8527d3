"""What a run does with each input the walk found, from what the ledger knows of it: one rule
(`decide`) for the reader, the Ray driver and `--dry-run`, on plain data (no SQLite here).
`Status` is an input's state, in a run's accounting and in the ledger alike."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gpucli.core.records import Source


class Status(enum.IntEnum):
    """An input's state. In a run's accounting (gpucli/output/accounts.py: a numpy int8 array indexed
    by source id) it is OPEN until every item is back, then COMPLETE, and DONE once its rows are
    durable, or FAILED; the ledger stores the two that outlive a run by name ('done', 'failed')."""

    OPEN = 0
    COMPLETE = 1
    FAILED = 2
    DONE = 3

    @property
    def stored(self) -> str:
        return self.name.lower()

    @classmethod
    def of_stored(cls, text: str) -> Status:
        return cls[text.upper()]




@dataclass(frozen=True)
class Known:
    size: int
    mtime_ns: int
    digest: str
    status: Status
    version: str = ""  # an object's ETag or generation (gpucli/inputs/stores/); "" for a file


class Action(enum.Enum):
    RUN = "run"  # read it (and, with a digest, skip it when the content is the same)
    UNCHANGED = "unchanged"  # done earlier with the same size and mtime: not even read


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    done_digest: str = ""  # the content digest of the rows kept: the same content, hashed again, is unchanged


def decide(known: Known | None, source: Source) -> Decision:
    """What a run does with an input the walk found, from what the ledger knows of its path:
    the one rule of the reader, the Ray driver and `--dry-run`. A failed input runs again (it
    may have been fixed); a done one is unchanged when its size and mtime are (and, for an object
    in a bucket, its ETag: a rewrite within the store's one-second mtime is seen), else it is read
    and hashed, and skipped still when the content is the same (a touch, a copy)."""
    if known is None:
        return Decision(Action.RUN, "new input")
    if known.status is not Status.DONE:
        return Decision(Action.RUN, "failed before: a run tries it again")
    if (known.size, known.mtime_ns, known.version) == (source.size, source.mtime_ns, source.version):
        return Decision(Action.UNCHANGED, "done earlier, same size and mtime" + (" and ETag" if source.version else ""),
                        known.digest)
    return Decision(Action.RUN, "changed since it was done (a run hashes it first: same content is skipped)",
                    known.digest)
