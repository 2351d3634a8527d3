"""What `--out postgresql://...` names: the server and database as libpq takes them, the table, and
gpucli's own options. Parsing only: nothing here connects (so that a missing `psycopg` is said by
the sink, not by the parser).

    postgresql://[USER[:PASSWORD]@][HOST][:PORT]/DATABASE?table=[SCHEMA.]TABLE&index=auto|hnsw|none

Every other query parameter (`sslmode`, `sslrootcert`, `host=/run/postgresql`, `connect_timeout`,
...) goes to libpq as it is, and so do the `PG*` environment variables and `~/.pgpass`. A password
is never shown: `display` drops it, and the query parameters but `table`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from gpucli.core.errors import UsageError

SCHEMES = ("postgresql://", "postgres://")
DEFAULT_TABLE = "chunks"
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
INDEX_CHOICES = ("auto", "hnsw", "none")
OWN_OPTIONS = {"table": "[SCHEMA.]TABLE to write (default chunks)",
               "index": "auto (an HNSW index once the table passes 10,000 rows), hnsw (always), none",
               "exact": "true: `gpucli search` scans every row even where an HNSW index exists"}


@dataclass(frozen=True)
class Target:
    """A parsed PostgreSQL output."""

    conninfo: str  # the URL libpq is given: the user's, less gpucli's own options
    schema: str
    table: str
    display: str  # no password, no libpq options
    host: str = ""
    port: str = ""
    dbname: str = ""
    index: str = "auto"
    exact: bool = False

    local: bool = False  # never a path on this machine (gpucli/output/state_dir.py asks)
    path: str = ""

    @property
    def qualified(self) -> str:
        """schema.table, as the ledger and the lock name the output."""
        return f"{self.schema}.{self.table}"

    @property
    def server_key(self) -> str:
        """host_port_database, safe as one directory name (a unix socket directory's slashes as
        underscores): where the run's failures file is kept (sink.py)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.host or 'local'}_{self.port or '5432'}_{self.dbname}")


def is_postgres(target: str) -> bool:
    return target.lower().startswith(SCHEMES)


def parse_target(target: str, environ: dict[str, str] | None = None) -> Target:
    env = os.environ if environ is None else environ
    parts = urlsplit(target)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in OWN_OPTIONS}
    libpq = [(k, v) for k, v in query if k not in OWN_OPTIONS]
    schema, table = _table(own.get("table", DEFAULT_TABLE))
    index = own.get("index", "auto").lower()
    if index not in INDEX_CHOICES:
        raise UsageError(f"PostgreSQL option index={own['index']!r}: use one of {', '.join(INDEX_CHOICES)}")
    exact = own.get("exact", "false").lower() in ("1", "true", "yes", "on")
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(libpq, quote_via=quote), ""))
    options = dict(libpq)
    try:
        port = str(parts.port or options.get("port") or env.get("PGPORT", ""))
    except ValueError:
        raise UsageError("the PostgreSQL URL has a bad port: postgresql://HOST:PORT/DATABASE") from None
    user = parts.username or options.get("user") or env.get("PGUSER", "")
    host = parts.hostname or options.get("host") or env.get("PGHOST", "")
    dbname = parts.path.lstrip("/") or options.get("dbname") or env.get("PGDATABASE", "") or user
    shown_host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else (parts.hostname or "")
    netloc = (f"{parts.username}@" if parts.username else "") + shown_host + (f":{parts.port}" if parts.port else "")
    display = f"{parts.scheme}://{netloc}{parts.path}?table={schema}.{table}"
    return Target(conninfo, schema, table, display, host, port, dbname, index, exact)


def _table(raw: str) -> tuple[str, str]:
    schema, _, table = raw.rpartition(".")
    schema = schema or "public"
    for name in (schema, table):
        if not IDENTIFIER.match(name):
            raise UsageError(f"PostgreSQL option table={raw!r}: use [SCHEMA.]TABLE of letters, digits and '_' "
                             "(63 at most, not starting with a digit)")
    return schema.lower(), table.lower()
