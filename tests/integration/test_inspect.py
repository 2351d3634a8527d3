"""`gpucli inspect OUT`: what an output holds, read from its metadata and ledger without
changing a byte, taking the lock or waiting for a run."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app

runner = CliRunner()

META = {"gpucli.model": "bge-small", "gpucli.dims": "4", "gpucli.pooling": "cls", "gpucli.normalize": "true",
        "gpucli.prompt": "passage: ", "gpucli.query_prompt": "query: ", "gpucli.version": "0.1.0",
        "gpucli.task": "embed"}
SETTINGS = {"task": "embed", "model": "bge-small", "info": META}


def make_ledger(state_dir: Path, done: dict[str, int], failed: tuple[str, ...] = (), wal: bool = True,
                settings: dict | None = None) -> Path:
    """A ledger as gpucli writes it: `files` and `meta` tables, WAL journal."""
    state_dir.mkdir(parents=True)
    path = state_dir / "ledger.sqlite"
    db = sqlite3.connect(path)
    if wal:
        db.execute("pragma journal_mode=wal")
    db.execute("create table meta (key text primary key, value text)")
    db.execute("create table files (path text primary key, size integer, mtime_ns integer, digest text, "
               "status text, error text, location text, rows integer, updated real)")
    db.execute("insert into meta values ('settings', ?)", (json.dumps(settings or SETTINGS),))
    for i, (name, rows) in enumerate(done.items()):
        db.execute("insert into files values (?, 1, 1, 'd', 'done', '', 'part-00000.parquet', ?, ?)",
                   (name, rows, 1_700_000_000 + i))
    for name in failed:
        db.execute("insert into files (path, status, error, updated) values (?, 'failed', 'bad', 1700000100)",
                   (name,))
    db.commit()
    db.close()
    return path


def state_of(out: Path) -> Path:
    """Where a run keeps a Parquet output's ledger and lock: beside the dataset directory."""
    return Path(f"{out}.gpucli")


def make_parquet_output(tmp_path: Path, failures: int = 2, state: Path | None = None) -> Path:
    out = tmp_path / "docs [draft].parquet"
    out.mkdir()
    table = pa.table({"path": ["a.txt", "a.txt", "b.txt"], "chunk": [0, 1, 0],
                      "embedding": pa.array([[0.0] * 4] * 3, pa.list_(pa.float32(), 4))})
    pq.write_table(table.replace_schema_metadata(META), out / "part-00000.parquet")
    make_ledger(state or state_of(out), {"a.txt": 2, "b.txt": 1}, failed=("c.txt",))
    records = [json.dumps({"path": f"bad{i}.txt", "stage": "decode", "error": "[binary]"}) for i in range(failures)]
    (tmp_path / "docs [draft].failures.jsonl").write_text("".join(r + "\n" for r in records))
    return out


def files_under(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")}


def test_inspect_parquet_reports_model_metadata_rows_inputs_failures_and_last_run(tmp_path):
    out = make_parquet_output(tmp_path)
    result = runner.invoke(app, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["task"], report["model"], report["dims"], report["pooling"], report["prompt"]) == (
        "embed", "bge-small", 4, "cls", "passage: ")
    assert (report["rows"], report["parts"], report["inputs_done"], report["inputs_failed"]) == (3, 1, 2, 1)
    assert report["failures"] == 2 and report["failures_file"].endswith("docs [draft].failures.jsonl")
    assert report["last_run"][:4].isdigit() and "T" in report["last_run"]
    assert report["metadata"]["query_prompt"] == "query: "


def test_inspect_prints_plain_lines_with_brackets_kept(tmp_path):
    out = make_parquet_output(tmp_path)
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "docs [draft].parquet" in text and "bge-small" in text and "cls" in text
    assert "rows:" in text and "3 in 1 part(s)" in text
    assert "2 records" in text and "1 input(s) to retry" in text
    assert "'passage: '" in text


def test_inspect_jsonl_reads_the_ledger_beside_it(tmp_path):
    out = tmp_path / "rows.jsonl"
    out.write_text('{"path": "a.txt"}\n' * 5)
    make_ledger(tmp_path / "rows.jsonl.gpucli", {"a.txt": 5})
    result = runner.invoke(app, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["format"], report["model"], report["dims"], report["rows"], report["inputs_done"]) == (
        "jsonl", "bge-small", 4, 5, 1)
    assert report["failures"] is None  # no failures file: said, not invented


def test_inspect_changes_nothing_and_leaves_no_wal_files(tmp_path):
    out = make_parquet_output(tmp_path)
    before = files_under(tmp_path)
    assert runner.invoke(app, ["inspect", str(out)]).exit_code == 0
    assert files_under(tmp_path) == before


def test_inspect_works_while_a_run_holds_the_lock_and_writes(tmp_path):
    out = make_parquet_output(tmp_path)
    lock = os.open(state_of(out) / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running gpucli holds it
    writer = sqlite3.connect(state_of(out) / "ledger.sqlite", isolation_level=None)
    writer.execute("pragma journal_mode=wal")
    writer.execute("insert into files values ('new.txt', 1, 1, 'd', 'done', '', 'part-00001.parquet', 7, 1.0)")
    try:
        result = runner.invoke(app, ["inspect", str(out), "--json"])
    finally:
        writer.close()
        os.close(lock)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs_done"] == 3  # read through the writer's WAL


@pytest.mark.parametrize("failures_written,expected", [(1_600_000_000, 1_700_000_100), (1_800_000_000, 1_800_000_000)])
def test_last_run_is_the_later_of_the_ledgers_last_change_and_the_failures_file(tmp_path, failures_written,
                                                                                 expected):
    out = make_parquet_output(tmp_path)  # the ledger's last change: 1_700_000_100
    os.utime(tmp_path / "docs [draft].failures.jsonl", (failures_written, failures_written))
    report = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert report["last_run"] == datetime.fromtimestamp(expected).astimezone().isoformat(timespec="seconds")


def test_inspect_reads_an_output_whose_ledger_an_earlier_gpucli_kept_inside_it_and_moves_nothing(tmp_path):
    out = make_parquet_output(tmp_path, state=tmp_path / "docs [draft].parquet" / "_gpucli")
    before = files_under(tmp_path)
    result = runner.invoke(app, ["inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["rows"], report["parts"], report["inputs_done"], report["inputs_failed"]) == (3, 1, 2, 1)
    assert files_under(tmp_path) == before and not state_of(out).exists()  # a run moves it, inspect does not


def test_inspect_of_a_parquet_output_whose_inputs_all_failed_uses_the_ledger_metadata(tmp_path):
    out = tmp_path / "empty.parquet"
    out.mkdir()
    make_ledger(state_of(out), {}, failed=("x.txt",), wal=False)
    result = runner.invoke(app, ["inspect", str(out), "--json"])
    report = json.loads(result.stdout)
    assert (report["model"], report["rows"], report["parts"], report["inputs_failed"]) == ("bge-small", 0, 0, 1)


@pytest.mark.parametrize("make,needle", [
    (lambda p: str(p / "missing.parquet"), "no such file"),
    (lambda p: str(p), "not a gpucli output"),
    (lambda p: (p / "plain.jsonl").write_text("{}\n") and str(p / "plain.jsonl"), "not a gpucli output"),
    (lambda p: "qdrant://localhost:6333/docs", "not a gpucli output (no ledger at"),
])
def test_inspect_of_something_else_exits_2_with_one_line(tmp_path, make, needle, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # no Qdrant server ledger of this user
    result = runner.invoke(app, ["inspect", make(tmp_path)])
    assert result.exit_code == 2
    assert needle in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_inspect_of_a_damaged_ledger_exits_2(tmp_path):
    out = tmp_path / "x.parquet"
    out.mkdir()
    state_of(out).mkdir()
    (state_of(out) / "ledger.sqlite").write_bytes(b"not sqlite at all" * 100)
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 2 and "cannot read this ledger" in result.stderr


@pytest.mark.slow
def test_inspect_describes_a_real_run_with_a_failure(tree, tmp_path):
    from tests.helpers import run_fake

    root = tree({"ok.txt": "one\ntwo\n", "more.txt": "three\n", "bad.txt": b"\xff\xfe\xfa not utf8"})
    for out in (tmp_path / "out.parquet", tmp_path / "out.jsonl"):
        summary = run_fake([root], out)
        report = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
        assert report["task"] == "fake" and report["rows"] == summary.rows == 3
        assert (report["inputs_done"], report["inputs_failed"], report["failures"]) == (2, 1, 1)


def test_inspect_reads_an_embedded_qdrant_output_from_its_ledger(tmp_path):
    from gpucli.output.sinks import open_sink

    target = f"qdrant:{tmp_path / 'qdrant_data'}/docs"
    make_ledger(open_sink(target).state_dir, {"a.txt": 2, "b.txt": 3})
    result = runner.invoke(app, ["inspect", target, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["format"], report["model"], report["dims"], report["rows"], report["inputs_done"]) == (
        "qdrant", "bge-small", 4, 5, 2)
    assert "ask the server" not in result.output


def test_inspect_shows_each_tasks_own_fields(tmp_path):
    meta = {"gpucli.model": "efficientnet-lite0", "gpucli.task": "classify", "gpucli.num_classes": "1000",
            "gpucli.top_k": "5", "gpucli.backend": "torch", "gpucli.version": "0.1.0"}
    out = tmp_path / "labels.parquet"
    out.mkdir()
    table = pa.table({"path": ["a.jpg"], "label": ["tabby"]})
    pq.write_table(table.replace_schema_metadata(meta), out / "part-00000.parquet")
    make_ledger(state_of(out), {"a.jpg": 1}, settings={"task": "classify", "model": "efficientnet-lite0",
                                                         "info": meta})
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0, result.output
    names = [line.split(":")[0].strip() for line in result.stdout.splitlines()]
    assert "top k" in names and "num classes" in names and "backend" in names
    assert "dims" not in names and "pooling" not in names and "prompt" not in names


def test_inspect_names_the_gpucli_that_made_a_json_lines_or_qdrant_output_from_its_ledger(tree, tmp_path):
    """Only a Parquet part carries `gpucli.version`; the ledger keeps it for the others (was `gpucli: ?`)."""
    from gpucli import __version__
    from gpucli.output.sinks import open_sink
    from tests.helpers import run_fake

    out = tmp_path / "out.jsonl"
    run_fake([tree({"ok.txt": "one\n"})], out)
    assert json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)["gpucli_version"] == __version__
    target = f"qdrant:{tmp_path / 'qdrant_data'}/docs"
    info = {k: v for k, v in META.items() if k != "gpucli.version"}  # as output_settings stores it
    ledger = make_ledger(open_sink(target).state_dir, {"a.txt": 2}, settings={**SETTINGS, "info": info})
    with sqlite3.connect(ledger) as db:
        db.execute("insert into meta values ('gpucli_version', '0.1.7')")
    result = runner.invoke(app, ["inspect", target])
    assert result.exit_code == 0 and "gpucli:         0.1.7" in result.stdout, result.stdout


def _lock_naming(out: Path, pid: int) -> None:
    import socket

    (state_of(out) / "lock").write_text(f"pid {pid} on {socket.gethostname()}, started 2026-12-06 10:00:00\n")


def test_inspect_says_a_run_is_writing_now_when_the_lock_names_a_live_process(tmp_path):
    out = make_parquet_output(tmp_path)
    _lock_naming(out, os.getpid())
    report = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert (report["last_run_state"], report["last_run_pid"]) == ("running", os.getpid())
    assert "running now" in runner.invoke(app, ["inspect", str(out)]).stdout


def test_inspect_says_the_last_run_did_not_finish_when_it_was_killed(tree, tmp_path):
    """A run empties the lock file when it ends (Ctrl-C too); a kill -9 leaves its name there."""
    import textwrap

    from tests.helpers import run_fake, sigkill_after_parts

    root = tree({f"f{i:03d}.txt": f"item {i}\n" for i in range(200)})
    out = tmp_path / "out.parquet"
    assert run_fake([root], out, {"sleep_ms": 30}, limit=1).exit_code == 0
    ended = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert ended["last_run_state"] == "ended" and ended["last_run_pid"] is None
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from gpucli.core.config import RunConfig
        from gpucli.engines.local.pipeline import run
        run(RunConfig(task="tests.fake_task:FakeTask", paths=({str(root)!r},), out={str(out)!r}, devices="cpu",
                      progress="off", task_options={{"sleep_ms": 30}}, batch_size=4, part_rows=12, flush_s=0.2))
    """)
    sigkill_after_parts(script, out, parts=3)
    result = runner.invoke(app, ["inspect", str(out)])
    assert result.exit_code == 0 and "did not finish" in result.stdout and "rerun" in result.stdout, result.stdout
    assert json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)["last_run_state"] == "did not finish"
    assert run_fake([root], out, {"sleep_ms": 30}).exit_code == 0
    assert json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)["last_run_state"] == "ended"
