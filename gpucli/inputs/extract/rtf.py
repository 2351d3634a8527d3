"""RTF with striprtf (BSD-3-Clause), a pure-Python tokenizer: fonts, pictures, fields and
other destinations are dropped, \\'xx and \\uN escapes decoded with the file's code page.

striprtf ends every \\par, \\line and \\row with "\\n" and every \\cell with "|"; we rebuild the
layout from that: table rows (lines ending in "|") become tab-separated lines, bullet items
lines of one paragraph, and every other line a paragraph of its own (an RTF \\par is one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from striprtf.striprtf import rtf_to_text

from gpucli.core.errors import InputError
from gpucli.core.stages import Stage
from gpucli.inputs.extract import Document
from gpucli.inputs.extract.layout import group_items, join_paragraphs

_CELL_PARAGRAPH = re.compile(r"\n+\|")  # a cell whose text ends with \par (pandoc, LibreOffice)
_BULLET = re.compile(r"^\s*(?:[\u2022\u25e6\u25aa\u00b7*-]|\d{1,3}[.)])\s")


def extract_rtf(data: bytes) -> Document:
    """The text of an RTF document; no pages (RTF page breaks are layout, not content)."""
    if not data.lstrip()[:5] == b"{\\rtf":
        raise InputError(Stage.DECODE, "not a valid RTF file (it does not start with {\\rtf)")
    text = rtf_to_text(_source(data), errors="replace")
    return Document(join_paragraphs(group_items(_blocks(_CELL_PARAGRAPH.sub("|", text)))))


def _source(data: bytes) -> str:
    """RTF is 7-bit with escapes; raw 8-bit bytes, where a writer left them, are UTF-8 or cp1252."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


def _blocks(text: str) -> Iterator[tuple[str, bool]]:
    for line in text.split("\n"):
        if line.rstrip().endswith("|"):
            yield "\t".join(cell.strip() for cell in line.rstrip()[:-1].split("|")), "row"
        else:
            yield line, "item" if _BULLET.match(line) else None
