"""`--engine ray`: the same rows, failure records, ledger and exit codes as the local engine.

The Ray tests share one local Ray session (starting one costs 10-20 s on a small box) and
skip when the `ray` extra is not installed; the missing-extra test runs either way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpucli.app.cli import app
from gpucli.core.config import RunConfig
from gpucli.core.errors import UsageError, WorkerSetupError
from tests.fake_task import FAKE
from tests.helpers import ROOT, SAMPLE, run_with

SUMMARY_KEYS = ("inputs", "succeeded", "failed", "skipped", "unchanged", "rows", "exit_code", "unfinished")






def rows_by_key(out: Path) -> dict[tuple[str, int], dict]:
    return {(r["path"], r["chunk"]): r for r in ds.dataset(str(out), format="parquet").to_table().to_pylist()}


def failures(summary) -> list[dict]:
    lines = Path(summary.failures_file).read_text().splitlines()
    return sorted((json.loads(line) for line in lines), key=lambda f: f["path"])


def test_missing_extra_exits_2_with_the_pip_command(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets without the extra
    monkeypatch.setitem(sys.modules, "ray.data", None)
    result = CliRunner().invoke(app, ["embed", str(SAMPLE / "docs"), "--engine", "ray",
                                      "--out", str(tmp_path / "out.parquet")])
    assert result.exit_code == 2, result.output
    assert "--engine ray needs the ray extra: pip install 'gpucli[ray]'" in result.stderr
    assert result.stdout == ""


def test_plan_gpus_per_actor_and_fractional_cpus():
    from gpucli.engines.ray import plan_for

    gpu = plan_for("auto", 2, cpus=32, gpus=4)
    assert (gpu.actors, gpu.num_gpus, gpu.num_cpus, gpu.device) == (8, 0.5, 1.0, "cuda:0")
    cpu = plan_for("auto", 2, cpus=2, gpus=0)  # 2 x 1 CPU would starve the reader on 2 cores
    assert (cpu.actors, cpu.num_gpus, cpu.device) == (2, 0.0, "cpu")
    assert cpu.actors * cpu.num_cpus + 0.5 <= 2 and cpu.threads == 1
    assert plan_for("cpu", 1, cpus=64, gpus=8).num_gpus == 0
    with pytest.raises(UsageError, match="no GPUs"):
        plan_for("cuda", 1, cpus=8, gpus=0)
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES"):
        plan_for("cuda:0,1", 1, cpus=8, gpus=2)


def test_a_cpu_cluster_gets_an_actor_per_node_with_that_nodes_cores_as_threads():
    """A CPU cluster (a head with 4 CPUs, two workers of 32): one predictor per node by default,
    each told the threads of every node, to run its own node's; --workers-per-device N is N
    actors in all, each with its share of the cluster's CPUs."""
    from gpucli.engines.ray import plan_for

    nodes = {"head": 4.0, "w1": 32.0, "w2": 32.0}
    default = plan_for("auto", 0, cpus=68, gpus=0, node_cpus=nodes)
    assert (default.actors, default.num_cpus, default.device) == (3, 1.0, "cpu")
    assert default.actor_threads() == {"head": 4, "w1": 32, "w2": 32}
    assert plan_for("auto", 0, cpus=64, gpus=0, node_cpus={"head": 0.0, "w1": 32.0, "w2": 32.0}).actors == 2
    assert plan_for("auto", 0, cpus=1, gpus=0, node_cpus={"a": 0.5, "b": 0.5}).actor_threads() == {"a": 1, "b": 1}
    explicit = plan_for("cpu", 4, cpus=68, gpus=0, node_cpus=nodes)
    assert (explicit.actors, explicit.actor_threads()) == (4, 17)
    one = plan_for("auto", 0, cpus=2, gpus=0, node_cpus={"here": 2.0})  # a private Ray on this machine
    assert (one.actors, one.num_cpus, one.actor_threads()) == (1, 1.0, {"here": 2})
    assert plan_for("auto", 0, cpus=68, gpus=4, node_cpus=nodes).actors == 4  # GPUs: one per GPU


def test_an_actor_of_the_default_cpu_plan_runs_its_own_nodes_cpus_as_threads(ray_session):
    """On a node of the plan's map an actor takes that node's threads (never more than the
    machine's cores); on a node the map does not know, the machine's cores."""
    import ray

    from gpucli.engines.ray.actors import actor_threads, cores

    here = ray.get_runtime_context().get_node_id()
    assert actor_threads({here: 1, "elsewhere": 64}) == 1
    assert actor_threads({here: 64}) == actor_threads({"elsewhere": 1}) == cores()
    assert actor_threads(3) == min(3, cores())


@pytest.mark.slow
@pytest.mark.model
def test_embed_gives_the_same_rows_and_failures_as_the_local_engine(ray_session, tmp_path):
    root = tmp_path / "docs"
    shutil.copytree(SAMPLE / "docs", root)
    (root / "bad").mkdir()
    (root / "bad" / "binary.txt").write_bytes(bytes(range(256)) * 8)
    (root / "bad" / "empty.txt").write_bytes(b"")
    (root / "bad" / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj broken")  # extracted in the actors' children
    (root / "long.txt").write_text(" ".join(f"sentence number {i} about rivers and stones." for i in range(400)))
    local = run_with("local", "embed", [root], tmp_path / "local.parquet")
    remote = run_with("ray", "embed", [root], tmp_path / "ray.parquet")

    assert {k: getattr(remote, k) for k in SUMMARY_KEYS} == {k: getattr(local, k) for k in SUMMARY_KEYS}
    assert remote.exit_code == 1 and remote.failed == 3 and remote.succeeded > 30
    assert failures(remote) == failures(local)
    assert [(f["path"], f["stage"]) for f in failures(remote)] == [("bad/binary.txt", "decode"),
                                                                   ("bad/broken.pdf", "decode"),
                                                                   ("bad/empty.txt", "read")]
    want, got = rows_by_key(tmp_path / "local.parquet"), rows_by_key(tmp_path / "ray.parquet")
    assert got.keys() == want.keys() and len(got) == remote.rows
    assert sum(path == "long.txt" for path, _ in got) > 3  # a long document: several chunks, several batches
    assert got[("formats/solar_system.pdf", 0)]["page"] == 1  # documents, with their pages, on Ray too
    for key, row in got.items():
        assert {k: v for k, v in row.items() if k != "embedding"} == {k: v for k, v in want[key].items()
                                                                       if k != "embedding"}
        assert max(abs(a - b) for a, b in zip(row["embedding"], want[key]["embedding"], strict=True)) < 1e-5
    schema = pq.read_schema(next((tmp_path / "ray.parquet").glob("part-*.parquet")))
    assert str(schema.field("embedding").type) == "fixed_size_list<element: float>[384]"
    assert schema.metadata[b"gpucli.model"] == b"minilm" and schema.metadata[b"gpucli.dims"] == b"384"


@pytest.mark.slow
def test_predict_errors_stay_per_item_and_every_input_is_accounted_for(ray_session, tree, tmp_path):
    files = {f"d{i % 3}/f{i:02d}.txt": f"alpha {i}\nbeta gamma {i}\n" for i in range(24)}
    files.update({"boom.txt": "fine line\nthis one goes BOOM\n", "latin.txt": b"caf\xe9\n", "empty.txt": ""})
    root = tree(files)
    summary = run_with("ray", FAKE, [root], tmp_path / "out.parquet", batch_size=4)
    assert (summary.inputs, summary.succeeded, summary.failed, summary.exit_code) == (27, 24, 3, 1)
    assert summary.rows == 48
    got = {(f["path"], f["stage"]) for f in failures(summary)}
    assert got == {("boom.txt", "infer"), ("latin.txt", "decode"), ("empty.txt", "read")}
    assert "BOOM in batch" in next(f["error"] for f in failures(summary) if f["path"] == "boom.txt")
    rows = rows_by_key(tmp_path / "out.parquet")
    assert rows[("d1/f04.txt", 1)]["text"] == "beta gamma 4" and rows[("d1/f04.txt", 1)]["words"] == 3
    assert not any(path == "boom.txt" for path, _ in rows)

    # one ledger for both engines: a local rerun into this output redoes only the failures
    again = run_with("local", FAKE, [root], tmp_path / "out.parquet", batch_size=4)
    assert (again.unchanged, again.succeeded, again.failed, again.rows) == (24, 0, 3, 0)
    assert rows_by_key(tmp_path / "out.parquet") == rows


@pytest.mark.slow
def test_the_same_rows_failures_and_counts_as_the_local_engine_with_a_long_document(ray_session, tree, tmp_path):
    """Blocks of several files, a document of many items spread over batches and predictor
    calls, a file that fails to decode, an empty one, a predict error and parts of a few rows."""
    files = {f"d{i % 4}/f{i:02d}.txt": f"alpha {i}\nbeta gamma {i}\n" for i in range(30)}
    files.update({"long.txt": "".join(f"line {i} of {'word ' * (i % 7)}the long one\n" for i in range(150)),
                  "latin.txt": b"caf\xe9\n", "empty.txt": "", "d1/boom.txt": "fine\nand BOOM here\n"})
    root = tree(files)
    kw = {"batch_size": 8, "read_chunk_files": 4, "queue_items": 16, "part_rows": 40}
    local = run_with("local", FAKE, [root], tmp_path / "local.parquet", **kw)
    remote = run_with("ray", FAKE, [root], tmp_path / "ray.parquet", **kw)

    assert {k: getattr(remote, k) for k in SUMMARY_KEYS} == {k: getattr(local, k) for k in SUMMARY_KEYS}
    assert (remote.inputs, remote.succeeded, remote.failed, remote.rows) == (34, 31, 3, 60 + 150)
    assert failures(remote) == failures(local)
    assert rows_by_key(tmp_path / "ray.parquet") == rows_by_key(tmp_path / "local.parquet")
    assert len(list((tmp_path / "ray.parquet").glob("part-*.parquet"))) > 1  # parts as results stream in


@pytest.mark.slow
def test_sigterm_keeps_complete_inputs_and_counts_the_rest_unfinished(ray_session, tree, tmp_path):
    """SIGTERM once the first part is durable (sent by the progress hook, not by a clock):
    exit 143, the written inputs are in the ledger, and every input is counted once; a rerun
    finishes the rest."""
    import os
    import signal

    from gpucli.core.progress import Progress
    from gpucli.engines.ray import run

    class TermAfterFirstPart(Progress):
        def update(self, counts) -> None:
            if counts.done and not getattr(self, "sent", False):
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)

    root = tree({f"f{i:02d}.txt": f"alpha {i}\nbeta {i}\n" for i in range(40)})
    config = RunConfig(task=FAKE, paths=(str(root),), out=str(tmp_path / "out.parquet"), progress="off",
                       devices="cpu", engine="ray", batch_size=2, read_chunk_files=2, queue_items=2, part_rows=1,
                       task_options={"sleep_ms": 50})
    stopped = run(config, TermAfterFirstPart())
    assert stopped.exit_code == 143 and stopped.interrupted
    assert 0 < stopped.succeeded < 40 and stopped.failed == 0
    assert stopped.inputs == 40 == stopped.succeeded + stopped.unfinished
    assert len(rows_by_key(tmp_path / "out.parquet")) == stopped.rows == 2 * stopped.succeeded
    again = run(config, Progress())
    assert (again.exit_code, again.unchanged, again.succeeded) == (0, stopped.succeeded, 40 - stopped.succeeded)
    assert len(rows_by_key(tmp_path / "out.parquet")) == 80


@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_stop_right_after_the_ledger_marks_a_part_done_still_counts_that_part(ray_session, tree, tmp_path,
                                                                               monkeypatch, signum):
    """The stop lands at the worst moment: the sink wrote the part and the ledger marked its
    inputs done, but the driver has not counted them yet. They count as succeeded (once), the
    rest as unfinished, and a rerun does exactly the rest."""
    import os
    import signal
    import threading

    from gpucli.core.progress import Progress
    from gpucli.engines.ray import run
    from gpucli.output.accounts import Accounts

    commit, sig = Accounts.write, getattr(signal, signum)
    stopped_once = threading.Event()

    def commit_then_stop(self, part):
        committed = commit(self, part)
        if not stopped_once.is_set():
            stopped_once.set()
            os.kill(os.getpid(), sig)
        return committed

    monkeypatch.setattr(Accounts, "write", commit_then_stop)
    root = tree({f"f{i:02d}.txt": f"alpha {i}\nbeta {i}\n" for i in range(30)})
    config = RunConfig(task=FAKE, paths=(str(root),), out=str(tmp_path / "out.parquet"), progress="off",
                       devices="cpu", engine="ray", batch_size=2, read_chunk_files=2, queue_items=2, part_rows=1,
                       task_options={"sleep_ms": 30})
    stopped = run(config, Progress())
    assert stopped.exit_code == 128 + sig and stopped.interrupted
    written = {path for path, _ in rows_by_key(tmp_path / "out.parquet")}
    assert 0 < len(written) == stopped.succeeded < 30 and stopped.rows == 2 * stopped.succeeded
    assert stopped.inputs == 30 == stopped.succeeded + stopped.unfinished
    monkeypatch.setattr(Accounts, "write", commit)
    again = run(config, Progress())
    assert (again.exit_code, again.unchanged, again.succeeded) == (0, stopped.succeeded, 30 - stopped.succeeded)
    assert len(rows_by_key(tmp_path / "out.parquet")) == 60


def _three_done_one_gone(tree, tmp_path):
    """An output of a.txt, b.txt and c.txt (local engine), and c.txt gone since: --prune's case."""
    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n", "c.txt": "gamma\n"})
    out = tmp_path / "out.parquet"
    assert run_with("local", FAKE, [root], out).succeeded == 3
    (root / "c.txt").unlink()
    return root, out


def _prune_stopped_with_143_and_nothing_pruned(root, out) -> None:
    from gpucli.engines.ray import RayJob

    config = RunConfig(task=FAKE, paths=(str(root),), out=str(out), progress="off", devices="cpu", engine="ray",
                       prune=True)
    summary = RayJob(config).run(lambda: pytest.fail("Ray must not start"))
    assert (summary.exit_code, summary.pruned, summary.interrupted) == (143, 0, True)
    assert sorted(path for path, _ in rows_by_key(out)) == ["a.txt", "b.txt", "c.txt"]


def test_sigterm_during_the_walk_exits_143_prunes_nothing_and_starts_no_ray(tree, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    import os
    import signal

    from gpucli.engines.job import Job

    root, out = _three_done_one_gone(tree, tmp_path)
    walk = Job.walk

    def walk_then_term(self):
        for n, found in enumerate(walk(self)):
            if n == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            yield found

    monkeypatch.setattr(Job, "walk", walk_then_term)
    _prune_stopped_with_143_and_nothing_pruned(root, out)


def test_a_sigterm_after_a_first_ctrl_c_stops_at_once_with_exit_143_as_the_local_engine_does(tree, tmp_path,
                                                                                            monkeypatch):
    """Ctrl-C, then SIGTERM (a supervisor's) while the first stop waits for the step under way
    (here --prune's): the second stops at once, with its own exit code, 143, and nothing is
    pruned."""
    pytest.importorskip("ray")
    import os
    import signal
    import time

    from gpucli.output.output import Output

    root, out = _three_done_one_gone(tree, tmp_path)
    prune = Output.prune

    def stopped_twice(self, *args, **kwargs):
        for sig in (signal.SIGINT, signal.SIGTERM):
            os.kill(os.getpid(), sig)
            time.sleep(0.05)
        return prune(self, *args, **kwargs)

    monkeypatch.setattr(Output, "prune", stopped_twice)
    _prune_stopped_with_143_and_nothing_pruned(root, out)


def test_ray_inits_own_sigterm_handler_does_not_outlive_the_run(tree, tmp_path, monkeypatch):
    """ray.init installs a SIGTERM handler of its own (sys.exit(15)). After the run the handler
    from before it is back (the CLI's, which exits 143), so a SIGTERM while the summary prints
    exits 143, not 15."""
    pytest.importorskip("ray")
    import signal
    import sys

    import gpucli.engines.ray.driver as driver
    from gpucli.engines.ray import RayJob

    def before(signum, frame):
        pass

    def rays(signum, frame):
        sys.exit(signum)

    def connector():
        signal.signal(signal.SIGTERM, rays)  # what ray.init does
        return lambda: None

    monkeypatch.setattr(driver, "make_plan", lambda config: None)
    monkeypatch.setattr(RayJob, "_run_on", lambda self, plan: None)  # the actors' part: not this test's
    previous = signal.signal(signal.SIGTERM, before)
    try:
        root = tree({"a.txt": "alpha\n"})
        config = RunConfig(task=FAKE, paths=(str(root),), out=str(tmp_path / "out.parquet"), progress="off",
                           devices="cpu", engine="ray")
        RayJob(config).run(connector)
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.slow
def test_a_sigterm_while_ray_starts_meets_no_handler_of_rays_that_aborts_the_driver(tmp_path):
    """ray.init installs Ray's C++ failure-signal handler, which also catches SIGTERM; a SIGTERM
    before gpucli's own handler was back then aborted the driver once its summary was out (exit
    134, ray-project/ray#37288). gpucli's driver starts Ray without it: the SIGTERM reaches Python
    (ray.init's sys.exit(15), which the driver turns into exit 143) and Ray shuts down cleanly."""
    pytest.importorskip("ray")
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from gpucli.engines.ray.connection import connect
        leave = connect()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        except SystemExit as exc:
            print("stopped", exc.code, flush=True)
        leave()
        print("left", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, cwd=tmp_path)
    assert "SIGTERM received" not in done.stderr
    assert (done.returncode, done.stdout.split()) == (0, ["stopped", "15", "left"]), done.stderr[-2000:]


def test_a_run_whose_ray_start_was_stopped_exits_after_its_summary_without_finalizing(tree, tmp_path):
    """Ray's half-started C++ side crashed now and then while the interpreter finalized, after
    the summary (exit 139 or 134 where 130/143 was due): such a process ends at once with its
    code once the summary is out, and no exit-time handler runs."""
    pytest.importorskip("ray")
    root = tree({"a.txt": "alpha\n"})
    script = textwrap.dedent(f"""
        import atexit, sys
        sys.path.insert(0, {str(ROOT)!r})
        import gpucli.engines.ray.connection as connection
        def stopped(temp_dir, *args, **kwargs):
            raise KeyboardInterrupt  # Ctrl-C while Ray starts
        connection.start_local = stopped
        atexit.register(lambda: print("FINALIZED", flush=True))
        from gpucli.app.cli import app, _make_command
        from tests.fake_task import FakeTask
        FakeTask.name = {FAKE!r}
        app.command(name="fake")(_make_command(FakeTask))
        app(args=["fake", {str(root)!r}, "--engine", "ray", "--devices", "cpu", "--progress", "off",
                  "--out", {str(tmp_path / "out.parquet")!r}], prog_name="gpucli")
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=ROOT)
    assert done.returncode == 130, done.stderr[-2000:]
    assert "interrupted" in done.stderr and "1 unfinished" in done.stderr
    assert "FINALIZED" not in done.stdout


def test_a_stop_right_after_a_walk_failure_is_written_still_counts_it(tree, tmp_path, monkeypatch):
    """SIGTERM lands just after the walk wrote a failure record to the failures file: the
    summary counts it (failed == the file's lines), and the run exits 143 without Ray."""
    pytest.importorskip("ray")
    import os
    import signal

    from gpucli.core.records import Failure
    from gpucli.engines.job import Job
    from gpucli.engines.ray import RayJob
    from gpucli.inputs.scope import Found
    from gpucli.output.output import Output

    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    walk, failed = Job.walk, Output.failed

    def walk_with_a_failure(self, exclude=None):
        yield Found(failure=Failure("bad.txt", "read", "cannot read it", 1, 1))
        yield from walk(self, exclude)

    def failed_then_stop(self, failure):
        known = failed(self, failure)
        os.kill(os.getpid(), signal.SIGTERM)
        return known

    monkeypatch.setattr(Job, "walk", walk_with_a_failure)
    monkeypatch.setattr(Output, "failed", failed_then_stop)
    config = RunConfig(task=FAKE, paths=(str(root),), out=str(tmp_path / "out.parquet"), progress="off",
                       devices="cpu", engine="ray")
    summary = RayJob(config).run(lambda: pytest.fail("Ray must not start"))
    assert (summary.exit_code, summary.interrupted) == (143, True)
    assert summary.failed == len(Path(summary.failures_file).read_text().splitlines()) == 1


def test_sigterm_while_ray_starts_exits_143_with_every_input_unfinished(tree, tmp_path):
    """ray.init installs its own SIGTERM handler first thing (`sys.exit(15)`): a systemd stop
    while Ray starts exited 15 with no summary. It is a stop like any other: exit 143, every
    input unfinished, and the stop handlers given back."""
    pytest.importorskip("ray")
    import os
    import signal
    import sys
    import time

    from gpucli.engines.ray import RayJob

    def ray_starting():
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init does first
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        pytest.fail("Ray's handler did not run")

    root = tree({"a.txt": "alpha\n", "b.txt": "beta\n"})
    config = RunConfig(task=FAKE, paths=(str(root),), out=str(tmp_path / "out.parquet"), progress="off",
                       devices="cpu", engine="ray")
    before = signal.getsignal(signal.SIGTERM)
    try:
        summary = RayJob(config).run(ray_starting)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert (summary.exit_code, summary.interrupted) == (143, True)
    assert (summary.inputs, summary.unfinished, summary.succeeded) == (2, 2, 0)

@pytest.mark.slow
def test_setup_failure_stops_the_run_with_the_actors_message(ray_session, tree, tmp_path):
    root = tree({"a.txt": "one\n", "b.txt": "two\n"})
    with pytest.raises(WorkerSetupError, match="no weights here"):
        run_with("ray", FAKE, [root], tmp_path / "out.parquet", {"fail_setup": "no weights here"})


@pytest.mark.slow
def test_a_file_that_kills_its_actor_costs_only_itself(ray_session, tree, tmp_path):
    root = tree({**{f"f{i}.txt": f"fine {i}\n" for i in range(6)}, "crash.txt": "this one CRASHes the worker\n"})
    summary = run_with("ray", FAKE, [root], tmp_path / "out.parquet")
    assert (summary.inputs, summary.succeeded, summary.failed, summary.exit_code) == (7, 6, 1, 1)
    [failure] = failures(summary)
    assert failure["path"] == "crash.txt" and failure["stage"] == "infer" and "died" in failure["error"]


def test_a_private_ray_sweeps_dead_runs_temp_dirs_first_and_names_its_own_after_this_process(monkeypatch):
    ray = pytest.importorskip("ray")
    import os
    import re

    from gpucli.core import leftovers
    from gpucli.engines.ray import connection

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(leftovers, "sweep_ray_temp", lambda: calls.append("sweep") or [])
    monkeypatch.setattr(connection, "start_local", lambda temp_dir: calls.append(temp_dir))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    leave = connection.connect()
    assert calls[0] == "sweep" and os.path.isdir(calls[1])
    assert re.match(leftovers.RAY_NAME, os.path.basename(calls[1]))
    assert os.path.basename(calls[1]).startswith(f"gpucli-ray-{os.getpid()}-")
    leave()
    assert not os.path.exists(calls[1])


def test_a_ray_that_cannot_be_reached_fails_the_run_with_exit_3():
    pytest.importorskip("ray")
    from gpucli.core.errors import RunFailedError
    from gpucli.engines.ray.connection import joined

    def refuse():
        raise ConnectionError("connection refused\nmore detail")

    with pytest.raises(RunFailedError, match="^cannot reach Ray at ray://nowhere:10001: connection refused$") as info:
        joined(refuse, "ray://nowhere:10001")
    assert info.value.exit_code == 3


def test_predictor_windows_match_the_local_dispatcher():
    """Items per predictor call: 16 batches (as the local dispatcher's sorted windows), within
    the task's queue size (transcribe keeps big audio chunks few)."""
    pytest.importorskip("ray")
    from gpucli.engines.job import batch_caps
    from gpucli.engines.ray import RayJob
    from gpucli.tasks.embed import EmbedTask
    from gpucli.tasks.transcribe import TranscribeTask

    job = RayJob(RunConfig(task="embed", paths=("x",), progress="off"))
    job.job.caps = batch_caps(job.config, EmbedTask, ["cpu"])
    assert job._window() == 16 * EmbedTask.cpu_batch_size
    job = RayJob(RunConfig(task="transcribe", paths=("x",), progress="off"))
    assert job._window() == TranscribeTask.queue_items
    job = RayJob(RunConfig(task="embed", paths=("x",), progress="off", queue_items=100))
    job.job.caps = batch_caps(job.config, EmbedTask, ["cpu"])
    assert job._window() == 100
    from gpucli.engines.ray.planning import chunks_per_call

    assert chunks_per_call(16 * 32, 64) == 8  # reader rows (one per chunk of files) per predictor call
    assert chunks_per_call(TranscribeTask.queue_items, TranscribeTask.read_chunk_files) == 32
    assert chunks_per_call(10, 64) == 1


def test_a_cluster_whose_live_nodes_cannot_hold_a_predictor_is_not_placeable():
    """The node watch's rule: a dead node's resources do not count; readers ask for no CPU."""
    from gpucli.engines.ray.planning import Plan, placeable

    plan = Plan(actors=2, num_cpus=1.0, num_gpus=0.5, device="cuda:0", threads=1, readers=1)
    head = {"Alive": True, "Resources": {"memory": 1.0}}  # runs no work
    gpu_node = {"Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}}
    assert placeable(plan, [head, gpu_node])
    assert not placeable(plan, [head, {**gpu_node, "Alive": False}])
    assert not placeable(plan, [head, {"Alive": True, "Resources": {"CPU": 8.0}}])  # CPUs left, no GPU


@pytest.mark.slow
def test_repeated_out_of_memory_lowers_the_actors_batch_size_for_the_rest_of_the_run(ray_session, tree, tmp_path):
    """As the local engine: out of memory twice -> caps halved to below the failing size; later
    batches stay under them, so the model stops running out of memory; nothing fails."""
    root = tree({f"f{i:02d}.txt": f"line {i}\n" for i in range(64)})
    log = tmp_path / "batches.jsonl"
    summary = run_with("ray", FAKE, [root], tmp_path / "out.parquet", {"oom_above": 2, "batch_log": str(log)},
                       batch_size=8, read_chunk_files=64)
    assert (summary.succeeded, summary.failed, summary.rows) == (64, 0, 64)
    sizes = [json.loads(line)["size"] for line in log.read_text().splitlines()]
    first_small = next(i for i, size in enumerate(sizes) if size <= 2)
    assert all(size <= 2 for size in sizes[first_small:])  # no out-of-memory after the caps came down
    assert sorted(size for size in sizes if size > 2) == [4, 8]  # 8, then 4 (the second: caps lowered)


@pytest.mark.slow
def test_a_batch_that_hangs_past_the_batch_timeout_ends_its_worker_and_only_its_file_fails(ray_session, tree,
                                                                                          tmp_path):
    """--batch-timeout-s on Ray: the hung worker ends itself; the batch runs again (Ray's retry,
    a new actor pool), then file by file, so the one file that hangs is the one failure."""
    root = tree({**{f"f{i}.txt": f"fine {i}\n" for i in range(5)}, "hang.txt": "this one HANGs the model\n"})
    summary = run_with("ray", FAKE, [root], tmp_path / "out.parquet", batch_timeout_s=1)
    assert (summary.inputs, summary.succeeded, summary.failed, summary.exit_code) == (6, 5, 1, 1)
    [failure] = failures(summary)
    assert failure["path"] == "hang.txt" and "--batch-timeout-s" in failure["error"]
    assert len(rows_by_key(tmp_path / "out.parquet")) == 5


@pytest.mark.slow
def test_an_actor_that_never_loads_its_model_fails_the_run_at_the_setup_timeout(ray_session, tree, tmp_path):
    root = tree({"a.txt": "one line\n"})
    with pytest.raises(WorkerSetupError, match="no Ray actor loaded the model within 3s"):
        run_with("ray", FAKE, [root], tmp_path / "out.parquet", {"setup_sleep_s": 3600}, setup_timeout_s=3)
    # the hung actor is gone with the run: the next run gets the CPUs
    assert run_with("ray", FAKE, [root], tmp_path / "again.parquet").succeeded == 1


@pytest.mark.slow
def test_a_first_batch_slower_than_the_setup_timeout_is_not_a_setup_failure(ray_session, tree, tmp_path, monkeypatch):
    """The setup timeout times the model's load (the Predictor's constructor), not the first rows.
    The watch's clock is the test's: it stands still until an actor has marked the model loaded
    (however long Ray takes to start one on a loaded host), then jumps past the deadline, and only
    then does the first batch end: a watch that timed the rows would fail the run. After the run
    its readiness key is gone (the driver is its only writer: readiness.py)."""
    from ray.experimental import internal_kv

    from gpucli.engines.ray import driver

    release = tmp_path / "release"

    class Watch(driver.NodeWatch):
        def _elapsed(self) -> float:
            if not self.loaded:
                return 0.0
            release.touch()  # past the deadline now, with no row back yet
            return self.setup_timeout_s + 1.0

    monkeypatch.setattr(driver, "NodeWatch", Watch)
    root = tree({"a.txt": "one line\n"})
    summary = run_with("ray", FAKE, [root], tmp_path / "out.parquet", {"predict_waits_for": str(release)},
                       setup_timeout_s=1)
    assert (summary.succeeded, summary.failed, summary.exit_code) == (1, 0, 0) and release.exists()
    assert len(rows_by_key(tmp_path / "out.parquet")) == 1
    assert internal_kv._internal_kv_list("", namespace="gpucli") == []


@pytest.mark.slow
def test_a_runs_readiness_key_is_written_by_its_driver_only_so_a_late_actor_leaves_nothing(ray_session):
    """The driver puts the run's key before its actors start and deletes it at the end; an actor
    that has loaded deletes it too. An actor that finishes loading after the run ended (the
    order that left a key behind on CI) finds nothing to delete and writes nothing."""
    from ray.experimental import internal_kv

    from gpucli.engines.ray.readiness import close_run, loaded, mark_loaded, new_run_id, open_run

    actor_loads = ray_session.remote(num_cpus=0)(mark_loaded)  # in a worker process, as a Predictor calls it
    mine, other = new_run_id(), new_run_id()
    assert open_run(mine) and open_run(other)
    assert not loaded(mine) and not loaded(other)
    ray_session.get(actor_loads.remote(mine))
    assert loaded(mine) and not loaded(other)
    close_run(mine)
    close_run(other)
    ray_session.get(actor_loads.remote(other))  # loaded after its run's driver closed it
    assert internal_kv._internal_kv_list("", namespace="gpucli") == []
