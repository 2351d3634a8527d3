"""Images/s of `gpucli embed` with an image-text model (CLIP ViT-B/32) against a plain loop (issue 29).

  gpucli   `python -m gpucli embed DIR --model CLIP --out X.parquet --progress off --json`,
           default settings, a fresh process timed from launch to exit
  plain    a single-process loop as a user writes it, also a fresh process timed from launch
           to exit: Pillow open + exif_transpose + RGB, the model's own processor
           (AutoImageProcessor) on batches of 32 images, `get_image_features` on them under
           torch.inference_mode (torch's default threads), numpy L2 normalisation, one Parquet
           file written with pyarrow

They alternate, N rounds (default 3, the order swapped every round), on the same images. Each
round prints both rates and gpucli / plain; the end prints the medians, gpucli's stage_seconds
and the smallest cosine between the two sides' vectors of one image (every image is checked;
the same model and preprocessing give ~1.0, the check requires >= 0.9999).

The model: a randomly initialised `CLIPModel` of openai/clip-vit-base-patch32's shape
(`CLIPConfig` defaults: vision ViT-B/32 at 224 px, 12 layers of 768; text 12 layers of 512;
projection 512; ~151M parameters, ~600 MB), with a `CLIPImageProcessor` (shortest edge 224,
centre crop 224, bicubic, CLIP's mean and std) and a fast CLIP tokenizer (the tests' generated
vocab: texts are not measured here), saved with `save_pretrained` once into
~/.cache/gpucli-bench/clip-vit-base-patch32-random (`--cache DIR`, or GPUCLI_BENCH_CACHE for
the parent directory) and reused. Random weights compute as fast as the real ones.

The corpus: classify_bench's photos (sample_data/images cut with random crops, scales and
flips into JPEGs of about 640x480 to 1600x1200), written to a temp directory.

    python benchmarks/image_embed_bench.py                       # 200 images, 3 rounds
    python benchmarks/image_embed_bench.py --images 120 --rounds 3
    python benchmarks/image_embed_bench.py --json                # + the figures for run.py (last line)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CACHE = Path(os.environ.get("GPUCLI_BENCH_CACHE", Path.home() / ".cache" / "gpucli-bench"))
MODEL_NAME = "clip-vit-base-patch32-random"
BUILD_VERSION = 1  # bump when the model's files change: a cache of another version is rebuilt
BATCH = 32  # the plain loop's batch (images per processor call and per forward pass)
MIN_COSINE = 0.9999
OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
TIMEOUT_S = 1200


def build_model(cache: Path) -> Path:
    """The random CLIP B/32 in `cache` / MODEL_NAME, built once (~20 s, ~600 MB); BUILD.json is
    written last, so an interrupted build is redone."""
    path = cache / MODEL_NAME
    marker = path / "BUILD.json"
    try:
        if json.loads(marker.read_text(encoding="utf-8")).get("version") == BUILD_VERSION:
            return path
    except (OSError, ValueError, AttributeError):
        pass
    import torch
    import transformers

    from tests.image_text_models import save_clip_tokenizer

    t0 = time.perf_counter()
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = save_clip_tokenizer(path)
    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}  # CLIP's text tower pools at the tokenizer's end-of-text id
    config = transformers.CLIPConfig(text_config=ids)  # defaults: openai/clip-vit-base-patch32's shape
    torch.manual_seed(0)
    transformers.CLIPModel(config).eval().save_pretrained(path)
    processor = {
        "image_processor_type": "CLIPImageProcessor", "do_resize": True, "size": {"shortest_edge": 224},
        "resample": 3, "do_center_crop": True, "crop_size": {"height": 224, "width": 224}, "do_rescale": True,
        "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": OPENAI_CLIP_MEAN,
        "image_std": OPENAI_CLIP_STD, "do_convert_rgb": True,
    }  # fmt: skip  (openai/clip-vit-base-patch32's preprocessor_config.json; resample 3 = bicubic)
    (path / "preprocessor_config.json").write_text(json.dumps(processor, indent=2), encoding="utf-8")
    marker.write_text(json.dumps({"version": BUILD_VERSION, "transformers": transformers.__version__}),
                      encoding="utf-8")
    print(f"model built in {time.perf_counter() - t0:.1f}s: {path}", file=sys.stderr, flush=True)
    return path


# --- the plain loop (runs in its own process: `--plain-loop SRC OUT MODEL`) -----------------------


def plain_loop(src: Path, out: Path, model_dir: Path) -> dict:
    """What a user writes; returns its own split of the time (the caller times the process)."""
    t0 = time.perf_counter()
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from PIL import Image, ImageOps
    from transformers import AutoImageProcessor, AutoModel

    model = AutoModel.from_pretrained(model_dir).eval()
    processor = AutoImageProcessor.from_pretrained(model_dir)
    paths = sorted(p for p in src.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    t_loaded = time.perf_counter()
    decode_s = process_s = model_s = 0.0
    vectors = []
    with torch.inference_mode():
        for start in range(0, len(paths), BATCH):
            t = time.perf_counter()
            images = []
            for p in paths[start : start + BATCH]:
                with Image.open(p) as im:
                    images.append(ImageOps.exif_transpose(im).convert("RGB"))
            t1 = time.perf_counter()
            inputs = processor(images=images, return_tensors="pt")
            t2 = time.perf_counter()
            features = model.get_image_features(**inputs)
            if not isinstance(features, torch.Tensor):  # transformers 5: an output with pooler_output
                features = features.pooler_output
            vectors.append(features.numpy())
            t3 = time.perf_counter()
            decode_s, process_s, model_s = decode_s + t1 - t, process_s + t2 - t1, model_s + t3 - t2
    t = time.perf_counter()
    matrix = np.concatenate(vectors).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    table = pa.table({"path": [str(p) for p in paths],
                      "embedding": pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])})
    pq.write_table(table, out)
    return {"images": len(paths), "start_load_s": t_loaded - t0, "decode_s": decode_s, "processor_s": process_s,
            "model_s": model_s, "write_s": time.perf_counter() - t, "torch_threads": torch.get_num_threads()}


# --- the two sides, each a fresh process ------------------------------------------------------------


def _env() -> dict[str, str]:
    from benchmarks.common import bench_env

    return bench_env()


def run_gpucli(src: Path, model: Path, out: Path) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "gpucli", "embed", str(src), "--model", str(model), "--out", str(out),
           "--progress", "off", "--json"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=TIMEOUT_S)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"gpucli failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads([line for line in proc.stdout.splitlines() if line.strip()][-1])


def run_plain(src: Path, model: Path, out: Path) -> tuple[float, dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--plain-loop", str(src), str(out), str(model)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=TIMEOUT_S)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"plain loop failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, json.loads([line for line in proc.stdout.splitlines() if line.strip()][-1])


def min_cosine(gpucli_out: Path, plain_out: Path, count: int) -> tuple[float, str]:
    """The smallest cosine of one image's two vectors, over every image, and that image."""
    import numpy as np
    import pyarrow.parquet as pq

    def vectors(path: Path) -> dict[str, np.ndarray]:
        table = pq.read_table(path)
        root = Path((table.schema.metadata or {}).get(b"gpucli.root", b"/").decode())  # gpucli's paths are relative
        matrix = np.asarray(table.column("embedding").combine_chunks().flatten(), np.float32)
        matrix = matrix.reshape(len(table), -1)
        return {str((root / p).resolve()): row for p, row in zip(table.column("path").to_pylist(), matrix)}

    ours = vectors(gpucli_out)
    theirs = vectors(plain_out)
    if len(ours) != count or set(ours) != set(theirs):
        raise SystemExit(f"the outputs differ in their images: gpucli {len(ours)} rows, plain {len(theirs)}, "
                         f"{len(set(ours) ^ set(theirs))} paths on one side only")
    cosines = {p: float(np.dot(ours[p], theirs[p]) / (np.linalg.norm(ours[p]) * np.linalg.norm(theirs[p])))
               for p in ours}
    worst = min(cosines, key=cosines.get)
    return cosines[worst], worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=CACHE, help="where the model is built once (default %(default)s)")
    parser.add_argument("--quick", action="store_true", help="40 images, 1 round (run.py --quick)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on the last line (run.py)")
    parser.add_argument("--plain-loop", nargs=3, metavar=("SRC", "OUT", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain_loop:
        src, out, model = (Path(a) for a in args.plain_loop)
        print(json.dumps(plain_loop(src, out, model)))
        return 0
    if args.quick:
        args.images, args.rounds = 40, 1

    import numpy as np

    from benchmarks.classify_bench import _pixels, make_corpus

    model = build_model(args.cache)
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpucli-image-embed-bench-") as tmp:
        work = Path(tmp)
        paths = make_corpus(work / "images", args.images)
        mpix = np.mean([_pixels(p) for p in paths]) / 1e6
        print(f"corpus: {len(paths)} JPEGs, {mpix:.2f} Mpixel on average; model {model} "
              f"({sum(f.stat().st_size for f in model.glob('*.safetensors')) / 1e6:.0f} MB of weights); "
              f"cpus={os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start", flush=True)  # fmt: skip
        for r in range(args.rounds):
            gpucli_out, plain_out = work / f"gpucli-{r}" / "out.parquet", work / f"plain-{r}.parquet"
            gpucli_out.parent.mkdir()
            result: dict = {}
            order = ("gpucli", "plain") if r % 2 == 0 else ("plain", "gpucli")
            for side in order:
                if side == "gpucli":
                    result["gpucli_s"], result["summary"] = run_gpucli(work / "images", model, gpucli_out)
                else:
                    result["plain_s"], result["plain"] = run_plain(work / "images", model, plain_out)
            summary = result["summary"]
            if summary.get("succeeded") != len(paths) or summary.get("failed"):
                raise SystemExit(f"gpucli embedded {summary.get('succeeded')} of {len(paths)} images: {summary}")
            result["min_cosine"], result["worst"] = min_cosine(gpucli_out, plain_out, len(paths))
            result["ratio"] = result["plain_s"] / result["gpucli_s"]  # = gpucli images/s / plain images/s
            rounds.append(result)
            p = result["plain"]
            print(f"round {r + 1} ({' then '.join(order)}): gpucli {len(paths) / result['gpucli_s']:5.1f} images/s "
                  f"({result['gpucli_s']:.1f}s), plain {len(paths) / result['plain_s']:5.1f} images/s "
                  f"({result['plain_s']:.1f}s), gpucli / plain {result['ratio']:.2f}x; min cosine "
                  f"{result['min_cosine']:.6f}", flush=True)  # fmt: skip
            print(f"  gpucli: elapsed_s {summary.get('elapsed_s')}, devices {summary.get('devices')}, "
                  f"stage_seconds {summary.get('stage_seconds')}", flush=True)  # fmt: skip
            print(f"  plain:  start+load {p['start_load_s']:.1f}s, decode {p['decode_s']:.1f}s, processor "
                  f"{p['processor_s']:.1f}s, model {p['model_s']:.1f}s, write {p['write_s']:.2f}s "
                  f"(torch threads {p['torch_threads']}); load average {os.getloadavg()[0]:.1f}", flush=True)
    n = len(paths)
    g = statistics.median(n / r["gpucli_s"] for r in rounds)
    pl = statistics.median(n / r["plain_s"] for r in rounds)
    ratios = [r["ratio"] for r in rounds]
    cos = min(r["min_cosine"] for r in rounds)
    print(f"median of {len(rounds)}: gpucli {g:.1f} images/s, plain {pl:.1f} images/s, "
          f"gpucli / plain {statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})")
    print(f"min cosine gpucli vs plain over {n} images x {len(rounds)} round(s): {cos:.6f} "
          f"({'ok' if cos >= MIN_COSINE else 'BELOW'} {MIN_COSINE})")
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    if args.json:
        details = [{"gpucli_s": r["gpucli_s"], "plain_s": r["plain_s"], "min_cosine": r["min_cosine"],
                    "stage_seconds": r["summary"].get("stage_seconds"), "devices": r["summary"].get("devices"),
                    **{f"plain_{k}": v for k, v in r["plain"].items()}} for r in rounds]
        note = (f"{n} JPEGs (~{mpix:.2f} Mpixel), random CLIP ViT-B/32; both fresh processes, launch to exit; "
                f"plain = one process, AutoImageProcessor + get_image_features in batches of {BATCH}; "
                f"min cosine {cos:.6f}")
        figures = [{"key": "image-embed", "name": "image embed (CLIP B/32): gpucli / plain loop (images/s, end to end)",
                    "runs": ratios, "op": "", "note": note, "details": details}]
        if cos < MIN_COSINE:
            figures.append({"key": "image-embed-cosine", "name": "image embed: min cosine gpucli vs plain",
                            "runs": [cos], "op": ">=", "target": MIN_COSINE})
        print(json.dumps({"figures": figures}))
    return 0 if cos >= MIN_COSINE or args.json else 1  # under --json the figure says it


if __name__ == "__main__":
    sys.exit(main())
