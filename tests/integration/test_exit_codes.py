"""What a cron user reads from the exit code (issue 14, part 4): known failures, empty roots,
and the summary's run fields."""

from __future__ import annotations

import pytest

from gpucli.core.errors import EXIT_FAILED, EXIT_OK, EXIT_RUN_FAILED
from tests.helpers import run_fake

pytestmark = pytest.mark.slow


def test_a_known_bad_file_fails_the_run_once_then_only_with_fail_on_any(tree, tmp_path):
    root = tree({"good.txt": "fine\n", "bad.txt": b"\xff\xfe\xfa not utf-8 \xff"})
    out = tmp_path / "out.parquet"
    first = run_fake([root], out)
    assert first.exit_code == EXIT_FAILED and first.failed == 1 and first.failed_known == 0
    again = run_fake([root], out)
    assert again.exit_code == EXIT_OK, "the same unchanged bad file is not a new problem"
    assert again.failed == 1 and again.failed_known == 1
    assert run_fake([root], out, fail_on="any").exit_code == EXIT_FAILED
    (root / "bad.txt").write_bytes(b"\xff changed and still bad \xfe")
    changed = run_fake([root], out)
    assert changed.exit_code == EXIT_FAILED and changed.failed_known == 0, "changed and failed again is new"
    assert run_fake([root], out, fail_on="never").exit_code == EXIT_OK


def test_a_root_that_holds_nothing_exits_3_unless_allowed(tree, tmp_path):
    empty = tmp_path / "mnt"
    empty.mkdir()
    assert run_fake([empty], tmp_path / "a.parquet").exit_code == EXIT_RUN_FAILED
    assert run_fake([empty], tmp_path / "b.parquet", allow_empty=True).exit_code == EXIT_OK


def test_an_unchanged_rerun_is_not_empty_and_the_summary_says_when_and_where(tree, tmp_path):
    root = tree({"a.txt": "one\n"})
    out = tmp_path / "out.parquet"
    first = run_fake([root], out)
    rerun = run_fake([root], out)
    assert rerun.exit_code == EXIT_OK and rerun.unchanged == 1
    data = first.to_dict()
    assert data["version"] and data["started_at"] <= data["finished_at"] and data["devices"] == ["cpu"]
    assert data["error"] == "", "only a run that failed has an error"


def _no_input_line(capsys) -> str:
    return next(line for line in capsys.readouterr().err.splitlines() if "found no input" in line)


@pytest.mark.parametrize("out_name", ["out.parquet", "out.jsonl"])
def test_a_tree_with_files_but_none_the_task_reads_says_so_and_leaves_nothing_behind(tree, tmp_path, capsys,
                                                                                    out_name):
    """`transcribe docs/` found 39 files, none audio: the line says how many it saw and what the
    task reads, and no empty output is left to be mistaken for a result."""
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from tests.fake_task import FAKE

    root = tree({"a.md": "one\n", "b.pdf": "two\n", "sub/c.csv": "x\n"})
    out = tmp_path / out_name
    config = RunConfig(task=FAKE, paths=(str(root),), out=str(out), progress="plain", devices="cpu")
    summary = run(config)
    assert summary.exit_code == EXIT_RUN_FAILED
    line = _no_input_line(capsys)
    assert "the walk saw 3 file(s)" in line and "files ending .txt" in line and "--include" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"], "no output, state or failures file"


def test_an_empty_root_says_it_may_be_unmounted_and_leaves_nothing_behind(tmp_path, capsys):
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from tests.fake_task import FAKE

    empty = tmp_path / "mnt"
    empty.mkdir()
    config = RunConfig(task=FAKE, paths=(str(empty),), out=str(tmp_path / "out.parquet"), progress="plain",
                       devices="cpu")
    summary = run(config)
    assert summary.exit_code == EXIT_RUN_FAILED
    line = _no_input_line(capsys)
    assert "unmounted" in line
    assert summary.to_dict()["error"] and line.endswith(summary.error), "--json's summary carries the line"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mnt"]


def test_an_existing_output_keeps_everything_when_a_rerun_finds_nothing(tree, tmp_path):
    root = tree({"a.txt": "one\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    (root / "a.txt").unlink()
    before = sorted(p.name for p in out.iterdir())
    assert run_fake([root], out).exit_code == EXIT_RUN_FAILED
    assert sorted(p.name for p in out.iterdir()) == before and (tmp_path / "out.parquet.gpucli").is_dir()


def test_no_input_through_include_names_the_globs_that_matched_nothing(tree, tmp_path, capsys):
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from tests.fake_task import FAKE

    root = tree({"a.txt": "one\n"})
    config = RunConfig(task=FAKE, paths=(str(root),), out=str(tmp_path / "out.parquet"), progress="plain",
                       devices="cpu", include=("*.md",))
    assert run(config).exit_code == EXIT_RUN_FAILED
    line = _no_input_line(capsys)
    assert "saw 1 file(s), none matching --include '*.md'" in line, line


def test_with_json_every_early_end_still_prints_one_json_object_with_its_code_and_error(tree, tmp_path):
    """A service parsing stdout gets an answer on every end, not silence: a usage error (exit 2)
    and a lock held by another run (75) end before any summary, and print one anyway."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from gpucli.app.cli import app
    from gpucli.core.errors import EXIT_LOCKED, EXIT_USAGE
    from gpucli.output.lock import RunLock

    root = tree({"a.txt": "alpha\n"})
    wrong = CliRunner().invoke(app, ["embed", str(root), "--out", "qdrant:http://127.0.0.1:6333/docs", "--json"])
    assert wrong.exit_code == EXIT_USAGE
    (line,) = wrong.stdout.splitlines()
    ended = json.loads(line)
    assert ended["exit_code"] == EXIT_USAGE and "qdrant://HOST:PORT/COLLECTION" in ended["error"]
    assert ended["task"] == "embed" and ended["succeeded"] == 0
    assert not (Path.cwd() / "http:").exists(), "a URL after qdrant: is not a local directory"

    out = tmp_path / "out.parquet"
    holder = RunLock(Path(f"{out}.gpucli"))
    holder.acquire(str(out))
    try:
        held = CliRunner().invoke(app, ["embed", str(root), "--out", str(out), "--json"])
    finally:
        holder.release()
    assert held.exit_code == EXIT_LOCKED
    assert json.loads(held.stdout.splitlines()[-1])["exit_code"] == EXIT_LOCKED
    quiet = CliRunner().invoke(app, ["embed", str(root), "--out", "qdrant:http://h/docs"])
    assert quiet.exit_code == EXIT_USAGE and quiet.stdout == "", "without --json, stdout stays empty"
