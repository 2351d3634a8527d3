"""Flat memory: peak RSS of the whole process tree (gpucli's process + its spawned workers)
for 10k and for 100k tiny files, with the fake task (tests/fake_task.py: no model, so the
pipeline's own memory is what is measured). Target: the 100k peak <= 1.2 x the 10k peak.

RSS is sampled every 20 ms by psutil from outside (benchmarks/common.py TreeRss). The
figure adds the parent's peak and the workers' peak (their RSS summed at each sample):
an upper bound of the tree's peak that does not depend on whether the parent happened
to peak while the workers were alive (at 10k files it peaks while writing the final part,
after the workers have exited; at 100k, mid-run). The peak of the simultaneous sum is
shown beside it, and so are the parent's peaks alone (where any growth lives).
"""

from __future__ import annotations

from benchmarks.common import Context, Figure, TreeRss, drive, median
from benchmarks.corpus import tiny_texts, write_tree

SIZES = (10_000, 100_000)
QUICK_SIZES = (2_000, 20_000)
BATCH = 64
MB = 2**20


def run(ctx: Context) -> list[Figure]:
    small, large = QUICK_SIZES if ctx.quick else SIZES
    trees = {n: write_tree(ctx.tmp / f"memory-{n}", tiny_texts(n)) for n in (small, large)}
    fig = Figure("memory", f"memory: peak RSS {large // 1000}k / {small // 1000}k files", op="<=", target=1.2,
                 note=f"fake task, batch {BATCH}, Parquet out, default part_rows")
    parent = Figure("memory-parent", f"memory: parent's peak RSS {large // 1000}k / {small // 1000}k (info)")
    for rep in range(ctx.reps):
        peaks = {}
        for n in (small, large):
            sampler = TreeRss()
            r = drive({"task": "tests.fake_task:FakeTask", "paths": [str(trees[n])], "batch_size": BATCH,
                       "out": str(ctx.tmp / f"memory-out-{n}-{rep}.parquet")}, timeout=3600,
                      on_start=lambda proc, s=sampler: s.start(proc.pid))
            sampler.stop()
            if r["summary"]["succeeded"] != n:
                raise RuntimeError(f"memory run on {n} files: {r['summary']}")
            peaks[n] = {"total_mb": (sampler.peak_root + sampler.peak_children) / MB,
                        "simultaneous_mb": sampler.peak_total / MB, "parent_mb": sampler.peak_root / MB,
                        "workers_mb": sampler.peak_children / MB, "elapsed_s": r["summary"]["elapsed_s"],
                        "samples": sampler.samples}
        fig.runs.append(peaks[large]["total_mb"] / peaks[small]["total_mb"])
        parent.runs.append(peaks[large]["parent_mb"] / peaks[small]["parent_mb"])
        fig.details.append({f"{n}": peaks[n] for n in peaks})
        ctx.log(f"  memory run {rep + 1}: " + ", ".join(
            f"{n} files: tree {p['total_mb']:.0f} MB (parent {p['parent_mb']:.0f}, workers {p['workers_mb']:.0f}), "
            f"{p['elapsed_s']:.1f}s" for n, p in peaks.items()) + f" -> {fig.runs[-1]:.2f}×")
    for n in (small, large):
        fig.note += (f"; {n // 1000}k: median tree {median([d[str(n)]['total_mb'] for d in fig.details]):.0f} MB "
                     f"(parent {median([d[str(n)]['parent_mb'] for d in fig.details]):.0f} MB)")
    return [fig, parent]
