"""Engine registry: `--engine NAME` -> the module that runs a whole job and returns its summary.

`local` is the pipeline (spawned workers on this machine); `ray` runs the same tasks and
sinks on Ray Data. An engine that needs an optional extra names the modules it imports, so a
missing extra is a usage error with the pip command to run, not a traceback.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucli.core.config import EngineName
from gpucli.core.errors import UsageError

if TYPE_CHECKING:
    from gpucli.core.config import RunConfig
    from gpucli.core.summary import RunSummary


@dataclass(frozen=True)
class Engine:
    name: str
    entry: str  # "module:function", called with the RunConfig
    needs: tuple[str, ...] = ()  # modules the engine imports
    extra: str = ""  # the pip extra that provides them


ENGINES: dict[str, Engine] = {
    EngineName.LOCAL.value: Engine("local", "gpucli.engines.local.pipeline:run"),
    EngineName.RAY.value: Engine("ray", "gpucli.engines.ray:run", needs=("ray", "ray.data"), extra="ray"),
}
if set(ENGINES) != {name.value for name in EngineName}:  # pragma: no cover - caught by any import in the tests
    raise RuntimeError("gpucli.engines.ENGINES and core.config.EngineName name different engines. This is a bug.")


def run_engine(config: RunConfig) -> RunSummary:
    """Run the job on `config.engine` and return its summary."""
    if config.dry_run:
        from gpucli.engines.dryrun import dry_run

        return dry_run(config)
    engine = ENGINES.get(config.engine)
    if engine is None:
        raise UsageError(f"--engine {config.engine!r}: choose one of {', '.join(ENGINES)}")
    _check_installed(engine)
    if config.watch:  # the local engine only (RunConfig says so): docs/watch.md
        from gpucli.engines.local.watch import run

        return run(config)
    module_name, _, function = engine.entry.partition(":")
    return getattr(importlib.import_module(module_name), function)(config)


def _check_installed(engine: Engine) -> None:
    for module in engine.needs:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            hint = f"pip install 'gpucli[{engine.extra}]'"
            if (exc.name or module).split(".")[0] != module.split(".")[0]:  # installed, but a dependency is not
                raise UsageError(f"--engine {engine.name}: {module} cannot be imported ({exc}); "
                                 f"reinstall the {engine.extra} extra: {hint}") from None
            raise UsageError(f"--engine {engine.name} needs the {engine.extra} extra: {hint}") from None
