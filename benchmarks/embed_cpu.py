"""Real model on this CPU: `gpucli embed` against sentence-transformers on the same texts.

Two corpora from the stdlib's docstrings (see corpus.py): short (one sentence per file,
~15 tokens) and long (~230-token passages: one chunk each for gpucli, nothing truncated
by sentence-transformers). Per repetition, interleaved so both sides meet the same load:
gpucli on short, the reference on short (batched, then one text at a time), gpucli on
long, the reference on long.

gpucli runs as a fresh process (benchmarks/drive.py: pipeline.run with default settings:
read files, tokenize, batch, one spawned worker, write Parquet). Its throughput counts
from the moment every worker has loaded the model to the end of the run (last part
durable, workers joined): model load is excluded, as it is for the reference, whose
texts are already in memory and whose model is loaded once (benchmarks/st_baseline.py).
Files read and tokenized while the model was loading are the pipeline's due (that is
what overlapping is for); it is small here (tokenizing costs ~1% of a forward pass).
The reference runs `encode` at each batch size on a sample and then on all texts at the
fastest one. Shown for information: the same ratios end to end (gpucli process start to
exit, against the reference's import + load + encode), and CPU seconds per document
(steady state, every process and thread), which the noise of a shared machine moves less.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from benchmarks.common import BENCH, Context, Figure, bench_env, drive, median
from benchmarks.corpus import long_texts, model_tokenizer, short_texts, stdlib_docstrings, write_tree

SIZES = {"short": 2000, "long": 300, "loop": 200}
QUICK_SIZES = {"short": 200, "long": 40, "loop": 40}
BATCH_SIZES = {"short": [16, 32, 64, 128], "long": [8, 16, 32, 64]}
SWEEP = {"short": 128, "long": 32}


class Reference:
    """The sentence-transformers process (st_baseline.py), one JSON line per command."""

    def __init__(self, stderr_path, python: str = sys.executable) -> None:
        """`python`: the interpreter it runs under (another venv's, for peers_e2e.py)."""
        self._stderr = open(stderr_path, "w")
        self.proc = subprocess.Popen([python, str(BENCH / "st_baseline.py")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=bench_env())
        self.info = self._reply()

    def ask(self, **command) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the sentence-transformers process died (exit {self.proc.poll()}); "
                               f"see {self._stderr.name}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._stderr.close()


def run(ctx: Context) -> list[Figure]:
    sizes = QUICK_SIZES if ctx.quick else SIZES
    tokenizer = model_tokenizer()
    docs = stdlib_docstrings()
    texts = {"short": short_texts(tokenizer, sizes["short"], docs), "long": long_texts(tokenizer, sizes["long"], docs=docs)}
    dirs, files = {}, {}
    for name, items in texts.items():
        dirs[name] = write_tree(ctx.tmp / f"embed-{name}", items)
        files[name] = ctx.tmp / f"embed-{name}.json"
        files[name].write_text(json.dumps(items), encoding="utf-8")
    ctx.log(f"  corpora: {sizes['short']} short files (~15 tokens), {sizes['long']} long files (~230 tokens)")
    ref = Reference(ctx.tmp / "st_baseline.stderr")
    ctx.log(f"  reference loaded: import {ref.info['import_s']:.1f}s, load {ref.info['load_s']:.1f}s, "
            f"{ref.info['threads']} torch threads")
    runs: list[dict] = []
    try:
        for rep in range(ctx.reps):
            r = {}
            for name in ("short", "long"):
                r[f"gpucli_{name}"] = gpucli_run(ctx, dirs[name], f"{name}-{rep}")
                r[f"st_{name}"] = ref.ask(op="encode", texts=str(files[name]), batch_sizes=BATCH_SIZES[name],
                                          sweep=min(SWEEP[name], len(texts[name])))
                if name == "short":
                    r["loop"] = ref.ask(op="loop", texts=str(files[name]), count=min(sizes["loop"], len(texts[name])))
            runs.append(r)
            ctx.log("  " + describe(rep, r))
    finally:
        ref.close()
    return figures(runs, ref.info, sizes)


def gpucli_run(ctx: Context, src, tag: str) -> dict:
    t0 = time.perf_counter()
    # torch, as the figure of record (docs/benchmarks.md) was measured; onnx_e2e.py measures the ONNX default
    r = drive({"task": "embed", "paths": [str(src)], "out": str(ctx.tmp / f"embed-out-{tag}.parquet"),
               "task_options": {"backend": "torch"}}, timeout=3600)
    r["wall_s"] = time.perf_counter() - t0
    s = r["summary"]
    if s["failed"] or s["succeeded"] != s["inputs"]:
        raise RuntimeError(f"gpucli embed did not embed every file: {s}")
    docs = s["succeeded"]
    cpu = r["cpu"]
    r["docs"] = docs
    r["rate"] = docs / (r["t_end"] - r["ready"])
    r["rate_e2e"] = docs / r["wall_s"]
    r["parent_cpu_per_doc"] = (cpu["parent_end"] - cpu["parent_ready"]) / docs
    r["cpu_per_doc"] = r["parent_cpu_per_doc"] + (cpu["workers_stop"] - cpu["workers_ready"]) / docs
    r["load_s"] = r["ready"] - r["pool_start"]
    return r


def describe(rep: int, r: dict) -> str:
    parts = []
    for name in ("short", "long"):
        g, st = r[f"gpucli_{name}"], r[f"st_{name}"]
        parts.append(f"{name}: gpucli {g['rate']:.1f}/s (load {g['load_s']:.1f}s, e2e {g['rate_e2e']:.1f}/s) vs "
                     f"ST {st['n'] / st['wall_s']:.1f}/s at batch {st['best_batch_size']}")
    loop = r["loop"]
    parts.append(f"loop {loop['n'] / loop['wall_s']:.1f}/s")
    return f"embed run {rep + 1}: " + "; ".join(parts)


def figures(runs: list[dict], ref_info: dict, sizes: dict) -> list[Figure]:
    fixed_ref = ref_info["import_s"] + ref_info["load_s"]
    out = []
    for name in ("short", "long"):
        main = Figure(f"embed-{name}", f"embed {name}: gpucli / ST encode (docs/s, model loaded)", op=">=", target=1.0,
                      note=f"{sizes[name]} files")
        cpu = Figure(f"embed-{name}-cpu", f"embed {name}: CPU s/doc, ST / gpucli (info)")
        e2e = Figure(f"embed-{name}-e2e", f"embed {name}: end to end incl. start + load, gpucli / ST (info)")
        for r in runs:
            g, st = r[f"gpucli_{name}"], r[f"st_{name}"]
            st_rate = st["n"] / st["wall_s"]
            main.runs.append(g["rate"] / st_rate)
            cpu.runs.append((st["cpu_s"] / st["n"]) / g["cpu_per_doc"])
            e2e.runs.append(g["rate_e2e"] / (st["n"] / (fixed_ref + st["wall_s"])))
            detail = {"gpucli_docs_s": g["rate"], "st_docs_s": st_rate, "st_best_batch": st["best_batch_size"],
                      "st_sweep_docs_s": st["sweep_rates"], "gpucli_e2e_docs_s": g["rate_e2e"],
                      "gpucli_model_load_s": g["load_s"], "gpucli_stage_seconds": g["summary"]["stage_seconds"],
                      "gpucli_rows": g["summary"]["rows"], "gpucli_cpu_s_per_doc": g["cpu_per_doc"],
                      "gpucli_parent_cpu_s_per_doc": g["parent_cpu_per_doc"],
                      "gpucli_steady_s": g["t_end"] - g["ready"], "gpucli_stop_to_end_s": g["t_end"] - g["stop"],
                      "gpucli_worker_join_s": g.get("stopped", g["stop"]) - g["stop"],
                      "st_cpu_s_per_doc": st["cpu_s"] / st["n"]}
            main.details.append(detail)
        main.note += (f"; median gpucli {median([d['gpucli_docs_s'] for d in main.details]):.1f} docs/s, "
                      f"ST {median([d['st_docs_s'] for d in main.details]):.1f} docs/s")
        out += [main, cpu, e2e]
    loop_fig = Figure("embed-short-loop", "embed short: gpucli / per-file loop (docs/s)", op=">=", target=3.0,
                      note=f"loop: encode(text) one at a time on {sizes['loop']} texts")
    for r in runs:
        loop_rate = r["loop"]["n"] / r["loop"]["wall_s"]
        loop_fig.runs.append(r["gpucli_short"]["rate"] / loop_rate)
        loop_fig.details.append({"gpucli_docs_s": r["gpucli_short"]["rate"], "loop_docs_s": loop_rate})
    loop_fig.note += f"; median loop {median([d['loop_docs_s'] for d in loop_fig.details]):.1f} docs/s"
    out.insert(1, loop_fig)
    return out
