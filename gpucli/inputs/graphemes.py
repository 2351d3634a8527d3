"""Grapheme clusters: what a reader sees as one character ("ê" + a combining macron, a flag, an emoji
with its skin tone). A chunk's text must begin and end on their boundaries: a tokenizer that strips
accents gives a combining mark no token of its own, so a chunk cut at its last token's end dropped
the mark ("ê̄" became "ê" at the end of Big5-HKSCS's test text). `regex`'s `\\X` knows the
boundaries (Unicode's extended grapheme clusters, UAX #29).
"""

from __future__ import annotations

import regex

CLUSTER = regex.compile(r"\X")
LOOK = 64  # characters looked at around a position: a cluster is never that long in text


def cluster_end(text: str, end: int) -> int:
    """`end` moved forward to the end of the grapheme cluster that holds `text[end - 1]`."""
    if end <= 0 or end >= len(text) or text[end].isascii() and text[end] != "\r":
        return end  # before an ASCII character (but the \n of \r\n) is always a boundary
    at = max(0, end - LOOK)
    for match in CLUSTER.finditer(text, at, min(len(text), end + LOOK)):
        if match.end() >= end:
            return match.end() if match.start() < end else end
    return end


def cluster_start(text: str, start: int) -> int:
    """`start` moved back to the start of the grapheme cluster that holds `text[start]`."""
    if start <= 0 or start >= len(text) or text[start].isascii() and text[start] != "\n":
        return start
    for match in CLUSTER.finditer(text, max(0, start - LOOK), min(len(text), start + LOOK)):
        if match.end() > start:
            return match.start()
    return start
