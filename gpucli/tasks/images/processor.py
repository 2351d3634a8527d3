"""A model's Hugging Face image processor, on the parent's side and the worker's: the parent resizes
and crops with it (pixels stay uint8 on their way to the worker), the worker rescales and normalises
on the device with the processor's own figures (`hf_normalize`). Shared by classify's Hugging Face
classifiers, classify --labels and embed's image-text models.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from gpucli.core.errors import UsageError


@dataclass(frozen=True)
class Normalize:
    """x -> (x * scale - mean) / std, per channel, on the device."""

    scale: float
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


class SharedProcessor:
    """A model's image processor (hf_processor), loaded once however many reader threads ask for
    it at the same moment (the image-text embed task and classify --labels hold one each)."""

    def __init__(self) -> None:
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self, model: str, path: str) -> Any:
        with self._lock:
            if self._value is None:
                self._value = hf_processor(model, path)
            return self._value


def hf_processor(model: str, path: str) -> Any:
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


def hf_normalize(processor: Any) -> Normalize:
    """The processor's rescaling and normalisation, which the workers apply on the device (here and
    in an image-text model's towers: tasks/image_text/towers.py)."""
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
