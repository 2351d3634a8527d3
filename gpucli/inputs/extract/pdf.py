"""PDF: the text layer, page by page, with pypdfium2 (PDFium; Apache-2.0/BSD, fast; PyMuPDF is
AGPL and not allowed). `extract_pdf` reads the text layer only: a scan without one is refused,
not guessed at. OCR (gpucli/inputs/documents/ocr.py, docs/ocr.md) starts from `page_texts`, which
says which pages have no text layer but something drawn on them, and renders those pages with
`render_page`: a page with a text layer is never OCR'd.

PDFium holds each page and text page in native memory until closed, so both are closed as
soon as the page's text is read: memory stays bounded by the text (2,000 pages of 40 lines,
5 M characters: 2.4 s, peak RSS +18 MB, on a shared 2-core host). PDFium is not thread-safe: one document at a time
per process, behind a lock (free in gpucli's single-threaded extraction children).
"""

from __future__ import annotations

import threading

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document
from gpucli.inputs.extract.layout import paged

# PDFium's FPDF_GetLastError() codes for a document that does not load
_LOAD_ERRORS = {
    pdfium_c.FPDF_ERR_PASSWORD: "encrypted PDF: it needs a password; not read",
    pdfium_c.FPDF_ERR_SECURITY: "encrypted PDF with an unsupported security handler; not read",
    pdfium_c.FPDF_ERR_FORMAT: "not a valid PDF file (corrupt or truncated: PDFium cannot parse it)",
    pdfium_c.FPDF_ERR_FILE: "not a valid PDF file (it cannot be opened)",
}
# PDFium joins a word hyphenated across a line end ("exam-" / "ple") into "exam\x02ple" and
# drops the line break: removing the marker gives the word back ("example")
GENERATED_HYPHEN = "\x02"
NO_TEXT_LAYER = "no text layer (a scanned PDF?); OCR is off: --ocr auto reads such pages (pip install 'gpucli[ocr]')"
_PDFIUM = threading.Lock()


def extract_pdf(data: bytes) -> Document:
    """Every page's text; pages joined by a blank line, with their start offsets."""
    with _PDFIUM:
        document = _open(data)
        try:
            texts = [_page_text(document, index) for index in range(len(document))]
        finally:
            document.close()
    if not any(text.strip() for text in texts):
        raise InputError(Stage.DECODE, NO_TEXT_LAYER if texts else "no pages in this PDF file")
    return paged(texts)


def page_texts(data: bytes) -> list[str | None]:
    """Each page's text layer; None for a page without one that has something drawn on it (an
    image, shapes: a scan, or text drawn as outlines), which OCR may read; "" for a blank page."""
    with _PDFIUM:
        document = _open(data)
        try:
            return [_page_text_or_none(document, index) for index in range(len(document))]
        finally:
            document.close()


def render_page(data: bytes, index: int, dpi: float, max_pixels: int):
    """Page `index` (0-based) as a greyscale uint8 array, as a scanner at `dpi` would give it,
    scaled down to at most `max_pixels` (a poster-sized page must not take gigabytes)."""
    with _PDFIUM:
        document = _open(data)
        try:
            page = document[index]
            try:
                width, height = page.get_size()  # points, 1/72 inch
                scale = min(dpi / 72, (max_pixels / max(width * height, 1.0)) ** 0.5)
                bitmap = page.render(scale=scale, grayscale=True)
                pixels = bitmap.to_numpy()
                pixels = (pixels[..., 0] if pixels.ndim == 3 else pixels).copy()  # the bitmap's memory is PDFium's
                bitmap.close()
                return pixels
            finally:
                page.close()
        finally:
            document.close()


def _page_text_or_none(document: pdfium.PdfDocument, index: int) -> str | None:
    text = _page_text(document, index)
    if text.strip():
        return text
    page = document[index]
    try:
        return None if pdfium_c.FPDFPage_CountObjects(page.raw) > 0 else ""
    finally:
        page.close()


def _open(data: bytes) -> pdfium.PdfDocument:
    if b"%PDF-" not in data[:1024]:  # the spec allows junk before the header, within 1 KB
        raise InputError(Stage.DECODE, "not a valid PDF file (no %PDF- header)")
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as error:
        reason = _LOAD_ERRORS.get(error.err_code, f"not a valid PDF file ({error})")
        raise InputError(Stage.DECODE, reason) from None


def _page_text(document: pdfium.PdfDocument, index: int) -> str:
    page = document[index]
    try:
        textpage = page.get_textpage()
        try:
            # get_text_bounded: full Unicode (get_text_range is UCS-2 only); lines end in \r\n
            return textpage.get_text_bounded().replace(GENERATED_HYPHEN, "")
        finally:
            textpage.close()
    finally:
        page.close()
