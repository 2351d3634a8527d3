"""A Parquet output's part files, read in record batches as `pyarrow.dataset` reads them, without
importing it: `pyarrow.dataset` imports pandas, 0.2-0.25 s of a search that takes ~1 s in all
(`python -X importtime`, pyarrow 26, 2 shared cores); `pyarrow.parquet` alone does not.

What is kept from `pyarrow.dataset.dataset(path, format="parquet")`: a file is read alone; a
directory's files are every file below it, in order of their paths, but those with a part of
the path starting with `.` or `_` (a part being written, `.part-N.parquet.inprogress`; the state
an earlier gpucli kept inside, `_gpucli/`); the schema and its metadata are the first file's; a
column that a later file lacks reads as nulls, one of another type is cast to the first's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

IGNORED_PREFIXES = (".", "_")  # pyarrow.dataset's default ignore_prefixes


def part_files(path: Path) -> list[Path]:
    """The files of the output at `path` (a file, or a dataset directory), as pyarrow.dataset finds them."""
    if path.is_file():
        return [path]
    found = [p for p in path.rglob("*") if p.is_file()
             and not any(name.startswith(IGNORED_PREFIXES) for name in p.relative_to(path).parts)]
    return sorted(found, key=str)


class Parts:
    """The part files of one output: the schema (the first file's) and batches of chosen columns."""

    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self.files = part_files(path)
        if not self.files:
            raise ValueError(f"no part file under {path}")
        self.schema = pq.read_schema(self.files[0])

    def batches(self, columns: list[str], batch_rows: int) -> Iterator[Any]:
        """Record batches of `columns`, at most `batch_rows` rows each, file after file."""
        import pyarrow.parquet as pq

        for file in self.files:
            with pq.ParquetFile(file) as part:
                have = [c for c in columns if c in part.schema_arrow.names]
                for batch in part.iter_batches(batch_size=batch_rows, columns=have):
                    yield self._conformed(batch, columns)

    def _conformed(self, batch: Any, columns: list[str]) -> Any:
        """The batch with `columns` in order, each of the schema's type: a missing one as nulls."""
        import pyarrow as pa

        arrays = []
        for name in columns:
            kind = self.schema.field(name).type
            if name not in batch.schema.names:
                arrays.append(pa.nulls(batch.num_rows, kind))
                continue
            column = batch.column(name)
            arrays.append(column if column.type == kind else column.cast(kind))
        return pa.RecordBatch.from_arrays(arrays, names=columns)
