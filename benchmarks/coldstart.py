"""Cold start: `gpucli embed` on 10 files against a minimal script with the same model.

Both run as fresh processes, timed from launch to exit: `python -m gpucli embed DIR --out
X.parquet --quiet` (the CLI a user types: imports, spawns one worker that imports torch and
loads the model, reads, writes Parquet, joins) against benchmarks/minimal_embed.py (import
torch + transformers, load, read, encode in one batch, write one Parquet file). The order
alternates between repetitions so neither always runs with warmer caches.
"""

from __future__ import annotations

import sys

from benchmarks.common import BENCH, Context, Figure, median, timed_subprocess
from benchmarks.corpus import model_tokenizer, short_texts, write_tree

FILES = 10


def run(ctx: Context) -> list[Figure]:
    src = write_tree(ctx.tmp / "cold-in", short_texts(model_tokenizer(), FILES))
    fig = Figure("cold-start", f"cold start: gpucli / minimal script ({FILES} files, wall)", op="<=", target=1.5,
                 note="both fresh processes, launch to exit")
    for rep in range(ctx.reps):
        # --backend torch: the same model path as the minimal script (the ONNX default: onnx_e2e.py)
        gpucli_cmd = [sys.executable, "-m", "gpucli", "embed", str(src), "--out",
                      str(ctx.tmp / f"cold-out-{rep}.parquet"), "--quiet", "--devices", "cpu", "--backend", "torch"]
        minimal_cmd = [sys.executable, str(BENCH / "minimal_embed.py"), str(src), str(ctx.tmp / f"cold-min-{rep}.parquet")]
        walls = {}
        order = (("gpucli", gpucli_cmd), ("minimal", minimal_cmd))
        for name, cmd in order if rep % 2 == 0 else reversed(order):
            walls[name] = timed_subprocess(cmd, timeout=900)
        fig.runs.append(walls["gpucli"] / walls["minimal"])
        fig.details.append({"gpucli_s": walls["gpucli"], "minimal_s": walls["minimal"]})
        ctx.log(f"  cold start run {rep + 1}: gpucli {walls['gpucli']:.1f}s, minimal {walls['minimal']:.1f}s "
                f"-> {fig.runs[-1]:.2f}×")
    fig.note += (f"; medians: gpucli {median([d['gpucli_s'] for d in fig.details]):.1f} s, "
                 f"minimal {median([d['minimal_s'] for d in fig.details]):.1f} s")
    return [fig]
