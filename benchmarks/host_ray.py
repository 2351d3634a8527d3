"""The host path on the Ray engine, beside the local engine (issue 17): the same null-device
run as benchmarks/host.py (the real embed task in the parent, workers that return a constant
vector), on one node, so that what is measured is each engine's own cost per input.

  host-ray-null   20k one-sentence files, null device: Ray engine (a private one-node Ray,
                  started by the run) / local engine, end to end (info; Ray's place is many
                  machines, see benchmarks/ray_bench.py and the README's crossover)

Ray binds the host's routable address, so its run goes inside a private network namespace
with only loopback up (`unshare -n`, root), where it binds 127.0.0.1. Without root the
figure says why it was not measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import BENCH, ROOT, Context, Figure, bench_env, drive, median
from benchmarks.corpus import model_tokenizer, short_texts, stdlib_docstrings, write_tree
from benchmarks.host import NULL

FILES, QUICK_FILES = 20_000, 3_000


def run(ctx: Context) -> list[Figure]:
    n = QUICK_FILES if ctx.quick else FILES
    fig = Figure("host-ray-null", f"host: {n // 1000}k one-sentence files, null device: Ray one node / local "
                 "(end to end)")
    why = _unusable()
    if why:
        fig.status, fig.note = "not run", why
        return [fig]
    root = write_tree(ctx.tmp / "host-ray", short_texts(model_tokenizer(), n, stdlib_docstrings()))
    for rep in range(ctx.reps):
        local = _local(ctx, root, rep)
        ray = _ray(ctx, root, rep)
        fig.runs.append(ray["wall"] / local["wall"])
        fig.details.append({"local_s": round(local["wall"], 2), "ray_s": round(ray["wall"], 2),
                            "local_stages": local["stages"], "ray_stages": ray["stages"]})
        ctx.log(f"  host ray null {rep + 1}: local {local['wall']:.2f}s, Ray {ray['wall']:.2f}s -> Ray takes "
                f"{fig.runs[-1]:.2f}× the local engine's time")
    fig.note = (f"Ray / local wall time (median {median(fig.runs):.2f}×: the local engine is that much faster on one "
                "machine)")
    return [fig]


def _unusable() -> str:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return "needs root, unshare and ip (Ray runs in a private network namespace)"
    try:
        import ray  # noqa: F401
    except ImportError:
        return "needs the ray extra"
    return ""


def _local(ctx: Context, root: Path, rep: int) -> dict:
    t0 = time.perf_counter()
    r = drive({"task": NULL, "model": "minilm", "paths": [str(root)], "out": str(ctx.tmp / f"hr-local-{rep}.parquet")},
              timeout=1800)
    return {"wall": time.perf_counter() - t0, "stages": r["summary"]["stage_seconds"]}


def _ray(ctx: Context, root: Path, rep: int) -> dict:
    out = ctx.tmp / f"hr-ray-{rep}.parquet"
    child = f"exec {sys.executable} {BENCH / 'host_ray.py'} --child {root} {out}"
    t0 = time.perf_counter()
    proc = subprocess.run(["unshare", "-n", "sh", "-c", f"ip link set lo up && {child}"], capture_output=True,
                          text=True, env={**bench_env(), "RAY_USAGE_STATS_ENABLED": "0"}, cwd=ROOT, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"Ray null run exit {proc.returncode}: {proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    if summary["failed"] or summary["exit_code"]:
        raise RuntimeError(f"Ray null run: {summary}")
    return {"wall": wall, "stages": summary["stage_seconds"]}


def _child(root: str, out: str) -> None:  # pragma: no cover - runs inside the namespace
    sys.path.insert(0, str(ROOT))
    from gpucli.core.config import RunConfig
    from gpucli.engines import run_engine

    summary = run_engine(RunConfig(task=NULL, model="minilm", paths=(root,), out=out, engine="ray",
                                   progress="off", quiet=True))
    print(json.dumps(summary.to_dict()))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3])
    else:
        import tempfile

        ctx = Context(quick="--quick" in sys.argv, reps=1, tmp=Path(tempfile.mkdtemp(prefix="gpucli-host-ray-")),
                      log=lambda m: print(m, file=sys.stderr, flush=True))
        for f in run(ctx):
            print(f"{f.name}: {f.runs} (median {median(f.runs) if f.runs else None}) {f.note}")
