"""The PostgreSQL sink: an output's rows in a table with `embedding vector(D)` (pgvector), its
ledger in the same database (ledger.py), its lock an advisory lock of the server (store.py).

A part is written by the ledger, not by `write`: the rows of an input, the removal of the rows
it had before, and its ledger entry commit in one transaction (`Sink.ledger_in_store`). The
table's own metadata (the model, its query prompt, --dims) is a JSON comment on the table, which
`gpucli search` reads; the same `info` is in the ledger's settings.

Where the failures file lives: a per-user state directory keyed by server, database and table,
as for a Qdrant server (`$XDG_STATE_HOME/gpucli/postgresql/HOST_PORT_DB/SCHEMA.TABLE/`, or
--state-dir). The HNSW index (cosine) is built once, when a run that wrote closes, once the table
has INDEX_ROWS rows (`?index=auto`, the default), whatever its size (`?index=hnsw`), or never
(`?index=none`); pgvector keeps it up to date on later writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from gpucli.core.errors import UsageError
from gpucli.output.sinks.base import Sink
from gpucli.output.sinks.postgres.ledger import PgLedger, split_keys
from gpucli.output.sinks.postgres.rows import VECTOR_COLUMN, Column, columns_of, copy_data, copy_sql, create_table_sql
from gpucli.output.sinks.postgres.store import Store
from gpucli.output.sinks.postgres.target import is_postgres, parse_target

INDEX_ROWS = 10_000  # below this many rows an exact scan answers in milliseconds; above, HNSW
MIN_PGVECTOR = (0, 5, 0)  # HNSW indexes
TYPES_FROM = {"float16": ("halfvec", "0.7.0"), "binary": ("bit", "0.7.0")}
HNSW = "using hnsw (embedding vector_cosine_ops) with (m = 16, ef_construction = 64)"


class PgLedgerView:
    """`exists`, `lookup`, `done_paths` (a set) and `close`, as gpucli/output/ledger_view.py has them."""

    def __init__(self, ledger: PgLedger) -> None:
        self.ledger, self.exists = ledger, ledger.exists

    def lookup(self, paths: list[str]) -> dict:
        return self.ledger.lookup(paths) if self.exists else {}

    def done_paths(self) -> set[str]:
        return set(self.ledger.done_paths()) if self.exists else set()

    def close(self) -> None:
        self.ledger.store.close()


class AdvisoryLock:
    """The run's lock (Output takes and releases it): a session advisory lock held by the store's
    connection; taken again by a new connection after a drop (store.py)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.path = store.target.display

    def acquire(self, output: str) -> None:
        self.store.locking = True
        self.store.connect()

    def release(self) -> None:
        self.store.close()


class PostgresSink(Sink):
    name = "postgres"
    help = "postgresql://USER@HOST:PORT/DATABASE?table=TABLE (pgvector; the ledger in the same database)"
    takes_state_dir: ClassVar[bool] = True
    ledger_in_store: ClassVar[bool] = True

    def __init__(self, target: str, state_dir: str = "") -> None:
        from gpucli.output.sinks.qdrant.state_dir import state_root

        super().__init__(target)
        self.parsed = parse_target(target)
        self.state_root = state_root(state_dir)
        self.store = Store(self.parsed)
        self.qualified = f"{self.parsed.schema}.{self.parsed.table}"
        self.columns: list[Column] = []
        self.refusal: UsageError | None = None  # the table cannot take these rows until --full remakes it
        self._metadata: dict[str, str] = {}
        self._wrote = False
        self.notices: list[str] = []

    @classmethod
    def accepts(cls, target: str) -> bool:
        return is_postgres(target)

    @property
    def display(self) -> str:
        return self.parsed.display

    @property
    def state_dir(self) -> Path:
        return self.state_root / "postgresql" / self.parsed.server_key / self.qualified

    @property
    def failures_path(self) -> str:
        return str(self.state_dir / "failures.jsonl")

    def run_lock(self) -> AdvisoryLock:
        return AdvisoryLock(self.store)

    def open_ledger(self, gpucli_version: str) -> PgLedger:
        return PgLedger(self.store, self, gpucli_version)

    def read_ledger(self) -> PgLedgerView:
        """The ledger as --dry-run reads it: no lock, nothing created (ReadOnlyLedger's methods)."""
        return PgLedgerView(PgLedger(Store(self.parsed), self, create=False))

    # --- before the lock: what the table holds ---------------------------------------------------
    def foreign(self) -> str | None:
        """A table of that name with rows and no ledger entry for it: not gpucli's to empty."""
        store = Store(self.parsed)
        try:
            def look(c: Any) -> str | None:
                if not _exists(c, self.qualified):
                    return None
                if _exists(c, f"{self.parsed.schema}.gpucli_meta") and c.execute(
                        f"select 1 from {self.parsed.schema}.gpucli_meta where output=%s and key='fingerprint'",
                        (self.qualified,)).fetchone():
                    return None
                rows = c.execute(f"select count(*) from {self.qualified}").fetchone()[0]
                return f"a table {self.qualified} of {rows} rows" if rows else None

            return store.transaction("looking at the table", look)
        finally:
            store.close()

    def made_with(self) -> dict | None:
        """The settings the output was made with, from its ledger (None: a new output)."""
        store = Store(self.parsed)
        try:
            def read(c: Any) -> str | None:
                if not _exists(c, f"{self.parsed.schema}.gpucli_meta"):
                    return None
                row = c.execute(f"select value from {self.parsed.schema}.gpucli_meta where output=%s and "
                                "key='settings'", (self.qualified,)).fetchone()
                return row[0] if row else None

            settings = store.transaction("reading the ledger", read)
        finally:
            store.close()
        try:
            return json.loads(settings) if settings else None
        except ValueError:
            return {}

    # --- open: pgvector, the table ---------------------------------------------------------------
    def open(self, schema: Any, metadata: dict[str, str]) -> None:
        self._refuse_types(schema, metadata)
        self.columns = columns_of(schema)
        self._metadata = {k: v for k, v in metadata.items() if k.startswith("gpucli.")}
        version = self.store.transaction("checking pgvector", _pgvector)
        if version is None:
            raise UsageError(f"--out {self.display}: the database has no pgvector extension and this user may not "
                             "create it; ask its administrator to run `create extension vector` (pgvector 0.5.0 or "
                             "newer)")
        if _version(version) < MIN_PGVECTOR:
            raise UsageError(f"--out {self.display}: pgvector {version} has no HNSW index; gpucli needs pgvector 0.5.0 "
                             "or newer (`alter extension vector update`)")
        self.store.transaction("making the table", self._make_or_check)

    def _refuse_types(self, schema: Any, metadata: dict[str, str]) -> None:
        vector_type = metadata.get("gpucli.vector_type", "float32")
        if vector_type != "float32":
            sql, since = TYPES_FROM.get(vector_type, ("", ""))
            need = (f"pgvector's {sql} (pgvector {since} or newer, which gpucli does not write yet)" if sql
                    else "a type pgvector does not have")
            raise UsageError(f"--out {self.display}: --vector-type {vector_type} needs {need}; use --vector-type "
                             "float32 for PostgreSQL, or write Parquet or Qdrant")
        if "sparse" in schema.names:
            raise UsageError(f"--out {self.display}: --sparse needs pgvector's sparsevec (pgvector 0.7.0 or newer, "
                             "which gpucli does not write yet); leave --sparse out for PostgreSQL, or write Parquet "
                             "or Qdrant")

    def _make_or_check(self, c: Any) -> None:
        if not _exists(c, self.qualified):
            self._create(c)
            return
        have = dict(c.execute("select attname, format_type(atttypid, atttypmod) from pg_attribute where attrelid = "
                              "%s::regclass and attnum > 0 and not attisdropped", (self.qualified,)).fetchall())
        wanted = next((col.sql_type for col in self.columns if col.name == VECTOR_COLUMN), None)
        if wanted and have.get(VECTOR_COLUMN) != wanted:
            self.refusal = UsageError(f"{self.display} holds {have.get(VECTOR_COLUMN) or 'no vector'} embeddings; "
                                      f"this run writes {wanted}: write to another table, or rerun with --full to "
                                      "empty this one and make it again")
            return
        stored = _comment(c, self.qualified).get("gpucli.model")
        if stored and stored != self._metadata.get("gpucli.model"):
            self.refusal = UsageError(f"{self.display} holds vectors of model {stored!r}, not "
                                      f"{self._metadata.get('gpucli.model')!r}: write to another table, or rerun "
                                      "with --full to empty this one")

    def _create(self, c: Any) -> None:
        c.execute(create_table_sql(self.qualified, self.columns))
        names = {col.name for col in self.columns}
        key = ", ".join(n for n in ("path", "id", "chunk") if n in names)
        unique = "unique " if "chunk" in names else ""  # a (path, chunk) twice is refused by the server itself
        c.execute(f"create {unique}index on {self.qualified} ({key})")
        self._comment(c)

    def _comment(self, c: Any) -> None:
        c.execute(f"comment on table {self.qualified} is {_literal(json.dumps(self._metadata, sort_keys=True))}")

    def widen(self) -> None:
        """Columns this gpucli writes that an older table lacks, added (null in earlier rows)."""
        def work(c: Any) -> None:
            for col in self.columns:
                c.execute(f"alter table {self.qualified} add column if not exists {col.quoted} {col.sql_type}")
            if self.refusal is None:
                self._comment(c)

        self.store.transaction("widening the table", work)

    # --- inside the ledger's transactions (ledger.RowsTable) -------------------------------------
    def copy(self, c: Any, table: Any) -> None:
        if self.refusal is not None:
            raise self.refusal
        columns = columns_of(table.schema)
        with c.copy(copy_sql(self.qualified, columns)) as copy:
            copy.write(copy_data(table, columns))
        self._wrote = True

    def delete_keys(self, c: Any, keys: list[str]) -> None:
        if not keys:
            return
        files, records = split_keys(keys)
        if files:
            c.execute(f"delete from {self.qualified} where path = any(%s)", (files,))
        if records:
            c.execute(f"delete from {self.qualified} where (path, id) in (select * from unnest(%s::text[], "
                      "%s::text[]))", ([p for p, _ in records], [i for _, i in records]))

    def write(self, table: Any) -> str | None:
        raise TypeError("a PostgreSQL output's rows are written with their ledger entries (PgLedger.write_done)")

    # --- incremental runs --------------------------------------------------------------------------
    def reset(self) -> None:
        """Empty the table; made again when its vectors are of another width."""
        def work(c: Any) -> None:
            if self.refusal is not None:
                c.execute(f"drop table {self.qualified}")
                self._create(c)
            else:
                c.execute(f"truncate {self.qualified}")
                self._comment(c)

        self.store.transaction("emptying the table", work)
        self.refusal = None

    def recover(self, known: set[str], last: str | None) -> dict[str, str | None]:
        return {}  # nothing is ever orphaned: rows and entries commit together (ledger.py)

    def close(self) -> None:
        """After a run that wrote: the HNSW index, once (the connection stays: it holds the lock)."""
        if not self._wrote or self.parsed.index == "none":
            return
        self._wrote = False

        def build(c: Any) -> None:
            if _has_hnsw(c, self.qualified):
                return
            if self.parsed.index == "auto" and c.execute(
                    f"select count(*) >= %s from {self.qualified}", (INDEX_ROWS,)).fetchone()[0] is False:
                return
            c.execute(f"create index on {self.qualified} {HNSW}")

        self.store.transaction("building the HNSW index", build)


def _exists(c: Any, qualified: str) -> bool:
    return c.execute("select to_regclass(%s) is not null", (qualified,)).fetchone()[0]


def _pgvector(c: Any) -> str | None:
    row = c.execute("select extversion from pg_extension where extname='vector'").fetchone()
    if row:
        return row[0]
    available = c.execute("select 1 from pg_available_extensions where name='vector'").fetchone()
    if not available:
        return None
    c.execute("savepoint vector")
    try:
        c.execute("create extension if not exists vector")
    except Exception:  # noqa: BLE001 - no privilege: said by the caller, in words
        c.execute("rollback to savepoint vector")
        return None
    return c.execute("select extversion from pg_extension where extname='vector'").fetchone()[0]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def _has_hnsw(c: Any, qualified: str) -> bool:
    return c.execute("select exists(select 1 from pg_indexes i join pg_class t on t.relname = i.tablename "
                     "where i.schemaname || '.' || i.tablename = %s and i.indexdef ilike '%%using hnsw%%')",
                     (qualified,)).fetchone()[0]


def _comment(c: Any, qualified: str) -> dict[str, str]:
    text = c.execute("select obj_description(%s::regclass, 'pg_class')", (qualified,)).fetchone()[0]
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def table_metadata(c: Any, qualified: str) -> dict[str, str]:
    """The table's gpucli metadata (its comment): for `gpucli search` and `gpucli inspect`."""
    return _comment(c, qualified)


def has_hnsw(c: Any, qualified: str) -> bool:
    return _has_hnsw(c, qualified)
