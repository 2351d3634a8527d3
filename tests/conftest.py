from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Spawned workers import tests.fake_task: make the repo root importable for them too.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
# A new output's default backend is `auto` (ONNX Runtime on a CPU host with the onnx extra, which
# this suite installs): every BERT-type model, the tiny test ones too, would be exported to ONNX
# first. The suite runs torch unless a test says otherwise (tests/test_backend_default.py and
# tests/test_onnx.py test the default and the ONNX path themselves, with this variable removed).
os.environ["GPUCLI_BACKEND"] = "torch"

from tests.helpers import write_tree  # noqa: E402


@pytest.fixture
def tree(tmp_path: Path):
    def make(files: dict[str, str | bytes], name: str = "in") -> Path:
        return write_tree(tmp_path / name, files)

    return make
