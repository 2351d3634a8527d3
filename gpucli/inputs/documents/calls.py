"""What an extraction child is asked to do, as typed calls, and how it does each (`run`, the
handler `Documents` gives its sandbox). A library's exception becomes the file's InputError, as
the extractors' do; a MemoryError passes through, for the sandbox to name its memory cap.

    Extract(fmt, data)    a document's text, each page cleaned of control characters
    PdfPages(data)        a PDF's text layer page by page (None: a page without one) for OCR's rounds
    OcrPdf(data, pages)   those pages of a PDF read by OCR, a few a call (ocr_pages.py)
    OcrImage(data)        an image's frames read by OCR (--ocr on)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.documents.ocr import OcrDocument, ocr_image, ocr_pdf_pages
from gpucli.inputs.extract import Document, short_reason
from gpucli.inputs.text import clean_text


@dataclass(frozen=True)
class Extract:
    fmt: str  # a format's name (inputs/extract FORMATS)
    data: bytes


@dataclass(frozen=True)
class PdfPages:
    data: bytes


@dataclass(frozen=True)
class OcrPdf:
    data: bytes
    pages: tuple[int, ...]  # 0-based


@dataclass(frozen=True)
class OcrImage:
    data: bytes


Call = Extract | PdfPages | OcrPdf | OcrImage


def run(call: Call) -> Any:
    """In an extraction child: one call's result."""
    match call:
        case Extract(fmt=fmt, data=data):
            return extract_clean(fmt, data)
        case PdfPages(data=data):
            from gpucli.inputs.extract import pdf  # PDFium: in the children only

            return _guarded(pdf.page_texts, "not a valid PDF file", data)
        case OcrPdf(data=data, pages=pages):  # RapidOCR is imported on first use: in the children only
            return _guarded(ocr_pdf_pages, "OCR failed", data, list(pages))
        case OcrImage(data=data):
            return _guarded(ocr_image, "OCR failed", data)
    raise TypeError(f"{call!r} is no extraction call. This is a bug.")


def _guarded(step: Any, what: str, *args: Any) -> Any:
    try:
        return step(*args)
    except (InputError, MemoryError):
        raise  # MemoryError: the sandbox names its memory cap
    except Exception as error:  # a library's bug or a broken file: one failure, not the run
        raise InputError(Stage.DECODE, f"{what} ({short_reason(error)})") from error


def extract_clean(fmt: str, data: bytes) -> Document:
    """The document's text, each page cleaned of control characters (page starts move with what is
    removed)."""
    from gpucli.inputs.extract import extract

    return cleaned(extract(fmt, data))


def cleaned(doc: Document) -> Document:
    """`doc` with each page cleaned of control characters (page starts move with what is removed);
    an OcrDocument stays one."""
    if not doc.pages:
        return Document(clean_text(doc.text))
    bounds = list(doc.pages) + [len(doc.text)]
    pieces = [clean_text(doc.text[a:b]) for a, b in zip(bounds, bounds[1:])]
    starts, at = [], 0
    for piece in pieces:
        starts.append(at)
        at += len(piece)
    if isinstance(doc, OcrDocument):
        return OcrDocument("".join(pieces), tuple(starts), doc.ocr_pages)
    return Document("".join(pieces), tuple(starts))
