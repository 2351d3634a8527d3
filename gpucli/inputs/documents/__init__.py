"""Documents -> text, for embed: plain text decoded in the reader, document formats extracted and
scanned pages read by OCR in child processes under a time limit and a memory cap.

    reading     Documents: a chunk of inputs -> documents (or failure records), the parent's side
    sandbox     the child processes: calls that may never end, each under its limits
    ocr_pages   which PDF pages go to OCR, in what batches, and the rows' `ocr` flags
    ocr         RapidOCR on a page or an image, in a child
"""

from __future__ import annotations

from gpucli.inputs.documents.ocr import OCR_MODES
from gpucli.inputs.documents.reading import Documents

__all__ = ["OCR_MODES", "Documents"]
