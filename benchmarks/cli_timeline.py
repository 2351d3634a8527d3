"""Run the real `gpucli` command line in this process and write where its wall time went.

    python benchmarks/cli_timeline.py TIMELINE.json embed DIR --out OUT.parquet --progress off

The command is gpucli's own `main` with argv as given; the only hooks are benchmark-side: a
WorkerPool subclass (as in drive.py) noting, in seconds since this interpreter started
(`T_PROCESS`, the first line run; the launcher's own fork/exec is measured by the caller):

  imported        gpucli.app.cli imported (the command line's own import cost)
  pool_start      the pool asked to start its workers (after walk set-up, output checks)
  worker_ready    each worker's Ready (its import + model load + warm-up), with its CPU seconds
  first_sent      the first batch handed to a worker
  first_result    the first batch's result back
  last_result     the last result back
  stop            the pool asked to stop (every result in)
  exit            gpucli's atexit handlers ran (the output is durable; then os._exit)

and CPU seconds (user + system) of this process at each mark and of each worker when it was
ready and at stop. Written as JSON to TIMELINE.json by an atexit handler (gpucli's main leaves
through os._exit once they have run).
"""

from __future__ import annotations

import time

T_PROCESS = time.monotonic()

import atexit  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MARKS: dict[str, float] = {}
CPU: dict[str, float] = {}
WORKERS: dict[int, dict] = {}
RESULTS: list[dict] = []  # each batch's result: when it came back, the model's seconds, its items


def mark(name: str) -> None:
    if name not in MARKS:
        MARKS[name] = time.monotonic() - T_PROCESS
        CPU[name] = sum(os.times()[:2])


def worker_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


def install_hooks() -> None:
    import gpucli.engines.local.pool as pool_module
    from gpucli.core.records import Ready, Result

    original = pool_module.WorkerPool

    class TimedPool(original):
        async def start(self) -> None:
            mark("pool_start")
            await super().start()
            mark("workers_ready")

        async def send(self, worker, batch) -> None:
            mark("first_sent")
            await super().send(worker, batch)

        def _handle(self, worker, message, done) -> None:
            now = time.monotonic() - T_PROCESS
            if isinstance(message, Ready):
                WORKERS[message.pid] = {"ready": now, "cpu_ready": worker_cpu(message.pid)}
            elif isinstance(message, Result):
                mark("first_result")
                MARKS["last_result"] = now
                RESULTS.append({"at": now, "pid": worker.pid, "seconds": message.seconds,
                                "items": len(message.outputs)})
            super()._handle(worker, message, done)

        async def stop(self, deadline: float) -> None:
            mark("stop")
            for pid, entry in WORKERS.items():
                entry["cpu_stop"] = worker_cpu(pid)
            await super().stop(deadline)

    for module in list(sys.modules.values()):
        if module is not None and module.__name__.startswith("gpucli") and getattr(module, "WorkerPool", None) is original:
            module.WorkerPool = TimedPool
    import gpucli.engines.job
    import gpucli.output.output
    import gpucli.tasks.embed.task

    span(gpucli.engines.job.Job, "open", "job_open")
    span(gpucli.tasks.embed.task.EmbedTask, "open", "task_open")
    span(gpucli.output.output.Output, "open", "output_open")


def span(owner: type, attr: str, name: str) -> None:
    """Mark the start and end of the first call of owner.attr (NAME and NAME_end)."""
    original = getattr(owner, attr)

    def timed(*args, **kwargs):
        mark(name)
        try:
            return original(*args, **kwargs)
        finally:
            mark(name + "_end")

    setattr(owner, attr, timed)


def main() -> None:
    out, argv = sys.argv[1], sys.argv[2:]
    import gpucli.app.cli as cli
    import gpucli.engines.job  # where the pool is built: hook it there too
    import gpucli.engines.local.pipeline  # noqa: F401

    mark("imported")
    install_hooks()
    sys.argv = ["gpucli", *argv]

    def write() -> None:  # gpucli's main leaves by os._exit after the atexit handlers (cli.py)
        mark("exit")
        with open(out, "w") as f:
            json.dump({"marks": MARKS, "cpu": CPU, "workers": list(WORKERS.values()), "results": RESULTS}, f)

    atexit.register(write)
    cli.main()


if __name__ == "__main__":
    main()
