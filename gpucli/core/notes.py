"""Notes on stderr for every command (a run, search, inspect): one `gpucli: note:`
line each, and the libraries' warnings turned into such lines.

A library's `warnings.warn` printed itself as Python prints warnings: the library's file and line,
the category, the message, then the source line that called it. qdrant-client's warning about an
embedded collection of over 20,000 points came out so, in the middle of a search's output.
`library_notes()` shows each warning raised in its block as one gpucli line instead, the moment
it is raised; which warnings are shown (Python's filters) does not change. A warning gpucli knows
gets its own words, another its message's first sentence.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from gpucli.core.terminal import fit, width_of

# qdrant-client (local mode) when it opens, or adds to, a collection of more points than its threshold
LARGE_LOCAL = re.compile(r"Local mode is not recommended for collections with more than (?P<limit>[\d,]+) points"
                         r"(?:.*?contains (?P<points>\d+) points)?", re.DOTALL)


def note(text: str, stream: TextIO | None = None) -> None:
    """`gpucli: note: TEXT` on stderr, wrapped to the terminal's width."""
    stream = stream or sys.stderr
    print(fit(f"gpucli: note: {text}", width_of(stream)), file=stream, flush=True)


@contextmanager
def library_notes() -> Iterator[None]:
    """Within the block, each warning Python would show is one `gpucli: note:` line on stderr
    (once per text), instead of Python's four-part report."""
    shown: set[str] = set()

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        text = note_text(str(message))
        if text not in shown:
            shown.add(text)
            note(text)

    with warnings.catch_warnings():  # restores the filters and showwarning when the block ends
        warnings.showwarning = show
        yield


def note_text(message: str) -> str:
    """A warning's message as a note: gpucli's words for one it knows, else its first sentence."""
    large = LARGE_LOCAL.search(message)
    if large:
        points = f"{int(large['points']):,}" if large["points"] else f"over {large['limit']}"
        return (f"embedded Qdrant collection of {points} points (qdrant-client advises a Qdrant server above "
                f"{large['limit']}: qdrant://HOST:PORT/COLLECTION)")
    flat = " ".join(message.split())
    first = re.split(r"(?<=[.!?])\s", flat, maxsplit=1)[0]
    return first or "a library warned, without words"
