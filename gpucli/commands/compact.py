"""`gpucli compact OUT`: a Parquet output's small parts folded into larger ones, on demand.

A run does the same at its end once the output holds many small parts (gpucli/output/compaction.py
says which and when); this command does it now, whenever two small parts fit one larger one, for a
cron job that wants its readers to open few files, or before copying an output elsewhere. It takes
the run lock (a run writing the output makes it exit 75), repairs what a killed run left as a run's
open would, then folds (gpucli/output/sinks/parquet_compact.py: staged, recorded in the ledger,
swapped in at once). JSON lines (one file) and Qdrant (which merges its own segments) have nothing
to fold: said, exit 0.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass


@dataclass
class CompactReport:
    out: str
    format: str
    parts_before: int | None
    parts_after: int | None
    seconds: float
    note: str = ""  # why nothing was folded, where nothing can be

    def to_dict(self) -> dict:
        return asdict(self)


def compact(target: str) -> CompactReport:
    from gpucli.output.compactor import compact_now
    from gpucli.output.output import Output
    from gpucli.output.sinks.parquet import ParquetSink

    output = Output(target)
    if not isinstance(output.sink._sink, ParquetSink):
        what = "a JSON lines output is one file" if output.sink.name == "jsonl" else \
            f"a {output.sink.name} output merges its own storage"
        return CompactReport(output.display, output.sink.name, None, None, 0.0, f"nothing to compact: {what}")
    done = compact_now(output)
    return CompactReport(output.display, "parquet", done.parts_before, done.parts_after, round(done.seconds, 3))


def render(report: CompactReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.to_dict()))
        return
    if report.note:
        print(f"gpucli compact: {report.note}", file=sys.stderr)
    elif report.parts_after == report.parts_before:
        print(f"gpucli compact: {report.out}: {report.parts_before} part(s), none small enough to fold together",
              file=sys.stderr)
    else:
        print(f"gpucli compact: {report.out}: {report.parts_before} parts folded into {report.parts_after} "
              f"in {report.seconds:.1f}s", file=sys.stderr)
