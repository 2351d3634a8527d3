"""Workers that die, interrupts, and what is left behind."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.helpers import read_rows, run_fake

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # kills, crashes, hangs, signals


def _kill_workers(times: int, every_s: float, killed: list[int], stop: threading.Event, started: Path) -> None:
    while not started.exists() and not stop.is_set():  # kill mid-run, not during model setup
        time.sleep(0.05)
    while len(killed) < times and not stop.is_set():
        time.sleep(every_s)
        workers = [p for p in mp.active_children() if p.name.startswith("gpucli-worker") and p.pid not in killed]
        if workers:
            os.kill(workers[0].pid, signal.SIGKILL)
            killed.append(workers[0].pid)


def test_sigkilled_worker_three_times_every_item_exactly_once(tree, tmp_path):
    files = {f"d{i % 10}/f{i:04d}.txt": f"item {i}\n" for i in range(2000)}
    killed: list[int] = []
    stop = threading.Event()
    log = tmp_path / "batches.jsonl"
    killer = threading.Thread(target=_kill_workers, args=(3, 0.5, killed, stop, log), daemon=True)
    killer.start()
    try:
        summary = run_fake([tree(files)], tmp_path / "out.parquet", {"sleep_ms": 15, "batch_log": str(log)},
                           workers_per_device=2, batch_size=8)
    finally:
        stop.set()
    assert len(killed) == 3, "the run ended before three kills; make it longer"
    assert summary.exit_code == 0, Path(summary.failures_file).read_text()
    paths = [r["path"] for r in read_rows(tmp_path / "out.parquet")]
    assert len(paths) == 2000 and set(paths) == set(files)


SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    s = run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu",
                      progress="plain", task_options={{"sleep_ms": 40}}, batch_size=4, part_rows=20, flush_s=0.5))
    print("SUMMARY", s.exit_code, s.succeeded, s.unfinished, flush=True)
    sys.exit(s.exit_code)
""")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_exits_promptly_with_readable_output(tree, tmp_path, sig, code):
    root = tree({f"f{i:04d}.txt": f"item {i}\n" for i in range(3000)})
    out = tmp_path / "out.parquet"
    script = SCRIPT.format(root=str(Path(__file__).resolve().parents[2]), src=str(root), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(out.glob("part-*.parquet")):
            time.sleep(0.1)
        assert any(out.glob("part-*.parquet")), "no part written before the interrupt"
        os.kill(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=60)  # a hang guard: the stop's deadline is 10 s
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    rows = ds.dataset(str(out), format="parquet").to_table().num_rows
    assert 0 < rows < 3000
    assert stdout.split()[1:4][0] == str(code)
    time.sleep(0.5)
    leftover = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True).stdout.split()
    if leftover:
        time.sleep(2)
        leftover = subprocess.run(["pgrep", "-a", "-s", str(proc.pid)], capture_output=True, text=True).stdout
    assert not leftover, f"a process outlived the command: {leftover}"


def test_a_hung_batch_times_out_and_the_stuck_item_fails(tree, tmp_path):
    files = {f"f{i:02d}.txt": f"line {i}\n" for i in range(12)}
    files["f05.txt"] = "this one will HANG\n"
    summary = run_fake([tree(files)], tmp_path / "out.parquet", batch_size=2, batch_timeout_s=1.0)
    assert (summary.succeeded, summary.failed) == (11, 1)
    record = Path(summary.failures_file).read_text()
    assert "f05.txt" in record and "timed out" in record


def test_spent_restart_budget_fails_the_run_but_keeps_what_was_written(tree, tmp_path):
    from gpucli.core.errors import GpucliError

    files = {f"ok{i:02d}.txt": f"line {i}\n" for i in range(20)}
    files.update({f"zz{i:02d}.txt": "CRASH\n" for i in range(20)})
    out = tmp_path / "out.parquet"
    with pytest.raises(GpucliError, match="restart budget"):
        run_fake([tree(files)], out, batch_size=1, max_restarts=3, part_rows=1)
    rows = ds.dataset(str(out), format="parquet").to_table().to_pylist()  # readable
    assert all(r["path"].startswith("ok") for r in rows)


def test_workers_leave_without_interpreter_teardown(tree, tmp_path):
    """Unloading torch and a model at exit takes seconds the parent spends in `join`; a
    worker exits as soon as its last result is sent, so atexit handlers never run."""
    root = tree({"a.txt": "one two\nthree\n", "b.txt": "four\n"})
    marker = tmp_path / "teardown.txt"
    summary = run_fake([root], tmp_path / "out.parquet", {"exit_marker": str(marker)})
    assert summary.exit_code == 0 and summary.rows == 3
    assert not marker.exists()
    assert not [p for p in mp.active_children() if p.name.startswith("gpucli-worker")]


def test_a_restarted_worker_that_cannot_load_the_model_ends_the_run_instead_of_hanging(tree, tmp_path):
    """After a crash, the replacement worker's setup fails (a GPU lost for good): that is one
    more death against the restart budget, and with no worker left the run stops."""
    from gpucli.core.errors import GpucliError

    files = {f"ok{i:02d}.txt": f"line {i}\n" for i in range(6)}
    files["zz.txt"] = "CRASH\n"
    result: dict = {}

    def go():
        try:
            run_fake([tree(files)], tmp_path / "out.parquet", {"fail_setup_again": str(tmp_path / "once")},
                     batch_size=1, max_restarts=2)
        except GpucliError as exc:
            result["error"] = str(exc)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the run hung waiting for a worker that never came back"
    assert "restart budget" in result.get("error", ""), result
