"""What an image-text model's files say, read without transformers: whether a directory holds one
(which picks embed's image-text variant), and from its config.json the model type, the text
tower's length, the vectors' width and an image's cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpucli.core.errors import UsageError
from gpucli.models.hub import WEIGHT_SUFFIXES, resolve_model_dir
from gpucli.models.model_kind import ModelKind, model_kind

SUPPORTED = ("clip", "siglip", "chinese_clip", "altclip")  # get_image_features / get_text_features, fixed size
# model types whose text tower was trained on texts padded to its full length, pooled at the last position
PAD_TO_LENGTH = ("siglip",)
CLIP_TEXT_POSITIONS = 77  # a text tower's length where its config names none


def is_image_text(path: str) -> bool:
    """Whether the model directory at `path` holds an image-text model (a vision and a text tower)."""
    return model_kind(path)[0] is ModelKind.IMAGE_TEXT


def image_text_dir(model: str, revision: str = "", download: bool = True) -> str | None:
    """The local directory of `model` when it is an image-text model, else None. A Hub id is taken
    from the cache (downloaded where the Hub is reachable and it is not cached, unless not
    `download`); a model that cannot be found is left to the text task, whose loader says what to do."""
    try:
        path = resolve_model_dir(model, revision, kind="transformers", cache_first=True,
                                 cache_only=not download).path
    except UsageError:
        return None
    return path if is_image_text(path) else None


@dataclass(frozen=True)
class ImageTextConfig:
    """An image-text model's config.json, as far as gpucli needs it."""

    model_type: str
    text_positions: int  # the text tower's length, special tokens included
    pad_id: int  # the text tower's pad token, where the tokenizer names none
    dims: int  # the vectors' width (the towers' projection)
    image_cost: int  # an image's cost in a batch: the vision tower's tokens
    layer_weights: int  # the vision tower's weights per layer, times its layers

    @staticmethod
    def read(model: str, path: str) -> ImageTextConfig:
        """The config of `model` at `path`; a type gpucli does not run is a usage error."""
        config = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
        model_type = str(config.get("model_type") or "")
        if model_type not in SUPPORTED:
            raise UsageError(f"--model {model}: a {model_type!r} image-text model; gpucli embed runs image-text "
                             f"models of the types {', '.join(SUPPORTED)} (CLIP, SigLIP and SigLIP 2 "
                             "fixed-resolution checkpoints, Chinese-CLIP, AltCLIP)")
        text, vision = config.get("text_config") or {}, config.get("vision_config") or {}
        hidden, layers = int(vision.get("hidden_size") or 768), int(vision.get("num_hidden_layers") or 12)
        return ImageTextConfig(
            model_type=model_type, text_positions=int(text.get("max_position_embeddings") or CLIP_TEXT_POSITIONS),
            pad_id=int(text.get("pad_token_id") or 0),
            dims=int(config.get("projection_dim") or text.get("projection_size") or text.get("hidden_size") or 0),
            image_cost=_patches(vision), layer_weights=layers * 12 * hidden * hidden)

    @property
    def pads_to_length(self) -> bool:
        """SigLIP: texts padded to the tower's full length, with no attention mask (tasks/embed/image_text.py)."""
        return self.model_type in PAD_TO_LENGTH


def processor_name(path: str) -> str:
    """The image processor's class as the model names it (preprocessor_config.json), without loading it."""
    try:
        config = json.loads((Path(path) / "preprocessor_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(config.get("image_processor_type") or config.get("feature_extractor_type") or "")


def weight_bytes(path: str) -> int:
    """The size of the model's weight files."""
    root = Path(path)
    return sum(f.stat().st_size for f in root.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES)) \
        if root.is_dir() else 0


def _patches(vision: dict) -> int:
    """The vision tower's tokens for one image: its patches and the class token."""
    size, patch = vision.get("image_size") or 224, vision.get("patch_size") or 32
    size = size if isinstance(size, int) else int(max(size))
    return (size // int(patch)) ** 2 + 1
