"""The output side's operating-system errors and a damaged ledger (issue 33, cases 3 and 4):
one line naming the path and the cause, exit 3 mid-run (2 before any work), the --json summary
still printed, and a rerun once the cause is gone that leaves every input exactly once."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pytest

from tests.fake_task import FAKE
from tests.helpers import expected_rows, jsonl_rows, parquet_rows

pytestmark = pytest.mark.slow


def invoke_fake(monkeypatch, args: list[str], **settings):
    """`gpucli embed ARGS` through the real CLI, with the fake task (and these RunConfig settings)."""
    import dataclasses

    from typer.testing import CliRunner

    import gpucli.core.config

    build = gpucli.core.config.build_config
    monkeypatch.setattr("gpucli.app.cli.build_config", lambda *a, **k: dataclasses.replace(
        build(*a, **k), task=FAKE, task_options={}, devices="cpu", progress="off", **settings))
    from gpucli.app.cli import app

    return CliRunner().invoke(app, ["embed", *args])


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only), unmounted after the test."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def random_tree(tree, files: int = 60, lines: int = 10) -> Path:
    """~1.2 MB of text that does not compress (random letters)."""
    rng = random.Random(7)
    return tree({f"d{i % 3}/f{i:03d}.txt": "\n".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz ")
                                                            for _ in range(2000)) for _ in range(lines)) + "\n"
                 for i in range(files)})


def fill(disk: Path, leave: int) -> Path:
    """A file that takes all but `leave` bytes of the disk."""
    filler = disk / "filler"
    info = os.statvfs(disk)
    filler.write_bytes(b"\0" * max(0, info.f_bavail * info.f_frsize - leave))
    return filler


def summary_of(result) -> dict:
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0])


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("gpucli: error:")]


@pytest.mark.parametrize("name", ["out.parquet", "rows.jsonl"])
def test_a_disk_that_fills_mid_run_is_one_line_naming_the_path_exit_3_and_the_summary(
        tree, small_disk, monkeypatch, name):
    root = random_tree(tree)
    out = small_disk / name
    filler = fill(small_disk, leave=600_000)  # room for the ledger and a few parts, not for all
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"], part_rows=40)
    assert result.exit_code == 3, result.output
    errors = error_lines(result)
    assert len(errors) == 1 and "internal error" not in result.stderr and "Traceback" not in result.output
    assert str(small_disk) in errors[0] and "No space left on device" in errors[0], errors
    summary = summary_of(result)
    assert summary["exit_code"] == 3 and summary["succeeded"] < 60
    assert summary["inputs"] == summary["succeeded"] + summary["failed"] + summary["skipped"] + summary["unfinished"]

    filler.unlink()  # space again: the rerun does the rest, every input exactly once
    again = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert summary_of(again)["succeeded"] == 60 - summary["succeeded"]
    rows = jsonl_rows(out) if name.endswith(".jsonl") else parquet_rows(out)
    assert rows == expected_rows(root)


def test_a_read_only_state_directory_before_any_work_is_exit_2_naming_it(tree, small_disk, monkeypatch):
    root = tree({"a.txt": "alpha\n"})
    out = small_disk / "out.parquet"
    assert invoke_fake(monkeypatch, [str(root), "--out", str(out)]).exit_code == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    (root / "b.txt").write_text("beta\n")
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"])
    assert result.exit_code == 2, result.output
    errors = error_lines(result)
    assert len(errors) == 1 and "Read-only file system" in errors[0] and str(out) in errors[0], errors
    assert "internal error" not in result.stderr


def test_a_failures_file_that_cannot_be_written_mid_run_stops_the_run_naming_it(tree, tmp_path, monkeypatch):
    from gpucli.output import output

    root = tree({"ok.txt": "fine\n", "bad.txt": b"\xff\xfe not text"})
    out = tmp_path / "out.parquet"

    def full(self, failure):
        with self._named():
            raise OSError(122, "Disk quota exceeded")

    monkeypatch.setattr(output.FailureLog, "add", full)
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"])
    assert result.exit_code == 3, result.output
    errors = error_lines(result)
    assert len(errors) == 1 and "out.failures.jsonl: Disk quota exceeded [EDQUOT]" in errors[0], errors
    assert summary_of(result)["exit_code"] == 3


# --- a damaged ledger ----------------------------------------------------------------------------
def damage(out: Path) -> Path:
    ledger = Path(f"{out}.gpucli") / "ledger.sqlite"
    size = ledger.stat().st_size
    with open(ledger, "r+b") as f:
        f.truncate(size // 2)
    return ledger


@pytest.fixture
def damaged(tree, tmp_path, monkeypatch):
    """An output of 200 inputs whose ledger was then truncated to half."""
    root = tree({f"f{i:03d}.txt": f"line {i}\n" * 3 for i in range(200)})
    out = tmp_path / "out.parquet"
    assert invoke_fake(monkeypatch, [str(root), "--out", str(out)]).exit_code == 0
    return root, out, damage(out)


def test_an_incremental_run_on_a_damaged_ledger_names_it_and_says_what_to_do(damaged, monkeypatch):
    root, out, ledger = damaged
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"])
    assert result.exit_code == 2, result.output
    errors = error_lines(result)
    assert len(errors) == 1 and str(ledger) in errors[0] and "damaged" in errors[0] and "--full" in errors[0]
    assert "internal error" not in result.stderr


def test_full_rebuilds_a_damaged_ledger_and_the_output(damaged, monkeypatch):
    root, out, ledger = damaged
    rebuilt = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--full", "--json"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert summary_of(rebuilt)["succeeded"] == 200
    assert ledger.with_name("ledger.sqlite.damaged").exists(), "the damaged file is set aside, not deleted"
    assert parquet_rows(out) == expected_rows(root)
    again = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"])
    assert again.exit_code == 0 and summary_of(again)["unchanged"] == 200


def test_a_dry_run_on_a_damaged_ledger_names_it(damaged, monkeypatch):
    root, out, ledger = damaged
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--dry-run"])
    assert result.exit_code in (2, 3) and "internal error" not in result.stderr, result.output
    assert str(ledger) in result.stderr


@pytest.mark.parametrize("code,cause", [(5, "Input/output error [EIO]"), (13, "Permission denied [EACCES]")])
def test_an_os_error_of_a_part_names_the_output_and_the_cause(tree, tmp_path, monkeypatch, code, cause):
    from gpucli.output.sinks.parquet import ParquetSink

    root = tree({f"f{i:02d}.txt": f"line {i}\n" for i in range(40)})
    out = tmp_path / "out.parquet"
    real = ParquetSink.write

    def fails(self, table):  # the first part (a loaded writer may merge all rows into it)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(ParquetSink, "write", fails)
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"], part_rows=10, batch_size=10)
    assert result.exit_code == 3, result.output
    errors = error_lines(result)
    assert len(errors) == 1 and f"{out}: {cause}" in errors[0], errors
    assert summary_of(result)["exit_code"] == 3
    monkeypatch.setattr(ParquetSink, "write", real)
    assert invoke_fake(monkeypatch, [str(root), "--out", str(out)]).exit_code == 0
    assert parquet_rows(out) == expected_rows(root)


def test_a_ledger_io_error_mid_run_names_the_ledger(tree, tmp_path, monkeypatch):
    import sqlite3

    from gpucli.output.ledger import Ledger

    root = tree({f"f{i:02d}.txt": f"line {i}\n" for i in range(40)})
    out = tmp_path / "out.parquet"

    def io_error(self, *args):
        with self._lock:
            exc = sqlite3.OperationalError("disk I/O error")
            exc.sqlite_errorname = "SQLITE_IOERR_WRITE"
            raise exc

    monkeypatch.setattr(Ledger, "mark_done", io_error)
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--json"], part_rows=10, batch_size=10)
    assert result.exit_code == 3, result.output
    errors = error_lines(result)
    ledger = Path(f"{out}.gpucli") / "ledger.sqlite"
    assert len(errors) == 1 and f"{ledger}: disk I/O error [SQLITE_IOERR_WRITE]" in errors[0], errors
    assert summary_of(result)["exit_code"] == 3
