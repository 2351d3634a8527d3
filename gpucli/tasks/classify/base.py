"""What both kinds of `gpucli classify` share: its options, its command's attributes, its rows,
and how a batch of images travels. `ClassifyTask` (tasks/classify/task.py) runs an image classifier's
own classes; `ZeroShotTask` (tasks/classify/zero_shot.py) scores the labels a user gives with an
image-text model. One base, so that the zero-shot variant needs no import of classify.py (which
picks it: `ClassifyTask.variant`) and the two keep one schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from gpucli.core.errors import UsageError
from gpucli.tasks.base import ModelEntry, Task, TaskSpec
from gpucli.tasks.classify.labels import DEFAULT_TEMPLATE, check_given
from gpucli.tasks.classify.lite0 import LITE0, lite0_available, lite0_weights
from gpucli.tasks.images import IMAGE_SUFFIXES, ShmBatch, ShmPool, read_batch

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class ClassifyOptions:
    top_k: int = field(
        default=5,
        metadata={"help": "How many labels, with their probabilities, each image gets.", "flag": "--top-k"},
    )

    backend: str = field(default="torch", metadata={
        "help": "Inference runtime: torch; onnx (ONNX Runtime, the default EfficientNet-Lite0 only: the model is "
                "exported once into ~/.cache/gpucli/onnx); "
                "auto (onnx for it on a host without a GPU, else torch). "
                "Decided once per output: a rerun keeps the output's own.", "flag": "--backend",
        "default_help": "auto for a new output (on Ray with --devices cpu only; else torch); an existing output's own"})

    # Zero-shot (docs/zero-shot.md). Not fingerprinted as options: the labels and the template the run
    # resolved are in the output's metadata (gpucli.labels, gpucli.label_template), which the ledger's
    # settings hold, so another list is refused without --full however it was given (flag or file).
    labels: str | None = field(default=None, metadata={
        "help": "Zero-shot: score these labels instead of the model's own classes, comma-separated "
                "(\"cat,dog,receipt\") or a JSON array; needs an image-text --model (CLIP, SigLIP). "
                "class_ids are the labels' places in this list.", "flag": "--labels",
        "default_help": "none: the model's own classes", "fingerprint": False})
    labels_file: str | None = field(default=None, metadata={
        "help": "Zero-shot labels from a UTF-8 file, one per line (blank lines skipped); as --labels.",
        "flag": "--labels-file", "default_help": "none", "fingerprint": False})
    label_template: str = field(default=DEFAULT_TEMPLATE, metadata={
        "help": "Zero-shot: the text each label is scored by, {} standing for the label.", "flag": "--label-template",
        "fingerprint": False})

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "torch", "onnx"):
            raise UsageError(f"--backend must be auto, torch or onnx, got {self.backend!r}")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise UsageError(f"--top-k must be a whole number of at least 1, got {self.top_k!r}")
        check_given(self.labels, self.labels_file, self.label_template)  # a labels file is read when the task opens


class ClassifyBase(Task):
    """The command's attributes, its rows and its image transport; subclasses run a model."""

    name: ClassVar[str] = "classify"
    help: ClassVar[str] = (
        "Label images with an image classifier: one row per image with its top-k labels, their "
        "probabilities and class ids. The default model, EfficientNet-Lite0 trained on ImageNet-1k, "
        "loads offline; --model also takes a Hugging Face image-classification id or directory. "
        "With --labels, an image-text model (CLIP, SigLIP) scores the labels you give (zero-shot)."
    )
    examples: ClassVar[str] = (
        "gpucli classify photos/ --out labels.parquet\n"
        "gpucli classify photos/ --out labels.jsonl --top-k 3 --devices cuda:0,1\n"
        "gpucli classify photos/ --model ./my-vit-finetune --out labels.parquet\n"
        "gpucli classify inbox/ --out inbox.parquet --prune --watch   # then stay up: new scans as they come\n"
        "gpucli classify photos/ --model openai/clip-vit-base-patch32 --labels \"cat,dog,receipt\""
    )
    shown_settings: ClassVar[tuple[str, ...]] = ("backend", "num_classes", "top_k", "input_size", "image_processor",
                                                 "runtime")
    suffixes: ClassVar[tuple[str, ...]] = IMAGE_SUFFIXES
    Options: ClassVar[type] = ClassifyOptions
    default_model: ClassVar[str] = LITE0
    cost_name: ClassVar[str] = "pixels"
    default_batch_size: ClassVar[int] = 32
    default_max_cost: ClassVar[int] = 32 * 224 * 224  # 32 images at 224x224; fewer at larger inputs
    queue_items: ClassVar[int] = 256  # ~150 KB each at 224x224
    read_chunk_files: ClassVar[int] = 16

    def __init__(self, spec: TaskSpec) -> None:
        super().__init__(spec)
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

    def pack(self, payloads: list[Any]) -> ShmBatch:
        return self._shm.pack(payloads)

    def release(self, packed: Any) -> None:
        if isinstance(packed, ShmBatch):
            self._shm.release(packed)

    def unpack(self, packed: Any) -> list[Any]:
        return read_batch(packed) if isinstance(packed, ShmBatch) else list(packed)


def output_row(labels: list[str], scores: list[float], ids: list[int]) -> dict[str, Any]:
    """One image's row: its labels best first, their scores, their class ids; `label` the first."""
    return {"label": labels[0], "labels": labels, "scores": scores, "class_ids": ids}


def group_by_shape(arrays: list[Any]) -> dict[tuple[int, ...], list[int]]:
    """Indices by array shape: every default model gives one shape, but a processor without
    a centre crop may give several, and each shape is its own forward pass."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, array in enumerate(arrays):
        groups.setdefault(tuple(array.shape), []).append(index)
    return groups
