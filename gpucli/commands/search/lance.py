"""A LanceDB embed output, searched by Lance: cosine distance (the score is 1 - distance, the
cosine similarity the other outputs give); exact while the table has no vector index, else its
IVF_FLAT index with NPROBES of its partitions scanned (recall@10 in benchmarks/RESULTS-stores.md);
`?exact=true` scans every row.
The model, query prompt and --dims are the table schema's `gpucli.*` metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucli.commands.search.hits import HIT_COLUMNS, Hit
from gpucli.commands.search.stored import number
from gpucli.core.errors import UsageError
from gpucli.output.sinks.lancedb.target import lancedb_module, parse_target

NPROBES = 32


class LanceIndex:
    def __init__(self, where: str) -> None:
        self.target = parse_target(where)
        self.display = self.target.display
        self.rows_scanned = None
        self.sparse = False
        if not Path(self.target.path).is_dir():
            raise UsageError(f"--in {self.display}: no such LanceDB table ({self.target.path} does not exist)")
        self.table = lancedb_module().connect(self.target.directory).open_table(self.target.table)
        schema = self.table.schema
        meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        self.model = meta.get("gpucli.model", "")
        if not self.model or "embedding" not in schema.names:
            raise UsageError(f"--in {self.display}: not a gpucli embed output (no gpucli.model metadata or no "
                             "embedding column)")
        vector_type = meta.get("gpucli.vector_type", "float32")
        if vector_type != "float32":
            raise UsageError(f"--in {self.display}: made with --vector-type {vector_type}; gpucli searches the float32 "
                             "vectors of a LanceDB output only (read this one with Lance yourself: docs/lancedb.md)")
        self.dims = schema.field("embedding").type.list_size
        self.query_prompt = meta.get("gpucli.query_prompt")
        self.truncate_dims = number(meta.get("gpucli.truncate_dims"))
        self.columns = [name for name in HIT_COLUMNS if name in schema.names]
        self.indexed = any("embedding" in index.columns for index in self.table.list_indices())

    def nearest(self, vector: Any, k: int) -> list[Hit]:
        query = self.table.search(vector.tolist(), vector_column_name="embedding").metric("cosine").limit(k)
        if self.indexed and self.target.exact:
            query = query.bypass_vector_index()
        elif self.indexed:
            query = query.nprobes(NPROBES)
        found = query.select([*self.columns, "_distance"]).to_arrow().to_pylist()
        return [Hit(1.0 - float(row["_distance"]), row["path"], int(row.get("chunk") or 0), row.get("text") or "",
                    row.get("char_start"), row.get("char_end"), row.get("page"), row.get("modality"))
                for row in found]

    def lexical(self, terms: Any, k: int) -> list[Hit]:
        raise UsageError(f"--in {self.display}: a LanceDB output holds no sparse vectors")

    def hybrid(self, vector: Any, terms: Any, k: int) -> list[Hit]:
        raise UsageError(f"--in {self.display}: a LanceDB output holds no sparse vectors")

    def close(self) -> None:
        pass
