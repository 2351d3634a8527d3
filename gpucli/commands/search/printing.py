r"""A search's hits on stdout (a table on a terminal, tab-separated lines otherwise, JSON lines with
--json) and one line about the search on stderr, fitted to the terminal.

The lines for a pipe are a stable format (docs/qdrant.md, Search output): a header line naming the
fields, then one line a hit, `score path chunk page text` separated by tabs, the whole chunk text
with backslash, tab, newline and carriage return escaped as `\\`, `\t`, `\n`, `\r` (as
PostgreSQL's COPY text format and `mysql --batch` do), so that no field holds a separator and
`cut -f2` or `awk -F'\t'` take what they name."""

from __future__ import annotations

import json
import sys
from typing import Any

from gpucli.commands.search.hits import SearchResult
from gpucli.core.terminal import cut, fit, width_of

PLAIN_FIELDS = ("score", "path", "chunk", "page", "text")  # the header of the lines for a pipe
ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def render(result: SearchResult, as_json: bool, console: Any = None) -> None:
    """Hits on stdout (a table on a terminal or the `console` given, tab-separated lines
    otherwise, JSON lines with --json); one line about the search on stderr."""
    if as_json:
        for rank, hit in enumerate(result.hits, 1):
            print(json.dumps(hit.to_dict(rank), ensure_ascii=False))
    elif console is not None or sys.stdout.isatty():
        _table(result, console)
    else:
        print("\t".join(PLAIN_FIELDS))
        for hit in result.hits:
            page = "" if hit.page is None else str(hit.page)
            print("\t".join([f"{hit.score:.4f}", escaped(hit.path), str(hit.chunk), page, escaped(hit.shown)]))
    scanned = f"{result.rows_scanned} rows scanned, " if result.rows_scanned is not None else ""
    print(fit(f"gpucli search: {len(result.hits)} hits from {result.source} (model {result.model}; {scanned}"
              f"query embedded in {result.embed_s:.2f}s, searched in {result.search_s:.3f}s)", width_of(sys.stderr)),
          file=sys.stderr)


def _table(result: SearchResult, console: Any = None) -> None:
    """Two lines a hit, fitted to the console's width: the rank, the score and where (path,
    chunk, page; a long path folds), then the snippet cut on a word boundary. Paths and chunk
    text are user data: Text, never markup (a chunk holding `[/usr/local]` is not a closing tag,
    a file named `notes [draft].txt` keeps its brackets)."""
    from rich.console import Console
    from rich.text import Text

    console = console or Console()
    width = max(console.width, 40)
    console.print(Text(f"{'#':>3}  {'score':<6}  path (chunk, page) / snippet", style="bold"), soft_wrap=True)
    for rank, hit in enumerate(result.hits, 1):
        where = f"{hit.path}  (chunk {hit.chunk}" + (f", page {hit.page}" if hit.page is not None else "") + ")"
        console.print(Text(_folded(f"{rank:>3}. {hit.score:.4f}  ", where, width)), soft_wrap=True)
        console.print(Text("     " + cut(hit.shown, width - 5), style="dim"), soft_wrap=True)


def _folded(prefix: str, text: str, width: int) -> str:
    """`prefix` + `text`, the text folded under itself where it passes `width` (a path has no
    word boundary to wrap on; moving it whole to the next line would not make it fit)."""
    room = max(width - len(prefix), 10)
    pieces = [text[i: i + room] for i in range(0, len(text), room)] or [""]
    return "\n".join([prefix + pieces[0], *(" " * len(prefix) + piece for piece in pieces[1:])])


def escaped(text: str) -> str:
    """A field of the lines for a pipe: no tab, newline or carriage return left in it."""
    return text.translate(ESCAPES)
