"""Compaction of a Parquet output (issue 47): small parts folded at the end of a run past the
threshold and by `gpucli compact`, exactly once under kills at every step, and never half-visible
to a reader listing the directory meanwhile (gpucli/output/sinks/parquet_compact.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.output.compaction import AUTO_MIN_SMALL
from gpucli.output.compactor import compact_now
from gpucli.output.ledger import Ledger
from gpucli.output.output import Output
from tests.fake_task import FAKE
from tests.helpers import expected_rows, parquet_rows, run_fake

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def one_file_runs(root: Path, out: Path, count: int, start: int = 0) -> None:
    """`count` runs, each adding one file: one small part each (the cron case)."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + count):
        (root / f"f{i:04d}.txt").write_text(f"line {i}\nmore {i}\n")
        assert run_fake([root], out).exit_code == 0


def parts_of(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("part-*.parquet"))


def ledger_locations(out: Path) -> set[str]:
    ledger = Ledger(Path(f"{out}.gpucli"))
    try:
        return ledger.locations()
    finally:
        ledger.close()


def assert_exact(out: Path, root: Path) -> None:
    """Every (path, chunk) once, the ledger's parts exactly the directory's, nothing staged left."""
    assert parquet_rows(out) == expected_rows(root)
    assert ledger_locations(out) == set(parts_of(out))
    assert not any(Path(f"{out}.gpucli", name).exists() for name in ("compacting", "compacted-away"))


def test_a_run_folds_the_small_parts_once_the_output_holds_the_threshold(tree, tmp_path):
    root, out = tree({}), tmp_path / "out.parquet"
    one_file_runs(root, out, AUTO_MIN_SMALL - 1)
    assert len(parts_of(out)) == AUTO_MIN_SMALL - 1  # below the threshold: left
    one_file_runs(root, out, 1, start=AUTO_MIN_SMALL - 1)
    assert len(parts_of(out)) == 1
    assert_exact(out, root)
    one_file_runs(root, out, 2, start=AUTO_MIN_SMALL)  # later runs add parts beside it, with higher numbers
    assert len(parts_of(out)) == 3 and parts_of(out)[0] < parts_of(out)[1]
    assert_exact(out, root)


def test_gpucli_compact_folds_the_parts_and_reruns_changes_and_prune_work_after_it(tree, tmp_path):
    root, out = tree({}), tmp_path / "out.parquet"
    one_file_runs(root, out, 13)
    result = runner.invoke(app, ["compact", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["parts_before"], report["parts_after"]) == (13, 1)
    assert len(parts_of(out)) == 1
    assert_exact(out, root)
    unchanged = run_fake([root], out)
    assert (unchanged.exit_code, unchanged.unchanged, unchanged.succeeded) == (0, 13, 0)
    (root / "f0003.txt").write_text("changed\n")  # its old rows are in the merged part
    (root / "f0007.txt").unlink()
    assert run_fake([root], out, prune=True).exit_code == 0
    assert_exact(out, root)
    again = runner.invoke(app, ["compact", str(out)])
    assert again.exit_code == 0 and "folded into 1" in again.stderr
    assert_exact(out, root)


def test_gpucli_compact_of_other_outputs_says_there_is_nothing_to_fold(tree, tmp_path):
    out = tmp_path / "rows.jsonl"
    run_fake([tree({"a.txt": "one\n"})], out)
    result = runner.invoke(app, ["compact", str(out)])
    assert result.exit_code == 0 and "nothing to compact" in result.stderr
    missing = runner.invoke(app, ["compact", str(tmp_path / "none.parquet")])
    assert missing.exit_code == 2 and "not a gpucli output" in missing.stderr
    assert not (tmp_path / "none.parquet").exists() and not (tmp_path / "none.parquet.gpucli").exists()


def test_gpucli_compact_exits_75_while_a_run_holds_the_output(tree, tmp_path):
    root, out = tree({}), tmp_path / "out.parquet"
    one_file_runs(root, out, 3)
    holder = Output(str(out))
    holder.lock.acquire(str(out))
    try:
        result = runner.invoke(app, ["compact", str(out)])
    finally:
        holder.lock.release()
    assert result.exit_code == 75, result.output
    assert len(parts_of(out)) == 3


CRASHING_COMPACTION = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    import gpucli.core.swap as swap
    import gpucli.output.compaction as compaction
    import gpucli.output.sinks.parquet as parquet
    import gpucli.output.sinks.parquet_compact as staging
    from gpucli.output.ledger import Ledger
    from gpucli.output.compactor import compact_now
    from gpucli.output.output import Output

    def die(*_, **__):
        os._exit(9)

    def nth_call(module, name, nth, after=False):
        original, calls = getattr(module, name), []
        def hooked(*args, **kwargs):
            calls.append(1)
            if len(calls) == nth and not after:
                die()
            result = original(*args, **kwargs)
            if len(calls) == nth and after:
                die()
            return result
        setattr(module, name, hooked)

    point = {point!r}
    compaction.SMALL_BYTES = {small}     # the first part (many files) is not small: it is linked, not rewritten
    if point == "writing":           # a merged part half written into the staging directory
        nth_call(parquet, "_write_synced", 1)
    elif point == "linking":         # some parts linked, others not
        nth_call(staging.os, "link", 1)
    elif point == "staged":          # staged whole, the ledger not told
        nth_call(Ledger, "set_meta", 1)
    elif point == "recorded":        # the ledger renamed the locations, the swap not made
        nth_call(staging, "exchange", 1)
    elif point == "swapped":         # swapped in, the old content and the mark not yet cleared
        nth_call(staging, "exchange", 1, after=True)
    elif point == "halfway":         # the two-rename fallback cut between its renames: no dataset directory
        swap._renameat2_exchange = lambda a, b: False
        nth_call(swap.os, "rename", 2)
    compact_now(Output({out!r}))
""")


@pytest.mark.parametrize("point", ["writing", "linking", "staged", "recorded", "swapped", "halfway"])
def test_a_compaction_killed_at_any_step_leaves_every_row_once_and_the_next_open_completes_it(tree, tmp_path, point):
    root, out = tree({f"many/g{i:03d}.txt": f"one of many {i}\n" for i in range(150)}), tmp_path / "out.parquet"
    assert run_fake([root], out).exit_code == 0
    one_file_runs(root, out, 6)
    first, *others = sorted(out.glob("part-*.parquet"))
    assert first.stat().st_size > max(p.stat().st_size for p in others)
    script = CRASHING_COMPACTION.format(root=str(ROOT), out=str(out), point=point, small=first.stat().st_size)
    assert subprocess.run([sys.executable, "-c", script], timeout=120).returncode == 9
    if point != "halfway":  # every moment but the fallback's own instant: readable as it is
        assert parquet_rows(out) == expected_rows(root)
    one_file_runs(root, out, 1, start=6)  # the next run's open repairs (or completes) it
    assert_exact(out, root)
    assert runner.invoke(app, ["compact", str(out)]).exit_code == 0
    assert len(parts_of(out)) == 1  # here every part is small: all folded
    assert_exact(out, root)


def test_a_reader_listing_the_directory_while_it_is_compacted_never_sees_a_row_twice_or_missing(tree, tmp_path):
    """pyarrow reads the dataset in a loop while parts are added and folded again and again. A read
    that lists the old directory and opens a part after the swap fails loudly (FileNotFoundError):
    retried; every read that succeeds holds exactly the rows of a state the output was in."""
    root, out = tree({}), tmp_path / "out.parquet"
    one_file_runs(root, out, 4)
    states: list[Counter] = [parquet_rows(out)]
    seen: list[Counter] = []
    errors: list[str] = []
    stop = threading.Event()

    def read_forever() -> None:
        while not stop.is_set():
            try:
                table = ds.dataset(str(out), format="parquet").to_table(columns=["path", "chunk", "text"])
            except (FileNotFoundError, OSError) as exc:
                errors.append(type(exc).__name__)
                continue
            seen.append(Counter(zip(*(table.column(c).to_pylist() for c in ("path", "chunk", "text")))))

    reader = threading.Thread(target=read_forever)
    reader.start()
    try:
        for round_ in range(8):
            for i in range(3):  # each run is a state a reader may see
                one_file_runs(root, out, 1, start=4 + 3 * round_ + i)
                states.append(parquet_rows(out))
            assert compact_now(Output(str(out))).parts_after == 1
    finally:
        stop.set()
        reader.join(30)
    assert len(seen) > 20, (len(seen), errors)
    odd = [read for read in seen if read not in states]
    assert not odd, ("a read saw a row twice or missed one", [dict(read - states[-1]) or sorted(states[-1] - read)
                                                              for read in odd][:3])
    assert_exact(out, root)


def test_the_end_of_a_run_says_it_compacted_and_inspect_shows_the_parts(tree, tmp_path, capsys):
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run

    root, out = tree({}), tmp_path / "out.parquet"
    one_file_runs(root, out, 12)
    shown = runner.invoke(app, ["inspect", str(out)])
    assert "12 part(s)" in shown.stdout and "12 small" in shown.stdout and "gpucli compact" in shown.stdout
    report = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert report["part_bytes"]["small"] == 12 and "gpucli compact" in report["advice"]
    one_file_runs(root, out, AUTO_MIN_SMALL - 13, start=12)
    (root / "last.txt").write_text("last\n")
    capsys.readouterr()
    assert run(RunConfig(task=FAKE, paths=(str(root),), out=str(out), progress="plain", devices="cpu")).exit_code == 0
    assert f"compacted {out}: {AUTO_MIN_SMALL} parts into 1" in capsys.readouterr().err
    after = json.loads(runner.invoke(app, ["inspect", str(out), "--json"]).stdout)
    assert after["parts"] == 1 and after["advice"] == ""


def test_a_full_disk_while_staging_leaves_the_output_as_it_was_with_a_note(tree, tmp_path, monkeypatch):
    import errno

    import gpucli.output.sinks.parquet as parquet

    root, out = tree({}), tmp_path / "out.parquet"
    one_file_runs(root, out, 5)
    before = parts_of(out)

    def full(table, path):
        Path(path).write_bytes(b"PAR1 half")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(parquet, "_write_synced", full)
    output = Output(str(out))
    done = compact_now(output)
    assert (done.parts_before, done.parts_after) == (5, 5) and parts_of(out) == before
    assert any("was not compacted" in note and "No space left" in note for note in output.closing_notes)
    assert_exact(out, root)
