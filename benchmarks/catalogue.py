"""Every script of benchmarks/: what it measures, where its figures are kept, and the date of its
last figure. `python benchmarks/run.py --list` prints it; benchmarks/README.md's table is this
catalogue (tests/unit/test_benchmarks_catalogue.py holds the two together).

Roles: `figure` scripts are run by run.py (`--only NAME`) and write RESULTS.md; `separate` ones
run on their own (`python benchmarks/run.py NAME [ARGS]`) and keep their own results file;
`helper` modules are what the others use (a corpus, a reference, a driver).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATE = re.compile(r"\b(20\d\d-\d\d-\d\d)\b")


@dataclass(frozen=True)
class Script:
    file: str
    role: str  # figure | separate | helper
    measures: str
    kept_in: str = ""  # the results file (or the docstring) that holds its latest figure
    figure: str = ""  # run.py's name for it (--only), for a `figure` script
    section: str = ""  # the heading of its section in a results file that holds several
    written: str = ""  # the date of a figure kept in a docstring or a doc (no results file dates it)


SCRIPTS = [
    Script("run.py", "helper", "the entry point: the figures of RESULTS.md, --list, and any separate script by name"),
    Script("overlap.py", "figure", "wall / max(device, sink) with a simulated device and a slow sink",
           "RESULTS.md", "overlap"),
    Script("embed_cpu.py", "figure", "gpucli embed docs/s / sentence-transformers encode (short, long texts), "
           "/ a per-file loop", "RESULTS.md", "embed"),
    Script("memory.py", "figure", "peak RSS of the process tree, 100k files / 10k", "RESULTS.md", "memory"),
    Script("host.py", "figure", "the parent's host path: null device and 1-layer BERT / a plain in-process loop; "
           "CPU per file; RSS growth per input", "RESULTS.md", "host"),
    Script("host_ray.py", "figure", "the null-device run on the Ray engine / the local engine", "RESULTS.md",
           "host-ray"),
    Script("coldstart.py", "figure", "gpucli embed on 10 files / a minimal script, launch to exit", "RESULTS.md",
           "cold-start"),
    Script("classify_bench.py", "figure", "classify images/s: gpucli and batched loops / a per-image loop",
           "RESULTS.md", "classify"),
    Script("transcribe_bench.py", "figure", "transcribe audio s/s: gpucli and a batched loop / a per-file loop",
           "RESULTS.md", "transcribe"),
    Script("image_embed_bench.py", "figure", "embed with an image-text model images/s / a plain loop; cosine of "
           "the two sides' vectors", "RESULTS.md", "image-embed", "## Image embedding"),
    Script("extract_bench.py", "figure", "PDF pages/s of embed's read stage / a plain multi-process loop",
           "RESULTS-docs.md", "documents"),
    Script("external.py", "helper", "runs classify_bench, transcribe_bench and image_embed_bench for run.py"),
    Script("cpu_e2e.py", "separate", "a CPU box, defaults, launch to exit / sentence-transformers encode and "
           "/ the script a user writes; where start-up goes", "RESULTS-cpu.md"),
    Script("onnx_e2e.py", "separate", "gpucli torch / onnx / onnx-int8 end to end / a sentence-transformers "
           "script; classify onnx / torch", "RESULTS-onnx.md"),
    Script("onnx_bench.py", "separate", "ONNX Runtime / torch in one process, texts in memory (the figures in "
           "gpucli/models/backends/onnx/ docstrings)", "its docstring", written="2026-12-02"),
    Script("ray_bench.py", "separate", "local engine / Ray one node / Ray two nodes, start-up and steady",
           "RESULTS-ray.md"),
    Script("bucket_bench.py", "separate", "objects/s from a local S3 server: gpucli's reader / one request at a "
           "time", "RESULTS-buckets.md"),
    Script("search_latency.py", "separate", "an installed gpucli search, launch to exit: Parquet and qdrant: at "
           "2,000 paragraphs, qdrant: / Parquet at 100k", "RESULTS-search.md"),
    Script("peers_e2e.py", "separate", "the README install's gpucli, launch to exit / the scripts users write "
           "instead (sentence-transformers on torch, ONNX, int8; fastembed) and / ST encode in memory",
           "RESULTS-cpu.md"),
    Script("peers.sh", "helper", "makes the peers' venv and their local ONNX files (for peers_e2e.py)"),
    Script("peers.py", "helper", "the peers' scripts, run in their own venv (for peers_e2e.py)"),
    Script("watch_latency.py", "separate", "--watch: a file saved into a watched tree, its close to its row "
           "durable and readable (median, p95 of 100); gpucli search finds it", "RESULTS-watch.md"),
    Script("embedded_qdrant.py", "separate", "qdrant: / Parquet writes, search latency, recall@10, RSS",
           "RESULTS-qdrant.md"),
    Script("vector_types_bench.py", "separate", "recall@10 of each --vector-type / float32, bytes per vector",
           "RESULTS.md", section="## Stored vector types"),
    Script("dedup_bench.py", "separate", "model time with dedup / --no-dedup on a tree of copies", "RESULTS.md",
           section="## Identical content once"),
    Script("extract_candidates.py", "separate", "PDF and HTML libraries: speed and text quality",
           "RESULTS-docs.md"),
    Script("stores_bench.py", "separate", "PostgreSQL commit step / psycopg's COPY alone; LanceDB writes / "
           "Parquet / table.add; CLI writes, search, recall@10", "RESULTS-stores.md"),
    Script("compaction.py", "separate", "a Parquet output after 1,000 one-file runs: parts left, a full scan "
           "before and after compaction", "docs/outputs-and-columns.md", written="2026-12-06"),
    Script("subtitles.py", "separate", "cues on real speech: sentence ends off a cue boundary, cue lengths; "
           "the word alignment's cost", "docs/subtitles.md", written="2026-12-06"),
    Script("encodings.py", "separate", "the encoding detector on texts of known truth: wrong decodings "
           "(target 0) and recall", "docs/encodings.md", written="2026-12-06"),
    Script("scripts.py", "separate", "the script rule on man pages: texts caught per language, English texts "
           "wrongly refused (target 0)", "docs/languages.md", written="2026-12-06"),
    Script("ocr.py", "separate", "OCR pages/s on one core and word recall on 10 scanned pages", "docs/ocr.md",
           written="2026-12-04"),
    Script("page_faults.py", "separate", "page faults per forward pass with and without the worker's allocator "
           "setting", "its docstring", written="2026-12-02"),
    Script("gpu.sh", "separate", "the GPU figures (gpu_bench.py): docs/s / sentence-transformers, GPU busy, "
           "classify / a loop", "its output ($OUT_DIR)", written="2026-11-30"),
    Script("gpu_bench.py", "helper", "what gpu.sh runs"),
    Script("common.py", "helper", "figures, subprocess and RSS helpers, machine info"),
    Script("corpus.py", "helper", "corpora from the standard library's docstrings"),
    Script("doc_corpus.py", "helper", "the real-document corpus, cached outside the repository"),
    Script("drive.py", "helper", "one pipeline job in a fresh process, with timing hooks"),
    Script("sim.py", "helper", "the simulated device and sink of the overlap figure"),
    Script("st_baseline.py", "helper", "the sentence-transformers reference process"),
    Script("minimal_embed.py", "helper", "the cold-start reference script"),
    Script("null_embed.py", "helper", "the null device: the real embed task, a worker that returns a constant"),
    Script("plain_loop.py", "helper", "the plain in-process loop of the host figures"),
    Script("cli_timeline.py", "helper", "the real CLI's wall time, mark by mark (for cpu_e2e.py)"),
    Script("latency_proxy.py", "helper", "a TCP relay that delays every byte (for bucket_bench.py)"),
]
BY_NAME = {s.file.rsplit(".", 1)[0]: s for s in SCRIPTS}


def last_figure(script: Script) -> str:
    """The date of the script's latest figure, from where it is kept; "" for a helper."""
    if script.role == "helper":
        return ""
    if script.written:
        return script.written
    if script.figure and script.kept_in == "RESULTS.md":
        runs = json.loads((HERE / "RESULTS.json").read_text(encoding="utf-8")).get("runs", {})
        if script.figure in runs:
            return runs[script.figure]["meta"]["date"][:10]
    text = (HERE / script.kept_in).read_text(encoding="utf-8")
    if script.section:
        start = text.index(script.section)
        end = text.find("\n## ", start + 1)
        text = text[start:end if end > 0 else len(text)]
    return max(DATE.findall(text), default="")


def listing() -> str:
    rows = [("script", "role", "figures in", "last figure", "what it measures")]
    rows += [(s.file, s.role, s.kept_in or "-", last_figure(s) or "-", s.measures) for s in SCRIPTS]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4] for row in rows)
