"""Parts that pile up, and compaction (issue 47): the cron case, one file added a run.

In one process (worker threads, the fake task of tests/fake_task.py: no model, so what is timed
is the output side), RUNS runs each add one file to the same Parquet output:
  shipped      gpucli as it is: a run folds the small parts once the output holds 50 (gpucli/output/
               compaction.py); the parts left, the runs that compacted and their time
  never        the same runs with compaction off: one part a run; then a full `pyarrow.dataset` scan
               (median of 5) before and after `gpucli compact` (Output.compact), and its time
Readers pay per file: the figure is the scan's time over RUNS parts against one.

    python benchmarks/compaction.py [--runs 1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GPUCLI_TEST_INPROCESS_WORKERS", "1")  # worker threads: no interpreter spawned a run


def one_file_runs(root: Path, out: Path, runs: int) -> tuple[float, int]:
    """Wall seconds of the runs, and how many of them compacted (their log says so)."""
    from gpucli.core.config import RunConfig
    from gpucli.engines.local.pipeline import run
    from gpucli.output import output as output_module
    from tests.fake_task import FAKE

    compacted = 0
    original = output_module.fold

    def counted(*args, **kwargs):
        nonlocal compacted
        done = original(*args, **kwargs)
        compacted += done is not None
        return done

    output_module.fold = counted
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        for i in range(runs):
            (root / f"f{i:05d}.txt").write_text(f"file {i}\nits second line\n")
            summary = run(RunConfig(task=FAKE, paths=(str(root),), out=str(out), progress="off", devices="cpu"))
            assert summary.exit_code == 0 and summary.succeeded == 1, summary
    finally:
        output_module.fold = original
    return time.perf_counter() - started, compacted


def scan_s(out: Path, reps: int = 5) -> float:
    import pyarrow.dataset as ds

    times = []
    for _ in range(reps):
        started = time.perf_counter()
        ds.dataset(str(out), format="parquet").to_table()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import gpucli.output.output as output_module
    from gpucli.output.compactor import compact_now
    from gpucli.output.output import Output

    figures: dict = {"runs": args.runs}
    with tempfile.TemporaryDirectory(prefix="compaction-") as tmp_name:
        tmp = Path(tmp_name)
        wall, compacted = one_file_runs(tmp / "shipped", tmp / "shipped.parquet", args.runs)
        figures["shipped"] = {"wall_s": round(wall, 1), "compactions": compacted,
                              "parts": len(list((tmp / "shipped.parquet").glob("part-*.parquet"))),
                              "scan_s": round(scan_s(tmp / "shipped.parquet"), 4)}
        auto, output_module.AUTO_MIN_SMALL = output_module.AUTO_MIN_SMALL, 10**9  # the end of a run's threshold
        try:
            wall, _ = one_file_runs(tmp / "never", tmp / "never.parquet", args.runs)
        finally:
            output_module.AUTO_MIN_SMALL = auto
        before = scan_s(tmp / "never.parquet")
        done = compact_now(Output(str(tmp / "never.parquet")))
        after = scan_s(tmp / "never.parquet")
        figures["never"] = {"wall_s": round(wall, 1), "parts_before": done.parts_before,
                            "parts_after": done.parts_after, "compact_s": round(done.seconds, 2),
                            "scan_before_s": round(before, 4), "scan_after_s": round(after, 4),
                            "scan_speedup": round(before / after, 1)}
    figures["load"] = os.getloadavg()[0]
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
