"""What the text tasks (embed, and its image-text models' texts) share with search:

    tokenizer   a model's fast tokenizer, its special and pad tokens
    tokens      texts -> token ids with each token's span, the prompt cut off
    chunking    token windows that end at the text's own boundaries
    unknown     whether a model can read a text (the share of unknown tokens)
    sparse      BM25 terms over a tokenizer's vocabulary, and their scoring in search
"""

from __future__ import annotations

from gpucli.tasks.text.chunking import WindowBlock
from gpucli.tasks.text.sparse import Terms
from gpucli.tasks.text.tokenizer import load_tokenizer, special_tokens
from gpucli.tasks.text.tokens import TextTokens
from gpucli.tasks.text.unknown import Unknown

__all__ = ["Terms", "TextTokens", "Unknown", "WindowBlock", "load_tokenizer", "special_tokens"]
