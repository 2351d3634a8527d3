"""Classify and transcribe figures, from their own scripts when those exist.

benchmarks/classify_bench.py and benchmarks/transcribe_bench.py belong to the tasks' authors.
The contract run.py relies on (see README): run with `--json` (and `--quick` when asked),
the script prints on its last stdout line one JSON object
    {"figures": [{"key": "classify", "name": "classify: gpucli / per-file loop",
                  "runs": [3.4, 3.1, 3.6], "op": ">=", "target": 3.0, "note": "..."}]}
Until a script takes `--json`, it is run with its own defaults (not with --quick), its
output is kept verbatim in RESULTS.md, and lines of the form `NAME  RATE unit/s  R.RRx loop`
(or `x the loop`) become information rows.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from benchmarks.common import BENCH, ROOT, Context, Figure, bench_env

RATIO_LINE = re.compile(r"^\s*(?P<name>\S.*?)\s+(?P<rate>[\d.]+)\s+[A-Za-z][\w ]*?/s\s+(?P<ratio>[\d.]+)x "
                        r"(?:the )?loop\s*$")
TIMEOUT_S = 1200


def _has_flag(help_text: str, flag: str) -> bool:
    """An option argparse lists (`[--json]` in the usage or an option line), not a word in prose."""
    return re.search(rf"\[{flag}\]|^\s+{flag}\b", help_text, re.M) is not None


def run_script(ctx: Context, task: str) -> list[Figure]:
    script = BENCH / f"{task}_bench.py"
    if not script.exists():
        return [Figure(task, f"{task}: gpucli / per-file loop", status="not yet",
                       note=f"benchmarks/{script.name} does not exist yet")]
    help_text = _run([sys.executable, str(script), "--help"], 300).stdout
    if _has_flag(help_text, "--json"):
        return _from_json(ctx, task, script, help_text)
    if ctx.quick:
        return [Figure(task, f"{task}: its own script", status="skipped",
                       note=f"{script.name} has no --json and no quick mode; run without --quick")]
    proc = _run([sys.executable, str(script)], TIMEOUT_S)
    output = (proc.stdout + ("\n" + proc.stderr[-2000:] if proc.returncode else "")).strip()
    figures = [Figure(task, f"{task}: {script.name} (output below)", status="see output" if proc.returncode == 0
                      else f"exit {proc.returncode}", details=[{"output": output}])]
    for line in proc.stdout.splitlines():
        m = RATIO_LINE.match(line)
        if m and m["name"].strip() != "loop":
            figures.append(Figure(f"{task}-{len(figures)}", f"{task}: {m['name']} / loop (info, 1 run)",
                                  runs=[float(m["ratio"])]))
    return figures


def _from_json(ctx: Context, task: str, script, help_text: str) -> list[Figure]:
    cmd = [sys.executable, str(script), "--json"]
    if ctx.quick and _has_flag(help_text, "--quick"):
        cmd.append("--quick")
    proc = _run(cmd, TIMEOUT_S)
    if proc.returncode != 0:
        return [Figure(task, f"{task}: {script.name}", status=f"exit {proc.returncode}",
                       details=[{"output": proc.stderr[-3000:]}])]
    try:
        data = json.loads([line for line in proc.stdout.splitlines() if line.strip()][-1])
        rows = data["figures"] if isinstance(data, dict) and "figures" in data else data
        out = []
        for i, row in enumerate(rows):
            runs = row.get("runs") or ([row["value"]] if "value" in row else [])
            out.append(Figure(row.get("key", f"{task}-{i}"), row.get("name", task), runs=[float(r) for r in runs],
                              op=row.get("op", ""), target=float(row.get("target", 0) or 0), note=row.get("note", ""),
                              details=row.get("details", [])))
        return out
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        return [Figure(task, f"{task}: {script.name}", status="unreadable --json",
                       details=[{"output": f"{type(exc).__name__}: {exc}\n{proc.stdout[-3000:]}"}])]


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, env=bench_env(), cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {timeout}s")


def classify(ctx: Context) -> list[Figure]:
    return run_script(ctx, "classify")


def transcribe(ctx: Context) -> list[Figure]:
    return run_script(ctx, "transcribe")
