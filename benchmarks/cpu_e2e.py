"""A CPU box against the sentence-transformers script people would write (issue 34).

Corpus: real paragraphs, one to a few hundred tokens: those of /usr/share/doc's READMEs, NEWS, change
logs and text files (`--corpus doc`, the default; ~290,000 on a Debian machine) or of the Python
standard library's docstrings (`--corpus stdlib`, ~12,600, shorter), cut at blank lines, whitespace
collapsed, mostly letters, 3-400 tokens, distinct, shuffled with a fixed seed (past the end each is
repeated with a numeral, so that no two files are the same and nothing is deduplicated). One .txt
file per paragraph.

Each round, in this order (interleaved, so that the machine's load falls on each alike):
  gpucli        `python -m gpucli embed DIR --out NEW.parquet --progress off`, the defaults (ONNX
                Runtime on a CPU host, its graph already exported), launch to exit
  timeline      the same through benchmarks/cli_timeline.py: where that wall time went (info)
  before        with --before CHECKOUT: the same command from another checkout (PYTHONPATH), for a
                before / after figure
  ST encode     sentence-transformers `encode` on the texts already in memory, model loaded, at the
                fastest of its batch sizes on a sample (benchmarks/st_baseline.py, a long-lived process)
  ST script     the script a user writes instead: start, import, load, read the files, `encode` at
                that batch size, write Parquet (onnx_e2e.ST_SCRIPT), launch to exit
Figures (median of the rounds; every round printed): gpucli / ST encode and gpucli / ST script, as
speed ratios (their wall time / gpucli's); start-up: launch to the first result. After the rounds:
min cosine of gpucli's vectors to the ST script's on every file (>= 0.9999).

    python benchmarks/cpu_e2e.py [--docs 2000] [--rounds 3] [--before /tmp/before] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import bench_env  # noqa: E402
from benchmarks.corpus import DOCSTRING, SKIP_PARTS, model_tokenizer, write_tree  # noqa: E402
from benchmarks.embed_cpu import Reference  # noqa: E402
from benchmarks.onnx_e2e import ST_SCRIPT  # noqa: E402

BATCH_SIZES = [8, 16, 32, 64]
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
SWEEP = 400


def paragraphs(count: int, corpus: str = "doc") -> list[str]:
    """`count` distinct real paragraphs of 3-400 tokens (see the module doc)."""
    found = list(dict.fromkeys(debian_doc_paragraphs() if corpus == "doc" else stdlib_paragraphs()))
    tokenizer = model_tokenizer()
    unk = tokenizer.token_to_id("[UNK]")
    encodings = tokenizer.encode_batch(found, add_special_tokens=False)
    # English only: a paragraph in a script the model cannot read is a failure record for gpucli
    # (its unknown-token rule), not work, and would make the run exit 1
    kept = [p for p, e in zip(found, encodings) if 3 <= len(e.ids) <= 400 and e.ids.count(unk) <= 0.05 * len(e.ids)]
    random.Random(34).shuffle(kept)
    # a control character makes gpucli take the text for binary (a failure record, exit 1): dropped after the
    # shuffle, so the corpora measured before this filter are unchanged where they held none
    kept = [p for p in kept if not CONTROL.search(p)]
    out = kept[:count]
    while len(out) < count:
        out += [f"{p} ({len(out) // len(kept)})" for p in kept[: count - len(out)]]
    return out


def cached_paragraphs(count: int, corpus: str = "doc", cache: Path | None = None) -> tuple[list[str], str]:
    """paragraphs(), kept in a file the first time (`cache`, default ~/.cache/gpucli-bench or
    GPUCLI_BENCH_CACHE): /usr/share/doc changes whenever someone installs a Debian package (here the
    corpus of two runs an hour apart differed), so later runs on this machine read the same texts.
    Remove the file to build it again. Returns the texts and a digest of them, to print beside figures."""
    import hashlib

    cache = cache or Path(os.environ.get("GPUCLI_BENCH_CACHE", Path.home() / ".cache" / "gpucli-bench"))
    path = cache / f"paragraphs-{corpus}-{count}.json"
    if path.exists():
        texts = json.loads(path.read_text(encoding="utf-8"))
    else:
        texts = paragraphs(count, corpus)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(texts), encoding="utf-8")
    return texts, hashlib.sha256("\0".join(texts).encode()).hexdigest()[:12]


def prose(piece: str) -> str | None:
    """A paragraph with its whitespace collapsed, if it is mostly letters (not a table or code)."""
    piece = " ".join(piece.split())
    return piece if len(piece) >= 20 and sum(c.isalpha() for c in piece) > 0.6 * len(piece) else None


def stdlib_paragraphs() -> list[str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(lib.rglob("*.py")):
        if SKIP_PARTS & set(path.relative_to(lib).parts):
            continue
        for doc in DOCSTRING.findall(path.read_text(encoding="utf-8", errors="replace")):
            out += [p for piece in re.split(r"\n\s*\n", doc) if (p := prose(piece))]
    return out


def debian_doc_paragraphs() -> list[str]:
    """The paragraphs of /usr/share/doc's READMEs, NEWS, change logs and text files (Debian):
    longer than the docstrings (median ~27 tokens, mean ~44, p90 ~93 against 17 / 29 / 64)."""
    import gzip

    out = []
    for path in sorted(Path("/usr/share/doc").rglob("*")):
        name = path.name
        try:
            if name.endswith(".gz") and re.search(r"README|NEWS|changelog", name, re.I):
                text = gzip.open(path, "rt", errors="replace").read()
            elif path.suffix in (".txt", ".md", "") and re.search(r"README|\.txt$|\.md$", name) and path.is_file():
                text = path.read_text(errors="replace")
            else:
                continue
        except (OSError, EOFError, UnicodeError):
            continue
        out += [p for piece in re.split(r"\n\s*\n", text) if (p := prose(piece))]
    if len(out) < 1000:
        raise SystemExit("/usr/share/doc holds too few paragraphs here: use --corpus stdlib")
    return out


def timed(cmd: list[str], env: dict | None = None, cwd: Path = ROOT) -> float:
    """Wall seconds, launch to exit. `python -m` puts the working directory first on sys.path:
    a run of another checkout starts in it."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env or bench_env(), cwd=cwd, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def gpucli_cmd(src: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "gpucli", "embed", str(src), "--out", str(out), "--progress", "off"]


def gpucli_env(checkout: Path | None = None) -> dict:
    env = bench_env()
    env.pop("GPUCLI_BACKEND", None)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), env.get("PYTHONPATH", "")])
    return env


def timeline(src: Path, out: Path, tl: Path) -> dict:
    t0 = time.perf_counter()
    cmd = [sys.executable, str(ROOT / "benchmarks" / "cli_timeline.py"), str(tl), *gpucli_cmd(src, out)[3:]]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=gpucli_env(), cwd=ROOT, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"the timeline run failed:\n{proc.stderr[-3000:]}")
    data = json.loads(tl.read_text())
    data["wall_s"] = wall
    return data


def describe_timeline(t: dict) -> str:
    m, cpu, workers = t["marks"], t["cpu"], t["workers"]
    ready = ", ".join(f"{w['ready']:.2f} s ({w['cpu_ready']:.2f} CPU-s)" for w in workers)
    busy = ", ".join(f"{w['cpu_stop'] - w['cpu_ready']:.2f}" for w in workers)
    return (f"imports done {m['imported']:.2f} s ({cpu['imported']:.2f} CPU-s) · workers asked {m['pool_start']:.2f} s "
            f"({cpu['pool_start']:.2f}) · first batch sent {m['first_sent']:.2f} · workers ready {ready} · first "
            f"result {m['first_result']:.2f} · last result {m['last_result']:.2f} · main returned {m['exit']:.2f} "
            f"(parent {cpu['exit']:.2f} CPU-s; workers' CPU-s after ready {busy}) · exit {t['wall_s']:.2f}")


def cosines(gpucli_out: Path, st_out: Path) -> float:
    import numpy as np
    import pyarrow.parquet as pq

    st = pq.read_table(st_out)
    st_vectors = dict(zip(st.column("path").to_pylist(), st.column("embedding").to_numpy(zero_copy_only=False)))
    ours = pq.read_table(gpucli_out, columns=["path", "chunk", "embedding"]).to_pylist()
    first = {r["path"]: np.asarray(r["embedding"]) for r in ours if r["chunk"] == 0}
    single = {p for p in first if sum(1 for r in ours if r["path"] == p) == 1}  # one window: ST's own vector
    return min(float(np.dot(first[p], st_vectors[p])) for p in single)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--corpus", choices=("doc", "stdlib"), default="doc",
                        help="paragraphs of /usr/share/doc (Debian; default) or of the stdlib's docstrings")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout of gpucli to run beside this one")
    parser.add_argument("--no-timeline", action="store_true", help="skip the timeline run (info)")
    parser.add_argument("--no-script", action="store_true", help="skip the ST script (the 20,000 figure is / encode)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpu-e2e-") as tmp_name:
        tmp = Path(tmp_name)
        texts = paragraphs(args.docs, args.corpus)
        src = write_tree(tmp / "docs", texts)
        texts_file = tmp / "texts.json"
        # the ST script reads the files in sorted order; encode gets the same texts in that order
        texts_file.write_text(json.dumps([p.read_text(encoding="utf-8") for p in sorted(src.rglob("*.txt"))]))
        print(f"corpus: {args.docs} paragraphs, {sum(len(t) for t in texts) / 1e6:.1f} MB", file=sys.stderr)
        timed(gpucli_cmd(src, tmp / "warm.parquet"), gpucli_env())  # exports the graph once if not cached
        ref = Reference(tmp / "st.stderr")
        rounds = []
        try:
            for r in range(args.rounds):
                row: dict = {}
                row["gpucli"] = timed(gpucli_cmd(src, tmp / f"g{r}.parquet"), gpucli_env())
                if not args.no_timeline:
                    row["timeline"] = timeline(src, tmp / f"t{r}.parquet", tmp / f"t{r}.json")
                if args.before:
                    row["before"] = timed(gpucli_cmd(src, tmp / f"b{r}.parquet"), gpucli_env(args.before), args.before)
                enc = ref.ask(op="encode", texts=str(texts_file), batch_sizes=BATCH_SIZES, sweep=SWEEP)
                row["st_encode"], row["st_batch"] = enc["wall_s"], enc["best_batch_size"]
                if not args.no_script:
                    row["st_script"] = timed([sys.executable, "-c", ST_SCRIPT, str(src), str(tmp / f"s{r}.parquet"),
                                              str(enc["best_batch_size"])])
                rounds.append(row)
                print(f"round {r + 1}: " + " · ".join(f"{k} {v:.2f} s" for k, v in row.items()
                                                        if isinstance(v, float)) + f" (ST batch {row['st_batch']})",
                      file=sys.stderr)
                if "timeline" in row:
                    print("  timeline: " + describe_timeline(row["timeline"]), file=sys.stderr)
        finally:
            ref.close()
        cos = None if args.no_script else cosines(tmp / "g0.parquet", tmp / "s0.parquet")
    report(args, rounds, cos)


def report(args, rounds: list[dict], cos: float | None) -> None:
    def ratios(key: str, over: str = "gpucli") -> list[float]:
        return [r[key] / r[over] for r in rounds]

    def line(name: str, values: list[float], target: str = "") -> str:
        shown = " / ".join(f"{v:.2f}" for v in values)
        return f"| {name} | {shown} | **{statistics.median(values):.2f}** | {target} |"

    print(f"\n{args.docs} paragraphs, {len(rounds)} rounds (each run listed, then the median)\n")
    print("| figure | runs | median | target |\n|---|---|---|---|")
    print(line("gpucli launch to exit, s", [r["gpucli"] for r in rounds]))
    if args.before:
        print(line("before: launch to exit, s", [r["before"] for r in rounds]))
    print(line("ST encode (texts in memory), s", [r["st_encode"] for r in rounds]))
    if not args.no_script:
        print(line("ST script (launch to exit), s", [r["st_script"] for r in rounds]))
    print(line("gpucli / ST encode (speed)", ratios("st_encode"), ">= 1.5 (2,000); >= 2 (20,000)"))
    if not args.no_script:
        print(line("gpucli / ST script (speed)", ratios("st_script"), ">= 2"))
    if args.before:
        print(line("after / before (speed)", ratios("before")))
    if all("timeline" in r for r in rounds):
        print(line("start-up: launch to first result, s", [r["timeline"]["marks"]["first_result"] for r in rounds]))
        print(line("steady: first to last result, s",
                   [r["timeline"]["marks"]["last_result"] - r["timeline"]["marks"]["first_result"] for r in rounds]))
    if cos is not None:
        print(f"\nmin cosine, gpucli to the ST script, one-window files: {cos:.6f} (>= 0.9999)")
    if args.json:
        args.json.write_text(json.dumps({"docs": args.docs, "rounds": rounds, "min_cosine": cos}, indent=1))


if __name__ == "__main__":
    main()
