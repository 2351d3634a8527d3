"""Which backend an output runs on, decided in the parent from plain data.

    backend_default  the `--backend` a run gets when none is given: a new output `auto`, an
                     existing one what it was made with (read from its ledger's settings)
    choose_backend   the runtime (torch or onnx) that a `--backend` means for this model on this
                     host: a new TaskSpec that names it, which the workers are built from
    Host             what `auto` decides by, looked up once by the task that opens

Both take a spec and return a new one (TaskSpec is frozen; its options dict is never written
to). `choose_backend` is pure, the host's facts are its arguments; `backend_default` looks at
the local devices in one case only (an output made on ONNX Runtime, continued on a host that may
use a GPU). Nothing here imports a task, torch or onnxruntime.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from gpucli.core.errors import UsageError
from gpucli.models.backends import BACKENDS, INSTALL, QUANTIZATIONS
from gpucli.models.devices import all_cpu

if TYPE_CHECKING:
    from gpucli.core.config import RunConfig

Spec = TypeVar("Spec")  # a gpucli.tasks.TaskSpec: named, not imported (the backends sit below the tasks)


@dataclass(frozen=True)
class Host:
    """What `auto` decides by, besides the model: this host's device kind (not this run's: a GPU
    host stays on torch even for a `--devices cpu` run, so every run of one host chooses alike;
    empty when the choice needs none) and whether onnx and onnxruntime are installed."""

    devices: tuple[str, ...] = ()
    onnx_installed: bool = False

    @classmethod
    def looked_up(cls, choice: str, cached: Callable[[], bool] | None = None) -> Host:
        """This host's facts, only those `choice` needs: `torch` none, `onnx` the extra, `auto`
        both (the GPU count, without a CUDA context: gpucli.models.devices). `cached()`: whether
        the model's graph is exported already, when onnx itself is not needed to run it."""
        from gpucli.models.backends import host_devices, onnx_available

        devices = tuple(host_devices()) if choice == "auto" else ()
        return cls(devices, choice != "torch" and onnx_available(cached))


def choose_backend(spec: Spec, choice: str, quantize: str = "", onnx_on_cpu: bool = False,
                   host: Host = Host()) -> Spec:
    """The spec with the runtime this run uses, `torch` or `onnx`, as its `runtime` and as its
    `backend` option: the workers (and reader processes, and Ray actors) built from it run what
    the parent chose and never decide `auto` again (a Ray CPU actor sees no GPU, and would pick
    otherwise). The task keeps its own options, with `auto`, for the output's fingerprint.

    `auto` decides once per output: the spec's `runtime` is the one an existing output was made
    with (gpucli.models.backends.choice.backend_default), and auto keeps it, so that a rerun never
    changes an output's runtime because the host changed (ONNX Runtime installed, a GPU added);
    an output kept on onnx where the extra is gone is refused, naming the fix. For a new output
    auto picks onnx when int8 is asked for, or when every device of the host is a CPU, the task
    says ONNX is faster there for this model (`onnx_on_cpu`, from benchmarks/onnx_e2e.py) and the
    ONNX Runtime is installed (gpucli's install brings it); else torch (GPUs stay on torch: onnxruntime-gpu is not measured yet).
    `onnx` needs the extra; int8 needs onnx or auto. Anything else is a usage error."""
    runtime = _runtime(choice, quantize, onnx_on_cpu, host, kept=getattr(spec, "runtime", ""))
    return dataclasses.replace(spec, options={**spec.options, "backend": runtime}, runtime=runtime)  # type: ignore


def fallback_notices(spec: Spec, choice: str, quantize: str = "", onnx_on_cpu: bool = False,
                     host: Host = Host()) -> list[str]:
    """One line when `auto` takes the slower path for want of a package: a new output on a CPU host,
    for a model ONNX Runtime runs faster, with onnx or onnxruntime missing or failing to import
    (both are part of gpucli's install, so this is a damaged install). Without it a user sees
    only a slow run."""
    kept = getattr(spec, "runtime", "")
    if choice != "auto" or quantize or kept in ("torch", "onnx") or not onnx_on_cpu or host.onnx_installed:
        return []
    if not all_cpu(list(host.devices)):
        return []
    return ["onnx or onnxruntime is not installed or does not import, so this run uses torch, about 2 x slower on "
            f"this CPU: {INSTALL}"]


def _runtime(choice: str, quantize: str, onnx_on_cpu: bool, host: Host, kept: str) -> str:
    if choice not in BACKENDS:
        raise UsageError(f"--backend {choice!r}: choose one of {', '.join(BACKENDS)}")
    if quantize not in QUANTIZATIONS:
        raise UsageError(f"--quantize {quantize!r}: gpucli knows int8 (or none)")
    if quantize and choice == "torch":
        raise UsageError("--quantize int8 runs on ONNX Runtime: use --backend onnx (or auto), or drop --quantize")
    if choice == "auto" and kept in ("torch", "onnx") and not quantize:
        if kept == "onnx" and not host.onnx_installed:
            raise UsageError(f"this output was made with ONNX Runtime (--backend auto chose it) and it is not "
                             f"installed now: {INSTALL}; or pass --backend torch --full to rebuild the output")
        return kept
    if choice == "auto":
        on_cpu = all_cpu(list(host.devices)) and onnx_on_cpu and host.onnx_installed
        choice = "onnx" if quantize or on_cpu else "torch"
    if choice == "onnx" and not host.onnx_installed:
        raise UsageError(f"--backend onnx needs ONNX Runtime: {INSTALL}")
    return choice


def backend_default(spec: Spec, task_cls: type, config: RunConfig, made_with: dict | None, out: str) -> Spec:
    """The spec (a TaskSpec) with the backend this output runs on, for a task that has `--backend`
    (`task_cls.Options` has a `backend` field); `out` is the output as the user names it.

    Given (flag, GPUCLI_BACKEND, config file): that. Not given: a new output (or `--full`) gets
    `auto` (ONNX Runtime on a CPU host where it is faster and installed: gpucli.models.backends), but
    on Ray only with `--devices cpu` (the driver cannot see the cluster's GPUs before it joins,
    and a GPU actor must not get a CPU graph); an existing output keeps the backend it was made
    with, and `auto` keeps the runtime it chose then (`made_with`: the ledger's settings, {} for
    a ledger that predates them), so no rerun (cron) changes an output's vectors or asks for
    `--full` when gpucli's default changes. An output made before `auto` was the default holds
    `torch`, or no backend at all (made before there was a choice): it stays on torch."""
    options_cls = task_cls.Options
    if not dataclasses.is_dataclass(options_cls) or "backend" not in {f.name for f in dataclasses.fields(options_cls)}:
        return spec
    options = dict(spec.options)  # type: ignore[attr-defined]
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
    from gpucli.models.devices import resolve_devices

    return all_cpu(resolve_devices(config.devices))
