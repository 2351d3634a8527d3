"""Where a long document's token windows start and end: at the text's own boundaries.

A window of W tokens, consecutive windows sharing about `overlap` tokens. Cut by count alone,
windows start and end mid-word ("'s magnetic field; ..." was a search hit's first line). The
rule, for a window that does not reach the end of the document:

1. it ends after the last paragraph break (a blank line) among its last L tokens, else
2. after the last sentence end among them (., ! or ?, or their CJK forms, then white
   space; a CJK full stop needs none), else
3. at the last word boundary among its last W/2 tokens (never between two letters or digits
   that touch: "magnet|ic" is inside a word, "field|;" and "field| the" are not), else
4. at W tokens (a "word" longer than half a window: a URL, a base64 blob, a line of CJK with
   no punctuation at all; cut where the count says).

L is the overlap (at least W/8, so that a window with no overlap still looks back). The next
window starts `overlap` tokens before the previous end, moved back to the start of its word
(never at or before the previous start), so a chunk also never starts inside a word.

Example (W = 10, overlap = 4), "The Sun is a star. It is hot and bright. Earth orbits it."
(16 tokens): cut by count, the first window is "The Sun is a star. It is hot and"; here it is
"The Sun is a star.", the second "is a star. It is hot and bright." (4 tokens back, at a word
start), the third "hot and bright. Earth orbits it.".

Pages: a document with pages (a PDF's pages, the slides of a PPTX or ODP: `Document.pages`) is
cut page by page. No window spans two pages: the windows restart at each page's first token (a
token belongs to the page its first character is on), so a row's `page` is the page all of its
text is on, and every page with text has at least one row, even a short slide beside others.

A document of one page (or none) that fits one window is one chunk, as before: its vector does
not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from gpucli.core.records import Items, Ragged
from gpucli.inputs.graphemes import cluster_end, cluster_start

if TYPE_CHECKING:
    from gpucli.inputs.extract import Document

SENTENCE_ENDS = frozenset(".!?")
CJK_SENTENCE_ENDS = frozenset("。！？")


def windows(count: int, window: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) token ranges covering all `count` tokens, `overlap` tokens shared, by count
    alone (the rule when there is no text to look at)."""
    step = window - overlap
    spans = []
    start = 0
    while True:
        end = min(start + window, count)
        spans.append((start, end))
        if end >= count:
            return spans
        start += step


def text_windows(text: str, offsets: Sequence[Any], window: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) token ranges covering all tokens of `text` (`offsets[k]` = token k's
    (char start, char end)), ending and starting at the text's boundaries (module doc)."""
    count = len(offsets)
    look = max(overlap, window // 8, 1)
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        end = min(start + window, count)
        if end < count:
            end = _best_end(text, offsets, start, end, look)
        spans.append((start, end))
        if end >= count:
            return spans
        start = _next_start(text, offsets, start, end, overlap)


def _best_end(text: str, offsets: Sequence[Any], start: int, end: int, look: int) -> int:
    """The end (a token index) of a window [start, end) by rules 1-4."""
    lowest = max(start + 1, end - look)
    sentence = 0
    for k in range(end, lowest - 1, -1):  # k: the window ends before token k
        gap = text[int(offsets[k - 1][1]):int(offsets[k][0])]
        if "\n" in gap and gap.count("\n") >= 2:
            return k
        if not sentence and _ends_sentence(text, offsets, k, gap):
            sentence = k
    if sentence:
        return sentence
    for k in range(end, max(start + 1, end - (end - start) // 2) - 1, -1):
        if _word_boundary(text, offsets, k):
            return k
    return end


def _next_start(text: str, offsets: Sequence[Any], start: int, end: int, overlap: int) -> int:
    """`overlap` tokens before `end`, moved back to a word's start; always after `start`."""
    first = end - overlap
    if first <= start:
        return end if end > start else start + 1
    k = first
    while k > start + 1 and not _word_boundary(text, offsets, k):
        k -= 1
    return k if _word_boundary(text, offsets, k) else first


def _ends_sentence(text: str, offsets: Sequence[Any], k: int, gap: str) -> bool:
    """Whether token k-1 ends a sentence: its last character is a sentence end followed by white
    space (or a CJK one, which needs none)."""
    last = text[int(offsets[k - 1][1]) - 1] if int(offsets[k - 1][1]) > 0 else ""
    if last in CJK_SENTENCE_ENDS:
        return True
    return last in SENTENCE_ENDS and gap[:1].isspace()


def _word_boundary(text: str, offsets: Sequence[Any], k: int) -> bool:
    """Whether a window may end before token k (and the next start at it): something lies
    between tokens k-1 and k, or the characters that touch there are not both word characters
    of a spaced script (CJK characters are words of their own)."""
    left_end, right_start = int(offsets[k - 1][1]), int(offsets[k][0])
    if right_start > left_end:
        return True
    if left_end <= 0 or right_start >= len(text):
        return True
    a, b = text[left_end - 1], text[right_start]
    return not (_wordy(a) and _wordy(b))


def _wordy(char: str) -> bool:
    return char.isalnum() and not _cjk(char)


def _cjk(char: str) -> bool:
    code = ord(char)
    return (0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF
            or 0x20000 <= code <= 0x3FFFF)


def page_cuts(doc: Document) -> list[int]:
    """Where in `doc.text` a page after the first starts (pages that start at 0 or past the text's
    end, blank ones, cut nothing)."""
    return sorted({start for start in doc.pages if 0 < start < len(doc.text)})


def multi_page(docs: Sequence[tuple[Any, Document]]) -> set[int]:
    """Indices of the (source, document) pairs whose windows restart at a page boundary: their
    tokens need every offset (tasks/text/tokens.py), even when the text fits one window."""
    return {i for i, (_, doc) in enumerate(docs) if page_cuts(doc)}


def page_tokens(doc: Document, offsets: Any, count: int) -> list[tuple[int, int]]:
    """[first, last) token ranges of the pages that hold tokens, in order; [(0, count)] for a
    text without page boundaries. A token belongs to the page its first character is on."""
    cuts = page_cuts(doc)
    if not cuts:
        return [(0, count)]
    if len(offsets) != count:
        raise ValueError(f"a document of {len(doc.pages)} pages came with {len(offsets)} offsets for {count} "
                         "tokens; its windows need every offset (multi_page). This is a bug.")
    starts = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)[:, 0]
    bounds = [0, *np.searchsorted(starts, cuts, side="left").tolist(), count]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


class WindowBlock:
    """Token windows of many documents, cut by `text_windows`, collected into one block of items:
    every window's ids as one flat array (`Ragged`; overlapping windows share a document's ids)
    and the row columns (page, char_start, char_end, text) as arrays."""

    def __init__(self, window: int, overlap: int) -> None:
        self.window, self.overlap = window, overlap
        self.ids: list[Any] = []
        self.size = 0
        self.sources: list[int] = []
        self.index: list[int] = []
        self.starts: list[int] = []
        self.lengths: list[int] = []
        self.page: list[int] = []  # 0: the format has no pages (a null in the row)
        self.char_start: list[int] = []
        self.char_end: list[int] = []
        self.text: list[str] = []

    def add(self, source_id: int, doc: Document, ids: Any, offsets: Any) -> None:
        """One document's windows, none across a page boundary (module doc). A text that fits one
        window may come with only its first and last offsets (tasks/text/tokens.py), so its span is
        read from the ends of `offsets`; a document of several pages comes with all of them
        (`multi_page`)."""
        pages = page_tokens(doc, offsets, len(ids))
        if len(pages) == 1 and len(ids) <= self.window:  # one window: most files of a tree of short texts
            self._window(source_id, doc, 0, 0, len(ids), int(offsets[0][0]), int(offsets[-1][1]))
        else:  # per page, at paragraph, sentence or word boundaries (text_windows above)
            number = 0
            for first, last in pages:
                for start, end in self._page_windows(doc.text, offsets, first, last):
                    self._window(source_id, doc, number, start, end - start, int(offsets[start][0]),
                                 int(offsets[end - 1][1]))
                    number += 1
        self.ids.append(ids)
        self.size += len(ids)

    def _page_windows(self, text: str, offsets: Any, first: int, last: int) -> list[tuple[int, int]]:
        """The windows of tokens [first, last) (one page's, or the whole text's)."""
        if last - first <= self.window:
            return [(first, last)]
        return [(first + a, first + b) for a, b in text_windows(text, offsets[first:last], self.window, self.overlap)]

    def _window(self, source_id: int, doc: Document, number: int, start: int, length: int, first: int,
                last: int) -> None:
        """One row's columns: its tokens are `length` from `start` of the document's ids; its text
        begins and ends on grapheme boundaries (inputs/graphemes.py: a mark no token covers is kept)."""
        first, last = cluster_start(doc.text, first), cluster_end(doc.text, last)
        self.sources.append(source_id)
        self.index.append(number)
        self.starts.append(self.size + start)
        self.lengths.append(length)
        self.page.append((doc.page_at(first) or 0) if doc.pages else 0)
        self.char_start.append(first)
        self.char_end.append(last)
        self.text.append(doc.text[first:last])

    def block(self, extra_cost: int) -> Items | None:
        if not self.sources:
            return None
        import itertools

        values = np.fromiter(itertools.chain.from_iterable(self.ids), dtype=np.int32, count=self.size)
        lengths = np.asarray(self.lengths, dtype=np.int64)
        text = np.empty(len(self.text), dtype=object)
        text[:] = self.text
        return Items(np.asarray(self.sources, dtype=np.int64), np.asarray(self.index, dtype=np.int64),
                     lengths + extra_cost, Ragged(values, np.asarray(self.starts, dtype=np.int64), lengths),
                     {"page": np.asarray(self.page, dtype=np.int32),
                      "char_start": np.asarray(self.char_start, dtype=np.int64),
                      "char_end": np.asarray(self.char_end, dtype=np.int64), "text": text})
