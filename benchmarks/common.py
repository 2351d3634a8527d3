"""What every benchmark shares: figures and their statistics, subprocess helpers, the
process-tree RSS sampler, and a description of the machine."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


@dataclass
class Figure:
    """One row of the table: a ratio measured `len(runs)` times, and its target.

    `op` is "<=" or ">=" (or "" for a figure shown for information only). `details` holds
    the raw numbers behind each run, one dict per run, for RESULTS.md."""

    key: str
    name: str
    runs: list[float] = field(default_factory=list)
    op: str = ""
    target: float = 0.0
    unit: str = "×"
    details: list[dict] = field(default_factory=list)
    note: str = ""
    status: str = ""  # overrides pass/miss ("not yet", "error", "see output")

    @property
    def median(self) -> float | None:
        return statistics.median(self.runs) if self.runs else None

    @property
    def verdict(self) -> str:
        if self.status:
            return self.status
        if not self.op or self.median is None:
            return "info"
        ok = self.median <= self.target if self.op == "<=" else self.median >= self.target
        return "pass" if ok else "MISS"

    def spread(self) -> str:
        if not self.runs:
            return "—"
        fmt = "{:.2f}".format
        return f"{fmt(min(self.runs))} / {fmt(self.median)} / {fmt(max(self.runs))}"

    def target_text(self) -> str:
        return f"{self.op} {self.target:g}{self.unit}" if self.op else "—"


@dataclass
class Context:
    quick: bool
    reps: int
    tmp: Path
    log: Callable[[str], None]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def bench_env() -> dict[str, str]:
    """The environment for subprocesses: the repo root importable (spawned workers import
    benchmarks.sim and tests.fake_task), quiet libraries."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def run_json(cmd: list[str], timeout: float, on_start: Callable[[subprocess.Popen], None] | None = None) -> dict:
    """Run a command, return the JSON object on the last line of its stdout."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=bench_env(),
                            cwd=ROOT)
    if on_start is not None:
        on_start(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"timed out after {timeout:g}s: {' '.join(cmd)}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{err[-3000:]}")
    lines = [line for line in out.splitlines() if line.strip()]
    return json.loads(lines[-1])


def drive(config: dict, timeout: float = 1800, slow_sink_ms: float = 0.0,
          on_start: Callable[[subprocess.Popen], None] | None = None) -> dict:
    """One gpucli job through benchmarks/drive.py in a fresh process (see drive.py)."""
    cmd = [sys.executable, str(BENCH / "drive.py"), json.dumps(config)]
    if slow_sink_ms:
        cmd += ["--slow-sink-ms", str(slow_sink_ms)]
    return run_json(cmd, timeout, on_start)


def timed_subprocess(cmd: list[str], timeout: float) -> float:
    """Wall seconds of a command that must succeed."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=bench_env(), cwd=ROOT, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return wall


class TreeRss:
    """Samples the summed RSS of a process and all its descendants every `interval` s,
    keeping the peak of the sum and the peak of the root process alone."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak_total = 0
        self.peak_root = 0
        self.peak_children = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(pid,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self, pid: int) -> None:
        import psutil

        try:
            root = psutil.Process(pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            try:
                root_rss = root.memory_info().rss
                children = 0
                for child in root.children(recursive=True):
                    try:
                        children += child.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                return
            self.samples += 1
            self.peak_root = max(self.peak_root, root_rss)
            self.peak_children = max(self.peak_children, children)
            self.peak_total = max(self.peak_total, root_rss + children)
            time.sleep(self.interval)


def git_commit() -> str:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = [line for line in git("status", "--porcelain", "--", "gpucli", "pyproject.toml").splitlines() if line]
    return f"{commit} + {len(dirty)} uncommitted change(s) under gpucli/" if dirty else commit


def cpu_pressure() -> str:
    """Linux PSI: the share of time runnable tasks waited for a CPU (other work on the box)."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return line.replace("some ", "")
    except (OSError, IndexError):
        return "n/a"


def machine() -> dict[str, str]:
    import importlib.metadata as md

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "absent"

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / 2**30:.0f} GiB"
    except ImportError:
        mem = "?"
    return {
        "cpu": f"{cpu}, {cores} cores usable, {mem} RAM",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "packages": ", ".join(f"{n} {version(n)}" for n in ("torch", "transformers", "sentence-transformers",
                                                              "tokenizers", "pyarrow")),
    }
