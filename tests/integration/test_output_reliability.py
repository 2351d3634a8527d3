"""The output side under crashes and odd targets: nothing lost, nothing twice, nothing foreign
deleted, and a clear one-line error for an --out the system refuses (issue 13, items 2-5, 13, 14)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.core.errors import UsageError
from gpucli.output.fingerprint import check_settings, fingerprint, legacy_match
from gpucli.output.ledger import Ledger
from gpucli.output.sinks.jsonl import JsonlSink
from gpucli.output.sinks.parquet import ParquetSink
from tests.fake_task import FAKE
from tests.helpers import expected_rows, jsonl_rows, parquet_rows, run_fake

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


# --- helpers -------------------------------------------------------------------------------------






CRASHING_RUN = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    from gpucli.core.config import RunConfig
    from gpucli.output.output import Output
    from gpucli.engines.local.pipeline import run
    from gpucli.output.sinks.jsonl import JsonlSink
    from gpucli.output.ledger import Ledger

    def die(*_, **__):
        os._exit(9)

    def on_call(cls, name, nth, before=None):
        original, calls = getattr(cls, name, None), []
        def hooked(self, *args, **kwargs):
            calls.append(1)
            if len(calls) == nth and (before is None or before(self, *args, **kwargs)):
                die()
            return original(self, *args, **kwargs)
        if original is not None:
            setattr(cls, name, hooked)

    def torn(self, table):
        self._file.write(b'{{"path": "torn'); self._file.flush(); os._exit(9)

    point = {point!r}
    if point == "commit":          # rows fsynced, the ledger not yet told
        on_call(Ledger, "mark_done", {nth})
    elif point == "torn":          # killed in the middle of a line
        on_call(JsonlSink, "write", {nth}, lambda self, table: torn(self, table))
    elif point == "rewrite":       # a rewrite prepared, the ledger not yet told
        on_call(Ledger, "rename_locations", 1, lambda self, renamed, stale=None, publish=None: publish is not None)
    elif point == "publish":       # the ledger told, the rewrite not yet in place
        on_call(JsonlSink, "publish", 1)
    elif point == "close":         # the run ended before removing superseded and pruned rows
        on_call(Output, "close", 1)
    run(RunConfig(task={task!r}, paths=({src!r},), out={out!r}, devices="cpu", progress="off", prune=True,
                  batch_size=2, part_rows=2, flush_s=0.05))
""")


def crashing_run(src: Path, out: Path, point: str, nth: int = 2) -> int:
    """A run with --prune killed (os._exit) at `point`, the nth time it is reached."""
    script = CRASHING_RUN.format(root=str(ROOT), task=FAKE, src=str(src), out=str(out), point=point, nth=nth)
    return subprocess.run([sys.executable, "-c", script], timeout=120).returncode


def change_tree(root: Path) -> None:
    """One of each: a changed file, a deleted one, new ones (several writes)."""
    (root / "f1.txt").write_text("changed one\n")
    (root / "f2.txt").unlink()
    for i in range(6):
        (root / f"new{i}.txt").write_text(f"fresh {i}\nsecond fresh {i}\n")


# --- item 2: JSON lines exact after a kill -----------------------------------------------------------
@pytest.mark.parametrize("point", ["commit", "torn", "rewrite", "publish", "close"])
def test_jsonl_killed_at_any_step_then_rerun_holds_every_row_once_and_parses(tree, tmp_path, point):
    root = tree({f"f{i}.txt": f"line {i}\nmore {i}\n" for i in range(5)})
    out = tmp_path / "rows.jsonl"
    run_fake([root], out, batch_size=2, part_rows=2, flush_s=0.05)
    change_tree(root)
    # the first time: results that come back together make one part, so a run may write a single one
    assert crashing_run(root, out, point, nth=1) == 9, "the run was killed at that point"
    summary = run_fake([root], out, prune=True)
    assert summary.exit_code == 0
    assert jsonl_rows(out) == expected_rows(root)


def test_jsonl_pruned_rows_go_even_when_the_pruning_run_ended_uncleanly(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "rows.jsonl"
    run_fake([root], out)
    (root / "b.txt").unlink()
    assert crashing_run(root, out, "close") == 9
    run_fake([root], out)  # without --prune: the ledger's stale entries alone say what goes
    assert jsonl_rows(out) == expected_rows(root)


def test_jsonl_a_changed_file_written_last_loses_its_old_rows(tree, tmp_path):
    root = tree({"b.txt": "two\nthree\n"})
    out = tmp_path / "rows.jsonl"
    run_fake([root], out)
    (root / "b.txt").write_text("dos\ntres\n")  # its new block touches its old one
    run_fake([root], out)
    assert jsonl_rows(out) == expected_rows(root)


def test_jsonl_sigkill_at_several_moments_then_rerun_gives_every_row_once(tree, tmp_path):
    root = tree({f"f{i:03d}.txt": f"item {i}\nmore {i}\n" for i in range(200)})
    out = tmp_path / "rows.jsonl"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from gpucli.core.config import RunConfig
        from gpucli.engines.local.pipeline import run
        run(RunConfig(task={FAKE!r}, paths=({str(root)!r},), out={str(out)!r}, devices="cpu", progress="off",
                      task_options={{"sleep_ms": 20}}, batch_size=4, part_rows=6, flush_s=0.05))
    """)
    for grown in (200, 2000, 6000):  # bytes of rows before the kill: three different moments
        proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < grown):
                time.sleep(0.01)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    summary = run_fake([root], out, {"sleep_ms": 20})
    assert summary.exit_code == 0
    assert jsonl_rows(out) == expected_rows(root)


def test_jsonl_output_of_gpucli_0_1_is_taken_over_and_stays_exact(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\ngamma\n"})
    out = tmp_path / "rows.jsonl"
    run_fake([root], out)
    make_legacy(Path(f"{out}.gpucli") / "ledger.sqlite", rename=lambda name: f"18b2f0c3a1-{len(name)}")
    with open(out, "ab") as f:
        f.write(b'{"path": "a.tx')  # and a torn line, as 0.1 could leave
    (root / "b.txt").write_text("beta again\n")
    assert run_fake([root], out).succeeded == 1
    assert jsonl_rows(out) == expected_rows(root)


def test_jsonl_file_cut_outside_gpucli_asks_for_full_instead_of_trusting_its_ledger(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "rows.jsonl"
    run_fake([root], out)
    out.write_text("")
    with pytest.raises(UsageError, match="--full"):
        run_fake([root], out)
    assert run_fake([root], out, incremental=False).succeeded == 2
    assert jsonl_rows(out) == expected_rows(root)


def test_jsonl_write_that_fails_half_way_leaves_no_partial_rows(tmp_path, monkeypatch):
    sink = JsonlSink(str(tmp_path / "rows.jsonl"))
    sink.open(None, {})
    sink.recover(set(), None)
    first = sink.write(pa.table({"path": ["a"], "text": ["alpha"]}))
    size = (tmp_path / "rows.jsonl").stat().st_size
    assert first == f"bytes=0-{size}"

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError):
        sink.write(pa.table({"path": ["b"], "text": ["beta"]}))
    monkeypatch.undo()
    assert (tmp_path / "rows.jsonl").stat().st_size == size
    sink.close()


# --- item 3: Parquet part names are never reused -------------------------------------------------
def test_a_part_name_is_not_reused_after_prune_and_a_crash(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    (root / "b.txt").write_text("beta\n")
    run_fake([root], out)  # b's rows in the highest part
    (root / "b.txt").unlink()
    run_fake([root], out, prune=True)  # that part goes with b
    for name in ("c", "d", "e"):
        (root / f"{name}.txt").write_text(f"{name}\n")
    assert crashing_run(root, out, "commit", nth=1) == 9  # a part written, not committed
    assert run_fake([root], out).exit_code == 0
    assert parquet_rows(out) == expected_rows(root)


def test_parquet_numbers_new_parts_above_every_name_the_ledger_listed(tmp_path):
    sink = ParquetSink(str(tmp_path / "o.parquet"))
    sink.open(pa.schema([("path", pa.string())]), {})
    sink.recover({"part-00003.parquet"}, "part-00007.parquet")
    assert sink.write(pa.table({"path": ["x"]})) == "part-00008.parquet"


# --- item 4: foreign files are never deleted -------------------------------------------------------
@pytest.mark.parametrize("incremental", [True, False])
def test_a_dataset_gpucli_did_not_write_is_refused_and_kept(tree, tmp_path, incremental):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "theirs.parquet"
    ds.write_dataset(pa.table({"x": [1, 2]}), str(out), format="parquet")  # names its file part-0.parquet
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(UsageError, match="gpucli did not write"):
        run_fake([root], out, incremental=incremental)
    assert sorted(p.name for p in out.iterdir()) == before
    assert ds.dataset(str(out)).to_table().num_rows == 2


@pytest.mark.parametrize("incremental", [True, False])
def test_a_jsonl_file_gpucli_did_not_write_is_refused_and_kept(tree, tmp_path, incremental):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "theirs.jsonl"
    out.write_text('{"mine": 1}\n')
    with pytest.raises(UsageError, match="gpucli did not write"):
        run_fake([root], out, incremental=incremental)
    assert out.read_text() == '{"mine": 1}\n'
    assert not Path(f"{out}.gpucli").exists()


@pytest.mark.parametrize("incremental", [True, False])
def test_a_users_file_named_like_a_part_is_never_deleted_as_a_crash_leftover(tree, tmp_path, incremental):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    pq.write_table(pa.table({"mine": [1, 2, 3]}), out / "part-09999.parquet")  # not listed by the ledger
    (out / "part-09998.parquet").write_bytes(b"not even parquet")
    before = {name: (out / name).read_bytes() for name in ("part-09999.parquet", "part-09998.parquet")}
    (root / "b.txt").write_text("beta\n")
    assert run_fake([root], out, incremental=incremental).exit_code == 0
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_part_a_crash_left_unlisted_is_still_removed(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    (root / "b.txt").write_text("beta\n")
    assert crashing_run(root, out, "commit", nth=1) == 9  # b's part written and renamed, not committed
    assert run_fake([root], out).exit_code == 0
    assert parquet_rows(out) == expected_rows(root)


def test_an_existing_empty_directory_is_a_fine_new_output(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    out.mkdir()
    assert run_fake([root], out).succeeded == 1


def test_a_foreign_directory_is_exit_2_on_the_command_line(tree, tmp_path, monkeypatch):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "theirs.parquet"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out), "--full"])
    assert result.exit_code == 2 and "gpucli did not write" in result.stderr
    assert (out / "notes.txt").read_text() == "keep me"


# --- item 5: --full killed half way --------------------------------------------------------------
class Killed(Exception):
    pass


@pytest.mark.parametrize("sink_cls,name", [(ParquetSink, "out.parquet"), (JsonlSink, "rows.jsonl")])
@pytest.mark.parametrize("after_reset", [True, False])
def test_full_killed_between_sink_and_ledger_then_rerun_has_every_row(tree, tmp_path, monkeypatch, sink_cls, name,
                                                                      after_reset):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\ngamma\n"})
    out = tmp_path / name
    run_fake([root], out)
    original = sink_cls.reset

    def killed(self):
        if after_reset:
            original(self)
        raise Killed

    monkeypatch.setattr(sink_cls, "reset", killed)
    with pytest.raises(Killed):
        run_fake([root], out, incremental=False)
    monkeypatch.setattr(sink_cls, "reset", original)
    assert run_fake([root], out).exit_code == 0
    rows = jsonl_rows(out) if name.endswith(".jsonl") else parquet_rows(out)
    assert rows == expected_rows(root)


# --- item 13: an --out the system refuses ------------------------------------------------------------
def invoke_fake(monkeypatch, args: list[str]):
    """`gpucli embed ARGS` through the real CLI, with the fake task in place of the model."""
    import gpucli.core.config

    build = gpucli.core.config.build_config
    monkeypatch.setattr("gpucli.app.cli.build_config", lambda *a, **k: dataclasses.replace(
        build(*a, **k), task=FAKE, task_options={}, devices="cpu", progress="off"))
    from gpucli.app.cli import app

    return CliRunner().invoke(app, ["embed", *args])


def _file(tmp_path: Path) -> Path:
    (tmp_path / "afile").write_text("x")
    return tmp_path / "afile"


@pytest.mark.parametrize("make,leftover", [
    (lambda t: _file(t).rename(t / "out.parquet") or t / "out.parquet", None),
    (lambda t: _file(t) / "out.parquet", None),
    (lambda t: _file(t) / "out.jsonl", None),
    (lambda t: (t / "dir.jsonl").mkdir() or t / "dir.jsonl", "dir.gpucli"),
    (lambda t: (t / "o.failures.jsonl").mkdir() or t / "o.parquet", "o.parquet"),
], ids=["parquet-is-a-file", "parquet-under-a-file", "jsonl-under-a-file", "jsonl-is-a-dir", "failures-is-a-dir"])
def test_an_unusable_out_is_one_error_line_exit_2_and_leaves_nothing(tree, tmp_path, monkeypatch, make, leftover):
    root = tree({"a.txt": "alpha\n"})
    out = make(tmp_path)
    result = invoke_fake(monkeypatch, [str(root), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.startswith("gpucli: error: ") and len(result.stderr.strip().splitlines()) == 1
    assert leftover is None or not (tmp_path / leftover).exists()


@pytest.mark.parametrize("mode", [0o555, 0o000], ids=["read-only", "no-permission"])
def test_an_out_in_a_directory_without_write_permission_is_exit_2(tree, tmp_path, mode):
    root = tree({"a.txt": "alpha\n"})
    parent = tmp_path / "readonly"
    parent.mkdir(mode=mode)
    code = textwrap.dedent(f"""
        import dataclasses, sys
        sys.path.insert(0, {str(ROOT)!r})
        import gpucli.core.config
        build = gpucli.core.config.build_config
        gpucli.core.config.build_config = lambda *a, **k: dataclasses.replace(
            build(*a, **k), task={FAKE!r}, task_options={{}}, devices="cpu", progress="off")
        from gpucli.app.cli import app
        app(["embed", {str(root)!r}, "--out", {str(parent / "sub" / "out.parquet")!r}])
    """)
    # root writes anywhere: drop the capabilities that let it (as a cron user has none)
    result = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--",
                             sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("gpucli: error: ") and "Traceback" not in result.stderr
    assert "ermission denied" in result.stderr
    assert os.listdir(parent) == []


# --- item 14: effective options, schema version, migration -----------------------------------------
def make_legacy(ledger: Path, rename=None) -> None:
    """Turn a ledger into what gpucli 0.1 wrote: only `fingerprint` in meta (its SCHEMA's
    tables are the same); `rename` gives its locations 0.1's names."""
    db = sqlite3.connect(ledger)
    with db:
        db.execute("delete from meta where key != 'fingerprint'")
        if rename is not None:
            for (name,) in db.execute("select name from locations").fetchall():
                db.execute("update locations set name=? where name=?", (rename(name), name))
                db.execute("update files set location=? where location=?", (rename(name), name))
    db.close()


def in_earlier_place(out: Path) -> Path:
    """A Parquet output's state put where gpucli 0.1 kept it, inside the dataset directory."""
    os.rename(f"{out}.gpucli", out / "_gpucli")
    return out / "_gpucli"


def test_an_output_of_gpucli_0_1_with_the_same_settings_needs_no_full_after_the_upgrade(tree, tmp_path,
                                                                                       monkeypatch):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out, {"sleep_ms": 1})  # 0.1 fingerprinted only the given options
    make_legacy(in_earlier_place(out) / "ledger.sqlite")
    again = run_fake([root], out, {"sleep_ms": 1})
    assert (again.exit_code, again.unchanged, again.succeeded) == (0, 2, 0)
    assert not (out / "_gpucli").exists(), "the ledger moved out of the dataset directory"
    db = sqlite3.connect(Path(f"{out}.gpucli") / "ledger.sqlite")
    meta = dict(db.execute("select key, value from meta"))
    db.close()
    assert meta["schema_version"] == "2" and json.loads(meta["settings"])["options"]["sleep_ms"] == 1
    assert run_fake([root], out, {"sleep_ms": 1}).unchanged == 2, "and from then on as a current ledger"


@pytest.mark.parametrize("before,after", [({"sleep_ms": 1}, {"sleep_ms": 2}), ({}, {"sleep_ms": 2}),
                                          ({"sleep_ms": 1}, {})])
def test_an_output_of_gpucli_0_1_with_other_settings_still_needs_full(tree, tmp_path, monkeypatch, before, after):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out, before)
    make_legacy(in_earlier_place(out) / "ledger.sqlite")
    with pytest.raises(UsageError, match="--full"):
        run_fake([root], out, after)


def test_other_settings_are_named_with_their_old_and_new_values(tree, tmp_path, monkeypatch):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    with pytest.raises(UsageError, match=r"options\.sleep_ms: 0\.0 -> 2"):
        run_fake([root], out, {"sleep_ms": 2})


def test_legacy_fingerprint_matches_when_the_given_options_are_a_subset_of_the_effective_ones():
    base = {"task": "embed", "model": "m", "dtype": "auto", "info": {"gpucli.dims": "4"}, "weights": []}
    legacy = fingerprint({**base, "options": {"chunk_overlap": 32}})  # 0.1: `--chunk-overlap 32` given
    assert legacy_match(legacy, {**base, "options": {"chunk_overlap": 32, "chunk_tokens": 256}})
    assert not legacy_match(legacy, {**base, "options": {"chunk_overlap": 16, "chunk_tokens": 256}})
    defaults = {"chunk_overlap": 32, "chunk_tokens": 256}
    made_without_flags = fingerprint({**base, "options": {}})
    assert legacy_match(made_without_flags, {**base, "options": defaults}, defaults)
    assert not legacy_match(made_without_flags, {**base, "options": {**defaults, "chunk_overlap": 16}}, defaults)
    assert legacy_match(legacy, {**base, "options": defaults}, defaults), "a default given then is the same output"


def test_an_option_added_by_a_later_version_needs_no_full_but_a_changed_one_does(tmp_path):
    settings = {"task": "embed", "model": "m", "options": {"chunk_overlap": 32}}
    old = Ledger(tmp_path / "state", gpucli_version="0.2")
    assert check_settings(old, settings, full=False)
    old.reset(settings)
    old.close()
    grown = {**settings, "options": {"chunk_overlap": 32, "new_knob": 1}}
    with pytest.raises(UsageError, match=r"options\.new_knob: \(unset\) -> 1"):
        check_settings(Ledger(tmp_path / "state", gpucli_version="0.2"), grown, full=False)  # same version: a change
    ledger = Ledger(tmp_path / "state", gpucli_version="0.3")
    assert not check_settings(ledger, grown, full=False)
    with pytest.raises(UsageError, match=r"options\.chunk_overlap: 32 -> 16"):
        check_settings(ledger, {**settings, "options": {"chunk_overlap": 16, "new_knob": 1}}, full=False)
    ledger.close()


def test_a_ledger_of_a_newer_gpucli_is_refused(tmp_path):
    ledger = Ledger(tmp_path / "state")
    settings = {"task": "embed", "model": "m", "options": {}}
    ledger.reset(settings)
    ledger.set_meta("schema_version", "99")
    with pytest.raises(UsageError, match="newer gpucli"):
        check_settings(ledger, settings, full=True)
    ledger.close()


# --- issue 28 item 5: the state of a Parquet output moved out of its dataset directory ----------------
def invoke_noted(monkeypatch, args: list[str]):
    """invoke_fake with plain progress, so that the run's notes reach stderr."""
    import gpucli.core.config

    build = gpucli.core.config.build_config
    monkeypatch.setattr("gpucli.app.cli.build_config", lambda *a, **k: dataclasses.replace(
        build(*a, **k), task=FAKE, task_options={}, devices="cpu", progress="plain"))
    from gpucli.app.cli import app

    return CliRunner().invoke(app, ["embed", *args])


def commit_in_wal(ledger: Path, key: str, value: str) -> None:
    """A transaction committed to the ledger's -wal and never checkpointed (its writer died)."""
    code = (f"import os, sqlite3; db = sqlite3.connect({str(ledger)!r}); db.execute('pragma wal_autocheckpoint=0'); "
            f"db.execute('insert or replace into meta values (?, ?)', ({key!r}, {value!r})); db.commit(); os._exit(0)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert Path(f"{ledger}-wal").stat().st_size > 0


def meta_of(out: Path) -> dict[str, str]:
    db = sqlite3.connect(Path(f"{out}.gpucli") / "ledger.sqlite")
    try:
        return dict(db.execute("select key, value from meta"))
    finally:
        db.close()


def test_a_ledger_kept_inside_the_dataset_moves_out_whole_with_its_wal_and_is_said_once(tree, tmp_path,
                                                                                       monkeypatch):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    earlier = in_earlier_place(out)
    commit_in_wal(earlier / "ledger.sqlite", "probe", "only in the -wal")
    (earlier / "ledger.sqlite.damaged").write_bytes(b"set aside by an earlier --full")
    (root / "c.txt").write_text("gamma\n")
    first = invoke_noted(monkeypatch, [str(root), "--out", str(out), "--json"])
    assert first.exit_code == 0, first.output
    assert first.stderr.count("moved the ledger and lock") == 1 and str(earlier) in first.stderr
    assert not earlier.exists() and sorted(os.listdir(out)) == ["part-00000.parquet", "part-00001.parquet"]
    assert meta_of(out)["probe"] == "only in the -wal"  # the WAL's transaction came along
    assert Path(f"{out}.gpucli", "ledger.sqlite.damaged").read_bytes() == b"set aside by an earlier --full"
    assert json.loads(first.stdout)["unchanged"] == 2
    second = invoke_noted(monkeypatch, [str(root), "--out", str(out)])
    assert second.exit_code == 0 and "moved the ledger" not in second.stderr
    assert parquet_rows(out) == expected_rows(root)


MOVE_KILLED = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {root!r})
    import gpucli.output.state_dir
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run

    rename = os.rename
    def killed(source, target):
        if str(source).endswith("_gpucli"):
            if {after!r}:
                rename(source, target)
            os._exit(9)
        rename(source, target)
    gpucli.output.state_dir.os.rename = killed
    run(RunConfig(task={task!r}, paths=({src!r},), out={out!r}, devices="cpu", progress="off"))
""")


@pytest.mark.parametrize("after", [False, True], ids=["before-the-rename", "after-the-rename"])
def test_a_run_killed_while_it_moves_the_ledger_out_loses_nothing(tree, tmp_path, after):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    in_earlier_place(out)
    (root / "c.txt").write_text("gamma\n")
    script = MOVE_KILLED.format(root=str(ROOT), after=after, task=FAKE, src=str(root), out=str(out))
    assert subprocess.run([sys.executable, "-c", script], timeout=120).returncode == 9
    assert (out / "_gpucli").exists() is not after and Path(f"{out}.gpucli").exists() is after
    again = run_fake([root], out)
    assert (again.exit_code, again.unchanged, again.succeeded) == (0, 2, 1)
    assert not (out / "_gpucli").exists() and parquet_rows(out) == expected_rows(root)


def test_an_earlier_gpucli_still_writing_the_output_keeps_its_ledger_and_this_run_exits_75(tree, tmp_path):
    import fcntl

    from gpucli.core.errors import LockedError

    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    earlier = in_earlier_place(out)
    held = os.open(earlier / "lock", os.O_RDWR)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the earlier gpucli's run holds it
    try:
        with pytest.raises(LockedError, match="an earlier gpucli run holds"):
            run_fake([root], out)
    finally:
        os.close(held)
    assert (earlier / "ledger.sqlite").is_file() and not Path(f"{out}.gpucli").exists()
    assert run_fake([root], out).unchanged == 1  # once it has ended


def test_two_ledgers_one_inside_and_one_beside_are_refused_and_both_kept(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    earlier = in_earlier_place(out)
    run_fake([root], tmp_path / "other.parquet")
    os.rename(tmp_path / "other.parquet.gpucli", f"{out}.gpucli")
    with pytest.raises(UsageError, match="Keep one"):
        run_fake([root], out)
    assert (earlier / "ledger.sqlite").is_file() and Path(f"{out}.gpucli", "ledger.sqlite").is_file()


def test_a_state_directory_a_run_left_with_only_its_lock_gives_way_to_the_earlier_ledger(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    in_earlier_place(out)
    Path(f"{out}.gpucli").mkdir()
    Path(f"{out}.gpucli", "lock").write_text("pid 999999 on elsewhere, started long ago\n")
    assert run_fake([root], out).unchanged == 1
    assert not (out / "_gpucli").exists()


@pytest.mark.parametrize("extra", [{"incremental": False}, {"prune": True}], ids=["full", "prune"])
def test_full_and_prune_work_from_a_ledger_kept_inside_the_dataset(tree, tmp_path, extra):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    in_earlier_place(out)
    (root / "b.txt").unlink()
    again = run_fake([root], out, **extra)
    assert again.exit_code == 0
    assert (again.succeeded, again.pruned) == ((1, 0) if extra.get("incremental") is False else (0, 1))
    assert parquet_rows(out) == expected_rows(root) and not (out / "_gpucli").exists()


def test_full_sets_a_damaged_ledger_kept_inside_the_dataset_aside_beside_it(tree, tmp_path):
    root = tree({"a.txt": "alpha\n"})
    out = tmp_path / "out.parquet"
    run_fake([root], out)
    earlier = in_earlier_place(out)
    (earlier / "ledger.sqlite").write_bytes(b"not a ledger any more" * 100)
    with pytest.raises(UsageError, match=r"out\.parquet\.gpucli/ledger\.sqlite is damaged"):
        run_fake([root], out)  # incremental: named where it now is, and kept
    assert run_fake([root], out, incremental=False).succeeded == 1
    assert Path(f"{out}.gpucli", "ledger.sqlite.damaged").read_bytes().startswith(b"not a ledger")
    assert parquet_rows(out) == expected_rows(root)
