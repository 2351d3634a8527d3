"""Stopping: signals at any moment give the documented exit code within one deadline, and a
worker that never finishes loading its model cannot hang the run (issue 13, items 9 and 10)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpucli.core.errors import WorkerSetupError
from tests.helpers import run_fake

pytestmark = [pytest.mark.slow, pytest.mark.processes]  # signals to real workers and readers

ROOT = str(Path(__file__).resolve().parents[2])
SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    s = run(RunConfig(task="tests.fake_task:FakeTask", paths=({src!r},), out={out!r}, devices="cpu",
                      progress="plain", task_options={options!r}, batch_size=4, workers_per_device=2))
    print("SUMMARY", s.exit_code, s.succeeded, s.unfinished, flush=True)
    sys.exit(s.exit_code)
""")


def test_a_worker_that_hangs_loading_its_model_is_killed_at_the_setup_timeout(tree, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(WorkerSetupError, match="did not load the model within 2s"):
        run_fake([tree({"a.txt": "one line\n"})], tmp_path / "out.parquet", {"setup_sleep_s": 3600},
                 setup_timeout_s=2)
    assert time.monotonic() - t0 < 60


def _start(tree, tmp_path, options: dict) -> tuple[subprocess.Popen, Path]:
    root = tree({f"f{i:03d}.txt": f"item {i}\n" for i in range(200)})
    out = tmp_path / "out.parquet"
    script = SCRIPT.format(root=ROOT, src=str(root), out=str(out), options=options)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    return proc, out


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not path.exists():
        time.sleep(0.05)
    assert path.exists(), f"{path.name} never appeared"


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_whole_group_while_the_model_loads_gives_its_exit_code_promptly(tree, tmp_path, sig, code):
    """systemd's stop (and Ctrl-C in a terminal) signals every process of the group: the
    workers leave the decision to the parent, which exits with 143/130, not 'could not load'."""
    marker = tmp_path / "loading"
    proc, out = _start(tree, tmp_path, {"setup_sleep_s": 30, "ready_marker": str(marker)})
    try:
        _wait_for(marker)
        os.killpg(proc.pid, sig)
        stdout, stderr = proc.communicate(timeout=60)  # a hang guard: the stop's deadline is 10 s
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, stderr
    assert "could not load" not in stderr and "Traceback" not in stderr
    assert stdout.split()[1] == str(code)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("held", [True, False])
def test_a_child_started_with_the_stop_signals_held_ignores_a_group_signal_before_its_entry(tmp_path, monkeypatch,
                                                                                          sig, held):
    """The signal arrives while the child still imports its target (before its entry could
    ignore it). Held: it is dropped and the child exits 0. Not held (the control): it kills
    the child, which is what the hold is for."""
    import contextlib
    import multiprocessing as mp

    from gpucli.core.signals import held_from_children

    marker = tmp_path / "importing"
    monkeypatch.setenv("GPUCLI_TEST_IMPORTING", str(marker))
    monkeypatch.setenv("GPUCLI_TEST_IMPORT_S", "0")  # the parent's own import: instant
    from tests import slow_child

    marker.unlink(missing_ok=True)  # the parent imports it once per session
    monkeypatch.setenv("GPUCLI_TEST_IMPORT_S", "1.5")  # the child's
    process = mp.get_context("spawn").Process(target=slow_child.main)
    with held_from_children() if held else contextlib.nullcontext():
        process.start()
    try:
        _wait_for(marker, 30)
        os.kill(process.pid, sig)
        process.join(30)
    finally:
        if process.is_alive():
            process.kill()
    assert (process.exitcode == 0) is held, process.exitcode


def test_every_process_a_run_starts_begins_with_the_stop_signals_held(tree, tmp_path, monkeypatch):
    """Readers and workers alike: each is started from a thread that blocks SIGINT and SIGTERM."""
    import multiprocessing.util

    spawn = multiprocessing.util.spawnv_passfds
    masks = []

    def recording(*args, **kwargs):
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        return spawn(*args, **kwargs)

    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", recording)
    root = tree({f"f{i:03d}.txt": f"item {i}\n" for i in range(40)})
    summary = run_fake([root], tmp_path / "out.parquet", workers_per_device=2, read_processes=2, read_chunk_files=4)
    assert summary.exit_code == 0 and summary.succeeded == 40
    assert len(masks) >= 4, "two workers and two readers"
    assert all({signal.SIGINT, signal.SIGTERM} <= mask for mask in masks), masks


def test_a_signal_mid_run_exits_143_within_the_deadline_and_a_rerun_finishes_exactly_once(tree, tmp_path):
    log = tmp_path / "batches.jsonl"
    options = {"sleep_ms": 100, "batch_log": str(log)}  # ~2.5 s of batches: the signal lands with most to do
    proc, out = _start(tree, tmp_path, options)
    try:
        _wait_for_lines(log, 3)  # workers loaded, batches running and prefetched
        os.killpg(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)  # a hang guard: the stop's deadline is 10 s
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, stderr
    _, _, succeeded, unfinished = stdout.split()
    assert int(unfinished) > 0 and int(succeeded) + int(unfinished) <= 200
    source = Path(script_source(proc.args[-1]))
    summary = run_fake([source], out, options, batch_size=4, workers_per_device=2)  # the same settings
    assert summary.exit_code == 0
    from tests.helpers import read_rows

    paths = [r["path"] for r in read_rows(out)]
    assert len(paths) == 200 and len(set(paths)) == 200, "every input exactly once after the rerun"


def _wait_for_lines(path: Path, lines: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (not path.exists() or path.read_text().count("\n") < lines):
        time.sleep(0.05)
    assert path.exists() and path.read_text().count("\n") >= lines, f"{path.name} never had {lines} lines"


def script_source(script: str) -> str:
    """The tree root a script was given."""
    import re

    return re.search(r"paths=\('([^']+)',\)", script).group(1)


def test_a_large_file_that_kills_its_reader_twice_becomes_a_failure_record(tree, tmp_path, monkeypatch):
    """Issue 13, item 12: large inputs are in the ledger while they are prepared; one that took
    its reader down twice is a failure record on the next run, and the rest goes through."""
    from gpucli.core.errors import RunFailedError
    from gpucli.engines import reader

    monkeypatch.setattr(reader, "LARGE_INPUT_BYTES", 10)  # every test file counts as large
    root = tree({"bad.txt": "DIE_IN_PREPARE here\n", **{f"ok{i}.txt": f"fine line {i}\n" for i in range(5)}})
    out = tmp_path / "out.parquet"
    for _ in range(2):
        with pytest.raises(RunFailedError, match="reader process died"):
            run_fake([root], out, read_processes=1, read_chunk_files=1, read_chunks_in_flight=1)
    summary = run_fake([root], out, read_processes=1, read_chunk_files=1, read_chunks_in_flight=1)
    assert summary.failed == 1 and summary.exit_code == 1
    failures = Path(summary.failures_file).read_text()
    assert "bad.txt" in failures and "died twice" in failures
    from tests.helpers import read_rows

    assert sorted({r["path"] for r in read_rows(out)}) == [f"ok{i}.txt" for i in range(5)]


def test_a_first_stop_inside_a_held_step_waits_for_its_end_and_a_second_stops_at_once(capfd):
    """Ray's driver stops by a KeyboardInterrupt: it takes what came back and writes parts in
    held steps, so a Ctrl-C never falls between a part written and a part counted, and the
    run's second Ctrl-C still gets the user out at once, wherever it lands."""
    from gpucli.core.signals import DriverStops

    def stop(sig=signal.SIGINT):
        os.kill(os.getpid(), sig)
        time.sleep(0.05)  # the handler has run by now

    stops, steps = DriverStops(), []
    with stops.installed():
        with pytest.raises(KeyboardInterrupt):
            with stops.held():
                stop(signal.SIGTERM)  # only noted
                steps.append("the step went on")
        assert steps == ["the step went on"] and stops.signum == signal.SIGTERM
        assert "stopping once the step under way is done" in capfd.readouterr().err
        with pytest.raises(KeyboardInterrupt) as second:  # the run's second stop, in a step: at once
            with stops.held(deliver=False):
                stop()
                steps.append("not reached")
        assert "not reached" not in steps and stops.signum == signal.SIGTERM  # the first stop's signal
        assert second.value.signum == signal.SIGINT  # ...and the second's own, for its exit code

    stops = DriverStops()
    with stops.installed():
        with stops.held(deliver=False):  # the run's last writes: a first stop is noted, not raised
            stop()
        assert stops.signum == signal.SIGINT
        with pytest.raises(KeyboardInterrupt):  # outside a step a stop is raised where it lands
            stop()

    stops = DriverStops()
    with stops.installed():
        with pytest.raises(ValueError):  # an error inside goes on as it was
            with stops.held():
                stop()
                raise ValueError("inside")
        with stops.held():  # ... and the stop is not kept for a later step
            pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handlers are given back


def test_the_stop_line_on_a_broken_stderr_does_not_cut_the_step(monkeypatch):
    """`2>&1 | tee log`: the same Ctrl-C ends tee, and the line about the stop meets a broken
    pipe; the step still ends whole, then the stop is raised."""
    from gpucli.core import signals

    def broken(fd, data):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(signals.os, "write", broken)
    stops, steps = signals.DriverStops(), []
    with stops.installed():
        with pytest.raises(KeyboardInterrupt):
            with stops.held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                steps.append("whole")
    assert steps == ["whole"]


def test_the_handlers_come_back_also_when_a_stop_lands_between_two_of_them(monkeypatch):
    """`restore_handlers` puts each stop signal's handler back even when the first one's restore is
    cut short by a KeyboardInterrupt (a stop landing right there)."""
    from gpucli.core import signals

    before = {sig: signal.getsignal(sig) for sig in signals.STOP_SIGNALS}
    for sig in signals.STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    real, calls = signal.signal, []

    def cut_after_the_first(sig, handler):
        calls.append(sig)
        real(sig, handler)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(signals.signal, "signal", cut_after_the_first)
    with pytest.raises(KeyboardInterrupt):
        signals.restore_handlers(before)
    monkeypatch.undo()
    assert {sig: signal.getsignal(sig) for sig in signals.STOP_SIGNALS} == before


def test_a_second_sigterm_that_ends_a_stopping_run_at_once_exits_143_not_130():
    """systemd or a supervisor sends SIGTERM again while the run finishes its last part: the
    stop raised at once carries SIGTERM, and the CLI exits 143 as for any SIGTERM (a second
    Ctrl-C: 130)."""
    import typer

    from gpucli.app.boundary import exit_codes
    from gpucli.core.signals import DriverStops

    stops = DriverStops()
    with stops.installed():
        with stops.held(deliver=False):
            os.kill(os.getpid(), signal.SIGTERM)  # the first: noted
            time.sleep(0.05)
        with pytest.raises(KeyboardInterrupt) as second:
            with stops.held(deliver=False):
                os.kill(os.getpid(), signal.SIGTERM)  # the second: at once
                time.sleep(0.05)
    for sig, code in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        with pytest.raises(typer.Exit) as ended:
            with exit_codes():
                raise type(second.value)(sig)
        assert ended.value.exit_code == code
    assert second.value.signum == signal.SIGTERM


def test_the_runs_own_wake_is_held_like_a_stop_but_is_no_users_stop(capfd):
    """Ray's NodeWatch stops the driver (no node can run the model, or none loaded it) by
    interrupting the main thread: inside a step it waits for the step's end like a stop, but
    it prints no "press Ctrl-C again" line and sets no exit code, and the user's Ctrl-C after
    it is still a first stop."""
    from gpucli.core.signals import DriverStops

    stops, steps = DriverStops(), []
    with stops.installed():
        with pytest.raises(KeyboardInterrupt):
            with stops.held():
                stops.wake()
                time.sleep(0.05)
                steps.append("the step went on")
        assert steps == ["the step went on"] and stops.signum == 0
        assert "stopping once" not in capfd.readouterr().err
        with pytest.raises(KeyboardInterrupt):  # outside a step: at once
            stops.wake()
            time.sleep(0.05)
        assert stops.signum == 0
        with pytest.raises(KeyboardInterrupt):
            with stops.held():
                os.kill(os.getpid(), signal.SIGINT)  # the user's first stop: noted, with its line
                time.sleep(0.05)
                steps.append("held again")
        assert steps[-1] == "held again" and stops.signum == signal.SIGINT
        assert "stopping once the step under way is done" in capfd.readouterr().err

    import threading  # ...and from the watch's own thread, as Ray's NodeWatch calls it

    stops, steps = DriverStops(), []
    with stops.installed():
        with pytest.raises(KeyboardInterrupt):
            with stops.held():
                waker = threading.Thread(target=stops.wake)
                waker.start()
                waker.join()
                time.sleep(0.05)
                steps.append("whole")
    assert steps == ["whole"] and stops.signum == 0 and "stopping once" not in capfd.readouterr().err


def test_nested_installs_keep_the_run_handler_and_the_outermost_gives_back_the_one_from_before():
    """An inner installed() puts the run's handler in again over one installed meanwhile (ray.init's)
    and leaves it in; only the outermost gives back what was there before the run."""
    from gpucli.core.signals import STOP_SIGNALS, DriverStops

    def before(signum, frame):
        pass

    def rays(signum, frame):
        pass

    saved = {sig: signal.signal(sig, before) for sig in STOP_SIGNALS}
    try:
        stops = DriverStops()
        with stops.installed():
            signal.signal(signal.SIGTERM, rays)
            with stops.installed():
                assert signal.getsignal(signal.SIGTERM) == stops._on_signal
            assert all(signal.getsignal(sig) == stops._on_signal for sig in STOP_SIGNALS)
        assert all(signal.getsignal(sig) is before for sig in STOP_SIGNALS)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
