"""Jupyter notebooks (.ipynb) with json: the sources of markdown and code cells in order.

Outputs are left out: they are results (tables, tracebacks, base64 images), not the text a
person wrote, and they would swamp it. Raw cells are left out too. A cell is a paragraph;
nbformat 4 (cells) and 3 (worksheets, code in "input") are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document
from gpucli.inputs.extract.layout import join_paragraphs

CELL_TYPES = {"markdown", "code"}


def extract_ipynb(data: bytes) -> Document:
    """Markdown and code cells' sources, separated by a blank line; no pages."""
    try:
        notebook = json.loads(data)
    except (UnicodeDecodeError, ValueError) as error:
        raise InputError(Stage.DECODE, f"not a valid Jupyter notebook file (not JSON: {error})") from None
    if not isinstance(notebook, dict) or not ("cells" in notebook or "worksheets" in notebook):
        raise InputError(Stage.DECODE, "not a valid Jupyter notebook file (no cells)")
    return Document(join_paragraphs(_sources(notebook)))


def _cells(notebook: dict) -> Iterator[dict]:
    yield from notebook.get("cells") or ()
    for worksheet in notebook.get("worksheets") or ():  # nbformat 3
        yield from worksheet.get("cells") or ()


def _sources(notebook: dict) -> Iterator[str]:
    for cell in _cells(notebook):
        if isinstance(cell, dict) and cell.get("cell_type") in CELL_TYPES:
            source = cell.get("source", cell.get("input", ""))
            yield "".join(source) if isinstance(source, list) else str(source)
