"""OCR'd documents for embed (docs/ocr.md): which pages of a PDF go to OCR, in what batches, how
the pages' texts become one document again, and the `ocr` flag of each row.

inputs/documents/reading.py drives it in two rounds through the extraction children: the first reads each
PDF's text layer page by page (gpucli/inputs/extract/pdf.py `page_texts`: a page without one but
with something drawn on it is None); the second OCRs those pages, PAGES_PER_CALL a call, each call
under the extraction time limit, spread over the children (gpucli/inputs/documents/ocr.py). A page
with a text layer is never OCR'd, so a PDF with text on every page gives the rows it always gave.

A scan nothing can be read from is the failure record it was before OCR, saying what was tried; a
page batch that fails (its time limit, its memory cap) fails the document: a document with pages
silently missing would be rows that do not say what the file holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.documents.ocr import OcrDocument
from gpucli.inputs.extract import Document
from gpucli.inputs.extract.layout import paged

# ~1-3 s a page on one core (benchmarks/ocr.py): a call stays far within the default time limit of
# 120 s, and a long scan spreads over every child
PAGES_PER_CALL = 4


def page_batches(texts: list[str | None]) -> list[list[int]]:
    """The 0-based pages without a text layer (None), PAGES_PER_CALL a batch."""
    pages = [index for index, text in enumerate(texts) if text is None]
    return [pages[k:k + PAGES_PER_CALL] for k in range(0, len(pages), PAGES_PER_CALL)]


def pdf_document(texts: list[str | None], read: dict[int, str], missing: str | None) -> Document:
    """The PDF's pages as one document: the text layer where a page has one, OCR's text (`read`,
    by 0-based page) where it had none; raises InputError when no page holds text. `missing`: why
    OCR could not run (then `read` is empty)."""
    if not texts:
        raise InputError(Stage.DECODE, "no pages in this PDF file")
    pages = [read.get(index, "") if text is None else text for index, text in enumerate(texts)]
    scanned = sum(text is None for text in texts)
    if not any(page.strip() for page in pages):
        if not scanned:
            from gpucli.inputs.extract.pdf import NO_TEXT_LAYER  # PDFium: not in the parent before a PDF

            raise InputError(Stage.DECODE, NO_TEXT_LAYER)
        if missing:
            raise InputError(Stage.DECODE, f"no text layer (a scanned PDF?); {missing}")
        raise InputError(Stage.DECODE, f"no text layer (a scanned PDF?), and OCR found no text on its "
                                       f"{_pages(scanned)} without one")
    return _with_ocr(paged(pages), [index + 1 for index in read if read[index].strip()])


def image_document(frames: list[str]) -> Document:
    """An image's frames (one, or a TIFF's pages) read by OCR, as pages of one document."""
    if not any(frame.strip() for frame in frames):
        raise InputError(Stage.DECODE, "OCR found no text in this image")
    return _with_ocr(paged(frames), [k + 1 for k, frame in enumerate(frames) if frame.strip()])


def _with_ocr(doc: Document, ocr_pages: list[int]) -> Document:
    return OcrDocument(doc.text, doc.pages, tuple(sorted(ocr_pages))) if ocr_pages else doc


def _pages(count: int) -> str:
    return "1 page" if count == 1 else f"{count} pages"


def ocr_flags(source_ids: np.ndarray, page: np.ndarray, ocr_pages: dict[int, tuple[int, ...]]) -> np.ndarray:
    """Each window's `ocr` flag: whether its page's text came from OCR. A window never spans two
    pages (tasks/text/chunking.py), so its page says it."""
    flags = np.zeros(len(source_ids), dtype=bool)
    if ocr_pages:
        for i, (source, number) in enumerate(zip(source_ids.tolist(), page.tolist())):
            flags[i] = number in ocr_pages.get(source, ())
    return flags


def first_failure(outcomes: list[Any]) -> InputError | None:
    """The first InputError among a document's page batches (a time limit, the memory cap)."""
    return next((outcome for outcome in outcomes if isinstance(outcome, InputError)), None)
