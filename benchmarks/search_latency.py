"""`gpucli search` latency, launch to exit, on a small output (issue 41, item 6).

The output: `gpucli embed sample_data/docs` (51-55 rows; made once, which also leaves the
model's ONNX graph in the cache, as any `gpucli embed` with the defaults does on a CPU host).
Each round runs, as fresh processes, in an order that rotates from round to round:

  after   `gpucli search QUERY --in OUT -k 3`: the query on ONNX Runtime with the cached graph
  torch   the same with GPUCLI_BACKEND=torch: the query on torch, as every search ran before
  before  with --before CHECKOUT: that checkout's `gpucli search` (PYTHONPATH), e.g. the commit
          before the change

Printed: each run's wall seconds and the "query embedded in" seconds its stderr line names, the
medians, and before (or torch) / after. With --importtime, the imports of one `after` run that
took over 15 ms (`python -X importtime`, cumulative, top two levels). No target is asserted:
the figures go in benchmarks/RESULTS-search.md.

    python benchmarks/search_latency.py [--rounds 3] [--before /tmp/before] [--importtime]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUERY = "how do bees make honey"
EMBEDDED = re.compile(r"query embedded in ([\d.]+)s")


def env_for(checkout: Path | None = None, backend: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUCLI_BACKEND"}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(checkout or ROOT), env.get("PYTHONPATH", "")) if p)
    if backend:
        env["GPUCLI_BACKEND"] = backend
    return env


def search_cmd(out: Path, *python_flags: str) -> list[str]:
    return [sys.executable, *python_flags, "-m", "gpucli", "search", QUERY, "--in", str(out), "-k", "3"]


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """(wall seconds launch to exit, the query's embedding seconds as the search reports them, stderr)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    found = EMBEDDED.search(proc.stderr)
    return wall, float(found.group(1)) if found else float("nan"), proc.stderr


def make_output(tmp: Path) -> Path:
    out = tmp / "docs.parquet"
    cmd = [sys.executable, "-m", "gpucli", "embed", str(ROOT / "sample_data" / "docs"), "--out", str(out),
           "--progress", "off"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env_for(), cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"gpucli embed failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return out


def slow_imports(out: Path, floor_us: int = 15_000) -> list[str]:
    """The imports of one search (ONNX path) over `floor_us`, cumulative, the top two levels."""
    proc = subprocess.run(search_cmd(out, "-X", "importtime"), capture_output=True, text=True, env=env_for(),
                          cwd=ROOT, timeout=600)
    lines = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        if depth <= 2 and int(parts[1]) >= floor_us:
            lines.append(f"{int(parts[1]) / 1000:7.0f} ms  {name}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout of gpucli, run beside this one")
    parser.add_argument("--importtime", action="store_true", help="list the slow imports of one search")
    args = parser.parse_args()
    variants = {"after": (env_for(), ROOT), "torch": (env_for(backend="torch"), ROOT)}
    if args.before:
        variants["before"] = (env_for(args.before), args.before)
    with tempfile.TemporaryDirectory(prefix="search-latency-") as tmp_name:
        out = make_output(Path(tmp_name))
        names = list(variants)
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # each variant first in turn
            for name in order:
                env, cwd = variants[name]
                wall, embed_s, _ = timed(search_cmd(out), env, cwd)
                runs[name].append((wall, embed_s))
                print(f"round {r + 1} {name:<7} {wall:6.2f} s (query embedded in {embed_s:.2f} s)", file=sys.stderr)
        load = os.getloadavg()
        print(f"\n`gpucli search` on the sample output, launch to exit, {args.rounds} rounds, interleaved; "
              f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores\n")
        print("| variant | wall, s (each round) | median wall, s | median 'query embedded', s |")
        print("|---|---|---|---|")
        for name in names:
            walls = [w for w, _ in runs[name]]
            embeds = [e for _, e in runs[name]]
            print(f"| {name} | {', '.join(f'{w:.2f}' for w in walls)} | {statistics.median(walls):.2f} | "
                  f"{statistics.median(embeds):.2f} |")
        after = statistics.median(w for w, _ in runs["after"])
        for name in names[1:]:
            print(f"\n{name} / after (median walls): {statistics.median(w for w, _ in runs[name]) / after:.1f}×")
        if args.importtime:
            print("\nimports over 15 ms of one `after` search (cumulative):\n")
            print("\n".join(f"    {line}" for line in slow_imports(out)))


if __name__ == "__main__":
    main()
