"""The models a worker runs on ONNX Runtime: `OnnxTextEncoder` and `OnnxImageClassifier` (the
package's docstring says how sessions are set up)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpucli.models.backends.onnx.cache import cache_root_of
from gpucli.models.backends.onnx.export import OPSET, text_entry
from gpucli.models.backends.onnx.image import ImageGraph, image_entry
from gpucli.models.backends.onnx.session import load_session


class OnnxTextEncoder:
    """A text encoder's last hidden state through ONNX Runtime, in a worker. Exports on first
    use (see `export_text_encoder`); `exported`, `export_s` and `load_s` say what it cost."""

    def __init__(self, model_dir: str | Path, threads: int, quantize: str | None = None, device: str = "cpu",
                 cache_root: str | Path | None = None, opset: int = OPSET) -> None:
        started = time.perf_counter()
        self.path, self.exported = text_entry(Path(model_dir), cache_root_of(cache_root), opset, quantize)
        ready = time.perf_counter()
        self.export_s = ready - started if self.exported else 0.0
        self.session = load_session(self.path, threads, device)
        self.load_s = time.perf_counter() - (ready if self.exported else started)
        self.input_names = tuple(i.name for i in self.session.get_inputs())

    def hidden(self, ids: Any, mask: Any) -> Any:
        """float32 (batch, sequence, hidden) for int64 ids and attention mask (batch, sequence)."""
        import numpy as np

        ids = np.ascontiguousarray(ids, dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ascontiguousarray(mask, dtype=np.int64)}
        if "token_type_ids" in self.input_names:
            feed["token_type_ids"] = np.zeros_like(ids)
        return self.session.run(None, {k: v for k, v in feed.items() if k in self.input_names})[0]


class OnnxImageClassifier:
    """An image classifier through ONNX Runtime, in a worker (classify's EfficientNet-Lite0, from
    the `ImageGraph` the task gives): `.logits(pixels)` takes what the torch path gives
    `logits(net, pixels)`, as a float32 NCHW array."""

    def __init__(self, graph: ImageGraph, threads: int = 1, quantize: str | None = None, device: str = "cpu",
                 cache_root: str | Path | None = None, opset: int = OPSET) -> None:
        started = time.perf_counter()
        self.path, self.exported = image_entry(graph, cache_root_of(cache_root), opset, quantize)
        ready = time.perf_counter()
        self.export_s = ready - started if self.exported else 0.0
        self.session = load_session(self.path, threads, device)
        self.load_s = time.perf_counter() - (ready if self.exported else started)
        self.input_name = graph.input_name

    def logits(self, pixels: Any) -> Any:
        import numpy as np

        return self.session.run(None, {self.input_name: np.ascontiguousarray(pixels, dtype=np.float32)})[0]
