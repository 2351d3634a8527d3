"""Overlap: a simulated device (10 ms per batch) and a slow sink (200 ms per write).

A sequential loop pays device + sink; a pipeline that overlaps them pays only the larger,
plus filling and draining. Sized so both totals are about equal (the hardest case for
overlap): 16 items per batch, one item per file, and part_rows = the rows the device
makes in one sink write, so each stage alone takes ~4 s (~2 s with --quick).

The simulated device takes 2 s to "load its model", as a real one takes seconds: what the
parent does at start-up (reading ahead, importing pandas for pyarrow) happens meanwhile, as
in a real run, instead of competing with the first batches (without it: ~0.03 more).

Measured: wall = from every worker ready to the end of the run (worker start-up is the
cold-start figure's business); device total = the summary's infer seconds (the worker's
predict times summed); sink total = what a sequential loop writing the same parts pays:
ceil(rows / part_rows) x 200 ms. Shown beside them: the end-to-end elapsed_s, the writer's
own stage seconds (sink calls plus table building and ledger commits, in its thread) and
the sink's real busy time (the writer may merge parts when it falls behind), and a
timeline of where the extra wall time went (device idle gaps, the tail after the last batch).
"""

from __future__ import annotations

import math

from benchmarks.common import Context, Figure, drive, median
from benchmarks.corpus import write_tree

DEVICE_MS = 10.0
SINK_MS = 200.0
BATCH = 16
LOAD_S = 2.0


def run(ctx: Context) -> list[Figure]:
    batches = 200 if ctx.quick else 400
    rows_per_write = int(BATCH * SINK_MS / DEVICE_MS)  # device rows made while one write sleeps
    files = batches * BATCH
    src = write_tree(ctx.tmp / "overlap-in", [f"item {i}" for i in range(files)])
    fig = Figure("overlap", "overlap: wall / max(device, sink)", op="<=", target=1.1,
                 note=f"{files} files, batch {BATCH}, device {DEVICE_MS:g} ms/batch, sink {SINK_MS:g} ms/write, "
                      f"part_rows {rows_per_write}")
    for rep in range(ctx.reps):
        trace = ctx.tmp / f"overlap-trace-{rep}.txt"
        config = {"task": "benchmarks.sim:SimTask", "paths": [str(src)], "out": str(ctx.tmp / f"overlap-out-{rep}"),
                  "batch_size": BATCH, "part_rows": rows_per_write, "flush_s": 5.0,
                  "task_options": {"device_ms": DEVICE_MS, "load_s": LOAD_S, "trace": str(trace)}}
        r = drive(config, timeout=600, slow_sink_ms=SINK_MS)
        s = r["summary"]
        device = s["stage_seconds"]["infer"]
        sink = math.ceil(s["rows"] / rows_per_write) * SINK_MS / 1000
        wall = r["t_end"] - r["ready"]
        detail = {"wall_s": wall, "device_s": device, "sink_s": sink, "elapsed_s": s["elapsed_s"],
                  "writer_stage_s": s["stage_seconds"]["write"], "writes": r["sink"]["writes"],
                  "wall_over_sum": wall / (device + sink),
                  "elapsed_over_max": s["elapsed_s"] / max(device, sink), **timeline(r, trace)}
        fig.runs.append(wall / max(device, sink))
        fig.details.append(detail)
        ctx.log(f"  overlap run {rep + 1}: wall {wall:.2f}s, device {device:.2f}s, sink {sink:.2f}s "
                f"-> {fig.runs[-1]:.3f}× max, {detail['wall_over_sum']:.3f}× sum; device idle "
                f"{detail.get('device_idle_gaps_s', 0):.2f}s, tail {detail.get('last_batch_to_end_s', 0):.2f}s, "
                f"writer stage {detail['writer_stage_s']:.2f}s for {r['sink']['writes']} writes")
    fig.note += (f"; medians: wall {median([d['wall_s'] for d in fig.details]):.2f} s, "
                 f"device {median([d['device_s'] for d in fig.details]):.2f} s, "
                 f"sink {median([d['sink_s'] for d in fig.details]):.2f} s, "
                 f"wall/sum {median([d['wall_over_sum'] for d in fig.details]):.2f}")
    return [fig]


def timeline(r: dict, trace) -> dict:
    """Where the wall time beyond max(device, sink) went: before the first batch, device
    idle gaps, and after the last batch (the final write, shutdown)."""
    spans = []
    try:
        for line in trace.read_text().splitlines():
            start, end, _ = line.split()
            spans.append((float(start), float(end)))
    except OSError:
        return {}
    if not spans:
        return {}
    spans.sort()
    gaps = sum(max(0.0, b[0] - a[1]) for a, b in zip(spans, spans[1:]))
    writes = r["sink"]["spans"]
    return {"first_batch_after_ready_s": spans[0][0] - r["ready"], "device_idle_gaps_s": gaps,
            "last_batch_to_end_s": r["t_end"] - spans[-1][1],
            "last_write_end_to_end_s": r["t_end"] - writes[-1][1] if writes else None,
            "stop_to_end_s": r["t_end"] - r["stop"] if "stop" in r else None,
            "worker_join_s": r["stopped"] - r["stop"] if "stopped" in r else None,
            "sink_busy_s": sum(e - s for s, e, _ in writes)}
