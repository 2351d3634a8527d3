"""`gpucli inspect OUT`: what an output holds and how it was made, without touching it.

Read from two places a run leaves behind:
* the metadata: for Parquet, the `gpucli.*` keys of the newest part's schema (only its footer
  is read); for JSON lines and Qdrant, the `info` the ledger stored with its settings (a
  Qdrant storage is never opened: a run holds its lock, and the ledger knows what it wrote);
* the ledger, in the sink's state directory (`Sink.state_dir`: beside a Parquet dataset
  directory, a JSON lines file or an embedded Qdrant storage, per user for a Qdrant server; or
  where an earlier gpucli kept it, until a run moves it: gpucli/output/state_dir.py): inputs done and
  failed, rows, the time of the last change.

Each task's own settings are shown (embed: dims, pooling, prompt; classify: classes, top-k;
transcribe: language, VAD, beam), not one task's fields for all.

The ledger is read through gpucli/output/ledger_view.py (read-only, nothing created) and the run lock
is never taken: inspecting an output that a cron run is writing neither blocks the run nor is
blocked by it. A path that is none of these is a usage error (exit 2) that says what it expected.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from gpucli.core.decision import Status
from gpucli.core.errors import OutputError, UsageError
from gpucli.core.notes import library_notes
from gpucli.output.ledger_view import ReadOnlyLedger
from gpucli.output.state_dir import LEDGER, ledger_dir

PART = re.compile(r"^part-\d+\.parquet$")
# The metadata keys (gpucli. dropped) that every task's outputs carry: a task that names none to
# show (Task.shown_settings) gets every other key.
COMMON_KEYS = ("model", "task", "version", "model_path", "model_source", "model_package", "model_repo",
               "model_revision", "extractors", "root")


@dataclass
class Report:
    out: str
    format: str  # "parquet" | "jsonl" | "qdrant" | "lancedb" | "postgresql"
    task: str = ""
    model: str = ""
    dims: int | None = None
    pooling: str | None = None
    prompt: str | None = None
    rows: int | None = None
    parts: int | None = None  # Parquet only
    part_bytes: dict[str, int] | None = None  # Parquet only: total, smallest, median, largest, and `small` parts
    advice: str = ""  # when `gpucli compact` would help (gpucli/output/compaction.py)
    inputs_done: int = 0
    inputs_failed: int = 0  # failed in the ledger, waiting for a retry
    failures: int | None = None  # records in the failures file (None: no such file)
    failures_file: str = ""
    last_run: str | None = None  # ISO time of the last run: the ledger's last change, or the failures file's
    last_run_state: str = ""  # "ended", "running", "did not finish" (killed or crashed): output/lock.py, LastRun
    last_run_pid: int | None = None  # the process of a run running now, or of one that did not finish
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
    """The report on the output at `where`; a library's warning is one `gpucli: note:` line (notes.py)."""
    with library_notes():
        return _inspect(where)


def _inspect(where: str) -> Report:
    from gpucli.output.sinks.postgres.target import is_postgres

    if is_postgres(where):
        return _inspect_postgres(where)
    layout = locate(where)
    ledger = _open_ledger(layout.ledger)
    try:
        settings = _settings(ledger)
        report = Report(str(layout.out), layout.format, failures_file=str(layout.failures.absolute()))
        metadata = _metadata(layout, settings)
        _describe(report, metadata, settings)
        report.gpucli_version = report.gpucli_version or ledger.meta("gpucli_version") or ""  # JSON lines, Qdrant
        _count_ledger(report, ledger, layout)
    except sqlite3.Error as exc:  # a ledger that a run is writing over this read, or damaged past its header
        raise UsageError(f"{layout.ledger}: cannot read this ledger ({type(exc).__name__}: {exc})") from None
    finally:
        ledger.close()
    _count_failures(report, layout.failures)
    return report


def locate(where: str) -> Layout:
    """The output's layout, from the sink that writes it (so its ledger is where runs keep it),
    or a UsageError naming what a gpucli output looks like."""
    from gpucli.output.sinks import open_sink
    from gpucli.output.sinks.lancedb.target import is_lancedb
    from gpucli.output.sinks.qdrant import is_qdrant

    qdrant, lance = is_qdrant(where), is_lancedb(where)
    path = Path(where)
    if not qdrant and not lance and not path.exists():
        raise UsageError(f"{where}: no such file or directory")
    try:
        sink = open_sink(where)  # builds paths only: no connection, no file touched
    except UsageError:
        sink = None  # a directory or file not named as gpucli names outputs: where 0.1 kept the ledger
    fmt = "qdrant" if qdrant else "lancedb" if lance else "parquet" if path.is_dir() else "jsonl"
    layout = _layout(path, fmt, sink)
    if not layout.ledger.is_file():
        raise UsageError(f"{where}: not a gpucli output (no ledger at {layout.ledger}); give the --out of a "
                         "gpucli run: DIR.parquet, FILE.jsonl or qdrant:PATH/COLLECTION")
    return layout


def _layout(path: Path, fmt: str, sink: Any) -> Layout:
    """The sink's state directory, or an earlier one of its that still holds the ledger (an
    output not yet moved by a newer gpucli); without a sink (a path not named as gpucli names
    outputs), beside it or, for a directory, inside it, as gpucli 0.1 kept it."""
    if sink is None:
        places = [Path(f"{path}.gpucli")] + ([path / "_gpucli"] if fmt == "parquet" else [])
        state = next((d for d in places if (d / LEDGER).is_file()), places[0])
        return Layout(path, fmt, state / LEDGER, path.with_suffix(".failures.jsonl"))
    ledger = ledger_dir(sink) / LEDGER
    return Layout(Path(sink.display) if fmt in ("qdrant", "lancedb") else path, fmt, ledger, Path(sink.failures_path))


def _open_ledger(path: Path) -> ReadOnlyLedger:
    """Read-only, leaving no trace (ledger_view.py); its header is read here, not its whole file."""
    try:
        return ReadOnlyLedger(path, check=False)
    except OutputError as exc:  # not SQLite, or not a ledger: named, with what it is
        raise UsageError(f"{path}: cannot read this ledger ({exc.cause}); not a gpucli output, or a damaged "
                         "one") from None


def _settings(ledger: ReadOnlyLedger) -> dict[str, Any]:
    try:
        settings = json.loads(ledger.meta("settings") or "{}")
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
    if layout.format == "lancedb":
        found.update(_lance_metadata(str(layout.out)))
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


def _count_ledger(report: Report, ledger: ReadOnlyLedger, layout: Layout) -> None:
    """The last run: the ledger's last change, or the failures file's, which every run rewrites
    (a run with nothing to do changes no input's record)."""
    counts = ledger.counts()
    report.inputs_done, report.inputs_failed = counts.get(Status.DONE, 0), counts.get(Status.FAILED, 0)
    if layout.format == "parquet":
        parts = _parts(layout.out)
        report.parts, report.rows = len(parts), sum(_part_rows(p) for p in parts)
        _describe_parts(report, parts)
    elif layout.format == "lancedb":  # the table's own count: what a reader of it gets
        report.rows = _lance_rows(str(layout.out))
    else:  # JSON lines and Qdrant: the rows the ledger knows are written
        report.rows = int(ledger.done_rows())
    times = [t for t in (ledger.last_update(), _mtime(layout.failures)) if t]
    report.last_run = _iso(max(times)) if times else None
    _last_run_state(report, layout.ledger.parent)


def _last_run_state(report: Report, state_dir: Path) -> None:
    """From the run lock's file, read without taking the lock (gpucli/output/lock.py)."""
    from gpucli.output.lock import LastRun, last_holder

    holder = last_holder(state_dir)
    if holder is None:
        report.last_run_state = LastRun.ENDED.value if report.last_run else ""
        return
    report.last_run_state, report.last_run_pid = holder.state.value, holder.pid
    if holder.state is not LastRun.ENDED:
        report.last_run = report.last_run or holder.started


def _describe_parts(report: Report, parts: list[Path]) -> None:
    """Part sizes, and whether compaction would help (gpucli/output/compaction.py)."""
    from gpucli.output.compaction import Layout, PartSize

    layout = Layout.of([PartSize(p.name, _size(p)) for p in parts])
    report.part_bytes = {"total": layout.total_bytes, "smallest": layout.smallest, "median": layout.median,
                         "largest": layout.largest, "small": layout.small}
    report.advice = layout.advice(report.out)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # removed by a run since it was listed
        return 0


def _lance_metadata(where: str) -> dict[str, str]:
    from gpucli.output.sinks.lancedb.target import lancedb_module, parse_target

    target = parse_target(where)
    if not Path(target.path).is_dir():
        return {}
    schema = lancedb_module().connect(target.directory).open_table(target.table).schema
    return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (schema.metadata or {}).items()}


def _lance_rows(where: str) -> int:
    from gpucli.output.sinks.lancedb.target import lancedb_module, parse_target

    target = parse_target(where)
    if not Path(target.path).is_dir():
        return 0
    return lancedb_module().connect(target.directory).open_table(target.table).count_rows()


def _inspect_postgres(where: str) -> Report:
    """A PostgreSQL output: its ledger and rows in the database (read in one transaction, no lock
    taken), its failures file in the per-user state directory."""
    from gpucli.output.sinks import open_sink
    from gpucli.output.sinks.postgres.store import Store

    sink = open_sink(where)
    target, store = sink.parsed, Store(sink.parsed)
    schema, output = target.schema, target.qualified

    def read(c: Any) -> tuple[Any, ...]:
        if not c.execute("select to_regclass(%s) is not null", (f"{schema}.gpucli_meta",)).fetchone()[0]:
            return None, {}, 0, None, None
        settings = c.execute(f"select value from {schema}.gpucli_meta where output=%s and key='settings'",
                             (output,)).fetchone()
        counts = dict(c.execute(f"select status, count(*) from {schema}.gpucli_inputs where output=%s group by status",
                                (output,)).fetchall())
        last = c.execute(f"select max(updated) from {schema}.gpucli_inputs where output=%s", (output,)).fetchone()[0]
        exists = c.execute("select to_regclass(%s) is not null", (output,)).fetchone()[0]
        rows = c.execute(f"select count(*) from {output}").fetchone()[0] if exists else 0
        comment = c.execute("select obj_description(%s::regclass, 'pg_class')", (output,)).fetchone()[0] \
            if exists else None
        return settings, counts, rows, last, comment

    try:
        settings_row, counts, rows, last, comment = store.transaction("reading the ledger", read)
    finally:
        store.close()
    if settings_row is None:
        raise UsageError(f"{where}: not a gpucli output (no gpucli ledger entry for {output} in that database)")
    try:
        settings = json.loads(settings_row[0])
    except ValueError:
        settings = {}
    failures = Path(sink.failures_path)
    report = Report(target.display, "postgresql", failures_file=str(failures.absolute()))
    try:
        stored = json.loads(comment) if comment else {}
    except ValueError:
        stored = {}
    info = {**(settings.get("info") if isinstance(settings.get("info"), dict) else {}),
            **(stored if isinstance(stored, dict) else {})}
    _describe(report, {k.removeprefix("gpucli."): str(v) for k, v in info.items() if k.startswith("gpucli.")},
              settings)
    report.inputs_done, report.inputs_failed = counts.get(Status.DONE.stored, 0), counts.get(Status.FAILED.stored, 0)
    report.rows = int(rows)
    times = [t for t in (last, _mtime(failures)) if t]
    report.last_run = _iso(max(times)) if times else None
    _count_failures(report, failures)
    return report


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
        *task_lines(report),
        ("rows", "?" if report.rows is None else str(report.rows)
         + (f" in {report.parts} part(s)" if report.parts is not None else "")),
        *([("part sizes", _sizes_line(report.part_bytes))] if report.part_bytes and report.parts else []),
        *([("compaction", report.advice)] if report.advice else []),
        ("inputs done", str(report.inputs_done)),
        ("failures", f"{failures} in {report.failures_file}"
         + (f"; {report.inputs_failed} input(s) to retry" if report.inputs_failed else "")),
        ("last run", _last_run_line(report)),
        ("gpucli", report.gpucli_version or "?"),
    ]
    return rows + ([("root", report.metadata["root"])] if report.metadata.get("root") else [])


def _sizes_line(sizes: dict[str, int]) -> str:
    return (f"{_mib(sizes['total'])} in all; smallest {_mib(sizes['smallest'])}, median {_mib(sizes['median'])}, "
            f"largest {_mib(sizes['largest'])}; {sizes['small']} small (under 16 MiB)")


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 1024:.0f} KiB"


def _last_run_line(report: Report) -> str:
    from gpucli.output.lock import LastRun

    when = report.last_run or "never"
    if report.last_run_state == LastRun.RUNNING.value:
        return f"{when}; running now (pid {report.last_run_pid}): these figures change as it writes"
    if report.last_run_state == LastRun.DIED.value:
        return (f"{when}; did not finish (pid {report.last_run_pid} was killed or crashed): rerun the same command "
                "to finish what is missing")
    if report.last_run_state == LastRun.ELSEWHERE.value:
        return f"{when}; the lock names a run on another host (pid {report.last_run_pid})"
    return when


def task_lines(report: Report) -> list[tuple[str, str]]:
    """The task's own settings, as its metadata records them (a prompt quoted: its spaces count)."""
    keys = _shown_settings(report.task) or tuple(k for k in sorted(report.metadata) if k not in COMMON_KEYS)
    shown = []
    for key in keys:
        value = report.metadata.get(key)
        if value:
            shown.append((key.replace("_", " "), repr(value) if key.endswith("prompt") else value))
    if report.task == "embed" and not report.metadata.get("prompt"):
        shown.append(("prompt", "none"))
    return shown


def _shown_settings(task: str) -> tuple[str, ...]:
    """The keys the output's task shows (Task.shown_settings); () for a task this gpucli does not know."""
    from gpucli.tasks import get_task

    try:
        return get_task(task).shown_settings if task else ()
    except (UsageError, ImportError, AttributeError, ValueError):
        return ()
