"""How wide a line may be, and lines fitted to it on word boundaries.

Text for people (the summary, the start line under `--progress plain` on a terminal, the short
usage) is wrapped to the terminal's width; text for machines and logs (a stream that is not a
terminal: cron, a pipe) is never wrapped, so that a log line stays one line for grep.
`COLUMNS` wins over the terminal's own size, as for every tool that uses
`shutil.get_terminal_size`.
"""

from __future__ import annotations

import shutil
import textwrap
from typing import IO, Any

NARROW = 100  # below this many columns, the progress bar and search take their short layout


def width_of(stream: IO[Any] | None) -> int | None:
    """The columns of the terminal `stream` writes to; None when it is no terminal (no wrapping)."""
    try:
        if stream is None or not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return columns()


def columns() -> int:
    """COLUMNS, else the terminal's width, else 80."""
    return shutil.get_terminal_size((80, 24)).columns


def fit(text: str, width: int | None, indent: str = "  ") -> str:
    """Each line of `text` wrapped to `width` on word boundaries (a word longer than a line is
    folded); continuation lines get `indent` more than their line's own. None: as it is."""
    if not width:
        return text
    out = []
    for line in text.splitlines() or [""]:
        lead = line[: len(line) - len(line.lstrip(" "))]
        out.append(textwrap.fill(line.strip(" "), width=max(width, 20), initial_indent=lead,
                                 subsequent_indent=lead + indent, break_on_hyphens=False) or line)
    return "\n".join(out)


def cut(text: str, width: int, mark: str = "…") -> str:
    """`text` on one line of at most `width` characters, cut after a whole word (a single word
    longer than the line is cut where the line ends)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    room = max(width - len(mark), 0)
    head = flat[: room + 1]
    space = head.rfind(" ")
    kept = head[:space] if space > room // 2 else flat[:room]
    return kept.rstrip(" ,;:.") + mark

