"""Where a Qdrant server output keeps its ledger, lock and failures file (a per-user state
directory keyed by server and collection, or --state-dir), and how a ledger that an earlier
version left in the current directory is moved there, never abandoned."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpucli.core.errors import LockedError, UsageError
from gpucli.output.ledger import Ledger
from gpucli.output.sinks import open_sink
from gpucli.output.sinks.qdrant import QdrantSink
from gpucli.output.sinks.qdrant import state_dir as places
from tests.helpers import FaultStub, qdrant_schema, run_fake

pipeline_tests = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def state_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "xdg-state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    return home


# --- the choice of directory ------------------------------------------------------------------
def test_server_state_is_per_user_keyed_by_server_and_collection(state_home):
    sink = QdrantSink("qdrant://h:1/docs")
    assert sink.state_dir == state_home / "gpucli" / "qdrant" / "h_1" / "docs"
    assert sink.failures_path == str(state_home / "gpucli" / "qdrant" / "h_1" / "docs" / "failures.jsonl")
    assert QdrantSink("qdrants://db.example.com/api/qdrant/docs").state_dir == (
        state_home / "gpucli" / "qdrant" / "db.example.com_6333_api_qdrant" / "docs")
    assert QdrantSink("qdrant://[::1]:6334/docs").state_dir.parent.name == "--1_6334"
    assert QdrantSink("qdrants://h:1/docs").state_dir == sink.state_dir, "http and https name one server"
    others = {QdrantSink(t).state_dir for t in ("qdrant://h:1/other", "qdrant://h:2/docs", "qdrant://g:1/docs")}
    assert sink.state_dir not in others and len(others) == 3


def test_the_state_directory_does_not_depend_on_the_current_directory(tmp_path):
    places_seen = set()
    for where in ("a", "b/c"):
        (tmp_path / where).mkdir(parents=True)
        os.chdir(tmp_path / where)
        sink = QdrantSink("qdrant://h:1/docs")
        assert sink.state_dir.is_absolute() and Path(sink.failures_path).is_absolute()
        places_seen.add((sink.state_dir, sink.failures_path))
    assert len(places_seen) == 1


def test_without_xdg_state_home_the_state_goes_under_home_local_state(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert QdrantSink("qdrant://h:1/docs").state_dir == tmp_path / "home/.local/state/gpucli/qdrant/h_1/docs"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/dir")  # invalid per the XDG spec: ignored
    assert QdrantSink("qdrant://h:1/docs").state_dir == tmp_path / "home/.local/state/gpucli/qdrant/h_1/docs"


def test_state_dir_option_chooses_the_root(tmp_path, monkeypatch):
    assert open_sink("qdrant://h:1/docs", state_dir=str(tmp_path / "mine")).state_dir == (
        tmp_path / "mine" / "qdrant" / "h_1" / "docs")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert open_sink("qdrant://h:1/docs", state_dir="~/s").state_dir == tmp_path / "home/s/qdrant/h_1/docs"
    os.chdir(tmp_path)
    assert open_sink("qdrant://h:1/docs", state_dir="rel").state_dir == tmp_path / "rel/qdrant/h_1/docs"


def test_outputs_that_keep_their_state_beside_them_ignore_state_dir(tmp_path):
    for out in ("docs.parquet", "docs.jsonl", "qdrant:./storage/docs"):
        assert open_sink(out, state_dir=str(tmp_path / "mine")).state_dir == open_sink(out).state_dir


def test_the_failures_file_never_collides_with_a_parquet_output_of_the_same_name():
    qdrant, parquet = open_sink("qdrant://h:1/docs"), open_sink("docs.parquet")
    assert Path(qdrant.failures_path).resolve() != Path(parquet.failures_path).resolve()
    assert Path(qdrant.failures_path).parent == qdrant.state_dir != Path.cwd()


# --- moving a ledger left in the current directory ----------------------------------------------
LEGACY_WRITER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from gpucli.core.records import Source
    from gpucli.output.ledger import Ledger
    from gpucli.output.lock import RunLock
    directory = Path(sys.argv[1])
    RunLock(directory).acquire("qdrant://h/docs")
    ledger = Ledger(directory)
    ledger.reset("fp-1")
    ledger.mark_done([Source(0, "a.txt", "/a.txt", 3, 1, "d1"), Source(1, "b.txt", "/b.txt", 4, 2, "d2")],
                     [1, 2], "docs")
    os._exit(0)  # killed: the ledger is never closed, its last commits are only in its WAL
""")


def _legacy_ledger(legacy: Path) -> None:
    """A ledger as gpucli before this change left it in ./COLLECTION.gpucli/HOST-PORT/, its
    process killed (so its WAL still holds the commits)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", LEGACY_WRITER, str(legacy)], check=True, env=env, timeout=60)
    assert (legacy / "ledger.sqlite-wal").stat().st_size > 0


def _done(state: Path) -> list[str]:
    ledger = Ledger(state)
    try:
        assert not ledger.is_new()
        return sorted(ledger.done_paths())
    finally:
        ledger.close()


def test_a_legacy_ledger_is_found_where_earlier_versions_kept_it():
    assert places.legacy_state_dir(QdrantSink("qdrant://h:1/docs").parsed) == Path("docs.gpucli/h-1")
    assert places.legacy_state_dir(QdrantSink("qdrants://h/p/docs").parsed) == Path("docs.gpucli/h-6333-p")


def test_a_legacy_ledger_moves_whole_with_its_wal_and_the_old_place_is_cleared(tmp_path):
    legacy, state = Path("docs.gpucli/h-1"), tmp_path / "state"
    _legacy_ledger(legacy)
    assert places.adopt_legacy(legacy, state) is True
    assert _done(state) == ["a.txt", "b.txt"]
    assert not Path("docs.gpucli").exists(), "the old directory is gone"
    assert not (state / places.MOVED_FROM).exists()
    assert places.adopt_legacy(legacy, state) is False, "nothing left to move"
    assert _done(state) == ["a.txt", "b.txt"]


def test_files_that_are_not_the_ledgers_stay_in_the_old_place(tmp_path):
    legacy = Path("docs.gpucli/h-1")
    _legacy_ledger(legacy)
    (legacy / "notes.txt").write_text("mine")
    assert places.adopt_legacy(legacy, tmp_path / "state")
    assert sorted(p.name for p in legacy.iterdir()) == ["notes.txt"]


def test_two_ledgers_for_one_collection_are_a_usage_error_and_neither_is_touched(tmp_path):
    legacy, state = Path("docs.gpucli/h-1"), tmp_path / "state"
    _legacy_ledger(legacy)
    Ledger(state).close()
    with pytest.raises(UsageError, match="another one, left by an earlier gpucli") as err:
        places.adopt_legacy(legacy, state)
    assert str(legacy.absolute()) in str(err.value) and str(state) in str(err.value)
    assert (legacy / "ledger.sqlite").exists() and (state / "ledger.sqlite").exists()


def test_a_move_interrupted_after_the_copy_is_finished_by_the_next_run(tmp_path):
    legacy, state = Path("docs.gpucli/h-1"), tmp_path / "state"
    _legacy_ledger(legacy)
    state.mkdir()
    places._copy_ledger(legacy / "ledger.sqlite", state)  # the copy landed, then the run died
    (state / places.MOVED_FROM).write_text(str(legacy.absolute()))
    assert places.adopt_legacy(legacy, state) is True
    assert not legacy.exists() and _done(state) == ["a.txt", "b.txt"]


def test_a_move_interrupted_before_the_rename_starts_over(tmp_path):
    legacy, state = Path("docs.gpucli/h-1"), tmp_path / "state"
    _legacy_ledger(legacy)
    state.mkdir()
    (state / places.MOVED_FROM).write_text(str(legacy.absolute()))
    (state / "ledger.sqlite.moving").write_bytes(b"half a copy")
    assert places.adopt_legacy(legacy, state) is True
    assert _done(state) == ["a.txt", "b.txt"] and not (state / "ledger.sqlite.moving").exists()


def test_a_legacy_ledger_in_use_by_an_earlier_run_is_not_moved(tmp_path):
    legacy, state = Path("docs.gpucli/h-1"), tmp_path / "state"
    _legacy_ledger(legacy)
    fd = os.open(legacy / "lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # an old gpucli running from this directory
    try:
        with pytest.raises(LockedError, match="earlier gpucli run holds"):
            places.adopt_legacy(legacy, state)
    finally:
        os.close(fd)
    assert (legacy / "ledger.sqlite").exists() and not (state / "ledger.sqlite").exists()


def test_the_sink_moves_a_legacy_ledger_when_it_opens_and_says_so(state_home):
    legacy = Path("docs.gpucli/127.0.0.1-PORT")
    with FaultStub() as stub:
        legacy = Path(f"docs.gpucli/127.0.0.1-{stub.port}")
        _legacy_ledger(legacy)
        sink = open_sink(f"qdrant://127.0.0.1:{stub.port}/docs")
        sink.open(qdrant_schema(), {"gpucli.model": "m", "gpucli.dims": "4"})
        sink.close()
    assert sink.state_dir == state_home / "gpucli" / "qdrant" / f"127.0.0.1_{stub.port}" / "docs"
    assert _done(sink.state_dir) == ["a.txt", "b.txt"] and not legacy.exists()
    assert len(sink.notices) == 1 and "moved the ledger" in sink.notices[0]
    assert str(legacy.absolute()) in sink.notices[0] and str(sink.state_dir) in sink.notices[0]


@pipeline_tests
def test_runs_from_two_directories_share_one_ledger_and_lock(tree, tmp_path):
    root = tree({"a.txt": "one two\n", "b.txt": "three\n"})
    with FaultStub() as stub:
        out = f"qdrant://127.0.0.1:{stub.port}/docs"
        for where, unchanged in (("cron-a", 0), ("cron-b", 2)):
            (tmp_path / where).mkdir()
            os.chdir(tmp_path / where)
            summary = run_fake([root], out)
            assert (summary.exit_code, summary.unchanged) == (0, unchanged)
            assert not list((tmp_path / where).iterdir()), "nothing written to the current directory"
    assert Path(summary.failures_file).parent == open_sink(out).state_dir


def test_state_dir_reaches_the_run_config_from_flag_environment_and_file(tmp_path):
    from gpucli.core.config import build_config
    from gpucli.tasks import get_task

    options = get_task("embed").Options
    assert build_config("embed", options, {"paths": ("x",)}, environ={}).state_dir == ""
    assert build_config("embed", options, {"paths": ("x",), "state_dir": "/s"}, environ={}).state_dir == "/s"
    assert build_config("embed", options, {"paths": ("x",)}, environ={"GPUCLI_STATE_DIR": "/e"}).state_dir == "/e"
    toml = tmp_path / "c.toml"
    toml.write_text('state_dir = "/f"\n')
    assert build_config("embed", options, {"paths": ("x",)}, toml, environ={}).state_dir == "/f"


def test_state_dir_is_a_cli_option():
    from typer.testing import CliRunner

    from gpucli.app.cli import app

    result = CliRunner().invoke(app, ["embed", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--state-dir" in result.output
