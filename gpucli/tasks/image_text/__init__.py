"""An image-text model (CLIP, SigLIP), as embed and classify --labels both run it:

    config   what its files say (is it one, its type, text length, dims, an image's cost)
    texts    the tokenizer that cuts its texts (SigLIP's built from spiece.model)
    towers   its two towers in a worker
"""

from __future__ import annotations

from gpucli.tasks.image_text.config import ImageTextConfig, is_image_text
from gpucli.tasks.image_text.towers import Towers

__all__ = ["ImageTextConfig", "Towers", "is_image_text"]
