from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Spawned workers import tests.fake_task: make the repo root importable for them too.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
# A new output's default backend is `auto` (ONNX Runtime on a CPU host, part of gpucli's
# install): every BERT-type model, the tiny test ones too, would be exported to ONNX
# first. The suite runs torch unless a test says otherwise (tests/integration/test_backend_default.py and
# test_onnx.py test the default and the ONNX path themselves, with this variable removed).
os.environ["GPUCLI_BACKEND"] = "torch"
# Workers run as threads of the process that runs the pipeline (gpucli/engines/local/processes.py,
# in-process mode): the same loop and messages, without the ~0.5-1 s spawn of an interpreter per
# worker per run that made most of the suite's time. Set here, before any fixture runs, so module
# fixtures and `gpucli` subprocesses get it too. A test whose subject is the processes themselves
# (a kill, a crash, a hang, signals, start-up, devices, memory) is marked `processes` and gets
# real spawned workers (the fixture below).
INPROCESS = "GPUCLI_TEST_INPROCESS_WORKERS"
os.environ[INPROCESS] = "1"
# ...so this process runs the models, and takes the setting a worker process gives itself
# (worker.limit_threads; read when torch loads OpenMP): idle OpenMP threads sleep instead of
# spinning. Measured on 2 busy cores, test_vector_types + test_dims: 12.8 s spinning, 9.1 s.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from tests import fake_task  # noqa: E402
from tests.helpers import write_tree  # noqa: E402

os.environ[fake_task.PYTEST_PID] = str(os.getpid())  # where the fake task's CRASH and HANG must not run


# Python's own Ctrl-C handler, whatever started the suite: a shell's `cmd &` starts it with SIGINT
# ignored, which Python then keeps, and the stop tests (and every child they start) would inherit it.
signal.signal(signal.SIGINT, signal.default_int_handler)
STOP_HANDLERS = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


@pytest.fixture(autouse=True)
def stop_handlers_as_the_session_had_them():
    """Each test starts with Ctrl-C's and SIGTERM's handlers as the session had them: tests of
    the stop paths set them in this process, and so do libraries (ray.init installs its own
    SIGTERM handler); one left behind made a later test's children ignore Ctrl-C (seen once on CI)."""
    yield
    for sig, handler in STOP_HANDLERS.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


@pytest.fixture(autouse=True)
def worker_kind(request, monkeypatch):
    """Spawned worker processes for tests marked `processes`, worker threads for the rest; a
    test that made a worker thread crash or hang fails, naming the marker it lacks."""
    if request.node.get_closest_marker("processes"):
        monkeypatch.delenv(INPROCESS, raising=False)
    fake_task.MISPLACED.clear()
    yield
    if fake_task.MISPLACED:
        misplaced = list(fake_task.MISPLACED)
        fake_task.MISPLACED.clear()
        pytest.fail(f"{misplaced} in a worker thread: a test whose worker crashes or hangs needs "
                    "@pytest.mark.processes (real worker processes)", pytrace=False)


@pytest.fixture
def tree(tmp_path: Path):
    def make(files: dict[str, str | bytes], name: str = "in") -> Path:
        return write_tree(tmp_path / name, files)

    return make


ON_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On CI (CI=true, as .ci/run is run) a skipped test fails: what a test needs is installed
    by pip or by .ci/run, so a skip there means a missing install step, which a green run would
    hide. The one exception is a test marked `external` (a service no registry ships)."""
    report = (yield).get_result()
    if not hasattr(report, "wasxfail") and not item.get_closest_marker("external"):
        _fail_on_ci(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at import (`pytest.importorskip` at its top)."""
    _fail_on_ci((yield).get_result())


def _fail_on_ci(report) -> None:
    if ON_CI and report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped on CI, where nothing may be missing ({reason}): install it in .ci/run"
