"""A PostgreSQL embed output, searched by the server: `ORDER BY embedding <=> query` (pgvector's
cosine distance; the score is 1 - distance, the cosine similarity the other outputs give). With
the table's HNSW index (gpucli/output/sinks/postgres/sink.py) the search is approximate, with
`hnsw.ef_search` candidates (at least 100, at least k, at most pgvector's 1000); `?exact=true`
scans every row. The model, query prompt and --dims are the table's comment."""

from __future__ import annotations

from typing import Any

from gpucli.commands.search.hits import HIT_COLUMNS, Hit
from gpucli.commands.search.stored import number
from gpucli.core.errors import UsageError
from gpucli.output.sinks.postgres.rows import quote
from gpucli.output.sinks.postgres.sink import has_hnsw, table_metadata
from gpucli.output.sinks.postgres.store import Store
from gpucli.output.sinks.postgres.target import parse_target


class PostgresIndex:
    def __init__(self, where: str) -> None:
        self.target = parse_target(where)
        self.display = self.target.display
        self.qualified = self.target.qualified
        self.rows_scanned = None  # the server searches
        self.sparse = False
        self.store = Store(self.target)
        try:
            self.store.transaction("reading the table", self._describe)
        except BaseException:
            self.store.close()
            raise

    def _describe(self, c: Any) -> None:
        if not c.execute("select to_regclass(%s) is not null", (self.qualified,)).fetchone()[0]:
            raise UsageError(f"--in {self.display}: no such table")
        types = dict(c.execute("select attname, format_type(atttypid, atttypmod) from pg_attribute where attrelid = "
                               "%s::regclass and attnum > 0 and not attisdropped", (self.qualified,)).fetchall())
        meta = table_metadata(c, self.qualified)
        self.model = meta.get("gpucli.model", "")
        if not self.model or not str(types.get("embedding", "")).startswith("vector("):
            raise UsageError(f"--in {self.display}: not a gpucli embed output (no gpucli.model in the table's "
                             "comment, or no embedding vector column)")
        self.dims = int(types["embedding"][len("vector("):-1])
        self.query_prompt = meta.get("gpucli.query_prompt")
        self.truncate_dims = number(meta.get("gpucli.truncate_dims"))
        self.columns = [name for name in HIT_COLUMNS if name in types]
        self.indexed = has_hnsw(c, self.qualified)

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
        shown = ", ".join(quote(name) for name in self.columns)

        def query(c: Any) -> list[Any]:
            if self.indexed and self.target.exact:
                c.execute("set local enable_indexscan = off")
            elif self.indexed:
                c.execute(f"set local hnsw.ef_search = {min(1000, max(100, k))}")
            c.execute(f"select {shown}, 1 - (embedding <=> %s::vector) from {self.qualified} "
                      "order by embedding <=> %s::vector limit %s", (literal, literal, k))
            return c.fetchall()

        hits = []
        for row in self.store.transaction("searching", query):
            values = dict(zip(self.columns, row))
            hits.append(Hit(float(row[-1]), values["path"], int(values.get("chunk") or 0), values.get("text") or "",
                            values.get("char_start"), values.get("char_end"), values.get("page"),
                            values.get("modality")))
        return hits

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        raise UsageError(f"--in {self.display}: a PostgreSQL output holds no sparse vectors")

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        raise UsageError(f"--in {self.display}: a PostgreSQL output holds no sparse vectors")

    def close(self) -> None:
        self.store.close()
