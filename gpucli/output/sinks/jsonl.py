"""JSON lines: the same rows as the Parquet sink, one object per line (vectors as lists).

Exact after a kill at any moment, like the Parquet parts (see state.py):

* Each write appends whole lines and fsyncs; its location is its byte range,
  `bytes=START-END` (END exclusive), so the ledger knows where every input's rows are.
* The file is the prefix the ledger knows: open truncates it to the end of the last
  committed range, which drops rows written but never committed and a torn last line.
* Superseded rows go in a rewrite: the kept lines are copied to `.NAME.inprogress` and
  fsynced; the ledger then renames the moved ranges and marks the rewrite pending in one
  transaction; `publish` renames the copy over the file. An open that finds the mark
  publishes again (roll forward); a copy without the mark is deleted.
* An output made by gpucli 0.1 named its writes by run; its ranges are unknown, so on first
  open its whole file (up to the last full line) becomes one range.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

from gpucli.core.durable import fsync_dir, replace_durably
from gpucli.core.errors import UsageError
from gpucli.core.keys import row_key
from gpucli.output.sinks.base import Rewrite, Sink

RANGE = re.compile(r"^bytes=(\d+)-(\d+)$")


class JsonlSink(Sink):
    name = "jsonl"
    help = "a file ending in .jsonl"
    reads_back = True

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.path = Path(target)
        self._file = None
        self._size = 0
        self._ranges: dict[str, tuple[int, int]] = {}  # every committed location, and this run's writes
        self._next_ranges: dict[str, tuple[int, int]] | None = None  # after the pending rewrite

    @classmethod
    def accepts(cls, target: str) -> bool:
        return target.lower().endswith(".jsonl") and not target.lower().endswith(".failures.jsonl")

    @property
    def failures_path(self) -> str:
        return str(self.path.with_suffix(".failures.jsonl"))

    @property
    def _tmp(self) -> Path:
        return self.path.with_name(f".{self.path.name}.inprogress")

    def foreign(self) -> str | None:
        self._check_is_file()
        if self.path.exists() and self.path.stat().st_size > 0:
            return f"{self.path.stat().st_size} bytes"
        return None

    def _check_is_file(self) -> None:
        if self.path.is_dir():
            raise UsageError(f"--out {self.path}: a directory of that name exists; a JSON lines output is a file")

    def open(self, schema, metadata: dict[str, str]) -> None:
        self._check_is_file()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab", buffering=0)
        self._size = os.fstat(self._file.fileno()).st_size
        fsync_dir(self.path.parent)  # a new file's name is durable before the ledger counts its rows

    # --- writes --------------------------------------------------------------------------------
    def write(self, table) -> str | None:
        if table.num_rows == 0:
            return None
        data = "".join(json.dumps(row, ensure_ascii=False, default=_plain) + "\n"
                       for row in _without_timestamps(table).to_pylist()).encode("utf-8")
        start = self._size
        try:
            view = memoryview(data)
            while view:
                view = view[self._file.write(view):]
            os.fsync(self._file.fileno())
        except BaseException:
            with contextlib.suppress(OSError):  # a write that failed half way (disk full): no partial line
                os.ftruncate(self._file.fileno(), start)
            raise
        self._size = start + len(data)
        name = f"bytes={start}-{self._size}"
        self._ranges[name] = (start, self._size)
        return name

    def rows_of(self, location: str, keys: set[str]):
        """The lines of these inputs in the committed byte range `location`, as a table of what
        JSON holds (the caller casts it to the task's columns)."""
        import pyarrow as pa

        if not RANGE.match(location):
            return None
        start, end = _span(location)
        with open(self.path, "rb") as f:
            f.seek(start)
            rows = [row for row in map(json.loads, f.read(end - start).splitlines()) if row_key(row) in keys]
        return pa.Table.from_pylist(rows) if rows else None

    def reset(self) -> None:
        self._truncate(0)
        self._ranges = {}

    def _truncate(self, size: int) -> None:
        os.ftruncate(self._file.fileno(), size)
        os.fsync(self._file.fileno())
        self._size = size

    # --- recovery ------------------------------------------------------------------------------
    def recover(self, known: set[str], last: str | None) -> dict[str, str | None]:
        """Truncate to what the ledger knows; a gpucli 0.1 ledger's writes become one range."""
        self._tmp.unlink(missing_ok=True)  # a rewrite the ledger never recorded (publish ran first)
        legacy = {name for name in known if not RANGE.match(name)}
        renamed: dict[str, str | None] = {}
        if legacy:
            whole = f"bytes=0-{self._last_full_line()}"
            renamed = {name: whole for name in legacy}
            known = (known - legacy) | {whole}
        self._ranges = {name: _span(name) for name in known}
        committed = max((end for _, end in self._ranges.values()), default=0)
        if self._size < committed:
            raise UsageError(f"--out {self.path}: the file is shorter than its ledger says ({self._size} < "
                             f"{committed} bytes): it was cut or replaced outside gpucli; pass --full to rebuild it")
        self._truncate(committed)
        return renamed

    def _last_full_line(self) -> int:
        """The length of the file up to its last newline (a torn last line is dropped)."""
        with open(self.path, "rb") as f:
            data = f.read()
        return data.rfind(b"\n") + 1

    # --- superseded rows -----------------------------------------------------------------------
    def supersede(self, stale: dict[str, set[str]], pruned: set[str]) -> Rewrite | None:
        """Copy the file without the rows of stale (location, path) pairs; the ledger's stale
        entries name them exactly, so this holds after an unclean end too (`pruned` is not
        needed). Nothing is visible until `publish`."""
        drop = {name: paths for name, paths in stale.items() if name in self._ranges}
        if not drop:
            return None
        renamed: dict[str, str | None] = {}
        after: dict[str, tuple[int, int]] = {}
        with open(self.path, "rb") as src, open(self._tmp, "wb") as dst:
            for name, (start, end) in sorted(self._ranges.items(), key=lambda item: item[1]):
                begin = dst.tell()
                _copy_range(src, dst, start, end, drop.get(name, set()))
                renamed[name] = f"bytes={begin}-{dst.tell()}" if dst.tell() > begin else None
                if renamed[name] is not None:
                    after[renamed[name]] = (begin, dst.tell())
            dst.flush()
            os.fsync(dst.fileno())
        fsync_dir(self.path.parent)  # the copy survives a power cut once the ledger names it
        self._next_ranges = after
        return Rewrite({old: new for old, new in renamed.items() if old != new}, self._tmp.name)

    def publish(self, pending: str) -> None:
        tmp = self.path.with_name(pending)
        if tmp.exists():
            self._file.close()
            replace_durably(tmp, self.path, synced=True)  # synced by `supersede`
            self._file = open(self.path, "ab", buffering=0)
            self._size = os.fstat(self._file.fileno()).st_size
        if self._next_ranges is not None:
            self._ranges, self._next_ranges = self._next_ranges, None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _copy_range(src, dst, start: int, end: int, drop: set[str]) -> None:
    """Copy bytes [start, end) line by line, without the lines of the `drop` paths (streamed:
    a range can be a whole file taken over from gpucli 0.1)."""
    src.seek(start)
    while src.tell() < end:
        data = src.read(min(end - src.tell(), 1 << 20)) if not drop else src.readline(end - src.tell())
        if not data:
            break  # a file cut short by hand: what is there is all there is
        if not drop or row_key(json.loads(data)) not in drop:  # a table's record: `path//id` (gpucli/core/keys.py)
            dst.write(data)


def _span(name: str) -> tuple[int, int]:
    start, end = RANGE.match(name).groups()
    return int(start), int(end)




def _without_timestamps(table):
    """Timestamp columns (`mtime`) as ISO 8601 text, written here: pyarrow converts a nanosecond
    timestamp to Python only through pandas, which gpucli does not require (without it every
    write failed). The text is what pandas' `Timestamp.isoformat` gives, so that rows written
    with and without pandas read the same: 9 digits of fraction when the nanoseconds say so, 6
    for whole microseconds, none for whole seconds, then the offset (`+00:00`)."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.tz in ("UTC", "+00:00"):
            ns = table.column(i).cast(pa.timestamp("ns", tz=field.type.tz)).cast(pa.int64()).to_pylist()
            table = table.set_column(i, field.name, pa.array([_iso_utc(v) for v in ns], pa.string()))
    return table


def _iso_utc(ns: int | None) -> str | None:
    import datetime as dt

    if ns is None:
        return None
    seconds, fraction = divmod(ns, 10**9)
    text = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    if fraction % 1000:
        text += f".{fraction:09d}"
    elif fraction:
        text += f".{fraction // 1000:06d}"
    return text + "+00:00"


def _plain(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if hasattr(value, "isoformat"):  # `mtime`: ISO 8601 with its UTC offset
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
