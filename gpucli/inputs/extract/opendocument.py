"""ODT and ODP (OpenDocument text and presentation): content.xml read with defusedxml (PSF).

Every writer puts the body in content.xml, under office:body: LibreOffice, pandoc, python-odf
(odfpy), Google Docs, Calligra. It is parsed as XML and walked in document order, whatever the
writer's whitespace, namespace declarations or nesting (sections, frames, text boxes, lists
in lists, tables of contents): headings and paragraphs are paragraphs, a list is one paragraph
of lines, a table one line per row (cells separated by tabs). Each slide (draw:page) of an ODP
is a page. Tracked deletions, comments, notes and speaker notes are left out: they are not the
text as it reads. Character data collapses white space as the ODF spec says (pandoc indents
its XML); <text:s text:c="N"/> <text:tab/> <text:line-break/> give spaces (at most
MAX_SPACES), a tab and a line break.

odfpy's loader, used before, read every pandoc-made ODT as empty: it takes the document's text
to be office:body's first child node, which in pandoc's indented XML is the white space before
office:text; and it "repairs" each part by declaring again the namespace prefixes it does not
see after a space (pandoc declares them after line ends), which makes the part ill-formed XML
(a duplicate attribute), prints it to stdout and drops it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from xml.etree.ElementTree import Element

from defusedxml.ElementTree import fromstring

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document
from gpucli.inputs.extract._zip import open_zip
from gpucli.inputs.extract.layout import group_items, join_lines, join_paragraphs, paged

OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
PRESENTATION = "{urn:oasis:names:tc:opendocument:xmlns:presentation:1.0}"
MANIFEST = "{urn:oasis:names:tc:opendocument:xmlns:manifest:1.0}"
MAX_SPACES = 100  # <text:s text:c="..."/>: a run of spaces, capped

_PARAGRAPHS = {f"{TEXT}p", f"{TEXT}h"}
_LIST = f"{TEXT}list"
_TABLE = f"{TABLE}table"
_ROW = f"{TABLE}table-row"
_CELLS = {f"{TABLE}table-cell", f"{TABLE}covered-table-cell"}
_LEFT_OUT = {f"{TEXT}tracked-changes", f"{OFFICE}annotation", f"{OFFICE}annotation-end", f"{OFFICE}forms",
             f"{TEXT}note", f"{TEXT}sequence-decls", f"{TEXT}variable-decls", f"{TEXT}user-field-decls",
             f"{PRESENTATION}notes", f"{TEXT}table-of-content-source", f"{TEXT}index-title-template"}
_INLINE = {f"{TEXT}tab": "\t", f"{TEXT}line-break": "\n"}
_SPACES = f"{TEXT}s"
_WHITE = re.compile(r"[ \t\r\n]+")  # ODF 1.2, 6.1.2: character data's white space collapses to one space


def extract_odt(data: bytes) -> Document:
    """The text body of an ODT, in document order."""
    body = _body(data, "ODT")
    return Document(join_paragraphs(group_items(_blocks(body))))


def extract_odp(data: bytes) -> Document:
    """One page per slide (draw:page) of an ODP."""
    body = _body(data, "ODP")
    return paged(join_paragraphs(group_items(_blocks(slide))) for slide in body.iter(f"{DRAW}page"))


def _body(data: bytes, label: str) -> Element:
    """office:body of the document's content.xml."""
    with open_zip(data, label) as archive:
        names = set(archive.namelist())
        if "content.xml" not in names:
            raise InputError(Stage.DECODE, f"not a valid {label} file (no content.xml in the zip)")
        if "META-INF/manifest.xml" in names and _encrypted(archive.read("META-INF/manifest.xml")):
            raise InputError(Stage.DECODE, f"encrypted {label}: it needs a password; not read")
        root = fromstring(archive.read("content.xml"))
    body = root.find(f"{OFFICE}body")
    if body is None:
        raise InputError(Stage.DECODE, f"not a valid {label} file (its content.xml has no office:body)")
    return body


def _encrypted(manifest: bytes) -> bool:
    """Whether the manifest says content.xml is encrypted (a password-protected document)."""
    for entry in fromstring(manifest).iter(f"{MANIFEST}file-entry"):
        if entry.get(f"{MANIFEST}full-path") == "content.xml":
            return entry.find(f"{MANIFEST}encryption-data") is not None
    return False


def _blocks(node: Element) -> Iterator[tuple[str, bool]]:
    """(text, is_list_item) for each paragraph, list item and table under `node`."""
    for child in node:
        tag = child.tag
        if tag in _LEFT_OUT:
            continue
        if tag in _PARAGRAPHS:
            text, inside = _paragraph(child)
            yield text, False
            yield from inside
        elif tag == _LIST:
            yield from ((text, True) for text, _ in _blocks(child))
        elif tag == _TABLE:
            yield join_lines(_rows(child)), False
        else:  # office:text, sections, frames, text boxes, shapes, list items, indexes: open them
            yield from _blocks(child)


def _rows(table: Element) -> Iterator[str]:
    for child in table:
        if child.tag == _ROW:
            yield "\t".join(_cell(cell) for cell in child if cell.tag in _CELLS)
        elif child.tag != _TABLE:  # header-rows, row-groups; a nested table is read in its cell
            yield from _rows(child)


def _cell(cell: Element) -> str:
    return " ".join(" ".join(text.split()) for text, _ in _blocks(cell) if text.strip())


def _paragraph(node: Element) -> tuple[str, list[tuple[str, bool]]]:
    """A paragraph's text, and the blocks of what is anchored in it (a text box, a shape's
    text, a caption's frame: paragraphs of their own after it, not words glued to its end)."""
    line = _Line()
    inside: list[tuple[str, bool]] = []
    line.inline(node, inside)
    return line.text(), inside


class _Line:
    """A paragraph's text as it is built: character data with its white space collapsed (also
    across spans), spaces, tabs and line breaks from their elements as they are."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.space = True  # a collapsed space here would be a second one (or lead the paragraph)

    def inline(self, node: Element, inside: list[tuple[str, bool]]) -> None:
        self.data(node.text)
        for child in node:
            tag = child.tag
            if tag in _INLINE:
                self.literal(_INLINE[tag])
            elif tag == _SPACES:
                count = child.get(f"{TEXT}c", "1")
                self.literal(" " * min(int(count) if count.isdigit() else 1, MAX_SPACES))
            elif tag.startswith(DRAW):  # a frame or shape anchored in the paragraph
                inside.extend(_blocks(child))
            elif tag not in _LEFT_OUT:
                self.inline(child, inside)
            self.data(child.tail)

    def data(self, text: str | None) -> None:
        if not text:
            return
        text = _WHITE.sub(" ", text)
        if self.space and text.startswith(" "):
            text = text[1:]
        if text:
            self.parts.append(text)
            self.space = text.endswith(" ")

    def literal(self, text: str) -> None:
        self.parts.append(text)
        self.space = text == "\n"  # a line starts: its leading white space goes, as a paragraph's

    def text(self) -> str:
        return "".join(self.parts).rstrip(" ")
