"""A stop from the first instant (issue 46): Ctrl-C or SIGTERM at any moment of a real `gpucli
embed`'s start (the console script's imports, Typer's parsing, the engine's imports, the output
opened, workers spawned and loading the model) exits 130 / 143 with at most one line on stderr,
never a traceback. Before, a Ctrl-C during the imports printed a KeyboardInterrupt traceback
through importlib, and a SIGTERM before the command's guard killed the process without a word.

The delays count from the moment the console script has run gpucli's first instructions, seen
in Python's own import log (PYTHONPROFILEIMPORTTIME: a line as each import completes; the one
for `gpucli.app.entry`, which main() imports right after it has set the stop handlers, and
before it imports the CLI: typer, click, rich). Before that is the interpreter's own start,
which no Python code reaches (a SIGTERM there kills the process, which a shell reports as 143
too). The run is far longer than the longest delay (3000 files, small batches), so every
signal lands while it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import write_tree

DELAYS_S = (0.0, 0.05, 0.15, 0.3, 0.5, 0.8, 1.2)
HANG_S = 120  # only a hang takes this long: nothing here is timed


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A randomly initialised 1-layer BERT with the default model's tokenizer: real embed code, fast."""
    from benchmarks.host import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Path:
    words = "river stone cloud field harbour lantern meadow orchard quarry summit valley willow".split()
    return write_tree(tmp_path_factory.mktemp("stop-at-start") / "in",
                      {f"d{i % 8}/doc{i:04d}.txt": " ".join(words[(i + j) % len(words)] for j in range(60))
                       for i in range(3000)})


def console_script() -> list[str]:
    """The installed `gpucli` script beside this Python (what a user runs), else `python -m gpucli`."""
    script = Path(sys.executable).parent / "gpucli"
    if script.exists() and script.read_bytes()[:2] == b"#!" and b"python" in script.read_bytes().splitlines()[0]:
        return [str(script)]
    return [sys.executable, "-m", "gpucli"]


IMPORT_LOG = "import time:"
FIRST_LINES_RUN = " gpucli.app.entry"  # its import has completed: the stop handlers are set (gpucli/__main__.py)


def stop_after(command: list[str], sig: signal.Signals, delay_s: float) -> subprocess.CompletedProcess:
    """`command` started, `sig` sent `delay_s` after the console script's first lines ran; its
    stderr without the import log."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "GPUCLI_BACKEND": "torch", "PYTHONPROFILEIMPORTTIME": "1"})
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            if line.rstrip().endswith(FIRST_LINES_RUN):
                started.set()
            lines.append(line)
        started.set()  # it ended: the wait below finds out

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(HANG_S) and proc.poll() is None, "gpucli ended (or hung) before its first lines"
        time.sleep(delay_s)
        assert proc.poll() is None, "the run ended before the signal: it must last longer than the delays"
        proc.send_signal(sig)
        proc.wait(HANG_S)
        out = _read_within(proc.stdout, HANG_S)  # a child that outlived gpucli holding its pipe fails, not hangs
        reader.join(HANG_S)
        assert not reader.is_alive(), "a child of gpucli outlived it, holding its stderr open"
    finally:
        proc.kill()
    err = "".join(line for line in lines if not line.startswith(IMPORT_LOG))
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _read_within(stream, timeout_s: float) -> str:
    """All of `stream` up to its end, or an assertion when it has not ended within `timeout_s`:
    the end comes when every process holding the pipe has exited (gpucli's readers and workers)."""
    got: list[str] = []
    thread = threading.Thread(target=lambda: got.append(stream.read()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "a child of gpucli outlived it, holding its stdout open"
    return got[0]


@pytest.mark.slow
@pytest.mark.processes
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_stop_at_any_moment_of_the_start_exits_with_its_code_and_at_most_one_line(sig, code, tiny_bert, documents,
                                                                                     tmp_path):
    out = tmp_path / "o.parquet"
    command = [*console_script(), "embed", str(documents), "--model", str(tiny_bert), "--out", str(out), "--quiet",
               "--batch-size", "2", "--devices", "cpu", "--workers-per-device", "1"]
    for delay in DELAYS_S:
        done = stop_after(command, sig, delay)
        seen = f"{sig.name} {delay}s after the start: exit {done.returncode}, stderr {done.stderr[-2000:]!r}"
        assert done.returncode == code, seen
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 1, seen
        line = "interrupted (Ctrl-C)" if code == 130 else "terminated (SIGTERM)"
        assert done.stderr in ("", f"gpucli: error: {line}\n"), seen


def test_a_signal_the_script_was_started_with_ignored_stays_ignored():
    """`gpucli ... &` in a script starts with Ctrl-C ignored, so that the terminal's Ctrl-C is
    not its own: the console script's first instruction leaves that as it is."""
    from gpucli.core.signals import exit_at_once, exits_at_once

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the session's handlers come back after the test (conftest)
    exit_at_once()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert exits_at_once(signal.getsignal(signal.SIGTERM))


def test_a_command_raises_the_stops_inside_its_guard_and_exits_at_once_outside_it():
    """Inside `exit_codes` a stop raises (the command's `finally`s run, then one line and its
    code); outside, the console script's exit-at-once handlers are back."""
    from gpucli.app.boundary import Terminated, exit_codes, stops_raise
    from gpucli.core.signals import exit_at_once, exits_at_once

    exit_at_once()
    with stops_raise():
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises at the next instruction
    assert all(exits_at_once(signal.getsignal(sig)) for sig in (signal.SIGINT, signal.SIGTERM))
    import typer

    with pytest.raises(typer.Exit) as ended:
        with exit_codes():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert ended.value.exit_code == 130
    assert all(exits_at_once(signal.getsignal(sig)) for sig in (signal.SIGINT, signal.SIGTERM))


@pytest.mark.slow
@pytest.mark.processes
def test_the_children_of_a_run_killed_with_sigkill_leave_with_it(tiny_bert, documents, tmp_path):
    """A parent killed with SIGKILL runs no handler: its workers and reader processes must see it
    gone and leave (gpucli.core.signals.die_with_parent). A reader stayed for good, blocked on a
    result pipe it holds both ends of, and kept a cron job's stdout open."""
    import psutil

    command = [*console_script(), "embed", str(documents), "--model", str(tiny_bert), "--out",
               str(tmp_path / "o.parquet"), "--quiet", "--batch-size", "2", "--devices", "cpu"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "GPUCLI_BACKEND": "torch"})
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + HANG_S
        children: list[psutil.Process] = []
        while len(children) < 2 and proc.poll() is None and time.monotonic() < deadline:
            children = [c for c in parent.children(recursive=True) if "resource_tracker" not in " ".join(c.cmdline())]
            time.sleep(0.05)  # polling for the children to exist, not waiting on a guess
        assert len(children) >= 2, "the run never started its workers"
        proc.kill()
        proc.wait(HANG_S)
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"children outlived their killed parent: {[c.cmdline()[-2:] for c in alive]}"
    finally:
        proc.kill()
        for child in psutil.Process().children(recursive=True):
            if child.pid != os.getpid() and "gpucli" in " ".join(child.cmdline()):
                child.kill()
