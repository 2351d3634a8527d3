"""Texts from a table: `gpucli embed --from data.parquet|data.csv|data.jsonl --text-column body --id-column id`.

Each row of the table is one input, a *record*, that goes through the same core as a file:
the walk yields it as a `Record` (a `Source` whose text travels with it, so the reader opens
no file), the task prepares and chunks it as it would a file's bytes, and the ledger keeps
it as any input. What makes a record different is its key:

* **Key.** A record's `Source.path` is `TABLE//ID` (gpucli/core/keys.py): the table's path
  (relative as for files) and the record's id. So records never collide with files, the ledger, the prune and the attempts table key
  them without a change, and `--prune` sees a record as an entry "under" its table
  (`WalkReport.may_prune`): it removes only records of the table read in this run, and only
  after the whole table was read.
* **Rows.** Rows carry `path` = the table's path and a separate `id` column (text: an integer
  id 42 is written "42"); the key is split again where rows are made (`with_path`), and
  rebuilt from rows where a sink removes the rows of a key (`row_keys`, `row_key`).
  The `id` column exists only in the outputs of `--from` runs, whose metadata says
  `gpucli.input = table`: that is part of the output's settings, so files and tables never
  mix in one output (a Parquet dataset keeps one schema).
* **Incremental.** size = the text's UTF-8 length, mtime = the table file's mtime, digest =
  the text's digest: when the table is rewritten, every record is compared by digest, and
  only new or changed texts are embedded again (a changed one's old rows are replaced as a
  changed file's are).
* **Qdrant.** Point ids are uuid5 of `TABLE//ID` NUL chunk (`sinks.qdrant.point_id` of the key).

Reading is streamed, with memory bounded by one batch: Parquet through
`ParquetFile.iter_batches` (only the two columns), CSV through Python's `csv` row by row (see
`_csv_reader`), JSON lines line by line. The table is opened by its name as bytes (a name that
is not UTF-8 works as for a walked file, and its rows' `path` is written as the walk writes it). Duplicate ids are found with 8 bytes per record (`SeenIds`), not a set
of strings.

Decisions (see README): a missing column is exit 2 naming the columns there are; a record
whose text is null or not a string, or whose id is null, is one failure record, and so is a
row that cannot be read (not UTF-8, another number of CSV fields than the header): the rows
around it are read; only a table that cannot be read on (an I/O error, a damaged Parquet
page) stops, with one record for the table, and then nothing is pruned; a duplicate
id is one failure record per repeat (the first row with the id is embedded); `--from`
takes no PATH arguments (exit 2), runs on the local engine only, and is for text tasks
(embed; classify and transcribe exit 2).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpucli.core.errors import UsageError
from gpucli.core.keys import ID_COLUMN, REPEAT, record_key
from gpucli.core.records import Failure, Source
from gpucli.core.stages import Stage
from gpucli.inputs.stores.url import is_url

FORMATS = (".parquet", ".csv", ".jsonl", ".ndjson")
BATCH_ROWS = 4096  # rows per Parquet batch read: what bounds the walk's memory


@dataclass(slots=True)
class Record(Source):
    """One row of a table as an input: its text's bytes travel here (see read_chunk)."""

    data: bytes = b""


def take_text(source: Source) -> bytes | None:
    """A record's text, taken out of it (None for a file): the rows of a record wait in the
    parent until they are durable, and its text need not wait with them."""
    if not isinstance(source, Record):
        return None
    data, source.data = source.data, b""
    return data


# --- the run's set-up -------------------------------------------------------------------------

def check(config: Any, task_cls: type) -> None:
    """Before anything is opened: the task, the engine, the table's format and its columns
    (exit 2 with what to do)."""
    if not config.from_table:
        return
    if not getattr(task_cls, "reads_tables", False):
        raise UsageError(f"--from is for text tasks (gpucli embed); {task_cls.name} reads files: give PATH arguments")
    if config.engine != "local":
        raise UsageError("--from runs on the local engine only; drop --engine ray")
    path = config.from_table
    if is_url(path):  # a table in object storage: its local copy (gpucli/inputs/stores/tables.py)
        from gpucli.inputs.stores.tables import local_copy

        path = local_copy(path).path
    if not os.path.isfile(path):
        raise UsageError(f"--from {path}: no such file" if not os.path.lexists(path) else f"--from {path}: not a file")
    columns = table_columns(path)
    if columns is None:
        return  # an empty JSON lines file: a run that finds no input (exit 3 unless --allow-empty)
    for flag, name in (("--text-column", config.text_column), ("--id-column", config.id_column)):
        if name not in columns:
            raise UsageError(f"--from {path}: no column {name!r} ({flag}); its columns are: {', '.join(columns)}")


def output(config: Any, schema: Any, metadata: dict[str, str]) -> tuple[Any, dict[str, str]]:
    """A --from run's schema (`id` after `path`) and metadata (`gpucli.input`, part of the settings)."""
    import pyarrow as pa

    if not config.from_table:
        return schema, metadata
    schema = schema.insert(1, pa.field(ID_COLUMN, pa.string()))
    return schema, {**metadata, "gpucli.input": "table", "gpucli.text_column": config.text_column,
                    "gpucli.id_column": config.id_column}


def _format(path: str) -> str:
    lower = path.lower()
    for suffix in FORMATS:
        if lower.endswith(suffix):
            return "jsonl" if suffix == ".ndjson" else suffix[1:]
    raise UsageError(f"--from {path}: not a table gpucli reads; name it *.parquet, *.csv or *.jsonl")


def table_columns(path: str) -> list[str] | None:
    """The column names, from the Parquet footer, the CSV header or the first JSON line (None
    for a JSON lines file without any)."""
    kind = _format(path)
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            with open(path, "rb") as f:  # a file object: pyarrow takes no name that is not UTF-8
                return list(pq.ParquetFile(f).schema_arrow.names)
        if kind == "csv":
            with _open_text(path) as f:
                return next(_csv_reader(f), None) or []
        return _first_json_keys(path)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader's error: the table cannot be used
        raise UsageError(f"--from {path}: cannot read it as {kind}: {exc}") from None


def _first_json_keys(path: str) -> list[str] | None:
    with _open_text(path) as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise UsageError(f"--from {path}: its first line is not a JSON object")
                return list(row)
    return None


def _open_text(path: str):
    """A table's text, decoded as UTF-8 (a leading BOM dropped) with each byte that is not
    UTF-8 kept as a lone surrogate (`surrogateescape`): one row in another encoding (Latin-1)
    is then that row's failure record (`_not_utf8`), not the end of the table."""
    return open(path, encoding="utf-8-sig", errors="surrogateescape", newline="")


def _csv_reader(f):
    """Python's CSV reader, not pyarrow's: pyarrow's streaming reader stops the whole table at
    one value longer than its block (a 2 MB quoted text: "straddles two block boundaries") or
    one row that is not UTF-8, and it cannot go on after an error. Row by row, one odd row is one
    failure record and the rows around it are read. Values are text, never typed (an id 007
    stays "007"); quoted values may hold newlines; no length limit here: a text over
    --max-file-mb is a failure record in `records`."""
    import csv
    import sys

    csv.field_size_limit(sys.maxsize)
    return csv.reader(f)


# --- the walk -----------------------------------------------------------------------------------

def records(config: Any, report: Any, max_bytes: int) -> Iterator[Any]:
    """The table's records as the walk's `Found`s (a Record, or a failure record), numbered
    from 0; fills `report` as a walk does, so that --prune removes only this table's records
    that its whole read did not find."""
    from gpucli.inputs.scope import Found
    from gpucli.inputs.walk import _rel, common_base

    if is_url(config.from_table):  # read from its local copy; named and dated as the object
        from gpucli.inputs.stores.tables import local_copy

        copy = local_copy(config.from_table)
        abspath, table, mtime_ns = copy.path, copy.name, copy.mtime_ns
    else:
        abspath = os.path.abspath(config.from_table)
        table = _rel(abspath, common_base([Path(abspath)]))
        mtime_ns = os.stat(abspath).st_mtime_ns
    report.roots.append(table)
    seen, next_id, stopped = SeenIds(), 0, []
    rows = _until_error(_rows(abspath, config.text_column, config.id_column), stopped)
    number = 0
    for number, (text, record_id, odd) in enumerate(rows, 1):
        if record_id is not None and _not_utf8(record_id):
            odd, record_id = odd or f"its id is not valid UTF-8 ({_not_utf8(record_id)})", None
        if record_id is None or record_id == "":  # no key: the failure is the table's
            yield Found(failure=Failure(table, Stage.READ, f"row {number}: " + (odd or (
                f"no id in the column {config.id_column!r} (or not a JSON object); every record needs an id"))))
            continue
        key = record_key(table, record_id)
        if seen.repeated(record_id):  # its own ledger entry: a known failure on reruns of the same table
            yield Found(failure=Failure(key + REPEAT, Stage.READ, f"row {number}: duplicate id: an earlier row has it (only "
                                        "the first row with an id is used); ids must be unique", -1, mtime_ns))
            continue
        problem = odd or _problem(text, config.text_column)
        data = b"" if problem else text.encode("utf-8", "surrogatepass")
        if len(data) > max_bytes:
            problem = (f"the text is {len(data) / 2**20:.1f} MiB, over --max-file-mb {max_bytes / 2**20:g}; "
                       "raise the limit to embed it")
        if problem:
            yield Found(failure=Failure(key, Stage.READ, f"row {number}: {problem}", -1, mtime_ns))
            continue
        yield Found(source=Record(id=next_id, path=key, abspath=abspath, size=len(data), mtime_ns=mtime_ns, data=data))
        next_id += 1
    if stopped:  # the read did not finish: the walk is incomplete, and --prune removes nothing
        yield Found(failure=Failure(table, Stage.READ, f"the table could not be read past row {number}: {stopped[0]}; "
                                                   "the rows before were read, and nothing is pruned"))
        return
    if not seen.count:
        report.empty_roots.append(table)
    report.complete = True


def _until_error(rows: Iterator[Any], stopped: list[Exception]) -> Iterator[Any]:
    """The rows until the reader fails (a malformed CSV line, a truncated Parquet file); the
    error goes to `stopped`. Errors of the caller's own loop are not caught here."""
    try:
        yield from rows
    except Exception as exc:  # noqa: BLE001 - any reader's error ends the table, not the run
        stopped.append(exc)


def _problem(text: Any, text_column: str) -> str:
    """Why a record's text cannot be embedded ("" when it can)."""
    if text is None:
        return f"the text column {text_column!r} is null"
    if not isinstance(text, str):
        return f"the text column {text_column!r} holds {type(text).__name__}, not text"
    if _not_utf8(text):
        return f"the text column {text_column!r} is not valid UTF-8 ({_not_utf8(text)}; another encoding?)"
    return ""


def _not_utf8(text: str) -> str:
    """Where a text read with `surrogateescape` held bytes that are not UTF-8 ("" when none)."""
    if text.isascii():
        return ""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = text[exc.start]
        shown = f"byte 0x{ord(char) - 0xDC00:02X}" if 0xDC80 <= ord(char) <= 0xDCFF else f"U+{ord(char):04X}"
        return f"{shown} at character {exc.start}"
    return ""


def _rows(path: str, text_column: str, id_column: str) -> Iterator[tuple[Any, Any, str]]:
    """(text, id as text or None, why the row cannot be read or "") per row, streamed."""
    kind = _format(path)
    if kind == "jsonl":
        yield from _jsonl_rows(path, text_column, id_column)
    elif kind == "csv":
        yield from _csv_rows(path, text_column, id_column)
    else:
        yield from _parquet_rows(path, text_column, id_column)


def _parquet_rows(path: str, text_column: str, id_column: str) -> Iterator[tuple[Any, Any, str]]:
    """Record batches of the two columns, one batch in memory at a time; a batch whose values
    do not all convert (a string that is not UTF-8) goes row by row."""
    import pyarrow.parquet as pq

    with open(path, "rb") as f, pq.ParquetFile(f) as parquet:
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[text_column, id_column]):
            texts, ids = batch.column(0), _ids_as_text(batch.column(1))
            try:
                rows = list(zip(texts.to_pylist(), ids.to_pylist(), itertools.repeat("")))
            except UnicodeDecodeError:  # a value that is not UTF-8 somewhere in the batch: row by row
                rows = [_parquet_row(texts, ids, i) for i in range(len(batch))]
            yield from rows


def _parquet_row(texts: Any, ids: Any, i: int) -> tuple[Any, Any, str]:
    try:
        record_id = ids[i].as_py()
    except UnicodeDecodeError:
        return None, None, "its id is not valid UTF-8"
    try:
        return texts[i].as_py(), record_id, ""
    except UnicodeDecodeError as exc:
        return None, record_id, f"the text is not valid UTF-8 (byte 0x{exc.object[exc.start]:02X} at {exc.start})"


def _csv_rows(path: str, text_column: str, id_column: str) -> Iterator[tuple[Any, Any, str]]:
    """The header names the columns; a row with another number of fields is one failure record
    (its id, when it has one where the header says); empty lines are skipped."""
    with _open_text(path) as f:
        reader = _csv_reader(f)
        header = next(reader, None)
        if header is None:
            return
        text_at, id_at, width = header.index(text_column), header.index(id_column), len(header)
        for fields in reader:
            if not fields:
                continue
            record_id = fields[id_at] if id_at < len(fields) else None
            if len(fields) != width:
                yield None, record_id, f"{len(fields)} fields where the header has {width}"
                continue
            yield fields[text_at], record_id, ""


def _ids_as_text(column: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return column if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) else pc.cast(column, pa.string())


def _jsonl_rows(path: str, text_column: str, id_column: str) -> Iterator[tuple[Any, Any, str]]:
    with _open_text(path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict):
                yield None, None, ""  # no id: a failure record naming the row
                continue
            record_id = row.get(id_column)
            yield row.get(text_column), None if record_id is None else _id_text(record_id), ""


def _id_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # as Arrow casts it
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class SeenIds:
    """Which ids a read has met, in 8 bytes per id (a 64-bit hash in sorted numpy runs), not a
    set of strings: a table of 10 million records costs 80 MB here, not a gigabyte. Two ids
    with the same 64-bit hash (about 1 in 10**11 for a million ids) would read as a duplicate."""

    def __init__(self, merge_at: int = 1 << 16) -> None:
        self.sorted = np.empty(0, dtype=np.uint64)
        self.recent: set[int] = set()
        self.merge_at = merge_at
        self.count = 0

    def repeated(self, record_id: str) -> bool:
        """Whether the id was met before; remembers it."""
        h = int.from_bytes(hashlib.blake2b(record_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
        if h in self.recent or self._in_sorted(h):
            return True
        self.recent.add(h)
        self.count += 1
        if len(self.recent) >= self.merge_at:
            self.sorted = np.union1d(self.sorted, np.fromiter(self.recent, np.uint64, len(self.recent)))
            self.recent.clear()
        return False

    def _in_sorted(self, h: int) -> bool:
        i = int(np.searchsorted(self.sorted, np.uint64(h)))
        return i < len(self.sorted) and int(self.sorted[i]) == h
