"""`gpucli search` latency, launch to exit, on Parquet and on embedded Qdrant (issue 41 item 6; issue 46).

The gpucli under test: `--gpucli BIN`, an installed console script (the README venv's `bin/gpucli`), run as a
user runs it: no PYTHONPATH, no GPUCLI_* setting, a working directory outside any checkout. Without it,
this checkout's code (`python -m gpucli` with PYTHONPATH set to it).

Outputs, each made once before the rounds by that same gpucli with `embed --from TABLE`:
  parquet 2k, qdrant 2k      `--chunks` (2,000) real paragraphs (cpu_e2e.py's /usr/share/doc corpus, those of
                             at most 200 tokens: one chunk each) with the defaults: all-MiniLM-L6-v2, ONNX
                             Runtime on a CPU host (the embed leaves the graph in the cache for the searches),
                             to Parquet and to `qdrant:DIR/docs` (embedded Qdrant)
  parquet 100k, qdrant 100k  `--large` (100,000) one-line texts with the near-free model of embedded_qdrant.py
                             (a 1-layer random BERT, 32-d: benchmarks/host.py), so that the store's cost shows
                             and the model's is nearly nil (`--large 0` skips them)
Each round runs `gpucli search QUERY --in OUT -k 10` once per query (3 queries) on every output, as fresh
processes, the outputs in an order that rotates from round to round. With --torch, the 2k Parquet output is
also searched with GPUCLI_BACKEND=torch; with --before CHECKOUT, by that checkout's code (PYTHONPATH).

Printed: every run's wall seconds with the 1-minute load average at its start, the medians, the median of the
"query embedded in" and "searched in" seconds the command reports, qdrant: minus Parquet at each size, and the
targets (issue 46: <= 1.0 s at 2,000 chunks on both; qdrant: <= Parquet + 0.2 s at 100k). With --importtime,
the imports of one search of each 2k output over 15 ms (`python -X importtime`, top two levels).
Figures: benchmarks/RESULTS-search.md.

    python benchmarks/search_latency.py --gpucli /work/readme-venv/bin/gpucli [--rounds 3] [--large 100000]
    python benchmarks/search_latency.py --gpucli ... --chunks 200 --large 2000 --rounds 1   # a smoke test
    python benchmarks/search_latency.py --torch --before /tmp/before --importtime           # this checkout
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUERIES = ("how do I install the package", "license and copyright terms", "bug fixes in this release")
EMBEDDED = re.compile(r"query embedded in ([\d.]+)s")
SEARCHED = re.compile(r"searched in ([\d.]+)s")
TARGET_SMALL_S = 1.0
TARGET_QDRANT_OVER_PARQUET_S = 0.2


@dataclass(frozen=True)
class Runner:
    """How one gpucli is started: its command, environment and working directory."""

    command: tuple[str, ...]  # `BIN`, or `python -m gpucli`
    env: dict[str, str]
    cwd: Path
    python: str  # the interpreter behind it
    script: tuple[str, ...]  # what follows the interpreter: `BIN`, or `-m gpucli` (for python's own flags)

    def search(self, out: str, query: str, *python_flags: str) -> list[str]:
        head = [self.python, *python_flags, *self.script] if python_flags else list(self.command)
        return [*head, "search", query, "--in", out, "-k", "10"]


def installed(gpucli: Path, cwd: Path) -> Runner:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GPUCLI_")}
    python = gpucli.read_text(errors="replace").splitlines()[0].removeprefix("#!").strip()
    return Runner((str(gpucli),), env, cwd, python, (str(gpucli),))


def checkout(path: Path, backend: str = "") -> Runner:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUCLI_")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(path), env.get("PYTHONPATH", "")) if p)
    if backend:
        env["GPUCLI_BACKEND"] = backend
    return Runner((sys.executable, "-m", "gpucli"), env, path, sys.executable, ("-m", "gpucli"))


def describe(runner: Runner) -> str:
    probe = "import gpucli, importlib.metadata as m; print(gpucli.__file__, m.version('gpucli'))"
    proc = subprocess.run([runner.python, "-c", probe], capture_output=True, text=True, env=runner.env,
                          cwd=runner.cwd, timeout=120)
    where = proc.stdout.strip() or proc.stderr.strip()[-300:]
    source = Path(where.split()[0]).parent.parent if proc.returncode == 0 else ROOT
    git = subprocess.run(["git", "-C", str(source), "log", "-1", "--format=%h %cs"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no", "gpucli"],
                           capture_output=True, text=True)
    commit = git.stdout.strip() + (" (+ uncommitted changes)" if dirty.stdout.strip() else "")
    return f"{' '.join(runner.command)} -> {where} (commit {commit or '?'})"


def run(cmd: list[str], runner: Runner, timeout: float = 3600) -> tuple[float, str, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=runner.env, cwd=runner.cwd, timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:8])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc.stdout, proc.stderr


def make_outputs(runner: Runner, tmp: Path, chunks: int, large: int) -> dict[str, tuple[str, int, float]]:
    """{name: (where, rows, seconds of the embed that made it)}."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchmarks.corpus import model_tokenizer
    from benchmarks.cpu_e2e import cached_paragraphs

    tokenizer = model_tokenizer()
    pool, digest = cached_paragraphs(int(chunks * 1.4) + 50)
    texts = [p for p in pool if len(tokenizer.encode(p).ids) <= 200][:chunks]
    print(f"corpus: {chunks} paragraphs of at most 200 tokens of {len(pool)} (texts sha256 {digest})", file=sys.stderr)
    if len(texts) < chunks:
        raise SystemExit(f"only {len(texts)} paragraphs of at most 200 tokens")
    plans = [("2k", texts, [])]
    if large:
        from benchmarks.embedded_qdrant import WORDS
        from benchmarks.host import tiny_model

        lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(4 + i % 5)) + f" number {i}"
                 for i in range(large)]
        plans.append(("100k", lines, ["--model", str(tiny_model(tmp / "tiny"))]))
    outputs = {}
    for size, items, model in plans:
        table = tmp / f"texts-{size}.parquet"
        pq.write_table(pa.table({"id": [str(i) for i in range(len(items))], "text": items}), table)
        for sink, where in (("parquet", str(tmp / f"{size}.parquet")), ("qdrant", f"qdrant:{tmp / f'q{size}'}/docs")):
            wall, stdout, _ = run([*runner.command, "embed", "--from", str(table), "--out", where, *model,
                                   "--progress", "off", "--json"], runner)
            rows = json.loads(stdout.strip().splitlines()[-1])["rows"]
            outputs[f"{sink} {size}"] = (where, rows, wall)
            print(f"made {sink} {size}: {rows:,} rows in {wall:.1f} s", file=sys.stderr)
    return outputs


def slow_imports(runner: Runner, out: str, floor_us: int = 15_000) -> list[str]:
    proc = subprocess.run(runner.search(out, QUERIES[0], "-X", "importtime"), capture_output=True, text=True,
                          env=runner.env, cwd=runner.cwd, timeout=600)
    lines = []
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        if depth <= 2 and int(parts[1]) >= floor_us:
            lines.append(f"{int(parts[1]) / 1000:7.0f} ms  {name}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpucli", type=Path, help="an installed console script (default: this checkout's code)")
    parser.add_argument("--chunks", type=int, default=2000, help="real paragraphs, default model")
    parser.add_argument("--large", type=int, default=100_000, help="one-line texts, near-free model (0: none)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torch", action="store_true", help="also the 2k Parquet search with GPUCLI_BACKEND=torch")
    parser.add_argument("--before", type=Path, help="another checkout of gpucli: its search of the 2k Parquet output")
    parser.add_argument("--importtime", action="store_true", help="list the slow imports of one search")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="search-latency-") as tmp_name:
        tmp = Path(tmp_name)
        main_runner = installed(args.gpucli, tmp) if args.gpucli else checkout(ROOT)
        print(f"gpucli: {describe(main_runner)}", file=sys.stderr)
        outputs = make_outputs(main_runner, tmp, args.chunks, args.large)
        variants = {name: (main_runner, where) for name, (where, _, _) in outputs.items()}
        if args.torch:
            variants["parquet 2k, torch"] = (checkout(ROOT, "torch") if not args.gpucli else
                                             Runner(main_runner.command, {**main_runner.env, "GPUCLI_BACKEND": "torch"},
                                                    main_runner.cwd, main_runner.python, main_runner.script),
                                             outputs["parquet 2k"][0])
        if args.before:
            variants["parquet 2k, before"] = (checkout(args.before), outputs["parquet 2k"][0])
        runs = measure(variants, args.rounds)
        load = os.getloadavg()
        report(args, outputs, runs, load, describe(main_runner))
        if args.importtime:
            for name in ("parquet 2k", "qdrant 2k"):
                print(f"\nimports over 15 ms of one search of the {name} output (cumulative):\n")
                print("\n".join(f"    {line}" for line in slow_imports(main_runner, outputs[name][0])))


def measure(variants: dict[str, tuple[Runner, str]], rounds: int) -> dict[str, list[dict]]:
    names = list(variants)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # each output first in turn
        for query in QUERIES:
            for name in order:
                runner, where = variants[name]
                load = os.getloadavg()[0]
                wall, _, err = run(runner.search(where, query), runner, timeout=600)
                embedded, searched = EMBEDDED.search(err), SEARCHED.search(err)
                runs[name].append({"wall": wall, "load": load,
                                   "embedded": float(embedded.group(1)) if embedded else float("nan"),
                                   "searched": float(searched.group(1)) if searched else float("nan")})
                print(f"round {r + 1} {name:<20} {wall:6.2f} s (load {load:.1f})", file=sys.stderr)
    return runs


def report(args, outputs: dict, runs: dict[str, list[dict]], load: tuple[float, float, float], who: str) -> None:
    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    per = len(QUERIES)
    print(f"\n`gpucli search QUERY --in OUT -k 10`, launch to exit, {args.rounds} rounds x {per} queries, interleaved "
          f"(order rotating); load average at the end {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on "
          f"{os.cpu_count()} cores\n\ngpucli: {who}\n")
    print("| output | rows | wall, s (each run; 1-min load at its start) | median wall, s | median 'query embedded', s "
          "| median 'searched', s | target |")
    print("|---|---:|---|---:|---:|---:|---|")
    for name in runs:
        rows = outputs.get(name.split(",")[0], (None, 0))[1]
        shown = ", ".join(f"{r['wall']:.2f} ({r['load']:.0f})" for r in runs[name])
        target = f"<= {TARGET_SMALL_S}" if name in ("parquet 2k", "qdrant 2k") else ""
        print(f"| {name} | {rows:,} | {shown} | **{med(name, 'wall'):.2f}** | {med(name, 'embedded'):.2f} | "
              f"{med(name, 'searched'):.3f} | {target} |")
    for size in ("2k", "100k"):
        if f"qdrant {size}" in runs:
            delta = med(f"qdrant {size}", "wall") - med(f"parquet {size}", "wall")
            target = f" (target <= +{TARGET_QDRANT_OVER_PARQUET_S} s)" if size == "100k" else ""
            print(f"\nqdrant: - Parquet at {size} (median walls): {delta:+.2f} s{target}")
    print("\nthe outputs' embeds (once, before the rounds): "
          + "; ".join(f"{name} {rows:,} rows {wall:.1f} s" for name, (_, rows, wall) in outputs.items()))
    if args.json:
        args.json.write_text(json.dumps({"outputs": outputs, "runs": runs, "load_end": load, "gpucli": who}, indent=1))


if __name__ == "__main__":
    main()
