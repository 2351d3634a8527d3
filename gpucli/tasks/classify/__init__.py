"""`gpucli classify`: images -> labels and scores.

    task        ClassifyTask: an image classifier's own classes (EfficientNet-Lite0 by default)
    zero_shot   ZeroShotTask: --labels scored by an image-text model, chosen by ClassifyTask.variant
    base        what both share: options, the command, rows, how a batch of images travels
    adapters    the two kinds of classifier: EfficientNet-Lite0 and any Hugging Face one
    lite0       EfficientNet-Lite0's names, weights and labels (a leaf the ONNX export uses too)
    labels      the zero-shot labels and their prompts, checked
    scores      zero-shot scores in a worker
"""

from __future__ import annotations

from gpucli.tasks.classify.base import ClassifyOptions
from gpucli.tasks.classify.task import ClassifyTask

__all__ = ["ClassifyOptions", "ClassifyTask"]
