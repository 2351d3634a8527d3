"""Export an image classifier to ONNX once, into the cache (gpucli.models.backends.onnx.cache).

The task says what to export (`ImageGraph`: its weights, the code that builds the module, the
module itself, the example batch and the names), so that no backend imports a task: classify
gives EfficientNet-Lite0 (gpucli.tasks.classify.task.lite0_graph). The graph takes `pixels` float32
(batch, 3, H, W) normalised as the torch path does, and gives `logits` (batch, classes). fp32
only: dynamic int8 quantization slows convolutions down on ONNX Runtime's CPU kernels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError
from gpucli.models.backends.onnx.cache import (
    SIDECAR_FILE,
    cache_key,
    cache_root_of,
    cached_model,
    entry_dir,
    files_digest,
    package_version,
)
from gpucli.models.backends.onnx.export import OPSET, torch_export
from gpucli.models.backends.onnx.quantize import check_quantize


@dataclass(frozen=True)
class ImageGraph:
    """What exporting an image classifier takes, given by its task. The key is plain data (the
    parent asks whether the entry exists without importing torch); `module` is called only
    when the entry has to be built, and gives a fresh float32 module on the CPU in eval mode
    (tracing leaves the module it traced computing wrong numbers: gpucli.models.backends.onnx.export)."""

    name: str  # the model's alias: the entry's kind is image-classifier:<name>
    weights: str  # the checkpoint file whose bytes key the entry
    code: tuple[str, ...]  # distributions whose code builds the module: their versions key the entry
    module: Callable[[], Any]
    example_shape: tuple[int, ...]  # the traced batch: (batch, 3, H, W); the batch axis stays dynamic
    input_name: str = "pixels"
    output_name: str = "logits"


def export_image_classifier(graph: ImageGraph, cache_root: str | Path | None = None, opset: int = OPSET,
                            quantize: str | None = None) -> Path:
    """The cached ONNX graph of `graph` (exported on first use)."""
    return image_entry(graph, cache_root_of(cache_root), opset, quantize)[0]


def image_entry(graph: ImageGraph, root: Path, opset: int, quantize: str | None) -> tuple[Path, bool]:
    """(verified path, built now)."""
    check_quantize(quantize)
    if quantize:
        raise UsageError("--quantize int8 is for embed; classify runs fp32 (dynamic int8 quantization slows "
                         "convolutions down on ONNX Runtime's CPU kernels)")
    key, directory = _image_key(graph, root, opset)
    return cached_model(directory, key, lambda out: _export(graph, opset, out), root)


def image_classifier_cached(graph: ImageGraph, cache_root: str | Path | None = None, opset: int = OPSET) -> bool:
    """Whether a run finds the graph exported already (export.text_encoder_cached's twin)."""
    with contextlib.suppress(OSError, UsageError):
        return (_image_key(graph, cache_root_of(cache_root), opset)[1] / SIDECAR_FILE).is_file()
    return False


def _image_key(graph: ImageGraph, root: Path, opset: int) -> tuple[dict[str, Any], Path]:
    key = cache_key(f"image-classifier:{graph.name}", files_digest([Path(graph.weights)], root), opset, None)
    for distribution in graph.code:
        key[distribution.replace("-", "_")] = package_version(distribution)
    return key, entry_dir(root, key)


def _export(graph: ImageGraph, opset: int, out: Path) -> None:
    import torch

    axes = {graph.input_name: {0: "batch"}, graph.output_name: {0: "batch"}}
    torch_export(graph.module(), (torch.zeros(*graph.example_shape),), out, (graph.input_name,), axes, opset)
