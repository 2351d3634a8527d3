"""`--dims N`: Matryoshka truncation, the first N dimensions of each vector.

A model trained with Matryoshka representation learning packs the most information into the
first dimensions, so its vectors cut to N dimensions (and renormalised) stay useful; cut from
any other model, they lose a share of their meaning no one can see. So `--dims` is refused for
a model that gives no sign of such training, unless `--force-dims`:

- gpucli's own word for a default alias (all-MiniLM-L6-v2: no, whatever its package's card
  says);
- its model card (README.md in the model directory, as the Hub serves it) names "matryoshka"
  (the sentence-transformers tag, MatryoshkaLoss, or the words) or "MRL";
- or its config says it: `matryoshka_dimensions` in config.json (jina-embeddings-v3 style), or
  `truncate_dim` in config_sentence_transformers.json.

The cut happens after pooling: the model's own vector, its first N values, then L2-normalised
again when the model's vectors are normalised (the issue's "renormalised when the model
normalises"), as sentence-transformers' `truncate_dim` and `normalize_embeddings` do together.
`gpucli search` cuts its queries the same way: the output's metadata names N
(`gpucli.truncate_dims`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError

SIGN = re.compile(r"matryoshka|\bMRL\b", re.IGNORECASE)
CARD_BYTES = 1 << 20  # a model card is read up to 1 MiB


def matryoshka_sign(path: str) -> str:
    """What says the model at `path` was trained for truncation ("" for nothing)."""
    root = Path(path)
    for config in ("config.json", "config_sentence_transformers.json"):
        try:
            data = json.loads((root / config).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and (data.get("matryoshka_dimensions") or data.get("truncate_dim")):
            return f"{config} ({'matryoshka_dimensions' if data.get('matryoshka_dimensions') else 'truncate_dim'})"
    for card in ("README.md", "readme.md"):
        try:
            with open(root / card, encoding="utf-8", errors="replace") as f:
                text = f.read(CARD_BYTES)
        except OSError:
            continue
        if SIGN.search(text):
            return f"its model card ({card})"
    return ""


def checked_dims(model: str, path: str, full: int, dims: int, force: bool, known: bool | None = None) -> int:
    """The dims rows will have: `full` without --dims, else `dims` once allowed (see the module doc).
    `known`: what gpucli knows of the model itself (a default alias), before its files' word: the
    default model's package ships a card tagged "matryoshka", but all-MiniLM-L6-v2 was not trained so."""
    if not dims or dims == full:
        return full
    if dims > full:
        raise UsageError(f"--dims {dims}: {model} makes {full}-d vectors; --dims takes at most {full}")
    if not force and not (matryoshka_sign(path) if known is None else known):
        raise UsageError(f"--dims {dims}: {model} gives no sign of Matryoshka training (its model card and config "
                         "name none), so its first dimensions need not carry most of its meaning; pass --force-dims "
                         "to cut them anyway, or use a Matryoshka model (e.g. nomic-ai/nomic-embed-text-v1.5)")
    return dims


def truncated(vectors: Any, dims: int, normalize: bool) -> Any:
    """The first `dims` columns of a float matrix (numpy or torch), renormalised when `normalize`."""
    if vectors.shape[-1] == dims:
        return vectors
    cut = vectors[..., :dims]
    if not normalize:
        return cut
    if hasattr(cut, "norm"):  # torch
        return cut / cut.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    import numpy as np

    return cut / np.maximum(np.linalg.norm(cut, axis=-1, keepdims=True), 1e-12)


def dims_info(full: int, dims: int) -> dict[str, str]:
    """Output metadata, only for a cut output (an uncut one's metadata stays as before)."""
    return {"gpucli.truncate_dims": str(dims), "gpucli.full_dims": str(full)} if dims != full else {}
