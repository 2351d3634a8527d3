"""The text side of an image-text model: the tokenizer that cuts its texts into windows with
their char offsets, and what happens to texts when the model has none.

The tokenizer is the checkpoint's tokenizer.json; a SigLIP checkpoint as the Hub ships it
(spiece.model only) gets one built from its SentencePiece model (tasks/image_text/siglip_tokenizer.py).
A model with neither (a Chinese-CLIP or AltCLIP directory saved without tokenizer.json) still
embeds its images; each text input is a failure record that says why, and a search query is
tokenized by transformers' own tokenizer, truncated to the tower's length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpucli.tasks.image_text.siglip_tokenizer import siglip_tokenizer
from gpucli.tasks.text.tokenizer import has_tokenizer_file, load_tokenizer


def text_tokenizer(path: str, model_type: str) -> Any | None:
    """The fast tokenizer that cuts the model's texts, or None when it has none."""
    return load_tokenizer(path) if has_tokenizer_file(path) else siglip_tokenizer(path, model_type)


def no_tokenizer(model: str) -> str:
    """Why a text input of `model` is refused (a failure record's reason)."""
    return (f"{model} has no fast tokenizer (tokenizer.json), which gpucli needs to cut a text into chunks with "
            "their char offsets; its images are embedded. Leave texts out with --include '*.jpg' (and other "
            "image globs), or save a fast tokenizer into the model directory")


def slow_query_ids(path: str, query: str, max_tokens: int) -> tuple[np.ndarray, int | None]:
    """A query's ids by transformers' own tokenizer, truncated to the tower's length, and the id it
    pads with (None: it names none)."""
    from transformers import AutoTokenizer

    slow = AutoTokenizer.from_pretrained(path, local_files_only=True)
    ids = slow(query, truncation=True, max_length=max_tokens)["input_ids"]
    return np.asarray(ids, np.int64), slow.pad_token_id
