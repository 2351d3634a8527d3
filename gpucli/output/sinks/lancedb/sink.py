"""The LanceDB sink: an output's rows in a Lance table, its ledger and lock beside it as for
Parquet (`DIR/TABLE.gpucli/`; failures in `DIR/TABLE.failures.jsonl`).

Every write is one Lance commit (a new version of the table, atomic: a kill leaves the table at
its last commit, readable). A table that was empty when the run opened it takes each part as
`add`: every input is written once per run, so no key can be there twice. Otherwise a part is a
`merge_insert` keyed by path (and a record's id) and chunk: rows of the same key updated, new
ones inserted, and the rows of the part's inputs that the part no longer has (chunks of a
longer, older version) deleted, all in the same commit. A crash between a commit and the
ledger's mark leaves rows whose inputs are not marked done; the rerun writes them again by
merge_insert, in place: the rerun is exact.

Removed inputs (--prune, a file that now fails) are deleted by key in `supersede`; --full drops
the table and makes it again. When a run that wrote closes: compaction and the cleanup of old
versions (`optimize`) once the table has COMPACT_FRAGMENTS small fragments (each run adds at
least one), keeping the versions of the last KEEP_VERSIONS (a search reading one finishes); the
vector index built once the table has INDEX_ROWS rows, and brought up to date by `optimize` on later
runs: Lance's IVF_FLAT with cosine distance (partitions of full vectors: recall@10 1.000 against an
exact search where IVF_PQ gave 0.408 at the same probes, benchmarks/RESULTS-stores.md).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError
from gpucli.core.keys import split_key
from gpucli.output.sinks.base import Sink
from gpucli.output.sinks.lancedb.target import is_lancedb, lancedb_module, parse_target

INDEX_ROWS = 100_000  # below this many rows Lance's exact scan answers within tens of milliseconds
COMPACT_FRAGMENTS = 16  # small fragments before a run's close compacts them
KEEP_VERSIONS = timedelta(minutes=10)  # old versions younger than this stay (a search may read one)
VECTOR = "embedding"


class LanceSink(Sink):
    name = "lancedb"
    help = "lancedb:DIR/TABLE (a Lance table in the LanceDB directory DIR)"

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.parsed = parse_target(target)
        self.lancedb = lancedb_module()
        self.db: Any = None
        self.table: Any = None
        self.schema: Any = None
        self.keys: list[str] = []
        self.refusal: UsageError | None = None
        self._append = False  # the table was empty at open: parts are added, not merged
        self._wrote = False

    @classmethod
    def accepts(cls, target: str) -> bool:
        return is_lancedb(target)

    @property
    def display(self) -> str:
        return self.parsed.display

    @property
    def state_dir(self) -> Path:
        return Path(self.parsed.directory) / f"{self.parsed.table}.gpucli"

    @property
    def failures_path(self) -> str:
        return str(Path(self.parsed.directory) / f"{self.parsed.table}.failures.jsonl")

    def _connect(self) -> Any:
        if self.db is None:
            self.db = self.lancedb.connect(self.parsed.directory)
        return self.db

    def _exists(self) -> bool:
        return Path(self.parsed.path).is_dir()

    def foreign(self) -> str | None:
        if not self._exists():
            return None
        rows = self._connect().open_table(self.parsed.table).count_rows()
        return f"a Lance table of {rows} rows" if rows else None

    def open(self, schema: Any, metadata: dict[str, str]) -> None:
        self.schema = schema.with_metadata({**(schema.metadata or {}), **metadata})
        self.keys = [name for name in ("path", "id", "chunk") if name in schema.names]
        Path(self.parsed.directory).mkdir(parents=True, exist_ok=True)
        db = self._connect()
        if not self._exists():
            self.table = db.create_table(self.parsed.table, schema=self.schema)
        else:
            self.table = db.open_table(self.parsed.table)
            self.refusal = self._mismatch(self.table.schema)
        self._append = self.table.count_rows() == 0

    def _mismatch(self, have: Any) -> UsageError | None:
        wanted = self.schema.field(VECTOR).type if VECTOR in self.schema.names else None
        present = have.field(VECTOR).type if VECTOR in have.names else None
        if wanted is not None and present != wanted:
            return UsageError(f"{self.display} holds embeddings of type {present}; this run writes {wanted}: write to "
                              "another table, or rerun with --full to make this one again")
        model = (have.metadata or {}).get(b"gpucli.model", b"").decode()
        if model and model != (self.schema.metadata or {}).get(b"gpucli.model", b"").decode():
            return UsageError(f"{self.display} holds vectors of model {model!r}: write to another table, or rerun "
                              "with --full to make this one again")
        return None

    def widen(self) -> None:
        """Columns this gpucli writes that an older table lacks, added (null in earlier rows)."""
        missing = [f for f in self.schema if f.name not in self.table.schema.names]
        if missing and self.refusal is None:
            import pyarrow as pa

            self.table.add_columns(pa.schema(missing))

    def next_pass(self) -> None:
        self._append = False  # an input of an earlier pass may come again: merged by key

    def write(self, table: Any) -> str:
        if self.refusal is not None:
            raise self.refusal
        table = table.replace_schema_metadata(None)
        if self._append:
            self.table.add(table)
        else:
            (self.table.merge_insert(self.keys).when_matched_update_all().when_not_matched_insert_all()
             .when_not_matched_by_source_delete(self._where(_keys_of(table))).execute(table))
        self._wrote = True
        return self.parsed.table

    def _where(self, keys: list[str]) -> str:
        """A Lance (SQL) predicate for the rows of these inputs: files by path, records by path and id."""
        files, records = [], {}
        for key in keys:
            path, record_id = split_key(key)
            if record_id is None:
                files.append(path)
            else:
                records.setdefault(path, []).append(record_id)
        terms = [f"path IN ({', '.join(map(_literal, files))})"] if files else []
        terms += [f"(path = {_literal(p)} AND id IN ({', '.join(map(_literal, ids))}))" for p, ids in records.items()]
        return " OR ".join(terms) or "false"

    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> None:
        """Delete every row of these inputs (pruned, or failed since): idempotent."""
        keys = sorted(set().union(*stale.values())) if stale else []
        for start in range(0, len(keys), 1000):
            self.table.delete(self._where(keys[start:start + 1000]))

    def reset(self) -> None:
        """--full: the table made again, empty, with this run's schema and metadata."""
        self._connect().drop_table(self.parsed.table)
        self.table = self.db.create_table(self.parsed.table, schema=self.schema)
        self.refusal, self._append = None, True

    def close(self) -> None:
        """After a run that wrote: compaction and cleanup past COMPACT_FRAGMENTS small fragments,
        the index past INDEX_ROWS rows (then kept up to date)."""
        if self.table is None or not self._wrote:
            return
        self._wrote = False
        stats = self.table.stats()
        indexed = any(VECTOR in index.columns for index in self.table.list_indices())
        if indexed or stats["fragment_stats"]["num_small_fragments"] >= COMPACT_FRAGMENTS:
            self.table.optimize(cleanup_older_than=KEEP_VERSIONS)
        if not indexed and VECTOR in self.table.schema.names and self.table.count_rows() >= INDEX_ROWS:
            self.table.create_index(metric="cosine", vector_column_name=VECTOR, index_type="IVF_FLAT")


def _keys_of(table: Any) -> list[str]:
    from gpucli.core.keys import row_keys

    return sorted(set(row_keys(table).to_pylist()))


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
