"""What a run killed with SIGKILL leaves behind, swept at the next start.

A run that ends normally cleans up after itself; a process group killed at once (`kill -9`,
the OOM killer, systemd's final SIGKILL) cannot. Two things outlive it, and would pile up
run after run under cron:

* `/dev/shm/gpucli_<pid>_<hex>`: the image tasks' shared-memory blocks (tasks/images/decode.py).
  Their creator's resource tracker would unlink them, but it dies with the group. Each block
  is named after the pid of the process that made it.
* `gpucli-ray-<pid>-<random>` in `tempfile.gettempdir()`: the private Ray's temp directory
  (engines/ray/connection.py, made with `ray_temp_prefix()`), hundreds of MB of logs and sockets.

An entry is removed only when it belongs to this user and the process named in it is dead:
a run going on beside this one (its pid alive) keeps everything. A dead pid reused by an
unrelated process keeps the entry too (the safe way round: it goes at a later start).
Ray directories of earlier versions (`gpucli-ray-<8 random chars>`, no pid) are removed when
no live process names them on its command line (Ray's raylet and GCS carry `--temp-dir` and
`--session-dir`) and they are older than LEGACY_MIN_AGE_S (a run of an old version between
making the directory and starting Ray).

Not here, because they belong to one output and are swept under its lock: Parquet
`.inprogress` files, by the Parquet sink's `open`, in the dataset directory (its ledger and lock
are beside it, `OUT.parquet.gpucli/`); a part a crash left unlisted by the ledger, by its
`recover`, only when its footer says gpucli wrote it (`ParquetSink.wrote`): a user's own
`part-09999.parquet` is never a leftover. A state directory an earlier gpucli left inside a
dataset (`OUT.parquet/_gpucli/`) is no leftover either: the output's next run moves it out
(gpucli/output/state_dir.py).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SHM_NAME = re.compile(r"^gpucli_(\d+)_[0-9a-f]+$")
RAY_PREFIX = "gpucli-ray-"
RAY_NAME = re.compile(r"^gpucli-ray-(\d+)-[A-Za-z0-9_]+$")
LEGACY_RAY_NAME = re.compile(r"^gpucli-ray-[a-z0-9_]{8}$")  # tempfile.mkdtemp's 8 random characters
LEGACY_MIN_AGE_S = 600.0


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (another user's counts: we must not touch its files)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_shm(directory: Path = SHM_DIR) -> list[str]:
    """Unlink this user's `gpucli_<pid>_*` shared-memory segments whose pid is dead; return their names.
    On systems without /dev/shm (macOS) there is nothing to list, and nothing is done."""
    removed: list[str] = []
    for name, info in _own_entries(directory):
        match = SHM_NAME.match(name)
        if match and stat.S_ISREG(info.st_mode) and not pid_alive(int(match.group(1))):
            if _unlink(directory / name):
                removed.append(name)
    return removed


def ray_temp_prefix() -> str:
    """The prefix for `tempfile.mkdtemp` of a private Ray's temp directory: names this process,
    so that `sweep_ray_temp` can tell a live run's directory from a dead one's."""
    return f"{RAY_PREFIX}{os.getpid()}-"


def sweep_ray_temp(directory: str | None = None, now: float | None = None) -> list[str]:
    """Remove this user's private Ray temp directories whose owner is dead; return their names."""
    root = Path(directory or tempfile.gettempdir())
    now = time.time() if now is None else now
    removed: list[str] = []
    legacy: list[str] = []
    for name, info in _own_entries(root):
        if not stat.S_ISDIR(info.st_mode):  # lstat: a link named like ours is not followed
            continue
        match = RAY_NAME.match(name)
        if match and not pid_alive(int(match.group(1))):
            removed.append(name)
        elif not match and LEGACY_RAY_NAME.match(name) and now - info.st_mtime > LEGACY_MIN_AGE_S:
            legacy.append(name)
    named = _named_by_live_processes() if legacy else None
    if named is not None:  # without /proc we cannot tell: keep them
        removed += [name for name in legacy if not any(str(root / name) in line for line in named)]
    for name in removed:
        shutil.rmtree(root / name, ignore_errors=True)
    return removed


def _own_entries(directory: Path) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of the entries of `directory` owned by this user; none if it cannot be listed."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    entries = []
    uid = os.getuid()
    for name in names:
        if not name.startswith(("gpucli_", RAY_PREFIX)):
            continue
        try:
            info = os.lstat(directory / name)
        except OSError:
            continue
        if info.st_uid == uid:
            entries.append((name, info))
    return entries


def _unlink(path: Path) -> bool:
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


def _named_by_live_processes() -> list[str] | None:
    """The command lines of the live processes (Linux /proc); None where /proc cannot be listed."""
    lines = []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                lines.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines
