"""ONNX Runtime backend (runners.py says how it works)."""

from __future__ import annotations

from gpucli.models.backends.onnx.runners import OnnxImageClassifier, OnnxTextEncoder

__all__ = ["OnnxImageClassifier", "OnnxTextEncoder"]
