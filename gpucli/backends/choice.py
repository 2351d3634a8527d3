"""Which backend an output runs on (issues 15, 16), decided in the parent from plain data.

    backend_default  the `--backend` a run gets when none is given: a new output `auto`, an
                     existing one what it was made with (read from its ledger's settings)

Nothing here imports a task, torch or onnxruntime: the job calls this before the task opens.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from gpucli.devices import all_cpu
from gpucli.errors import UsageError

if TYPE_CHECKING:
    from gpucli.config import RunConfig


def backend_default(spec: Any, task_cls: type, config: RunConfig, made_with: dict | None, out: str) -> Any:
    """The spec (a TaskSpec) with the backend this output runs on, for a task that has `--backend`
    (`task_cls.Options` has a `backend` field); `out` is the output as the user names it.

    Given (flag, GPUCLI_BACKEND, config file): that. Not given: a new output (or `--full`) gets
    `auto` (ONNX Runtime on a CPU host where it is faster and installed: gpucli.backends), but
    on Ray only with `--devices cpu` (the driver cannot see the cluster's GPUs before it joins,
    and a GPU actor must not get a CPU graph); an existing output keeps the backend it was made
    with, and `auto` keeps the runtime it chose then (`made_with`: the ledger's settings, {} for
    a ledger that predates them), so no rerun (cron) changes an output's vectors or asks for
    `--full` when gpucli's default changes. An output made before `auto` was the default holds
    `torch`, or no backend at all (made before there was a choice): it stays on torch."""
    options_cls = task_cls.Options
    if not dataclasses.is_dataclass(options_cls) or "backend" not in {f.name for f in dataclasses.fields(options_cls)}:
        return spec
    options = dict(spec.options)
    given = "backend" in config.task_options
    on_cpu = config.devices.strip().lower() == "cpu"
    if made_with is None:
        if not given and (config.engine != "ray" or on_cpu):
            options["backend"] = "auto"
        return dataclasses.replace(spec, options=options)
    stored = made_with.get("options") or {}
    if not given and "backend" in stored:
        options["backend"] = stored["backend"]
    runtime = (made_with.get("info") or {}).get("gpucli.runtime", "torch")  # left out of the settings when torch
    if runtime == "onnx" and options.get("backend") == "auto" and not (on_cpu or _cpu_only_run(config)):
        raise UsageError(f"--out {out} was made on ONNX Runtime on the CPU "
                         "(--backend auto chose it then), and this run may use a GPU: pass --devices cpu to "
                         "continue it as it was made, or --backend torch --full to rebuild it on torch")
    return dataclasses.replace(spec, options=options, runtime=runtime)


def _cpu_only_run(config: RunConfig) -> bool:
    """The local engine's devices are all CPUs (no CUDA context made). On Ray the driver cannot
    tell before it joins: only --devices cpu says so."""
    if config.engine == "ray":
        return False
    from gpucli.devices import resolve_devices

    return all_cpu(resolve_devices(config.devices))
