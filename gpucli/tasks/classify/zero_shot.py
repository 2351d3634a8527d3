"""`gpucli classify --labels "cat,dog,a receipt" --model CLIP_OR_SIGLIP`: zero-shot labels.

An image-text model (the CLIP or SigLIP that `gpucli embed` runs for image vectors) scores the
labels the user gives, in place of a classifier's own classes (`ClassifyTask.variant` picks
this task when --labels or --labels-file is given). Rows keep classify's columns: `labels` the
given labels ranked best first (top-k of them), `scores` theirs (softmax over the labels for
CLIP, a sigmoid per label for SigLIP: tasks/classify/scores.py), `class_ids` each label's
place in the given list, `label` the best. docs/zero-shot.md is the user's side.

    parent  the labels (a file read once; the workers get the list itself: tasks/classify/labels.py)
            and the template checked against the model's tokenizer (no prompt longer than the
            text tower); each image decoded as classify decodes (EXIF, CMYK, 16-bit, alpha on
            white, bombs refused: tasks/images/decode.py), resized and cropped by the model's own
            processor, kept as uint8
    worker  both towers (tasks/image_text/towers.py); the prompts' vectors once; a batch's images
            rescaled and normalised on the device, one forward pass, scored against them

What was resolved (the labels, the template, sigmoid or softmax) is in the output's metadata, so
that the ledger's settings hold it: a rerun with other labels is refused without --full.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any

import numpy as np

from gpucli.core.errors import UsageError
from gpucli.core.records import Item, Source
from gpucli.models.hub import hub_info, resolve_model_dir
from gpucli.tasks.base import TaskSpec, per_core
from gpucli.tasks.classify.base import ClassifyBase, group_by_shape, output_row
from gpucli.tasks.classify.labels import ZeroShotLabels
from gpucli.tasks.classify.lite0 import LITE0
from gpucli.tasks.classify.scores import LabelScorer, check_prompts, is_sigmoid, load_tokenizer
from gpucli.tasks.image_text.config import ImageTextConfig, is_image_text, processor_name, weight_bytes
from gpucli.tasks.images import SharedProcessor, open_image, stack

REAL_MODEL_BYTES = 4_000_000  # weights from which the model gets a worker per CPU core (as classify)
EXAMPLE_MODELS = "openai/clip-vit-base-patch32 or google/siglip-base-patch16-224"


def not_image_text(model: str, what: str) -> UsageError:
    """--labels with a model that has no text tower: what to use instead."""
    return UsageError(f"--labels: --model {model} is {what}; zero-shot labels need an image-text model (CLIP, SigLIP) "
                      f"to read them: pass e.g. --model {EXAMPLE_MODELS} (a Hugging Face id or a local directory), "
                      "or leave out --labels to use the classifier's own classes")


class ZeroShotTask(ClassifyBase):
    """`gpucli classify --labels` with an image-text model: see the module docstring."""

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
        self._in_worker = False
        self._opened = False
        self._open_lock = threading.Lock()  # reader threads open the task at once
        self._processor = SharedProcessor()

    def cpu_workers(self, cores: int) -> int:
        self.open()
        return per_core(cores) if weight_bytes(self.path) >= REAL_MODEL_BYTES else 1

    # --- parent ---------------------------------------------------------------------------
    def open(self) -> None:
        with self._open_lock:
            if not self._opened:
                self._open()
                self._opened = True

    def _open(self) -> None:
        model = self.spec.model
        if model == LITE0:
            raise not_image_text(model, "the default image classifier (ImageNet classes, no text tower)")
        self.resolved = resolve_model_dir(model, self.spec.revision, kind="transformers", cache_first=self._in_worker)
        self.path = self.resolved.path
        if not is_image_text(self.path):
            raise not_image_text(model, "not an image-text model")
        self.config = ImageTextConfig.read(model, self.path)
        if self.options.backend == "onnx":
            raise UsageError(f"--backend onnx: --labels runs on torch only (--model {model} is an image-text model)")
        self.zero_shot = ZeroShotLabels.of(self.options.labels, self.options.labels_file, self.options.label_template)
        assert self.zero_shot is not None, "ZeroShotTask without labels. This is a bug."
        # the workers get the list itself (not the file) and the runtime chosen; torch is the only one
        options = {**self.spec.options, "labels": self.zero_shot.carried(), "labels_file": None, "backend": "torch"}
        self.spec = dataclasses.replace(self.spec, options=options, runtime="torch")
        self.options = self.Options(**options)
        self.runtime, self.notices = "torch", []
        self.tokenizer = load_tokenizer(model, self.path)
        self.prompts = self.zero_shot.prompts()
        check_prompts(model, self.tokenizer, self.zero_shot.labels, self.prompts, self.config.text_positions)

    @property
    def processor(self) -> Any:
        """The model's own image processor (on Pillow: gpucli.tasks.classify.adapters), loaded once."""
        return self._processor.get(self.spec.model, self.path)

    def info(self) -> dict[str, str]:
        self.open()
        return {"gpucli.model": self.spec.model, "gpucli.task": self.name, "gpucli.backend": "transformers",
                "gpucli.num_classes": str(len(self.zero_shot.labels)), "gpucli.top_k": str(self.options.top_k),
                "gpucli.zero_shot": "true", "gpucli.labels": json.dumps(list(self.zero_shot.labels), ensure_ascii=False),
                "gpucli.label_template": self.zero_shot.template,
                "gpucli.scores": "sigmoid" if is_sigmoid(self.config.model_type) else "softmax",
                "gpucli.model_type": self.config.model_type, "gpucli.image_processor": processor_name(self.path),
                **hub_info(self.resolved)}

    def prepare(self, source: Source, data: bytes) -> list[Item]:
        self.open()
        pixels = self.pixels(data)
        return [Item(source_id=source.id, index=0, payload=pixels, cost=pixels.shape[0] * pixels.shape[1])]

    def pixels(self, data: bytes) -> np.ndarray:
        """One image's pixels as the model's processor resizes and crops them, uint8 H x W x 3
        (rescaling and normalising happen on the device, as for embed's image vectors)."""
        out = self.processor(images=open_image(data), do_rescale=False, do_normalize=False, return_tensors="np")
        values = np.asarray(out["pixel_values"][0])  # C, H, W in 0..255
        return np.ascontiguousarray(np.clip(np.rint(values), 0, 255).astype(np.uint8).transpose(1, 2, 0))

    # --- worker ---------------------------------------------------------------------------
    def setup(self, device: str) -> None:
        from gpucli.tasks.image_text.towers import Towers

        self._in_worker = True
        self.open()
        towers = Towers.load(self.spec.model, self.path, device, self.spec.dtype, self.processor,
                             dims=self.config.dims, normalize=True, pad_to=0)
        self.scorer = LabelScorer.load(towers, self.tokenizer, self.prompts, self.config.model_type,
                                       self.config.text_positions)

    def predict(self, payloads: list[Any]) -> list[dict[str, Any]]:
        outputs: list[dict[str, Any]] = [{} for _ in payloads]
        k = min(self.options.top_k, len(self.zero_shot.labels))
        for indices in group_by_shape(payloads).values():
            scores, ids = self.scorer.top(stack([payloads[i] for i in indices]), k)
            for index, row_scores, row_ids in zip(indices, scores, ids):
                outputs[index] = output_row([self.zero_shot.labels[i] for i in row_ids], row_scores, row_ids)
        return outputs
