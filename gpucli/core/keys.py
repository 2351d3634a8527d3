"""The key of an input, in one place: what the ledger, the failure records, the prune and the
sinks call an input. A file's key is its path (relative to the walk's root); a table's record
(`embed --from`, gpucli/inputs/tables.py) is `TABLE//ID`: the table's path and the record's id,
joined by `//`, which no walked path ever holds (paths are normalised), so records never
collide with files. Rows carry the two apart (`path` and an `id` column), so the key is
split where rows are made (`with_path`) and rebuilt where a sink removes a key's rows
(`row_keys`, `row_key`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpucli.core.records import Failure

SEP = "//"  # between a table's path and a record's id in a key; never inside a walked path
REPEAT = "\x00repeat"  # after a key: the ledger's entry for the rows that repeat an id (failure records)
ID_COLUMN = "id"


@dataclass(frozen=True, slots=True)
class InputKey:
    """An input's key, parsed: `record_id` is None for a file."""

    path: str
    record_id: str | None = None

    @classmethod
    def parse(cls, key: str) -> InputKey:
        """A key (or a repeated id's key: the id without its REPEAT mark)."""
        path, sep, record_id = key.partition(SEP)
        return cls(path, record_id.partition(REPEAT)[0]) if sep else cls(key)

    def __str__(self) -> str:
        return self.path if self.record_id is None else f"{self.path}{SEP}{self.record_id}"


def record_key(table: str, record_id: str) -> str:
    return str(InputKey(table, record_id))


def split_key(key: str) -> tuple[str, str | None]:
    """(path, id) of a key (or of a repeated id's key); a file's path has no id."""
    parsed = InputKey.parse(key)
    return parsed.path, parsed.record_id


def row_key(row: dict[str, Any]) -> str:
    """The key of one output row (a dict with `path`, and `id` for a record)."""
    record_id = row.get(ID_COLUMN)
    return row["path"] if record_id is None else record_key(row["path"], record_id)


def row_keys(table: Any) -> Any:
    """The key of each row of an Arrow table: `path`, or `path//id` where `id` is set."""
    import pyarrow.compute as pc

    path = table.column("path")
    if ID_COLUMN not in table.column_names:
        return path
    return pc.coalesce(pc.binary_join_element_wise(path, table.column(ID_COLUMN), SEP), path)


def with_path(table: Any, keys: list[str], schema: Any) -> Any:
    """A batch's rows with `path` first and, for records (`id` in the schema), `id` second."""
    import pyarrow as pa

    if ID_COLUMN not in schema.names:
        return table.add_column(0, "path", pa.array(keys, pa.string()))
    paths, ids = zip(*map(split_key, keys)) if keys else ((), ())
    table = table.add_column(0, "path", pa.array(paths, pa.string()))
    return table.add_column(1, ID_COLUMN, pa.array(ids, pa.string()))


def shown(failure: Failure) -> dict[str, Any]:
    """A failure record as the failures file shows it: a record's as `path` + `id`."""
    data = failure.to_dict()
    path, record_id = split_key(failure.path)
    if record_id is not None:
        data = {"path": path, ID_COLUMN: record_id, **{k: v for k, v in data.items() if k != "path"}}
    return data
