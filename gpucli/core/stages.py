"""Where an input failed: the `stage` of its failure record, one vocabulary end to end.

A leaf (no imports) so that errors.py, records.py and every floor above can name a stage
without importing numpy. The values are the failures file's `stage` column and never change.
"""

from __future__ import annotations

import enum


class Stage(str, enum.Enum):
    """A failure's stage. A `str` too, so that the JSON and Parquet of the failures file hold
    the plain word and `failure.stage == "decode"` still reads as before."""

    READ = "read"  # the bytes could not be read (gone, denied, too large, a store's error)
    DECODE = "decode"  # the bytes are not a document, image or recording the task can read
    PREPROCESS = "preprocess"  # decoded, but the task's preparation failed
    INFER = "infer"  # the model's batch failed for this input, or its output was unusable
    # (no WRITE: a write that fails stops the run, exit 3; no single input fails there)
    SKIP = "skip"  # not a failure: passed over on purpose (an output of gpucli's own, a link loop)

    __str__ = str.__str__  # "decode", not "Stage.DECODE", in messages and f-strings
    __format__ = str.__format__  # type: ignore[assignment]  # str's, on purpose: the value, not the member


class SkipReason(str, enum.Enum):
    """Why a file the walk found was not read: the summary, `--json`, the progress line and
    `--dry-run` count skipped files by it, so that every file found is accounted for."""

    NO_READER = "no reader for this type"  # its suffix is none the task reads, or its content is not text
    EXCLUDED = "excluded"  # an --exclude pattern matched it
    TOO_LARGE = "too large"  # over --max-file-mb, or inflating to more
    OUTSIDE_ROOT = "link outside the root"  # a symbolic link that leaves the root: not followed
    UNCHANGED = "unchanged since the last run"  # done by an earlier run (incremental)

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]  # str's, on purpose: the value, not the member
