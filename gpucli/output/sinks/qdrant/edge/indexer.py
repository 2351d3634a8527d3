"""A shard's indexes built in a process of its own (issue 42).

Why: Qdrant Edge's `optimize` holds Python's GIL for as long as it runs: minutes at a million
points, during which the run's event loop would be frozen (no progress, no Ctrl-C, no watchdog).
So the parent closes the shard, keeps the storage locked, and waits for a child that loads the
shard, optimizes it and closes it. The child dies with its parent (PR_SET_PDEATHSIG: a shard is
never left to a process nobody locks for) and on Ctrl-C (the terminal's SIGINT reaches both);
Qdrant builds new segments beside the old ones and swaps them in, so a stopped build leaves the
points as they were, searched exactly until a later run that writes indexes them.

    python -m gpucli.output.sinks.qdrant.edge.indexer SHARD_DIR   # prints "optimized" or "optimal"
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


class IndexingStopped(Exception):
    """The child was stopped by a signal (Ctrl-C, SIGTERM): nothing is lost, the index waits."""


def build_indexes(shard_dir: Path) -> bool:
    """Optimize the (closed) shard at `shard_dir` in a child; True when anything was rebuilt.
    Raises IndexingStopped when a signal stopped the child, RuntimeError with the child's last
    words when it failed (Qdrant's message: a full disk says `(os error 28)`)."""
    child = subprocess.run([sys.executable, "-m", __name__, str(shard_dir)], capture_output=True, text=True)
    if child.returncode < 0:
        raise IndexingStopped(f"stopped by {signal.Signals(-child.returncode).name}")
    if child.returncode != 0:
        lines = [line for line in child.stderr.splitlines() if line.strip()]
        raise RuntimeError(lines[-1] if lines else f"the indexing process exited with {child.returncode}")
    return child.stdout.strip() == "optimized"


def _die_with_parent() -> None:
    """SIGKILL when the parent dies (Linux prctl; elsewhere nothing: the parent kills its child)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends the build at once, even inside Rust
    _die_with_parent()
    import qdrant_edge as edge

    shard = edge.EdgeShard.load(argv[0])
    try:
        changed = shard.optimize()
    finally:
        shard.close()
    print("optimized" if changed else "optimal", flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Exception as exc:  # noqa: BLE001 - one line for the parent, which names the output
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
