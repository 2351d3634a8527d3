"""`--dry-run` says per input what a run would do, loading no model and writing nothing;
`--limit N` takes at most N inputs and prunes nothing (issue 14, part 5)."""

from __future__ import annotations

import json
import os

import pytest

from gpucli.core.config import RunConfig
from gpucli.engines.dryrun import dry_run
from tests.fake_task import FAKE
from tests.helpers import read_rows, run_fake


def actions(capsys, root, out, **kw) -> dict[str, str]:
    summary = dry_run(RunConfig(task=FAKE, paths=(str(root),), out=str(out), progress="off", **kw))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert summary.exit_code == 0 and summary.dry_run
    return {line["path"]: line["action"] for line in lines}


def test_a_dry_run_on_a_new_output_writes_nothing_and_would_run_everything(tree, tmp_path, capsys):
    root = tree({"a.txt": "one\n", "b.txt": "two\n"})
    out = tmp_path / "out.parquet"
    assert actions(capsys, root, out) == {"a.txt": "run", "b.txt": "run"}
    assert not out.exists() and not (tmp_path / "out.failures.jsonl").exists()


@pytest.mark.slow
def test_a_dry_run_tells_unchanged_changed_and_pruned_inputs_apart(tree, tmp_path, capsys):
    root = tree({"a.txt": "one\n", "b.txt": "two\n", "c.txt": "three\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    (root / "b.txt").write_text("two, changed\n")
    os.utime(root / "b.txt", ns=(1, 1))
    (root / "c.txt").unlink()
    (root / "d.txt").write_text("new\n")
    parts_before = sorted(p.name for p in out.iterdir())
    assert actions(capsys, root, out, prune=True) == {"a.txt": "unchanged", "b.txt": "run", "c.txt": "prune",
                                                      "d.txt": "run"}
    assert sorted(p.name for p in out.iterdir()) == parts_before, "nothing written"


@pytest.mark.slow
def test_limit_takes_at_most_n_inputs_and_prunes_nothing(tree, tmp_path):
    root = tree({f"f{i}.txt": f"line {i}\n" for i in range(6)})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    summary = run_fake([root], out, limit=2, prune=True, incremental=True)
    assert summary.inputs == 2 and summary.pruned == 0
    assert len({r["path"] for r in read_rows(out)}) == 6


def _snapshot(directory) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_dry_run_leaves_the_output_directory_byte_identical(tree, tmp_path, capsys):
    """No `ledger.sqlite-wal` or `-shm` appears: the ledger is read without being opened for locking."""
    root = tree({"a.txt": "one\n", "b.txt": "two\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    (root / "c.txt").write_text("new\n")
    before = _snapshot(out)
    assert actions(capsys, root, out, prune=True) == {"a.txt": "unchanged", "b.txt": "unchanged", "c.txt": "run"}
    assert _snapshot(out) == before


@pytest.mark.slow
def test_a_dry_run_reads_an_output_an_earlier_gpucli_made_with_its_state_inside_and_moves_nothing(tree, tmp_path,
                                                                                                  capsys):
    """Before the state moved beside the dataset (`OUT.parquet/_gpucli/`): the dry run reads the
    ledger where it is and leaves it there; the next real run moves it."""
    root = tree({"a.txt": "one\n", "b.txt": "two\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    beside, inside = tmp_path / "out.parquet.gpucli", out / "_gpucli"
    os.rename(beside, inside)  # the layout of gpucli before the move
    assert actions(capsys, root, out) == {"a.txt": "unchanged", "b.txt": "unchanged"}
    assert inside.is_dir() and not beside.exists(), "a dry run moves nothing"
