"""Inputs -> documents for embed: each input's text, and where its pages start.

Plain text (and a table's record) is decoded here, in the reader's thread or process
(gpucli/inputs/text.py). A document format (PDF, DOCX, HTML, EPUB...: gpucli/inputs/extract/) is
extracted in child processes (sandbox.py; what they are asked, calls.py), for two reasons:
extraction is CPU work in C libraries that must spread over the host's cores, and a pathological
file must be stoppable (a time limit per file, `--extract-timeout`, and a memory cap per child)
without stopping the run. Either way the text is cleaned of escape sequences and control
characters before tokenizing.

OCR (`--ocr`, docs/ocr.md) is part of extraction, in the same children: with `auto` (the default)
a PDF's pages without a text layer are OCR'd, in a second round of calls, a few pages a call
(ocr_pages.py); with `on` image files are read by OCR too; `off` reads text layers only.
Which pages came from OCR is kept per input until the task's rows take it (`take_ocr_pages`).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from gpucli.core.errors import InputError
from gpucli.core.records import Failure, Source
from gpucli.core.stages import Stage
from gpucli.inputs.compressed import inner_name
from gpucli.inputs.documents.calls import Call, Extract, OcrImage, OcrPdf, PdfPages, cleaned, run
from gpucli.inputs.documents.ocr import IMAGE_SUFFIXES, OCR_MODES, OcrDocument, missing
from gpucli.inputs.documents.ocr_pages import first_failure, image_document, page_batches, pdf_document
from gpucli.inputs.documents.sandbox import Limits, Sandbox, default_size
from gpucli.inputs.encodings import NamedEncodings
from gpucli.inputs.extract import Document, format_for
from gpucli.inputs.tables import Record
from gpucli.inputs.text import decode_text


class Documents:
    """Reads a chunk of inputs into documents; one pool of extraction children per process."""

    def __init__(self, timeout_s: float, ocr: str = "off", encodings: NamedEncodings = NamedEncodings()) -> None:
        if ocr not in OCR_MODES:
            raise ValueError(f"ocr must be one of {', '.join(OCR_MODES)}, not {ocr!r}")
        self.limits = Limits(timeout_s=timeout_s, memory_mb=_child_memory_mb())
        self.ocr = ocr
        self.encodings = encodings  # --encoding (inputs/encodings.py)
        self._pool: Sandbox | None = None
        self._lock = threading.Lock()  # reader threads ask for the pool at once
        self._ocr_pages: dict[int, tuple[int, ...]] = {}  # source id -> its pages read by OCR, until taken

    def read(self, sources: list[Source], datas: list[bytes]) -> tuple[list[tuple[Source, Document]], list[Failure]]:
        """(source, document) for each usable input, in order, and a failure record per other.
        Plain text takes one pass with no per-file object but its Document (one-sentence files
        are most trees' inputs: this is the reader's hot loop)."""
        docs: list[Any] = [None] * len(sources)
        asked: dict[int, Call] = {}  # input -> its call in an extraction child
        for i, (source, data) in enumerate(zip(sources, datas)):
            call = None if type(source) is Record else self._call(inner_name(source.path), data)
            if call is not None:
                asked[i] = call
                continue
            try:
                docs[i] = Document(decode_text(data, self.encodings.for_path(source.path)))
            except InputError as exc:
                docs[i] = exc
        if asked:
            for i, outcome in zip(asked, self.pool().map(list(asked.values()))):
                docs[i] = outcome
            self._finish_ocr(docs, datas, asked)
        kept, failures = [], []
        for source, doc in zip(sources, docs):
            if isinstance(doc, Document) and doc.text.strip():
                kept.append((source, doc))
                if isinstance(doc, OcrDocument):
                    with self._lock:
                        self._ocr_pages[source.id] = doc.ocr_pages
            elif isinstance(doc, Document):
                failures.append(Failure(source.path, Stage.DECODE, "no text (the file holds only whitespace)"))
            else:
                failures.append(Failure(source.path, doc.stage, str(doc)))
        return kept, failures

    def _call(self, path: str, data: bytes) -> Call | None:
        """What an extraction child does with this input (calls.py); None for plain text."""
        fmt = format_for(path)
        if fmt is not None:
            return PdfPages(data) if fmt.name == "pdf" and self.ocr != "off" else Extract(fmt.name, data)
        if self.ocr == "on" and path.lower().endswith(IMAGE_SUFFIXES):
            return OcrImage(data)
        return None

    def _finish_ocr(self, docs: list[Any], datas: list[bytes], asked: dict[int, Call]) -> None:
        """Round two: the pages of each PDF without a text layer, OCR'd a few pages a call in the
        children; then every PDF's and image's pages become its document (inputs/documents/ocr_pages.py)."""
        scans = {i: docs[i] for i, call in asked.items() if isinstance(call, PdfPages) and isinstance(docs[i], list)}
        cannot = missing()
        batches = [] if cannot else [(i, pages) for i, texts in scans.items() for pages in page_batches(texts)]
        outcomes = self.pool().map([OcrPdf(datas[i], tuple(pages)) for i, pages in batches]) if batches else []
        read: dict[int, dict[int, str]] = {i: {} for i in scans}
        failed: dict[int, list[Any]] = {}
        for (i, pages), outcome in zip(batches, outcomes):
            if isinstance(outcome, InputError):
                failed.setdefault(i, []).append(_on_pages(outcome, pages))
            else:
                read[i].update(zip(pages, outcome))
        for i, texts in scans.items():
            docs[i] = first_failure(failed.get(i, [])) or _attempt(pdf_document, texts, read[i], cannot)
        for i, call in asked.items():
            if isinstance(call, OcrImage) and isinstance(docs[i], list):
                docs[i] = _attempt(image_document, docs[i])

    def take_ocr_pages(self, sources: list[Source]) -> dict[int, tuple[int, ...]]:
        """{source id: its pages (1-based) read by OCR} for these inputs, forgotten here once taken."""
        with self._lock:
            return {s.id: pages for s in sources if (pages := self._ocr_pages.pop(s.id, None))}

    def pool(self) -> Sandbox:
        with self._lock:
            if self._pool is None:
                self._pool = Sandbox(run, default_size(), self.limits)
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __getstate__(self) -> dict:  # should a task be pickled, its children stay with this process
        return {"limits": self.limits, "ocr": self.ocr, "encodings": self.encodings}

    def __setstate__(self, state: dict) -> None:
        self.limits, self.ocr, self._pool, self._lock = state["limits"], state.get("ocr", "off"), None, threading.Lock()
        self.encodings = state.get("encodings", NamedEncodings())
        self._ocr_pages = {}


def _attempt(make: Any, *args: Any) -> Any:
    """make(*args), cleaned (`cleaned`), or the InputError it raised."""
    try:
        return cleaned(make(*args))
    except InputError as exc:
        return exc


def _on_pages(error: InputError, pages: list[int]) -> InputError:
    where = f"page {pages[0] + 1}" if len(pages) == 1 else f"pages {pages[0] + 1}-{pages[-1] + 1}"
    return InputError(error.stage, f"OCR of {where}: {error}")


def _child_memory_mb() -> int:
    """A child's address-space cap: 4 GiB, less on a small host (a quarter of its memory)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") >> 20
    except (ValueError, OSError, AttributeError):
        return 4096
    return int(max(1024, min(4096, total // 4)))
