"""What `--out lancedb:DIR/TABLE` names: a LanceDB database directory and a table in it (stored by
Lance as DIR/TABLE.lance). Parsing only; `?exact=true` makes `gpucli search` scan every row even
where the table has a vector index."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from gpucli.core.errors import UsageError

SCHEME = "lancedb:"
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
INSTALL = "pip install 'gpucli[lancedb]'"


@dataclass(frozen=True)
class Target:
    directory: str  # the database: a directory
    table: str
    exact: bool = False
    local: bool = True  # on this machine (gpucli/output/state_dir.py asks)

    @property
    def path(self) -> str:
        """The table's own directory, as Lance lays it out: what a walk must not read."""
        return str(Path(self.directory) / f"{self.table}.lance")

    @property
    def display(self) -> str:
        return f"{SCHEME}{self.directory}/{self.table}"


def is_lancedb(target: str) -> bool:
    return target.lower().startswith(SCHEME)


def parse_target(target: str) -> Target:
    rest, _, query = target[len(SCHEME):].partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - {"exact"})
    if unknown:
        raise UsageError(f"unknown LanceDB output option(s) {', '.join(unknown)}; known: exact=true")
    directory, _, table = rest.rstrip("/").rpartition("/")
    if not directory or not table:
        raise UsageError("a LanceDB output needs a directory and a table: lancedb:DIR/TABLE (e.g. lancedb:./lance/docs)")
    if not NAME.match(table) or table.endswith(".lance"):
        raise UsageError(f"LanceDB table name {table!r}: use letters, digits, '_', '-' and '.' (without .lance)")
    exact = options.get("exact", "false").lower() in ("1", "true", "yes", "on")
    return Target(directory, table, exact)


def lancedb_module():
    """lancedb, or a UsageError naming the extra that brings it."""
    try:
        import lancedb
    except ImportError:
        raise UsageError(f"a LanceDB output needs lancedb, which the lancedb extra installs: {INSTALL}") from None
    return lancedb
