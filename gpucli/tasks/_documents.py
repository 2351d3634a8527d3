"""Inputs -> documents for embed: each input's text, and where its pages start.

Plain text (and a table's record) is decoded here, in the reader's thread or process
(gpucli/inputs/text.py). A document format (PDF, DOCX, HTML, EPUB...: gpucli/inputs/extract/) is
extracted in child processes (gpucli/inputs/limited.py), for two reasons: extraction is CPU work in C
libraries that must spread over the host's cores, and a pathological file must be stoppable
(a time limit per file, `--extract-timeout`, and a memory cap per child) without stopping the run.
Either way the text is cleaned of escape sequences and control characters before tokenizing.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from gpucli.core.errors import InputError
from gpucli.core.records import Failure, Source
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document, format_for
from gpucli.inputs.limited import LimitedPool, Limits, default_size
from gpucli.inputs.tables import Record
from gpucli.inputs.text import clean_text, decode_text

EXTRACT_TARGET = "gpucli.tasks._documents:extract_clean"


class Documents:
    """Reads a chunk of inputs into documents; one pool of extraction children per process."""

    def __init__(self, timeout_s: float) -> None:
        self.limits = Limits(timeout_s=timeout_s, memory_mb=_child_memory_mb())
        self._pool: LimitedPool | None = None
        self._lock = threading.Lock()  # reader threads ask for the pool at once

    def read(self, sources: list[Source], datas: list[bytes]) -> tuple[list[tuple[Source, Document]], list[Failure]]:
        """(source, document) for each usable input, in order, and a failure record per other.
        Plain text takes one pass with no per-file object but its Document (one-sentence files
        are most trees' inputs: this is the reader's hot loop)."""
        docs: list[Any] = [None] * len(sources)
        extract = []
        for i, (source, data) in enumerate(zip(sources, datas)):
            fmt = None if type(source) is Record else format_for(source.path)
            if fmt is not None:
                extract.append((i, fmt.name))
                continue
            try:
                docs[i] = Document(decode_text(data))
            except InputError as exc:
                docs[i] = exc
        if extract:
            for (i, _), outcome in zip(extract, self.pool().map([(name, datas[i]) for i, name in extract])):
                docs[i] = outcome
        kept, failures = [], []
        for source, doc in zip(sources, docs):
            if type(doc) is Document and doc.text.strip():
                kept.append((source, doc))
            elif type(doc) is Document:
                failures.append(Failure(source.path, Stage.DECODE, "no text (the file holds only whitespace)"))
            else:
                failures.append(Failure(source.path, doc.stage, str(doc)))
        return kept, failures

    def pool(self) -> LimitedPool:
        with self._lock:
            if self._pool is None:
                self._pool = LimitedPool(EXTRACT_TARGET, default_size(), self.limits)
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __getstate__(self) -> dict:  # should a task be pickled, its children stay with this process
        return {"limits": self.limits}

    def __setstate__(self, state: dict) -> None:
        self.limits, self._pool, self._lock = state["limits"], None, threading.Lock()


def extract_clean(fmt: str, data: bytes) -> Document:
    """In an extraction child: the document's text, each page cleaned of control characters
    (page starts move with what is removed)."""
    from gpucli.inputs.extract import extract

    doc = extract(fmt, data)
    if not doc.pages:
        return Document(clean_text(doc.text))
    bounds = list(doc.pages) + [len(doc.text)]
    pieces = [clean_text(doc.text[a:b]) for a, b in zip(bounds, bounds[1:])]
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    return Document("".join(pieces), tuple(starts))


def _child_memory_mb() -> int:
    """A child's address-space cap: 4 GiB, less on a small host (a quarter of its memory)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    except (ValueError, OSError, AttributeError):
        return 4096
    return int(max(1024, min(4096, total // 4)))
