"""The one entry point of benchmarks/: measure the figures of benchmarks/README.md on this machine,
print a table and write benchmarks/RESULTS.md; list every script; run any other by its name.

    python benchmarks/run.py                  # every figure, 3 repetitions (~15-30 min on 2 busy cores)
    python benchmarks/run.py --quick          # smaller corpora, 1 repetition (a smoke test)
    python benchmarks/run.py --only overlap,memory --reps 5    # updates those figures, keeps the others
    python benchmarks/run.py --list           # every script: what it measures, where, its last figure's date
    python benchmarks/run.py ray_bench --docs 2000    # a separate script (catalogue.py), with its own arguments

Each figure is a ratio measured within one run, repeated; the table shows min / median /
max and judges the median against the target. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import coldstart, embed_cpu, external, extract_bench, host, host_ray, memory, overlap  # noqa: E402
from benchmarks.catalogue import BY_NAME, listing  # noqa: E402
from benchmarks.common import Context, Figure, cpu_pressure, git_commit, machine  # noqa: E402


def _image_embed(ctx: Context) -> list[Figure]:
    """benchmarks/image_embed_bench.py (issue 29), through external.py's --json contract."""
    return external.run_script(ctx, "image_embed")


BENCHMARKS = {
    "host": host.run,
    "host-ray": host_ray.run,
    "overlap": overlap.run,
    "embed": embed_cpu.run,
    "memory": memory.run,
    "cold-start": coldstart.run,
    "classify": external.classify,
    "transcribe": external.transcribe,
    "image-embed": _image_embed,
    "documents": extract_bench.run,
}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in BY_NAME and BY_NAME[sys.argv[1]].role == "separate":
        return separate(BY_NAME[sys.argv[1]].file, sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 repetition (unless --reps)")
    parser.add_argument("--only", default="", help=f"comma list of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--reps", type=int, default=0, help="repetitions per figure (default 3, --quick 1)")
    parser.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"), help="where to write the report")
    parser.add_argument("--keep", action="store_true", help="keep the temporary corpora and outputs")
    parser.add_argument("--list", action="store_true", help="every script: what it measures, its last figure's date")
    args = parser.parse_args()
    if args.list:
        print(listing())
        return 0
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    reps = args.reps or (1 if args.quick else 3)
    tmp = Path(tempfile.mkdtemp(prefix="gpucli-bench-"))
    ctx = Context(quick=args.quick, reps=reps, tmp=tmp, log=lambda m: print(m, file=sys.stderr, flush=True))
    results_md = Path(args.results)
    store = results_md.with_suffix(".json")
    runs = _load(store) if args.only else {}  # --only updates those figures and keeps the others
    try:
        for name in names:
            runs[name] = measure(name, ctx)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    runs = {name: runs[name] for name in BENCHMARKS if name in runs}
    figures = [f for run in runs.values() for f in run["figures"]]
    print(table(figures))
    store.write_text(json.dumps({"machine": machine(), "runs": {n: {**r, "figures": [asdict(f) for f in r["figures"]]}
                                                              for n, r in runs.items()}}, indent=1), encoding="utf-8")
    results_md.write_text(report(machine(), runs), encoding="utf-8")
    print(f"\nwritten: {results_md} (raw: {store.name})", file=sys.stderr)
    return 0


def separate(script: str, args: list[str]) -> int:
    """A script that keeps its own results file, run as its own docstring says, from the repo root."""
    import subprocess

    command = ["bash" if script.endswith(".sh") else sys.executable, str(ROOT / "benchmarks" / script), *args]
    return subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}).returncode


def measure(name: str, ctx: Context) -> dict:
    """One benchmark's figures, with when and under what load they were measured."""
    ctx.log(f"== {name} ({ctx.reps} repetition(s){', quick' if ctx.quick else ''}); "
            f"load average {os.getloadavg()[0]:.1f}")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "commit": git_commit(),
            "repetitions": ctx.reps, "quick": ctx.quick,
            "load_before": "/".join(f"{x:.1f}" for x in os.getloadavg()), "cpu_pressure_before": cpu_pressure()}
    t0 = time.perf_counter()
    try:
        figures = BENCHMARKS[name](ctx)
    except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
        ctx.log(traceback.format_exc())
        figures = [Figure(name, name, status="error", note=f"{type(exc).__name__}: {exc}"[:300])]
    meta.update(seconds=round(time.perf_counter() - t0), load_after="/".join(f"{x:.1f}" for x in os.getloadavg()),
                cpu_pressure_after=cpu_pressure())
    return {"meta": meta, "figures": figures}


def _load(store: Path) -> dict:
    try:
        data = json.loads(store.read_text(encoding="utf-8"))
        return {name: {**run, "figures": [Figure(**f) for f in run["figures"]]} for name, run in data["runs"].items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def table(figures: list[Figure]) -> str:
    rows = [("figure", "min / median / max", "target", "result")]
    rows += [(f.name, f.spread(), f.target_text(), f.verdict) for f in figures]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(machine_info: dict[str, str], runs: dict[str, dict]) -> str:
    figures = [f for run in runs.values() for f in run["figures"]]
    out = ["# Benchmark results", "",
           "Written by `python benchmarks/run.py` (README.md in this directory says what each figure measures and "
           "how). Ratios are measured side by side within one run and repeated; the verdict judges the median. "
           "This machine is shared with other work: read the load columns before reading absolute rates.", ""]
    out += [f"- **written:** {time.strftime('%Y-%m-%d %H:%M %Z')}"]
    out += [f"- **{k}:** {v}" for k, v in machine_info.items()]
    out += ["", "| figure | min / median / max | target | result |", "|---|---|---|---|"]
    out += [f"| {f.name} | {f.spread()} | {f.target_text()} | {f.verdict} |" for f in figures]
    out += ["", "| benchmark | measured | commit | reps | took | load avg before → after | CPU pressure before |",
            "|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        m = run["meta"]
        reps = f"{m['repetitions']}{' (quick)' if m.get('quick') else ''}"
        out.append(f"| {name} | {m['date']} | {m['commit']} | {reps} | {m.get('seconds', '?')} s | "
                   f"{m['load_before']} → {m.get('load_after', '?')} | {m['cpu_pressure_before']} |")
    out += ["", "## Details", ""]
    for f in figures:
        out.append(f"### {f.name}")
        if f.note:
            out += ["", f.note]
        outputs = [d["output"] for d in f.details if isinstance(d, dict) and "output" in d]
        others = [d for d in f.details if not (isinstance(d, dict) and "output" in d)]
        if f.runs:
            out += ["", "runs: " + ", ".join(f"{r:.3f}" for r in f.runs)]
        if others:
            out += ["", "```json", *(json.dumps(_rounded(d)) for d in others), "```"]
        for text in outputs:
            out += ["", "```", text, "```"]
        out.append("")
    return "\n".join(out)


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
