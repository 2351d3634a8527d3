"""The README install, as a new user gets it: a second virtual environment made with the README's
first command alone (`pip install -e .`, no extras: no pandas, no polars, no test tools), whose
own `gpucli` the tour runs. `.ci/run` makes it and names it in README_VENV_FOR_TOUR; without that
variable the session makes (or refreshes) one under ~/.cache/gpucli-tests/, about a minute the
first time and a few seconds after.

Every command of the tour runs as a user runs it: the venv's `gpucli` on PATH, no GPUCLI_*
variable, no PYTHONPATH but tests/tour/audit (whose sitecustomize records the packages each
process tries to import), the default backend, real worker processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import ROOT

AUDIT = Path(__file__).resolve().parent / "audit"
VENV_VARIABLE = "README_VENV_FOR_TOUR"
CACHED_VENV = Path.home() / ".cache" / "gpucli-tests" / "readme-venv"
README_INSTALL = "pip install -e ."
# What only the test extra (or another extra) brings: were any of these importable in the README
# venv, it would not be the README install (a developer's pip install into it), and it is made again.
NOT_IN_THE_README_INSTALL = ("pandas", "polars", "duckdb", "pytest")
# Probes, not needs: pyarrow tries `import pandas` and `import dateutil` on the first array a process
# builds (its pandas shim and timezone helpers), and goes on without them; a conversion that does
# need pandas raises (an ns timestamp's to_pylist did), which the tour's exit codes and read-backs catch.
PROBED_BY_PYARROW = frozenset({"pandas", "dateutil"})


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _has_any(venv: Path, names: tuple[str, ...]) -> bool:
    probe = "import importlib.util, sys; sys.exit(any(importlib.util.find_spec(n) for n in sys.argv[1:]))"
    return subprocess.run([_python(venv), "-c", probe, *names], capture_output=True).returncode != 0


def _make(venv: Path) -> None:
    """The README's first command, in a venv of its own (made anew when it is not a README install)."""
    if venv.exists() and (not _python(venv).exists() or _has_any(venv, NOT_IN_THE_README_INSTALL)):
        shutil.rmtree(venv)
    if not venv.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(README_INSTALL.split(), cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _top_level_modules(python: Path | str) -> set[str]:
    script = "import pkgutil, sys; print('\\n'.join({m.name for m in pkgutil.iter_modules()} | set(sys.builtin_module_names)))"
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd="/")
    return set(done.stdout.split())


@dataclass
class ReadmeInstall:
    venv: Path
    lacks: frozenset[str]  # top-level packages this suite's environment has and the README install has not

    @property
    def python(self) -> Path:
        return _python(self.venv)

    def env(self, import_log: Path) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("GPUCLI_") and k not in ("PYTHONPATH", "OMP_WAIT_POLICY", "VIRTUAL_ENV")}
        env.update(PATH=f"{self.venv / 'bin'}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(AUDIT),
                   GPUCLI_TOUR_IMPORT_LOG=str(import_log), VIRTUAL_ENV=str(self.venv))
        return env


@pytest.fixture(scope="session")
def readme_install() -> ReadmeInstall:
    given = os.environ.get(VENV_VARIABLE)
    venv = Path(given) if given else CACHED_VENV
    if not given:
        CACHED_VENV.parent.mkdir(parents=True, exist_ok=True)
        _make(venv)
    assert (venv / "bin" / "gpucli").exists(), f"{venv}: no gpucli (made with `{README_INSTALL}`?)"
    assert not _has_any(venv, NOT_IN_THE_README_INSTALL), f"{venv} is not the README install: it has extras"
    lacks = _top_level_modules(sys.executable) - _top_level_modules(_python(venv)) - PROBED_BY_PYARROW
    return ReadmeInstall(venv, frozenset(lacks))
