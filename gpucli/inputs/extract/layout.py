"""Shared text layout: paragraphs joined by a blank line, pages joined the same way with their
start offsets kept, and the whitespace soup of extracted text cleaned in one place.

A sentence/paragraph-aware chunker cuts at "\\n\\n" first and "\\n" next, so every extractor
emits paragraphs (or whole pages) through these helpers instead of joining strings itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from gpucli.inputs.extract import Document

PARAGRAPH = "\n\n"
_TRAILING_SPACE = re.compile(r"[^\S\n]+\n")  # spaces, tabs, \r, \f... before a line end
_BLANK_RUN = re.compile(r"\n{3,}")


def tidy(text: str) -> str:
    """One text block cleaned: \\r\\n -> \\n, no trailing spaces, at most one blank line in a row."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _TRAILING_SPACE.sub("\n", text + "\n")
    return _BLANK_RUN.sub(PARAGRAPH, text).strip("\n").rstrip()


def join_paragraphs(paragraphs: Iterable[str]) -> str:
    """Non-empty paragraphs, tidied, separated by one blank line."""
    return PARAGRAPH.join(p for p in map(tidy, paragraphs) if p)


def join_lines(lines: Iterable[str]) -> str:
    """Lines (list items, table rows) of one paragraph, one per line, empty ones dropped."""
    return "\n".join(line for line in map(tidy, lines) if line)


def paged(pages: Iterable[str]) -> Document:
    """Pages (or slides) joined by a blank line, with the offset where each one starts.

    An empty page (a blank page, an image-only slide) adds no separator and starts where the
    next page with text starts (or at the end), so page numbers stay true to the file.
    """
    parts: list[str] = []
    starts: list[int | None] = []
    length = 0
    for page in pages:
        page = tidy(page)
        if not page:
            starts.append(None)
            continue
        if parts:
            parts.append(PARAGRAPH)
            length += len(PARAGRAPH)
        starts.append(length)
        parts.append(page)
        length += len(page)
    return Document("".join(parts), _fill_empty(starts, length))


def _fill_empty(starts: list[int | None], end: int) -> tuple[int, ...]:
    filled: list[int] = []
    following = end
    for start in reversed(starts):
        following = following if start is None else start
        filled.append(following)
    filled.reverse()
    if filled:
        filled[0] = 0
    return tuple(filled)


def group_items(blocks: Iterable[tuple[str, object]]) -> Iterator[str]:
    """(text, kind) blocks -> paragraphs: a run of items of one kind (truthy: "list", "row")
    becomes one paragraph of lines; a falsy kind is a paragraph of its own. The items of a list
    belong together, the paragraphs around them do not."""
    items: list[str] = []
    current: object = None
    for text, kind in blocks:
        if items and kind != current:
            yield join_lines(items)
            items = []
        current = kind
        if kind:
            items.append(text)
        else:
            yield text
    if items:
        yield join_lines(items)
