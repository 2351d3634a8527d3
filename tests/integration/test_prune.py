"""`--prune` never deletes the rows of a file that still exists.

The decision (Output.prune over a WalkReport and the ledger's seen paths) as unit tests;
then the CLI end to end on the fake task, with a directory that root really cannot list
(the capabilities that let root read everything dropped with setpriv).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpucli.core.errors import RunFailedError
from gpucli.core.records import Source
from gpucli.inputs.scope import WalkFilter, WalkReport
from gpucli.inputs.walk import walk
from gpucli.output.output import Output
from tests.helpers import ROOT, read_rows, unlistable

SETTINGS = {"task": "unit"}


@pytest.fixture
def output(tmp_path):
    """An opened Parquet output whose ledger lists a.txt, sub/b.txt and sub/c.txt as done."""
    import pyarrow as pa

    out = Output(str(tmp_path / "out.parquet"))
    out.open(pa.schema([("path", pa.string())]), {}, SETTINGS)
    done = [Source(i, p, p) for i, p in enumerate(["a.txt", "sub/b.txt", "sub/c.txt"])]
    out.ledger.mark_done(done, [1, 1, 1], None)
    yield out
    out.close(clean=False)


def test_prune_removes_only_what_a_complete_walk_did_not_find(output):
    output.mark_seen(["a.txt"])
    output.mark_seen(["sub/b.txt"])
    report = WalkReport(roots=["."], complete=True)
    assert output.prune(report) == 1
    assert sorted(output.ledger.done_paths()) == ["a.txt", "sub/b.txt"]


def test_prune_keeps_everything_under_an_unlisted_directory_and_says_so(output):
    output.mark_seen(["a.txt", "sub"])
    said = []
    report = WalkReport(roots=["."], unlisted=["sub"], complete=True)
    assert output.prune(report, log=said.append) == 0
    assert len(output.ledger.done_paths()) == 3
    assert said and "could not be listed" in said[0]


def test_prune_of_an_empty_root_removes_nothing_unless_prune_all(output):
    said = []
    report = WalkReport(roots=["."], empty_roots=["."], complete=True)
    assert output.prune(report, log=said.append) == 0
    assert len(output.ledger.done_paths()) == 3 and "empty" in said[0]
    assert output.prune(report, prune_all=True) == 3
    assert output.ledger.done_paths() == []


def test_prune_that_would_remove_every_row_refuses_and_removes_nothing(output):
    output.mark_seen(["elsewhere/a.txt"])  # the root argument changed: every path is new
    report = WalkReport(roots=["."], complete=True)
    with pytest.raises(RunFailedError, match="--prune-all") as err:
        output.prune(report)
    assert err.value.exit_code == 3
    assert len(output.ledger.done_paths()) == 3 and output.pruned == set()
    assert output.prune(report, prune_all=True) == 3


def test_an_interrupted_walk_prunes_nothing(output):
    assert output.prune(WalkReport(roots=["."], complete=False)) == 0
    assert len(output.ledger.done_paths()) == 3


def test_seen_paths_live_in_the_ledger_not_in_memory(output, tmp_path):
    output.mark_seen([f"f{i}.txt" for i in range(2000)] + ["a.txt"])
    output.mark_seen(["a.txt"])  # a path seen twice is fine
    assert sorted(output.ledger.unseen_done()) == ["sub/b.txt", "sub/c.txt"]


def test_a_walk_with_an_unlistable_directory_prunes_only_outside_it(output, tree, monkeypatch):
    root = tree({"x.txt": "new", "sub/b.txt": "b", "sub/c.txt": "c"})  # a.txt is gone
    unlistable(monkeypatch, root / "sub")
    report = WalkReport()
    found = list(walk([str(root)], WalkFilter((".txt",)), report=report))
    output.mark_seen([f.source.path if f.source else f.failure.path for f in found])
    assert output.prune(report) == 1
    assert sorted(output.ledger.done_paths()) == ["sub/b.txt", "sub/c.txt"]


# --- end to end: the CLI on the fake task ---------------------------------------------------------

CLI = """
import sys
from gpucli.app.cli import app, _make_command
from tests.fake_task import FakeTask
FakeTask.name = "tests.fake_task:FakeTask"  # the task the spawned workers import
app.command(name="fake")(_make_command(FakeTask))
app(args=sys.argv[1:], prog_name="gpucli")
"""
DROP_CAPS = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


def cli(*args: str, drop_caps: bool = False) -> tuple[int, dict | None, str]:
    """Run `gpucli fake ARGS --json` in a subprocess: exit code, summary, stderr."""
    cmd = [sys.executable, "-c", CLI, "fake", *args, "--devices", "cpu", "--progress", "plain", "--json"]
    if drop_caps:
        cmd = DROP_CAPS + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    lines = proc.stdout.strip().splitlines()
    return proc.returncode, json.loads(lines[-1]) if lines else None, proc.stderr


def rows_by_path(out: Path) -> list[str]:
    return sorted({r["path"] for r in read_rows(out)})


needs_setpriv = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                   reason="needs root and setpriv to make a directory root cannot list")


@pytest.mark.slow
@needs_setpriv
def test_cli_prune_keeps_the_rows_under_a_directory_it_cannot_list(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "gone.txt": "bye\n", "sub/b.txt": "beta\n", "sub/deep/c.txt": "gamma\n"})
    out = tmp_path / "out.parquet"
    assert cli(str(root), "--out", str(out))[1]["succeeded"] == 4
    (root / "gone.txt").unlink()
    os.chmod(root / "sub", 0)
    try:
        code, summary, err = cli(str(root), "--out", str(out), "--prune", drop_caps=True)
    finally:
        os.chmod(root / "sub", 0o755)
    assert code == 1, err  # the directory is a failure record
    assert summary["pruned"] == 1 and summary["failed"] == 1
    assert "could not be listed" in err
    assert rows_by_path(out) == ["a.txt", "sub/b.txt", "sub/deep/c.txt"]
    failures = [json.loads(line) for line in Path(summary["failures_file"]).read_text().splitlines()]
    assert [(f["path"], f["stage"]) for f in failures] == [("sub", "read")]


@pytest.mark.slow
def test_cli_prune_of_an_empty_root_keeps_every_row_and_says_so(tree, tmp_path):
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    assert cli(str(root), "--out", str(out))[1]["succeeded"] == 2
    for name in ("a.txt", "b.txt"):
        (root / name).unlink()  # an unmounted share
    code, summary, err = cli(str(root), "--out", str(out), "--prune")
    assert (code, summary["pruned"]) == (3, 0), err  # a root that holds nothing is exit 3 (issue 14)
    assert "empty" in err and rows_by_path(out) == ["a.txt", "b.txt"]
    code, summary, err = cli(str(root), "--out", str(out), "--prune-all")
    assert (code, summary["pruned"]) == (0, 2), err
    assert read_rows(out) == []


@pytest.mark.slow
def test_cli_prune_that_would_empty_the_output_exits_3_and_deletes_nothing(tree, tmp_path):
    root = tree({"docs/a.txt": "alpha\n", "docs/b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    assert cli(str(root / "docs"), "--out", str(out))[1]["succeeded"] == 2  # rows: a.txt, b.txt
    code, summary, err = cli(str(root), "--out", str(out), "--prune")  # now: docs/a.txt, docs/b.txt
    assert code == 3 and summary["exit_code"] == 3 and "--prune-all" in summary["error"], err  # --json: one object
    assert summary["succeeded"] == 0 and "gpucli: error:" in err and "--prune-all" in err
    assert {"a.txt", "b.txt"} <= set(rows_by_path(out))


@pytest.mark.slow
def test_the_ray_engine_prunes_by_the_same_rule(tree, tmp_path, monkeypatch):
    pytest.importorskip("ray.data")
    from gpucli.core.config import RunConfig
    from gpucli.engines import run_engine

    def run(engine: str, **kw):
        return run_engine(RunConfig(task="tests.fake_task:FakeTask", paths=(str(root),), out=str(out),
                                    progress="off", devices="cpu", engine=engine, **kw))

    root = tree({"a.txt": "alpha\n", "gone.txt": "bye\n", "sub/b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    assert run("local").succeeded == 3
    (root / "gone.txt").unlink()
    unlistable(monkeypatch, root / "sub")
    summary = run("ray", prune=True)  # nothing new to do: the driver walks and prunes, Ray never starts
    assert (summary.pruned, summary.failed) == (1, 1)
    assert rows_by_path(out) == ["a.txt", "sub/b.txt"]


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_stop_while_prune_runs_lets_it_finish_before_the_output_closes(tree, tmp_path, monkeypatch, engine):
    """Ctrl-C lands while --prune's ledger work runs (a large ledger): the prune ends before the
    output closes, so the ledger and the rows agree: the vanished input's rows are gone, and
    the run says it was interrupted (exit 130)."""
    import signal
    import time

    from gpucli.core.config import RunConfig
    from gpucli.engines import run_engine

    if engine == "ray":
        pytest.importorskip("ray.data")
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n", "gone.txt": "bye\n"})
    out = tmp_path / "out.parquet"
    config = dict(task="tests.fake_task:FakeTask", paths=(str(root),), out=str(out), progress="off", devices="cpu")
    assert run_engine(RunConfig(**config)).succeeded == 3
    (root / "gone.txt").unlink()
    events, prune, close = [], Output.prune, Output.close

    def slow_prune(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)
        pruned = prune(self, *args, **kwargs)
        events.append("prune end")
        return pruned

    def noted_close(self, *args, **kwargs):
        events.append("close")
        return close(self, *args, **kwargs)

    monkeypatch.setattr(Output, "prune", slow_prune)
    monkeypatch.setattr(Output, "close", noted_close)
    summary = run_engine(RunConfig(**config, engine=engine, prune=True))  # nothing new: Ray never starts
    assert events == ["prune end", "close"]
    assert (summary.exit_code, summary.pruned) == (130, 1)
    assert rows_by_path(out) == ["a.txt", "b.txt"]


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_stop_while_prune_refuses_still_says_why_and_removes_nothing(tree, tmp_path, monkeypatch, engine):
    """Ctrl-C lands while --prune decides, and the prune refuses (none of the output's inputs is
    under the paths given: a moved root). The refusal is still the run's error, said in one line
    (exit 3), not an exit 130 that hides it; nothing is removed."""
    import signal
    import threading
    import time

    from gpucli.core.config import RunConfig
    from gpucli.engines import run_engine

    if engine == "ray":
        pytest.importorskip("ray.data")
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    out = tmp_path / "out.parquet"
    config = dict(task="tests.fake_task:FakeTask", paths=(str(root),), out=str(out), progress="off", devices="cpu")
    assert run_engine(RunConfig(**config)).succeeded == 2
    for name in ("a", "b"):
        (root / f"{name}.txt").rename(root / f"{name}2.txt")
    prune, heard = Output.prune, threading.Event()
    if engine == "local":  # the refusal must come after the stop reached the run's loop
        from gpucli.engines.local.pipeline import Pipeline

        on_signal = Pipeline._on_signal

        def noted(self, sig):
            on_signal(self, sig)
            heard.set()

        monkeypatch.setattr(Pipeline, "_on_signal", noted)

    def stopped_prune(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        if engine == "local":
            assert heard.wait(10)
        else:
            time.sleep(0.2)  # Ray's driver: the stop waits for this held step
        return prune(self, *args, **kwargs)

    monkeypatch.setattr(Output, "prune", stopped_prune)
    with pytest.raises(RunFailedError, match="--prune would remove every row"):
        run_engine(RunConfig(**config, engine=engine, prune=True))
    assert {"a.txt", "b.txt"} <= set(rows_by_path(out))  # nothing removed
