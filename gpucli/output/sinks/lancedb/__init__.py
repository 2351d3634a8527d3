"""LanceDB: `--out lancedb:DIR/TABLE` (embed), rows merged by path and chunk, compacted and indexed
as Lance does; the ledger and lock beside the table (sink.py). lancedb comes with the lancedb
extra (`pip install 'gpucli[lancedb]'`); without it the output is refused (exit 2) with that command."""

from gpucli.output.sinks.lancedb.sink import LanceSink
from gpucli.output.sinks.lancedb.target import is_lancedb, parse_target

__all__ = ["LanceSink", "is_lancedb", "parse_target"]
