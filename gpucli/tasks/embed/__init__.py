"""`gpucli embed`: texts, documents and images -> vectors.

    task              EmbedTask: a text encoder (the default), and its --ocr on variant
    image_text        ImageTextTask: an image-text model (CLIP, SigLIP), chosen by EmbedTask.variant
    base              what both share: the command, options, inputs, windows, stored vectors
    options, models   the options and their checks; the default alias and the suggested models
    st_model          what a sentence-transformers directory asks for: pooling, prompts, lower case
    image_text_items  an image-text model's items, mixed batches and rows
    dims, policy      --dims (Matryoshka); reader processes and workers per core for a text model
"""

from __future__ import annotations

from gpucli.tasks.embed.options import EmbedOptions
from gpucli.tasks.embed.task import EmbedTask

__all__ = ["EmbedOptions", "EmbedTask"]
