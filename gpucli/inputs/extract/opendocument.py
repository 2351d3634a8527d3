"""ODT and ODP (OpenDocument text and presentation) with odfpy (Apache-2.0).

The text body is walked in document order: headings and paragraphs are paragraphs, a list
is one paragraph of lines, a table one line per row (cells separated by tabs). Each slide of
an ODP is a page. Tracked deletions, comments, notes and speaker notes are left out: they
are not the text as it reads. Inline text is read by our own walk rather than odfpy's
teletype.extractText, which expands <text:s text:c="N"/> to N spaces for any N.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from odf.namespaces import DRAWNS, OFFICENS, PRESENTATIONNS, TABLENS, TEXTNS
from odf.opendocument import load

from gpucli.inputs.extract import Document
from gpucli.inputs.extract._layout import group_items, join_lines, join_paragraphs, paged
from gpucli.inputs.extract._zip import open_zip

ELEMENT = 1
TEXT_NODE = 3
MAX_SPACES = 100  # <text:s text:c="..."/>: a run of spaces, capped

_PARAGRAPHS = {(TEXTNS, "p"), (TEXTNS, "h")}
_LIST = (TEXTNS, "list")
_TABLE = (TABLENS, "table")
_ROW = (TABLENS, "table-row")
_CELLS = {(TABLENS, "table-cell"), (TABLENS, "covered-table-cell")}
_LEFT_OUT = {(TEXTNS, "tracked-changes"), (OFFICENS, "annotation"), (OFFICENS, "forms"), (TEXTNS, "note"),
             (TEXTNS, "sequence-decls"), (PRESENTATIONNS, "notes"), (OFFICENS, "annotation-end")}
_INLINE = {(TEXTNS, "tab"): "\t", (TEXTNS, "line-break"): "\n"}


def extract_odt(data: bytes) -> Document:
    """The text body of an ODT, in document order."""
    document = _load(data, "ODT")
    return Document(join_paragraphs(group_items(_blocks(document.text))))


def extract_odp(data: bytes) -> Document:
    """One page per slide (draw:page) of an ODP."""
    document = _load(data, "ODP")
    slides = (node for node in _elements(document.presentation) if node.qname == (DRAWNS, "page"))
    return paged(join_paragraphs(group_items(_blocks(slide))) for slide in slides)


def _load(data: bytes, label: str):
    open_zip(data, label).close()
    return load(io.BytesIO(data))


def _elements(node) -> Iterator:
    return (child for child in node.childNodes if child.nodeType == ELEMENT)


def _blocks(node) -> Iterator[tuple[str, bool]]:
    """(text, is_list_item) for each paragraph, list item and table under `node`."""
    for child in _elements(node):
        name = child.qname
        if name in _LEFT_OUT:
            continue
        if name in _PARAGRAPHS:
            yield _inline(child), False
        elif name == _LIST:
            yield from ((text, True) for text, _ in _blocks(child))
        elif name == _TABLE:
            yield join_lines(_rows(child)), False
        else:  # sections, frames, text boxes, list items, shapes: open them
            yield from _blocks(child)


def _rows(table) -> Iterator[str]:
    for child in _elements(table):
        if child.qname == _ROW:
            yield "\t".join(_cell(cell) for cell in _elements(child) if cell.qname in _CELLS)
        elif child.qname != _TABLE:  # header-rows, row-groups; a nested table is read in its cell
            yield from _rows(child)


def _cell(cell) -> str:
    return " ".join(" ".join(text.split()) for text, _ in _blocks(cell) if text.strip())


def _inline(node) -> str:
    """The text of a paragraph: spans opened, <text:s/> <text:tab/> <text:line-break/> read."""
    parts: list[str] = []
    for child in node.childNodes:
        if child.nodeType == TEXT_NODE:
            parts.append(child.data)
        elif child.nodeType == ELEMENT and child.qname not in _LEFT_OUT:
            parts.append(_inline_element(child))
    return "".join(parts)


def _inline_element(node) -> str:
    if node.qname in _INLINE:
        return _INLINE[node.qname]
    if node.qname == (TEXTNS, "s"):
        count = node.getAttrNS(TEXTNS, "c")
        return " " * min(int(count) if count and count.isdigit() else 1, MAX_SPACES)
    return _inline(node)
