"""A model's tokenizer as gpucli's text windows need it: a fast tokenizer (the `tokenizers`
library, which gives each token's char offsets), without padding or truncation, since chunking
decides lengths; and what frames one text: the special tokens around it and the pad token.

A text model's comes from its tokenizer.json; an image-text model whose checkpoint ships only a
SentencePiece model (SigLIP's) has one built from it (tasks/image_text/texts.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpucli.core.errors import UsageError
from gpucli.models.model_kind import model_kind

TOKENIZER_FILE = "tokenizer.json"


def has_tokenizer_file(path: str) -> bool:
    return (Path(path) / TOKENIZER_FILE).is_file()


def load_tokenizer(path: str) -> Any:
    """The model's fast tokenizer (`tokenizer.json`) through the `tokenizers` library,
    without padding or truncation: chunking decides lengths."""
    from tokenizers import Tokenizer

    if not has_tokenizer_file(path):
        kind, named = model_kind(path)
        what = f" ({kind.value}: {named})" if named else ""
        raise UsageError(f"model at {path}{what} has no tokenizer.json (a fast tokenizer); gpucli embed needs one for "
                         "char offsets. Save it with transformers: "
                         "AutoTokenizer.from_pretrained(...).save_pretrained(dir)")
    return unbounded(Tokenizer.from_file(str(Path(path) / TOKENIZER_FILE)))


def unbounded(tokenizer: Any) -> Any:
    """`tokenizer` without padding or truncation."""
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after one text ([CLS] ... [SEP], <s> ... </s>)."""
    body = tokenizer.encode("hello", add_special_tokens=False).ids
    full = tokenizer.encode("hello", add_special_tokens=True).ids
    for i in range(len(full) - len(body) + 1):
        if full[i : i + len(body)] == body:
            return full[:i], full[i + len(body) :]
    return [], []


def saved_pad_id(path: str, tokenizer: Any, default: int) -> int:
    """The id the tokenizer pads with (the pad token its saved configuration names), else `default`."""
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        try:
            token = json.loads((Path(path) / name).read_text(encoding="utf-8")).get("pad_token")
        except (OSError, ValueError, AttributeError):
            continue
        token = token.get("content") if isinstance(token, dict) else token
        found = tokenizer.token_to_id(token) if isinstance(token, str) else None
        if found is not None:
            return int(found)
    return default
