"""Audio seconds per wall second of Whisper tiny.en transcription on this machine, side by side:

  loop         faster-whisper called once per file: `WhisperModel.transcribe(path, beam_size=5,
               vad_filter=True)`, the way most scripts do it
  loop-batched once per file through faster-whisper's `BatchedInferencePipeline` (batches the
               chunks of one file; a short clip is a batch of one)
  task         gpucli's transcribe task in this process: every file prepared (decode + VAD),
               then chunks of many files batched into one model call (no pipeline, no Parquet)
  gpucli       `gpucli transcribe DIR --out X.parquet --json` end to end: process start, model
               load in a spawned worker, reading, batching, Parquet; rate from its wall time

All use the same weights, compute type, beam size, VAD and threads. The corpus: the sample
clips, each re-written N/6 times with 0-2 s of silence before and after, random gain, and
one of 8/16/22.05/44.1 kHz, mono or stereo, WAV or FLAC.

    python benchmarks/transcribe_bench.py --clips 36 --repeats 2
"""

from __future__ import annotations

import argparse
import io
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
WAVS = ROOT / "sample_data" / "wavs"
sys.path.insert(0, str(ROOT))


def make_corpus(out: Path, count: int, seed: int = 0) -> tuple[list[Path], float]:
    import av

    from gpucli.tasks.transcribe import audio

    rng = random.Random(seed)
    clips = [audio.decode(p.read_bytes()) for p in sorted(WAVS.glob("*.wav"))]
    paths, seconds = [], 0.0
    for i in range(count):
        pcm = clips[i % len(clips)].astype(np.float32) / 32768.0 * rng.uniform(0.5, 1.0)
        pad = [np.zeros(int(rng.uniform(0, 2) * 16000), np.float32) for _ in range(2)]
        pcm = np.concatenate([pad[0], pcm, pad[1]])
        seconds += len(pcm) / 16000
        rate = rng.choice([8000, 16000, 22050, 44100])
        layout = rng.choice(["mono", "stereo"])
        fmt = rng.choice(["wav", "flac"])
        path = out / f"d{i % 4}" / f"clip{i:03d}.{fmt}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_encode(av, pcm, rate, layout, fmt))
        paths.append(path)
    return paths, seconds


def _encode(av, pcm: np.ndarray, rate: int, layout: str, fmt: str) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, "w", format=fmt) as out:
        stream = out.add_stream("pcm_s16le" if fmt == "wav" else "flac", rate=rate)
        stream.layout = layout
        frame = av.AudioFrame.from_ndarray((pcm[None, :] * 32767).astype(np.int16), format="s16", layout="mono")
        frame.sample_rate = 16000
        resampler = av.AudioResampler(format="s16", layout=layout, rate=rate)
        for chunk in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(chunk):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def threads() -> int:
    return len(os.sched_getaffinity(0))


def run_loop(paths: list[Path], model_path: str, compute: str, batched: bool) -> float:
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(model_path, device="cpu", compute_type=compute, cpu_threads=threads())
    runner = BatchedInferencePipeline(model) if batched else model
    runner.transcribe(str(paths[0]), beam_size=5, vad_filter=True, language="en")  # warm
    start = time.perf_counter()
    for path in paths:
        segments, _ = runner.transcribe(str(path), beam_size=5, vad_filter=True, language="en")
        "".join(s.text for s in segments)  # the generator does the work
    return time.perf_counter() - start


def run_task(paths: list[Path], batch_size: int) -> float:
    from gpucli.core.records import Source
    from gpucli.tasks import TaskSpec, create_task

    task = create_task(TaskSpec("transcribe", ""))
    task.open()
    task.setup("cpu")
    task.predict([task.prepare(Source(0, "w", "w"), paths[0].read_bytes())[0].payload])  # warm
    start = time.perf_counter()
    items = []
    for i, path in enumerate(paths):
        items += task.prepare(Source(i, path.name, str(path)), path.read_bytes())
    items.sort(key=lambda item: item.cost)  # the dispatcher sorts a window by cost too
    for at in range(0, len(items), batch_size):
        task.predict([item.payload for item in items[at:at + batch_size]])
    return time.perf_counter() - start


def run_gpucli(corpus: Path, out: Path, batch_size: int) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpucli", "transcribe", str(corpus), "--out", str(out), "--json",
                           "--devices", "cpu", "--progress", "off", "--full", "--batch-size", str(batch_size)],
                          capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"gpucli failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", type=int, default=36)
    parser.add_argument("--repeats", type=int, default=2, help="rounds, interleaved; the best of each is kept")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--modes", default="loop,loop-batched,task,gpucli")
    args = parser.parse_args()

    from gpucli.tasks.transcribe.task import _compute_type, _tiny_en_path

    compute = _compute_type("auto", "auto", "cpu", 0)
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory(prefix="gpucli-transcribe-bench-") as tmp:
        corpus = Path(tmp) / "corpus"
        paths, seconds = make_corpus(corpus, args.clips)
        print(f"corpus: {len(paths)} clips, {seconds:.1f} s of audio; whisper-tiny.en {compute}, beam 5, VAD on, "
              f"{threads()} threads, batch {args.batch_size}; load average {os.getloadavg()[0]:.2f}")
        best: dict[str, float] = {}
        for _ in range(args.repeats):
            for mode in modes:
                if mode == "loop":
                    took = run_loop(paths, _tiny_en_path(), compute, batched=False)
                elif mode == "loop-batched":
                    took = run_loop(paths, _tiny_en_path(), compute, batched=True)
                elif mode == "task":
                    took = run_task(paths, args.batch_size)
                else:
                    took, summary = run_gpucli(corpus, Path(tmp) / "out.parquet", args.batch_size)
                    assert summary["succeeded"] == len(paths), summary
                best[mode] = min(best.get(mode, float("inf")), took)
                print(f"  {mode:13s} {took:7.2f} s  {seconds / took:6.2f} audio s/s", flush=True)
        base = best.get("loop")
        print("best of each:")
        for mode, took in best.items():
            ratio = f"  {base / took:.2f}x loop" if base else ""
            print(f"  {mode:13s} {seconds / took:6.2f} audio s/s{ratio}")


if __name__ == "__main__":
    main()
