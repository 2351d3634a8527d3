"""`gpucli inspect OUT`: what an output holds and how it was made, without touching it.

Read from two places a run leaves behind:
* the metadata: for Parquet, the `gpucli.*` keys of the newest part's schema (only its footer
  is read); for JSON lines, which has no metadata, the `info` the ledger stored with its settings;
* the ledger (SQLite: `OUT/_gpucli/ledger.sqlite` for Parquet, `OUT.gpucli/ledger.sqlite` for
  JSON lines): inputs done and failed, rows, the time of the last change.

The ledger is opened read-only (`mode=ro`) and the run lock is never taken: inspecting an
output that a cron run is writing neither blocks the run nor is blocked by it. A path that is
none of these is a usage error (exit 2) that says what it expected.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpucli.errors import UsageError

PART = re.compile(r"^part-\d+\.parquet$")
EXTRA_KEYS = ("root", "normalize", "prompt_name", "query_prompt", "query_prompt_name", "max_tokens")  # shown when set


@dataclass
class Report:
    out: str
    format: str  # "parquet" | "jsonl"
    task: str = ""
    model: str = ""
    dims: int | None = None
    pooling: str | None = None
    prompt: str | None = None
    rows: int | None = None
    parts: int | None = None  # Parquet only
    inputs_done: int = 0
    inputs_failed: int = 0  # failed in the ledger, waiting for a retry
    failures: int | None = None  # records in the failures file (None: no such file)
    failures_file: str = ""
    last_run: str | None = None  # ISO time of the last run: meta.last_run, the ledger, the failures file
    gpucli_version: str = ""
    metadata: dict[str, str] = field(default_factory=dict)  # every gpucli.* key, prefix dropped

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Layout:
    """Where an output's pieces are."""

    out: Path
    format: str
    ledger: Path
    failures: Path


def inspect_output(where: str) -> Report:
    layout = locate(where)
    with open_ledger(layout.ledger) as ledger:
        settings = _settings(ledger)
        report = Report(str(layout.out), layout.format, failures_file=str(layout.failures.absolute()))
        metadata = _metadata(layout, settings)
        _describe(report, metadata, settings)
        _count_ledger(report, ledger, layout)
    _count_failures(report, layout.failures)
    return report


def locate(where: str) -> Layout:
    """The output's layout, or a UsageError naming what a gpucli output looks like."""
    if "://" in where or where.startswith("qdrant:"):
        raise UsageError(f"{where}: gpucli inspect reads Parquet and JSON lines outputs (DIR.parquet, FILE.jsonl); "
                         "for Qdrant, ask the server about the collection")
    path = Path(where)
    if not path.exists():
        raise UsageError(f"{where}: no such file or directory")
    if path.is_dir():
        layout = Layout(path, "parquet", path / "_gpucli" / "ledger.sqlite", path.with_suffix(".failures.jsonl"))
    else:
        layout = Layout(path, "jsonl", Path(f"{path}.gpucli") / "ledger.sqlite", path.with_suffix(".failures.jsonl"))
    if not layout.ledger.is_file():
        raise UsageError(f"{where}: not a gpucli output (no ledger at {layout.ledger}); give the --out of a "
                         "gpucli run: DIR.parquet or FILE.jsonl")
    return layout


class open_ledger:
    """A read-only connection that leaves no trace. With no `-wal` file beside the ledger no
    run has uncommitted pages in one (a run that closed cleanly checkpointed and removed it),
    so the database file alone is the whole ledger: `immutable=1` reads it without creating
    the `-wal` and `-shm` files a `mode=ro` connection to a WAL database leaves behind. With a
    `-wal` file (a run is writing, or died), `mode=ro` reads through it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.db: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection:
        uri = self.path.absolute().as_uri()
        quiet = not Path(f"{self.path}-wal").exists()
        error: Exception | None = None
        for options in (["mode=ro&immutable=1"] if quiet else []) + ["mode=ro"]:
            try:
                self.db = sqlite3.connect(f"{uri}?{options}", uri=True)
                self.db.execute("select count(*) from files").fetchone()
                return self.db
            except sqlite3.Error as exc:  # e.g. a run began writing as we read: read through its -wal
                error = exc
                self.close()
        raise UsageError(f"{self.path}: cannot read this ledger ({type(error).__name__}: {error}); "
                         "not a gpucli output, or a damaged one")

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


def _settings(ledger: sqlite3.Connection) -> dict[str, Any]:
    row = ledger.execute("select value from meta where key = 'settings'").fetchone()
    try:
        settings = json.loads(row[0]) if row and row[0] else {}
    except ValueError:
        return {}
    return settings if isinstance(settings, dict) else {}


def _metadata(layout: Layout, settings: dict[str, Any]) -> dict[str, str]:
    """`gpucli.*` keys, without the prefix: the newest part's (what the last run wrote), else
    the ledger's copy (JSON lines, or a Parquet output whose every input failed)."""
    info = settings.get("info") if isinstance(settings.get("info"), dict) else {}
    found = {str(k): str(v) for k, v in info.items()}
    if layout.format == "parquet":
        parts = _parts(layout.out)
        if parts:
            found.update(_part_metadata(parts[-1]))
    return {k.removeprefix("gpucli."): v for k, v in found.items() if k.startswith("gpucli.")}


def _parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if PART.match(p.name))


def _part_metadata(part: Path) -> dict[str, str]:
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(part).metadata or {}
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on a damaged footer
        raise UsageError(f"{part}: cannot read this part's metadata ({exc})") from None
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in metadata.items()}


def _describe(report: Report, metadata: dict[str, str], settings: dict[str, Any]) -> None:
    report.metadata = metadata
    report.task = metadata.get("task") or str(settings.get("task") or "")
    report.model = metadata.get("model") or str(settings.get("model") or "")
    report.dims = int(metadata["dims"]) if metadata.get("dims", "").isdigit() else None
    report.pooling = metadata.get("pooling")
    report.prompt = metadata.get("prompt")
    report.gpucli_version = metadata.get("version", "")


def _count_ledger(report: Report, ledger: sqlite3.Connection, layout: Layout) -> None:
    counts = dict(ledger.execute("select status, count(*) from files group by status").fetchall())
    report.inputs_done, report.inputs_failed = counts.get("done", 0), counts.get("failed", 0)
    done_rows = ledger.execute("select coalesce(sum(rows), 0) from files where status = 'done'").fetchone()[0]
    updated = ledger.execute("select max(updated) from files").fetchone()[0]
    if layout.format == "parquet":
        parts = _parts(layout.out)
        report.parts, report.rows = len(parts), sum(_part_rows(p) for p in parts)
    else:
        report.rows = int(done_rows)
    times = [t for t in (updated, _mtime(layout.failures), _recorded_run(ledger)) if t]
    report.last_run = _iso(max(times)) if times else None


def _recorded_run(ledger: sqlite3.Connection) -> float | None:
    """`meta.last_run` (seconds since the epoch), where the engine records when a run ended:
    the other clues miss a run that changed nothing and could not write its failures file."""
    row = ledger.execute("select value from meta where key = 'last_run'").fetchone()
    try:
        return float(row[0]) if row and row[0] else None
    except ValueError:
        return None


def _part_rows(part: Path) -> int:
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(part).num_rows
    except (OSError, ValueError) as exc:
        raise UsageError(f"{part}: cannot read this part's footer ({exc})") from None


def _mtime(path: Path) -> float | None:
    """The failures file is rewritten by every run, even one with nothing to do."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def _count_failures(report: Report, path: Path) -> None:
    try:
        with open(path, "rb") as f:
            report.failures = sum(1 for line in f if line.strip())
    except FileNotFoundError:
        report.failures = None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the failures file ({exc.strerror or exc})") from None


# --- printing ---------------------------------------------------------------------------------
def render(report: Report, as_json: bool) -> None:
    """One JSON object with --json; otherwise aligned `name: value` lines, plain text (no
    markup: a model path or a prompt may hold brackets)."""
    if as_json:
        print(json.dumps(report.to_dict(), ensure_ascii=False))
        return
    for name, value in lines(report):
        print(f"{name + ':':<16}{value}")


def lines(report: Report) -> list[tuple[str, str]]:
    failures = "no failures file" if report.failures is None else f"{report.failures} records"
    rows = [
        ("output", f"{report.out} ({report.format})"),
        ("task", report.task or "?"),
        ("model", report.model or "?"),
        ("dims", str(report.dims) if report.dims is not None else "-"),
        ("pooling", report.pooling or "-"),
        ("prompt", repr(report.prompt) if report.prompt else "none"),
        ("rows", "?" if report.rows is None else str(report.rows)
         + (f" in {report.parts} part(s)" if report.parts is not None else "")),
        ("inputs done", str(report.inputs_done)),
        ("failures", f"{failures} in {report.failures_file}"
         + (f"; {report.inputs_failed} input(s) to retry" if report.inputs_failed else "")),
        ("last run", report.last_run or "never"),
        ("gpucli", report.gpucli_version or "?"),
    ]
    return rows + [(key.replace("_", " "), report.metadata[key]) for key in EXTRA_KEYS if report.metadata.get(key)]
