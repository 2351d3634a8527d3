"""Run one gpucli job in this process through `gpucli.engines.local.pipeline` and print its timings as
one JSON line on stdout. The benchmarks start it as a subprocess, so every job gets a
fresh interpreter and its own process tree (for RSS sampling).

    python benchmarks/drive.py '{"task": "embed", "paths": ["DIR"], "out": "x.parquet"}' [--slow-sink-ms MS]

Experiment knobs (environment): BENCH_TRACEMALLOC=N prints the N largest live allocation
sites when the pool stops; BENCH_WORKER_THREADS=N overrides the threads each worker gets;
BENCH_TIME_WRITES=1 splits each writer flush into table building, sink.write and commit.

The only hooks are benchmark-side: a WorkerPool subclass that notes when every worker
has loaded its model (to tell start-up from steady state), and, for the overlap
benchmark, `gpucli.output.sinks.open_sink` replaced (wherever gpucli imported it by name) by one
returning the SlowSink.
"""

from __future__ import annotations

import time

T_PROCESS = time.monotonic()  # before any import: the driver's own start-up counts

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # benchmarks.sim and tests.fake_task, here and in spawned workers
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)

MARKS: dict[str, float] = {}
if os.environ.get("BENCH_TRACEMALLOC"):
    import tracemalloc

    tracemalloc.start()


CPU: dict[str, float] = {}


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes (all their threads); 0 for one gone."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def timed_pool_class():
    """gpucli's WorkerPool noting when every worker is ready and when the pool is asked to
    stop, with the CPU seconds spent by this process and by the workers at those moments.
    (Built in `main`: a spawned reader or worker re-runs this file as `__mp_main__`, and
    must not import the pipeline for nothing, as a user's `gpucli` script does not.)"""
    from gpucli.engines.local.pool import WorkerPool

    class TimedPool(WorkerPool):
        async def start(self) -> None:
            MARKS["pool_start"] = time.monotonic()
            await super().start()
            MARKS["ready"] = time.monotonic()
            CPU["parent_ready"] = cpu_seconds([os.getpid()])
            CPU["workers_ready"] = cpu_seconds([w.pid for w in self.workers])

        async def stop(self, deadline: float) -> None:
            MARKS["stop"] = time.monotonic()
            CPU["workers_stop"] = cpu_seconds([w.pid for w in self.workers])
            if os.environ.get("BENCH_TRACEMALLOC"):
                report_allocations(int(os.environ["BENCH_TRACEMALLOC"]))
            await super().stop(deadline)
            MARKS["stopped"] = time.monotonic()

    return TimedPool


def report_allocations(top: int) -> None:
    """With BENCH_TRACEMALLOC=N (tracemalloc started at import): the N largest live
    allocation sites when the pool is asked to stop, on stderr (a diagnosis aid)."""
    import tracemalloc

    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    print(f"tracemalloc: {current / 2**20:.1f} MiB live, {peak / 2**20:.1f} MiB peak", file=sys.stderr)
    for stat in snapshot.statistics("lineno")[:top]:
        print(f"  {stat.size / 2**20:8.1f} MiB {stat.count:9d} blocks  {stat.traceback}", file=sys.stderr)


WRITES: list[dict] = []


def timed_writer_class():
    """gpucli's Writer with each part's write split in two (wall seconds in the writer thread):
    sink.write and commit (the ledger)."""
    import gpucli.output.writer as writer_module

    class TimedWriter(writer_module.Writer):
        def write(self, part):
            entry = {"rows": part.table.num_rows, "start": time.monotonic()}
            t0 = time.perf_counter()
            location = self.sink.write(part.table)
            t1 = time.perf_counter()
            result = self.commit(part, location)
            entry.update(sink_s=t1 - t0, commit_s=time.perf_counter() - t1)
            WRITES.append(entry)
            return result

    return TimedWriter


def replace_everywhere(name: str, new) -> None:
    """Rebind `name` in every loaded gpucli module that imported the original by name
    (the pipeline or a helper module of it may call it), and in the defining module."""
    import gpucli.output.sinks

    original = getattr(gpucli.output.sinks, name)
    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("gpucli") and getattr(module, name, None) is original:
            setattr(module, name, new)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", help="RunConfig fields as JSON")
    parser.add_argument("--slow-sink-ms", type=float, default=0.0)
    args = parser.parse_args()
    fields = json.loads(args.config)
    fields["paths"] = tuple(fields["paths"])
    fields.setdefault("progress", "off")
    fields.setdefault("quiet", True)
    fields.setdefault("devices", "cpu")
    import gpucli.engines.local.pipeline as pipeline
    from gpucli.core.config import RunConfig

    config = RunConfig(**fields)
    pipeline.WorkerPool = timed_pool_class()
    if os.environ.get("BENCH_TIME_WRITES"):  # diagnosis: split each flush into table / sink / commit
        pipeline.Writer = timed_writer_class()
    if os.environ.get("BENCH_WORKER_THREADS"):  # an experiment knob: torch/OMP threads per worker
        import gpucli.engines.local.pool

        gpucli.engines.local.pool._threads_per_worker = lambda devices: int(os.environ["BENCH_WORKER_THREADS"])
    sink = None
    if args.slow_sink_ms:
        from benchmarks.sim import SlowSink

        SlowSink.sink_ms = args.slow_sink_ms

        def open_slow(target: str, **_: object) -> SlowSink:
            nonlocal sink
            sink = SlowSink(target)
            return sink

        replace_everywhere("open_sink", open_slow)
    t_run = time.monotonic()
    summary = pipeline.run(config)
    t_end = time.monotonic()
    CPU["parent_end"] = cpu_seconds([os.getpid()])
    result = {"summary": summary.to_dict(), "t_process": T_PROCESS, "t_run": t_run, "t_end": t_end, **MARKS,
              "cpu": CPU, "clock_offset": time.time() - time.monotonic()}
    if WRITES:
        result["writes"] = WRITES
    if sink is not None:
        result["sink"] = {"writes": sink.writes, "rows": sink.rows, "spans": sink.spans}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
