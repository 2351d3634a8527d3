"""Extraction throughput (the "documents" figure of benchmarks/README.md): gpucli's read stage on a tree of real
PDFs against a plain multi-process loop running the same library.

    python benchmarks/doc_corpus.py            # the corpus, once (~1 min; see there)
    python benchmarks/extract_bench.py         # 3 interleaved rounds: plain, plain+tokenize, gpucli, null device, ...
    python benchmarks/extract_bench.py --plain-only        # the reference alone
    python benchmarks/extract_bench.py --rounds 5 --copies 4   # the tree 4 times over (hard links)
    python benchmarks/run.py --only documents                  # the same figures in RESULTS.md

*Plain loop* (`--plain ROOT`, a fresh process): walk ROOT for *.pdf, then a `multiprocessing.Pool` of
`os.cpu_count()` processes, each file: `pypdfium2.PdfDocument(path)`, every page's
`get_textpage().get_text_bounded()` (what gpucli/inputs/extract/pdf.py calls), pages and text pages closed,
the document closed; the text's length comes back. Its JSON line: pages, `extract_s` (pool start to
last result), `total_s` (the process's own run, imports included).

*gpucli*: `python -m gpucli embed CORPUS/pdf --model TINY --out TMP.parquet --json --progress off
--devices cpu --backend torch --allow-empty` in a fresh process, TINY being benchmarks/host.py's
random 1-layer BERT (hidden 32, the default model's tokenizer) so that inference costs next to
nothing; a new output each round (no incremental skip). From its JSON summary: `elapsed_s`,
`stage_seconds` (`read` = wall time during which some chunk was being read, extracted, tokenized).

*Null device* (information): the same tree through benchmarks/drive.py with host.py's null device
(benchmarks/null_embed.py: the real embed task reads, extracts, tokenizes and chunks in the parent and
its reader processes; the worker computes nothing), so that its read stage is gpucli's read path alone,
with no model beside it on the cores.

Figures (pages/s of gpucli / pages/s of the plain loop; medians of the rounds):
  read stage   plain `extract_s` / gpucli `stage_seconds.read`          target >= 0.9 (the issue's)
  + tokenize   the same, against the plain loop that also tokenizes     info
  null device  plain `extract_s` / the null device run's read stage     info
  end to end   plain process wall / gpucli process wall (launch to exit: imports, model load and the
               Parquet write are gpucli's, the plain loop has none of them)           info
Pages/s per core = pages/s / cores. `--copies N` hard-links the tree N times (CACHE/pdf-xN) to
weigh fixed costs less. Until gpucli reads PDFs, its run finds 0 inputs and the figures say "not yet".
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import Context, Figure, bench_env, machine  # noqa: E402
from benchmarks.doc_corpus import DEFAULT_CACHE, load  # noqa: E402

TARGET = 0.9


_TOKENIZER = None


def _init_tokenizer(path: str) -> None:
    global _TOKENIZER
    from tokenizers import Tokenizer

    _TOKENIZER = Tokenizer.from_file(path)
    _TOKENIZER.no_truncation()  # gpucli cuts whole documents into windows itself


def _extract(path: str) -> tuple[int, int, int]:
    """One PDF: open, each page's text, close (then tokenized, for --plain-tokenize). (pages, chars, tokens)."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(path)
    try:
        texts, pages = [], len(document)
        for index in range(pages):
            page = document[index]
            textpage = page.get_textpage()
            texts.append(textpage.get_text_bounded())
            textpage.close()
            page.close()
    finally:
        document.close()
    text = "\n\n".join(texts)
    tokens = len(_TOKENIZER.encode(text, add_special_tokens=False).ids) if _TOKENIZER is not None else 0
    return pages, len(text), tokens


def plain_main(root: Path, tokenizer: str | None = None) -> None:
    """The reference: a pool of one process per core over every PDF under root; prints one JSON line."""
    t0 = time.perf_counter()
    import multiprocessing

    import pypdfium2  # noqa: F401 - imported before the fork, as a plain script would

    paths = sorted(str(Path(d) / f) for d, _, files in os.walk(root) for f in files if f.lower().endswith(".pdf"))
    t1 = time.perf_counter()
    with multiprocessing.Pool(os.cpu_count(), initializer=_init_tokenizer if tokenizer else None,
                              initargs=(tokenizer,) if tokenizer else ()) as pool:
        results = list(pool.imap_unordered(_extract, paths, chunksize=1))
    t2 = time.perf_counter()
    print(json.dumps({"files": len(paths), "pages": sum(r[0] for r in results), "chars": sum(r[1] for r in results),
                      "tokens": sum(r[2] for r in results), "processes": os.cpu_count(), "extract_s": t2 - t1,
                      "total_s": time.perf_counter() - t0}))


def _run(cmd: list[str], timeout: float) -> tuple[float, dict, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=bench_env(), cwd=ROOT, timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError(f"exit {proc.returncode}, no output: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return wall, json.loads(lines[-1]), proc.stderr


def plain(root: Path, tokenizer: Path | None = None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--plain", str(root)]
    wall, out, _ = _run(cmd + (["--tokenizer", str(tokenizer)] if tokenizer else []), timeout=1800)
    return {**out, "wall": wall}


def gpucli(root: Path, model: Path, work: Path) -> dict:
    out = work / "extract-bench.parquet"
    for stale in (out, work / "extract-bench.failures.jsonl"):
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "gpucli", "embed", str(root), "--model", str(model), "--out", str(out), "--json",
           "--progress", "off", "--devices", "cpu", "--backend", "torch", "--allow-empty"]
    wall, summary, err = _run(cmd, timeout=3600)
    return {"wall": wall, "summary": summary, "stderr_tail": err[-500:]}


def null_device(root: Path, work: Path) -> dict:
    """The same run with host.py's null device (benchmarks/null_embed.py through drive.py: the real
    embed task in the parent and its readers, a worker that computes nothing): gpucli's read path alone."""
    from benchmarks.common import drive

    out = work / "extract-null.parquet"
    shutil.rmtree(out, ignore_errors=True)
    (work / "extract-null.failures.jsonl").unlink(missing_ok=True)
    r = drive({"task": "benchmarks.null_embed:NullEmbedTask", "model": "minilm", "paths": [str(root)],
               "out": str(out)}, timeout=3600)
    s = r["summary"]
    return {"read": s["stage_seconds"]["read"], "elapsed_s": s["elapsed_s"], "inputs": s["inputs"], "rows": s["rows"]}


def tree(cache: Path, copies: int) -> Path:
    """CACHE/pdf itself, or CACHE/pdf-xN: N hard-linked copies of it (copy-0 ... copy-N-1)."""
    base = cache / "pdf"
    if copies <= 1:
        return base
    root = cache / f"pdf-x{copies}"
    for k in range(copies):
        for src in base.rglob("*.pdf"):
            dest = root / f"copy-{k}" / src.relative_to(base)
            if not dest.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    os.link(src, dest)
                except OSError:
                    shutil.copyfile(src, dest)
    return root


def measure(cache: Path, rounds: int, copies: int = 1, plain_only: bool = False, log=print) -> dict:
    manifest = load(cache)
    root = tree(cache, copies)
    pages, files = manifest["pages"] * copies, len(manifest["pdf"]) * copies
    cores = os.cpu_count() or 1
    model = None
    if not plain_only:
        from benchmarks.host import tiny_model

        model = tiny_model(cache / "tiny-bert")
    work = Path(tempfile.mkdtemp(prefix="gpucli-extract-bench-"))
    runs = []
    try:
        for r in range(rounds):
            load_avg = os.getloadavg()[0]
            p = plain(root)
            if p["pages"] != pages:
                raise RuntimeError(f"plain loop read {p['pages']} pages, the manifest says {pages}")
            row = {"round": r + 1, "load": load_avg, "plain": p}
            msg = (f"  round {r + 1} (load {load_avg:.2f}): plain {pages / p['extract_s']:.0f} pages/s "
                   f"({pages / p['extract_s'] / cores:.0f}/core), process {p['wall']:.2f}s")
            if model is not None:
                pt = plain(root, model / "tokenizer.json")
                row["plain_tok"] = pt
                msg += f"; plain + tokenize {pages / pt['extract_s']:.0f} pages/s ({pt['tokens']} tokens)"
                g = gpucli(root, model, work)
                s = g["summary"]
                row["gpucli"] = g
                if s.get("inputs"):
                    nul = null_device(root, work)
                    row["null"] = nul
                    row["read_null_ratio"] = p["extract_s"] / nul["read"] if nul["read"] else float("nan")
                    msg += f"; null device read {nul['read']:.2f}s ({pages / nul['read']:.0f} pages/s)"
                    read = s["stage_seconds"]["read"]
                    row["read_ratio"] = p["extract_s"] / read if read else float("nan")
                    row["e2e_ratio"] = p["wall"] / g["wall"]
                    row["read_tok_ratio"] = pt["extract_s"] / read if read else float("nan")
                    msg += (f"; gpucli {s['succeeded']}/{s['inputs']} inputs, {s['rows']} rows, read {read:.2f}s "
                            f"({pages / read:.0f} pages/s), elapsed {s['elapsed_s']:.2f}s, process {g['wall']:.2f}s, "
                            f"stages {s['stage_seconds']} -> read {row['read_ratio']:.2f}x, "
                            f"end to end {row['e2e_ratio']:.2f}x")
                else:
                    msg += f"; gpucli found 0 inputs (it reads no PDF yet): {g['stderr_tail'][-200:]!r}"
            log(msg)
            runs.append(row)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(), "cores": cores,
            "pages": pages, "files": files, "copies": copies, "rounds": runs, "load_after": os.getloadavg()[0]}


def summarize(result: dict) -> str:
    pages, cores, runs = result["pages"], result["cores"], result["rounds"]
    med = statistics.median
    plain_rate = med(pages / r["plain"]["extract_s"] for r in runs)
    loads = ", ".join(f"{r['load']:.2f}" for r in runs)
    lines = [f"{result['date']}; {result['machine']['cpu']}; {result['files']} PDFs, {pages} pages; "
             f"{len(runs)} interleaved round(s); load {loads} -> "
             f"{result['load_after']:.2f}", "",
             "| | pages/s | pages/s per core | seconds (extract or read / process) |", "|---|---|---|---|",
             f"| plain loop, Pool({cores}) | {plain_rate:.0f} | {plain_rate / cores:.0f} | "
             f"{med(r['plain']['extract_s'] for r in runs):.2f} / {med(r['plain']['wall'] for r in runs):.2f} |"]
    tok = [r for r in runs if "plain_tok" in r]
    if tok:
        rate = med(pages / r["plain_tok"]["extract_s"] for r in tok)
        lines.append(f"| plain loop + tokenize (info) | {rate:.0f} | {rate / cores:.0f} | "
                     f"{med(r['plain_tok']['extract_s'] for r in tok):.2f} / "
                     f"{med(r['plain_tok']['wall'] for r in tok):.2f} |")
    done = [r for r in runs if "read_ratio" in r]
    if done:
        read = med(r["gpucli"]["summary"]["stage_seconds"]["read"] for r in done)
        lines.append(f"| gpucli embed, read stage | {pages / read:.0f} | {pages / read / cores:.0f} | "
                     f"{read:.2f} / {med(r['gpucli']['wall'] for r in done):.2f} |")
        rr, ee, rt = [r["read_ratio"] for r in done], [r["e2e_ratio"] for r in done], [r["read_tok_ratio"] for r in done]
        rn = [r["read_null_ratio"] for r in done]
        nread = med(r["null"]["read"] for r in done)
        lines.append(f"| gpucli, null device, read stage (info) | {pages / nread:.0f} | {pages / nread / cores:.0f} | "
                     f"{nread:.2f} / — |")
        verdict = "pass" if med(rr) >= TARGET else "MISS"
        lines += ["", f"read stage, gpucli / plain: {min(rr):.2f} / {med(rr):.2f} / {max(rr):.2f} (min / median / max), "
                  f"target >= {TARGET}: {verdict}",
                  f"read stage, gpucli / plain loop + tokenize: {min(rt):.2f} / {med(rt):.2f} / {max(rt):.2f} (info)",
                  f"read stage, gpucli null device / plain: {min(rn):.2f} / {med(rn):.2f} / {max(rn):.2f} (info)",
                  f"end to end, gpucli / plain: {min(ee):.2f} / {med(ee):.2f} / {max(ee):.2f} (info)",
                  "gpucli stage_seconds (median): " + ", ".join(
                      f"{k} {med(r['gpucli']['summary']['stage_seconds'][k] for r in done):.2f}s"
                      for k in done[0]["gpucli"]["summary"]["stage_seconds"])
                  + f"; elapsed_s {med(r['gpucli']['summary']['elapsed_s'] for r in done):.2f}"]
    elif any("gpucli" in r for r in runs):
        lines += ["", "gpucli: not yet (it found 0 inputs: PDFs are not read by this checkout)"]
    return "\n".join(lines)


def run(ctx: Context) -> list[Figure]:
    """For benchmarks/run.py (`--only documents`): the read-stage figure, end to end beside it."""
    try:
        import pypdfium2  # noqa: F401
    except ImportError:
        return [Figure("documents", "documents: PDF read stage / plain loop", status="error",
                       note="pypdfium2 is not installed (pip install pypdfium2)")]
    cache = Path(os.environ.get("GPUCLI_BENCH_DOCS", DEFAULT_CACHE))
    if not load(cache)["pdf"]:
        return [Figure("documents", "documents: PDF read stage / plain loop", status="error",
                       note="no PDF in the corpus: apt-get install -y enscript ghostscript groff (doc_corpus.py)")]
    result = measure(cache, ctx.reps, log=ctx.log)
    done = [r for r in result["rounds"] if "read_ratio" in r]
    read = Figure("documents", f"documents: PDF read stage ({result['pages']} pages, 1-layer BERT) / plain "
                  f"Pool({result['cores']}) pypdfium2 loop", op=">=", target=TARGET)
    e2e = Figure("documents-e2e", "documents: PDF end to end (launch to exit) / plain loop")
    tok = Figure("documents-tok", "documents: PDF read stage / plain loop that also tokenizes")
    nul = Figure("documents-null", "documents: PDF read stage, null device / plain loop")
    for r in done:
        read.runs.append(r["read_ratio"])
        e2e.runs.append(r["e2e_ratio"])
        tok.runs.append(r["read_tok_ratio"])
        nul.runs.append(r["read_null_ratio"])
        detail = {"load": r["load"], "plain_extract_s": r["plain"]["extract_s"], "plain_wall": r["plain"]["wall"],
                  "gpucli_wall": r["gpucli"]["wall"], "elapsed_s": r["gpucli"]["summary"]["elapsed_s"],
                  "plain_tok_extract_s": r["plain_tok"]["extract_s"], "null_read_s": r["null"]["read"],
                  "stages": r["gpucli"]["summary"]["stage_seconds"]}
        read.details.append(detail)
        e2e.details.append(detail)
    if not done:
        read.status = e2e.status = tok.status = nul.status = "not yet"
        read.note = "gpucli found 0 PDF inputs"
    plain_rate = statistics.median(result["pages"] / r["plain"]["extract_s"] for r in result["rounds"])
    read.note = (read.note + "; " if read.note else "") + (
        f"plain loop {plain_rate:.0f} pages/s = {plain_rate / result['cores']:.0f} pages/s per core")
    return [read, tok, nul, e2e]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plain", type=Path, help=argparse.SUPPRESS)  # the child: the plain loop over this tree
    parser.add_argument("--tokenizer", help=argparse.SUPPRESS)  # the child: tokenize too (tokenizer.json)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--copies", type=int, default=1, help="the PDF tree N times over (hard links)")
    parser.add_argument("--plain-only", action="store_true", help="the plain loop alone")
    args = parser.parse_args()
    if args.plain:
        plain_main(args.plain, args.tokenizer)
        return 0
    try:
        import pypdfium2  # noqa: F401
    except ImportError:
        sys.exit("extract_bench: pip install pypdfium2")
    result = measure(args.cache, args.rounds, args.copies, args.plain_only,
                     log=lambda m: print(m, file=sys.stderr, flush=True))
    (args.cache / f"results-extract-bench-x{args.copies}.json").write_text(json.dumps(result, indent=1),
                                                                           encoding="utf-8")
    print(summarize(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
